"""Start-up failures derived from verl 0.9.1's and 0.8.0's source (issue 46's measured set): per row
of docs/startup.md, and per verl release where it differs, configurations that trip one `assert` /
`raise` verl (or the vLLM it starts) hits at start-up or in the first step, each with the topl keys
a refusal must name, and valid neighbours that differ minimally and must be accepted.

Data only: tests/contract/test_startup_cases.py runs plain `check` over every case (and the dry run
over a sample, slow tier); scripts/startup_coverage.py prints the figure docs/startup.md records.
`cite` is verl@<release>:<path below verl/>:<line> of the check in that release's wheel.
"""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    id: str
    row: int  # docs/startup.md row
    verl: str  # the release the base declares
    overrides: list[str]
    keys: tuple[str, ...]  # one error violation must name all of them
    cite: str
    by: str = "rule"  # rule: plain `check` refuses it; dry: only the dry run (verl's own code) does


class Neighbour(NamedTuple):
    id: str
    row: int
    verl: str
    overrides: list[str]


M91 = ["recipe=qwen3_4b_grpo_a2_release_strict"]  # 1 x 8, Megatron, V1 trainer, static batches
M80 = ["recipe=qwen3_4b_grpo_a2_strict", "train.use_dynamic_bsz=false"]  # the seed's verl 0.8.0
F91 = ["stack=release", "cluster.backend=ray_job", "cluster.devices_per_node=8"]  # FSDP, 1 x 8
F80 = ["stack=seed", "cluster.backend=ray_job", "cluster.devices_per_node=8"]
MOE91 = ["recipe=qwen3_30b_a3b_grpo_a2_release_strict"]
BASES = {"0.9.1": {"M": M91, "F": F91}, "0.8.0": {"M": M80, "F": F80}}
V = "+verl_overrides.actor_rollout_ref."
VO = "verl_overrides.actor_rollout_ref."
KL = ["algorithm.use_kl_loss=true", V + "ref.log_prob_use_dynamic_bsz=false"]
DYN = ["train.use_dynamic_bsz=true"]
WORLD = ("cluster.devices_per_node",)
RC = "+verl_overrides.algorithm.rollout_correction"
IS, RS = RC + ".rollout_is", RC + ".rollout_rs"
# the files of the checks, below verl/
CONFIG, ACTOR, ROLLOUT = "utils/config.py", "workers/config/actor.py", "workers/config/rollout.py"
WORKERS, SPLIT = "workers/engine_workers.py", "workers/engine/utils.py"
BALANCE = "utils/seqlen_balancing.py"
FSDP_ENGINE = "workers/engine/fsdp/transformer_impl.py"
MCORE_ENGINE = "workers/engine/megatron/transformer_impl.py"
VLLM_SERVER = "workers/rollout/vllm_rollout/vllm_async_server.py"
ALGOS, CORR = "trainer/ppo/core_algos.py", "trainer/ppo/rollout_corr_helper.py"
V1 = "trainer/ppo/v1/trainer_base.py"
OFF = ["alignment=off"]  # strict mode refuses some of these keys itself (TOP-VERL-002)
VPP = V + "actor.megatron.virtual_pipeline_model_parallel_size"
RECOMP = "train.recompute_"
# megatron-core's checks (launcher/contract/dryrun/mcore.py cites each in megatron_core@0.16.0),
# cited at verl's call that reaches them: mpu.initialize_model_parallel (parallel_state), the
# TransformerConfig verl builds (Megatron-Bridge's provider on 0.9.1, mbridge's on 0.8.0), and
# make_megatron_module, which builds the layers (get_num_layers_to_build)
MPU = {"0.9.1": 271, "0.8.0": 154}
TFC = {"0.9.1": 400, "0.8.0": 192}
BUILD = {"0.9.1": 485, "0.8.0": 279}

# (id, row, engine base, overrides, keys, {release: line}, path below verl/, by)
# fmt: off
_SPEC = [
    # 1: verl's Hydra compose (trainer/main_ppo.py): a key the declared verl lacks
    ("unknown_key", 1, "M", [V + "actor.no_such_key=1"], (VO + "actor.no_such_key",),
     {"0.9.1": 171, "0.8.0": 171}, "trainer/main_ppo.py", "rule"),
    # 2: validate_config, Megatron: n_gpus % (tp * pp * cp); real batch % (dp * micro)
    ("megatron_tp_3", 2, "M", ["train.tp=3"], ("train.tp", *WORLD),
     {"0.9.1": 110, "0.8.0": 96}, CONFIG, "rule"),
    ("megatron_pp_3", 2, "M", ["train.pp=3"], ("train.pp", *WORLD),
     {"0.9.1": 110, "0.8.0": 96}, CONFIG, "rule"),
    ("megatron_cp_3", 2, "M", ["train.cp=3"], ("train.cp", *WORLD), {"0.9.1": 110}, CONFIG, "rule"),
    ("real_batch", 2, "M",
     ["rollout.n=2", "train.train_batch_size=12", "train.ppo_mini_batch_size=4"],
     ("train.train_batch_size", "rollout.n"), {"0.9.1": 124, "0.8.0": 110}, CONFIG, "rule"),
    # 3: validate_config.check_mutually_exclusive: both log-prob micro sizes
    ("rollout_micro_twice", 3, "M", [V + "rollout.log_prob_micro_batch_size=8"],
     (VO + "rollout.log_prob_micro_batch_size", "rollout.log_prob_micro_batch_size_per_gpu"),
     {"0.9.1": 159, "0.8.0": 145}, CONFIG, "rule"),
    ("ref_micro_twice", 3, "M", KL + [V + "ref.log_prob_micro_batch_size=8"],
     (VO + "ref.log_prob_micro_batch_size",), {"0.9.1": 159, "0.8.0": 145}, CONFIG, "rule"),
    # 5: val do_sample needs temperature > 0
    ("temperature_0", 5, "M", ["rollout.temperature=0"], ("rollout.temperature",),
     {"0.9.1": 201, "0.8.0": 186}, CONFIG, "rule"),
    # 7: ActorConfig.__post_init__: both actor micro sizes; loss_agg_mode
    ("actor_micro_twice", 7, "M", [V + "actor.ppo_micro_batch_size=4"],
     (VO + "actor.ppo_micro_batch_size", "train.ppo_micro_batch_size_per_gpu"),
     {"0.9.1": 202, "0.8.0": 202}, ACTOR, "rule"),
    ("loss_agg_via_overrides", 7, "M", [V + "actor.loss_agg_mode=no-such-mode"],
     (VO + "actor.loss_agg_mode",), {"0.9.1": 220, "0.8.0": 219}, ACTOR, "rule"),
    # 8: ActorConfig.validate: train >= mini; 18: FSDP Ulysses needs remove-padding
    ("train_below_mini", 8, "M", ["train.train_batch_size=8", "train.ppo_mini_batch_size=16"],
     ("train.train_batch_size", "train.ppo_mini_batch_size"), {"0.9.1": 225, "0.8.0": 224},
     ACTOR, "rule"),
    ("ulysses_no_remove_padding", 18, "F",
     ["train.ulysses_sp=2", V + "model.use_remove_padding=false"],
     ("train.ulysses_sp", VO + "model.use_remove_padding"), {"0.9.1": 151, "0.8.0": 130},
     FSDP_ENGINE, "rule"),
    # 9: McoreEngineConfig: dtype in {bfloat16, float16}
    ("megatron_fp32", 9, "M", ["train.dtype=float32"], ("train.dtype",),
     {"0.9.1": 218, "0.8.0": 213}, "workers/config/engine.py", "rule"),
    # 11: RolloutConfig: ep == tp * dp; PP > 1 not for vLLM (without the vllm_pp patch)
    ("rollout_ep_3", 11, "M", ["rollout.ep=3"], ("rollout.ep", "rollout.tp", "rollout.dp"),
     {"0.9.1": 294, "0.8.0": 300}, ROLLOUT, "rule"),
    ("rollout_pp_2_unpatched", 11, "M", ["rollout.pp=2"], ("rollout.pp",), {"0.9.1": 319},
     ROLLOUT, "rule"),
    # 15: actor dynamic bsz == log-prob dynamic bsz
    ("logprob_dyn_differs", 15, "M", [V + "rollout.log_prob_use_dynamic_bsz=true"],
     ("train.use_dynamic_bsz", VO + "rollout.log_prob_use_dynamic_bsz"),
     {"0.9.1": 616, "0.8.0": 557}, WORKERS, "rule"),
    # 17: world % rollout (tp * dp * pp)
    ("rollout_tp_3", 17, "M", ["rollout.tp=3"], ("rollout.tp", *WORLD),
     {"0.9.1": 659, "0.8.0": 600}, WORKERS, "rule"),
    # 19: FSDP meshes cover the world
    ("ulysses_16", 19, "F", ["train.ulysses_sp=16"], ("train.ulysses_sp", *WORLD),
     {"0.9.1": 248, "0.8.0": 224}, FSDP_ENGINE, "rule"),
    ("ulysses_3", 19, "F", ["train.ulysses_sp=3"], ("train.ulysses_sp", *WORLD),
     {"0.9.1": 248}, FSDP_ENGINE, "rule"),
    ("fsdp_size_3", 19, "F", ["train.fsdp_size=3"], ("train.fsdp_size", *WORLD),
     {"0.9.1": 51, "0.8.0": 56}, "workers/engine/fsdp/utils.py", "rule"),
    ("ref_ulysses_3", 19, "F",
     ["algorithm.use_kl_loss=true", V + "ref.ulysses_sequence_parallel_size=3"],
     (VO + "ref.ulysses_sequence_parallel_size", *WORLD), {"0.9.1": 248}, FSDP_ENGINE, "rule"),
    # 20: MegatronEngine asserts use_mbridge (actor, and the ref it builds first)
    ("mbridge_actor", 20, "M", [V + "actor.megatron.use_mbridge=false"],
     (VO + "actor.megatron.use_mbridge",), {"0.9.1": 191, "0.8.0": 90}, MCORE_ENGINE, "rule"),
    ("mbridge_ref", 20, "M", KL + [V + "ref.megatron.use_mbridge=false"],
     (VO + "ref.megatron.use_mbridge",), {"0.9.1": 191}, MCORE_ENGINE, "rule"),
    # 21: megatron-core parallel_state (via the engine's init): world % (etp * ep * pp)
    ("megatron_etp_3", 21, "M", ["train.etp=3"], ("train.etp", *WORLD), {"0.9.1": 271},
     MCORE_ENGINE, "rule"),
    # 22: train_mini_batch: (mini * n) % dp
    ("mini_times_n_by_dp", 22, "M",
     ["rollout.n=3", "train.ppo_mini_batch_size=1", "train.train_batch_size=8"],
     ("train.ppo_mini_batch_size", "rollout.n", *WORLD), {"0.9.1": 267, "0.8.0": 258},
     WORKERS, "rule"),
    # 23: prepare_micro_batches: per-rank batch % micro, per pass
    ("recompute_micro_3", 23, "M", ["rollout.log_prob_micro_batch_size_per_gpu=3"],
     ("rollout.log_prob_micro_batch_size_per_gpu", "train.train_batch_size", "rollout.n"),
     {"0.9.1": 125, "0.8.0": 91}, SPLIT, "rule"),
    ("ref_micro_3", 23, "M", KL + [V + "ref.log_prob_micro_batch_size_per_gpu=3"],
     (VO + "ref.log_prob_micro_batch_size_per_gpu",), {"0.9.1": 125, "0.8.0": 91}, SPLIT, "rule"),
    ("update_micro_3", 23, "M", ["train.ppo_micro_batch_size_per_gpu=3"],
     ("train.ppo_micro_batch_size_per_gpu", "train.ppo_mini_batch_size"),
     {"0.9.1": 125, "0.8.0": 91}, SPLIT, "rule"),
    # 24: rearrange_micro_batches: token budget * sp >= prompt + response
    ("actor_token_budget", 24, "M", DYN + ["train.ppo_max_token_len_per_gpu=16"],
     ("train.ppo_max_token_len_per_gpu", "train.max_prompt_length", "train.max_response_length"),
     {"0.9.1": 384, "0.8.0": 384}, BALANCE, "rule"),
    ("logprob_token_budget", 24, "M", DYN + [V + "rollout.log_prob_max_token_len_per_gpu=16"],
     (VO + "rollout.log_prob_max_token_len_per_gpu", "train.max_prompt_length"),
     {"0.9.1": 384, "0.8.0": 384}, BALANCE, "rule"),
    ("ref_token_budget", 24, "M",
     DYN + ["algorithm.use_kl_loss=true", V + "ref.log_prob_max_token_len_per_gpu=16"],
     (VO + "ref.log_prob_max_token_len_per_gpu", "train.max_prompt_length"),
     {"0.9.1": 384, "0.8.0": 384}, BALANCE, "rule"),
    # 25: RolloutReplica: a replica is whole nodes or part of one
    ("replica_not_whole_nodes", 25, "M",
     ["alignment=off", "cluster.nodes=2", "rollout.tp=4", "rollout.dp=3"],
     ("rollout.tp", "rollout.dp", *WORLD), {"0.9.1": 114, "0.8.0": 114},
     "workers/rollout/replica.py", "rule"),
    # 26: vLLM dp > 1: gpus_per_node % tp
    ("vllm_dp_tp_over_node", 26, "M",
     ["alignment=off", "cluster.nodes=4", "rollout.tp=16", "rollout.dp=2"],
     ("rollout.tp", "rollout.dp"), {"0.9.1": 385, "0.8.0": 305}, VLLM_SERVER, "rule"),
    # 28: vLLM SchedulerConfig: max_num_batched_tokens >= max_num_seqs (chunked prefill)
    ("tokens_below_seqs", 28, "M",
     ["rollout.chunked_prefill=true", "rollout.max_num_batched_tokens=16"],
     ("rollout.max_num_batched_tokens", "rollout.max_num_seqs"),
     {"0.9.1": 335, "0.8.0": 263}, VLLM_SERVER, "rule"),
    # 29-31: registry look-ups (the spec's names, and the verl keys passed straight through)
    ("adv_estimator_spec", 29, "M", ["algorithm.adv_estimator=no_such"],
     ("algorithm.adv_estimator",), {"0.9.1": 149, "0.8.0": 149}, ALGOS, "rule"),
    ("adv_estimator_via_overrides", 29, "M", ["+verl_overrides.algorithm.adv_estimator=no_such"],
     ("verl_overrides.algorithm.adv_estimator",), {"0.9.1": 149, "0.8.0": 149}, ALGOS, "rule"),
    ("policy_loss_via_overrides", 30, "M", [V + "actor.policy_loss.loss_mode=no_such"],
     (VO + "actor.policy_loss.loss_mode",), {"0.9.1": 82, "0.8.0": 82}, ALGOS, "rule"),
    ("reward_manager_via_overrides", 31, "M",
     ["+verl_overrides.reward.reward_manager.name=no_such"],
     ("verl_overrides.reward.reward_manager.name",), {"0.9.1": 52, "0.8.0": 52},
     "experimental/reward_loop/reward_manager/registry.py", "rule"),
    # 32: rollout-correction thresholds, parsed on step 1 (TOP-INIT-019; the dry run calls the
    # parsers)
    ("is_threshold_negative", 32, "M", [IS + "=token", IS + "_threshold=-1.0"],
     (IS[1:] + "_threshold",), {"0.9.1": 122, "0.8.0": 122}, CORR, "rule"),
    ("is_threshold_inverted", 32, "M", [IS + "=token", IS + "_threshold='2.0_1.0'"],
     (IS[1:] + "_threshold",), {"0.9.1": 126, "0.8.0": 126}, CORR, "rule"),
    ("rs_threshold_inverted", 32, "M", [RS + "=token_k1", RS + "_threshold='2.0_0.5'"],
     (RS[1:] + "_threshold",), {"0.9.1": 173}, CORR, "rule"),
    ("rs_threshold_two_bounds_non_k1", 32, "M", [RS + "=seq_mean_k3", RS + "_threshold='0.5_2.0'"],
     (RS[1:] + "_threshold",), {"0.9.1": 180, "0.8.0": 178}, CORR, "rule"),
    # 4: router replay R2 records routes in the recompute that bypass mode skips (0.9.1 only;
    # no topl field sets either: verl's validate_config, in the dry run, refuses it)
    ("router_replay_r2_bypass", 4, "M",
     [V + "actor.megatron.router_replay.mode=R2", RC + ".bypass_mode=true"],
     (VO + "actor.megatron.router_replay.mode",), {"0.9.1": 82}, CONFIG, "dry"),
    # 33-34: the V1 trainer (verl 0.9)
    ("gen_batch_3", 33, "M", ["algorithm.gen_batch_size=3"],
     ("algorithm.gen_batch_size", "train.train_batch_size"), {"0.9.1": 1485}, V1, "rule"),
    ("filter_groups_no_metric", 34, "M",
     ["algorithm.filter_groups=true", "algorithm.filter_groups_metric=''"],
     ("algorithm.filter_groups_metric",), {"0.9.1": 195}, V1, "rule"),
    # 21: parallel_state.initialize_model_parallel on each engine's sizes (TOP-INIT-020)
    ("vpp_without_pp", 21, "M", [VPP + "=2"], (VPP[1:],), MPU, MCORE_ENGINE, "rule"),
    ("ref_vpp_without_pp", 21, "M", KL + [V + "ref.megatron.virtual_pipeline_model_parallel_size=2"],
     (VO + "ref.megatron.virtual_pipeline_model_parallel_size",), MPU, MCORE_ENGINE, "rule"),
    ("pp_via_overrides", 21, "M", OFF + [V + "actor.megatron.pipeline_model_parallel_size=5"],
     (VO + "actor.megatron.pipeline_model_parallel_size", *WORLD), MPU, MCORE_ENGINE, "rule"),
    ("etp_via_overrides", 21, "M", OFF + [V + "actor.megatron.expert_tensor_parallel_size=3"],
     (VO + "actor.megatron.expert_tensor_parallel_size", *WORLD), MPU, MCORE_ENGINE, "rule"),
    # 38: TransformerConfig.__post_init__ (activation recompute, sequence parallel, EP)
    ("recompute_granularity_bad", 38, "M", [RECOMP + "granularity=partial"],
     (RECOMP + "granularity",), TFC, MCORE_ENGINE, "rule"),
    ("recompute_method_bad", 38, "M", [RECOMP + "method=zigzag"], (RECOMP + "method",), TFC,
     MCORE_ENGINE, "rule"),
    ("recompute_full_no_method", 38, "M", [RECOMP + "method=null"],
     (RECOMP + "granularity", RECOMP + "method"), TFC, MCORE_ENGINE, "rule"),
    ("recompute_full_no_layers", 38, "M", [RECOMP + "num_layers=null"],
     (RECOMP + "granularity", RECOMP + "num_layers"), TFC, MCORE_ENGINE, "rule"),
    ("recompute_selective_with_layers", 38, "M", [RECOMP + "granularity=selective"],
     (RECOMP + "granularity", RECOMP + "num_layers"), TFC, MCORE_ENGINE, "rule"),
    ("sequence_parallel_tp_1", 38, "M",
     OFF + [V + "actor.megatron.override_transformer_config.sequence_parallel=true"],
     (VO + "actor.megatron.override_transformer_config.sequence_parallel",), TFC, MCORE_ENGINE,
     "rule"),
    ("ep_on_dense", 38, "M", OFF + [V + "actor.megatron.expert_model_parallel_size=2"],
     (VO + "actor.megatron.expert_model_parallel_size",), TFC, MCORE_ENGINE, "rule"),
    # 39: get_num_layers_to_build: layers per stage split over the virtual stages
    ("vpp_splits_stage", 39, "M", ["train.pp=2", VPP + "=4"],
     (VPP[1:], "train.pp", "model.num_layers"), BUILD, MCORE_ENGINE, "rule"),
    # 41: _init_device_mesh returns where parallel_state is initialized: the actor runs in the
    # ref's groups (no error: the line is where verl skips its own sizes)
    ("ref_layout_differs", 41, "M", OFF + KL + [V + "ref.megatron.pipeline_model_parallel_size=2"],
     (VO + "ref.megatron.pipeline_model_parallel_size", "train.pp"), {"0.9.1": 244, "0.8.0": 139},
     MCORE_ENGINE, "rule"),
    # 42: dynamic context parallel on megatron-core 0.16 (0.9.1: the scheduler import; 0.8.0: assert)
    ("dynamic_cp", 42, "M", OFF + ["train.cp=2", V + "actor.megatron.dynamic_context_parallel=true"],
     (VO + "actor.megatron.dynamic_context_parallel",), {"0.9.1": 242, "0.8.0": 145},
     MCORE_ENGINE, "rule"),
]
# fmt: on
# verl 0.8.0 only: what 0.9 added, or what 0.8.0's RayPPOTrainer does not do
_ONLY_080 = [
    Case(
        "policy_loss_dro",
        30,
        "0.8.0",
        M80 + ["algorithm.policy_loss=dro"],
        ("algorithm.policy_loss",),
        "verl@0.8.0:trainer/ppo/core_algos.py:82",
    ),
    Case(
        "loss_agg_token_sum",
        7,
        "0.8.0",
        M80 + ["algorithm.loss_agg_mode=token-sum"],
        ("algorithm.loss_agg_mode",),
        "verl@0.8.0:workers/config/actor.py:219",
    ),
    Case(
        "train_not_multiple_of_mini",
        35,
        "0.8.0",
        M80 + ["train.train_batch_size=24", "train.ppo_mini_batch_size=16"],
        ("train.train_batch_size", "train.ppo_mini_batch_size"),
        "verl@0.8.0:workers/engine_workers.py:258",
    ),
    Case(
        "filter_groups_on_main_ppo",
        35,
        "0.8.0",
        M80 + ["algorithm.filter_groups=true"],
        ("algorithm.filter_groups",),
        "verl@0.8.0:trainer/main_ppo.py:171",
    ),
]
# each case's minimal valid neighbour: the same base, the value verl accepts
# fmt: off
_NEAR = {
    "unknown_key": [V + "actor.ppo_epochs=1"],
    "megatron_tp_3": ["alignment=off", "train.tp=2"],
    "megatron_pp_3": ["train.pp=2"],
    "megatron_cp_3": ["alignment=off", "train.cp=2"],
    "real_batch": ["rollout.n=2", "train.train_batch_size=16", "train.ppo_mini_batch_size=8"],
    "rollout_micro_twice": [V + "rollout.log_prob_micro_batch_size_per_gpu=2"],
    "ref_micro_twice": KL + [V + "ref.log_prob_micro_batch_size_per_gpu=2"],
    "temperature_0": ["rollout.temperature=0.7"],
    "actor_micro_twice": ["train.ppo_micro_batch_size_per_gpu=4", "alignment=off"],
    "loss_agg_via_overrides": [V + "actor.loss_agg_mode=seq-mean-token-mean"],
    "train_below_mini": ["train.train_batch_size=16", "train.ppo_mini_batch_size=16"],
    "ulysses_no_remove_padding": ["train.ulysses_sp=1", V + "model.use_remove_padding=false"],
    "megatron_fp32": ["train.dtype=float16", "alignment=off"],
    "rollout_ep_3": ["rollout.ep=1"],
    "rollout_pp_2_unpatched": ["rollout.pp=1"],
    "logprob_dyn_differs": [V + "rollout.log_prob_use_dynamic_bsz=false"],
    "rollout_tp_3": ["rollout.tp=2", "train.tp=2"],
    "ulysses_16": ["train.ulysses_sp=2"],
    "ulysses_3": ["train.ulysses_sp=2"],
    "fsdp_size_3": ["train.fsdp_size=4"],
    "ref_ulysses_3": ["algorithm.use_kl_loss=true", V + "ref.ulysses_sequence_parallel_size=2"],
    "mbridge_actor": [V + "actor.megatron.use_mbridge=true"],
    "mbridge_ref": KL + [V + "ref.megatron.use_mbridge=true"],
    "megatron_etp_3": ["train.etp=2", "train.tp=2", "rollout.tp=2"],
    "mini_times_n_by_dp": ["rollout.n=8", "train.ppo_mini_batch_size=2", "train.train_batch_size=8"],
    "recompute_micro_3": ["rollout.log_prob_micro_batch_size_per_gpu=4", "alignment=off"],
    "ref_micro_3": KL + [V + "ref.log_prob_micro_batch_size_per_gpu=4", "alignment=off"],
    "update_micro_3": ["train.ppo_micro_batch_size_per_gpu=4", "alignment=off"],
    "actor_token_budget": DYN + ["train.ppo_max_token_len_per_gpu=8192", "alignment=off"],
    "logprob_token_budget":
        DYN + [V + "rollout.log_prob_max_token_len_per_gpu=8192", "alignment=off"],
    "ref_token_budget": DYN + ["algorithm.use_kl_loss=true",
                               V + "ref.log_prob_max_token_len_per_gpu=8192", "alignment=off"],
    "replica_not_whole_nodes":
        ["alignment=off", "cluster.nodes=2", "rollout.tp=4", "rollout.dp=2"],
    "vllm_dp_tp_over_node": ["alignment=off", "cluster.nodes=4", "rollout.tp=8", "rollout.dp=2"],
    "tokens_below_seqs":
        ["rollout.chunked_prefill=true", "rollout.max_num_batched_tokens=4096", "alignment=off"],
    "adv_estimator_spec": ["algorithm.adv_estimator=rloo"],
    "adv_estimator_via_overrides": ["+verl_overrides.algorithm.adv_estimator=rloo"],
    "policy_loss_via_overrides": [V + "actor.policy_loss.loss_mode=gspo"],
    "reward_manager_via_overrides": ["+verl_overrides.reward.reward_manager.name=naive"],
    "is_threshold_negative": [IS + "=token", IS + "_threshold=2.0"],
    "is_threshold_inverted": [IS + "=token", IS + "_threshold='0.5_2.0'"],
    "rs_threshold_inverted": [RS + "=token_k1", RS + "_threshold='0.5_2.0'"],
    "rs_threshold_two_bounds_non_k1": [RS + "=seq_mean_k3", RS + "_threshold=2.0"],
    "router_replay_r2_bypass": [V + "actor.megatron.router_replay.mode=R2"],
    "gen_batch_3": ["algorithm.gen_batch_size=4"],
    "filter_groups_no_metric": ["algorithm.filter_groups=true", "algorithm.filter_groups_metric=acc"],
    "vpp_without_pp": ["train.pp=2", VPP + "=2"],
    # the ref takes the actor's virtual pipeline, with the pipeline the recipe pins for it (the
    # ref is built first: its sizes initialize parallel_state for both)
    "ref_vpp_without_pp": KL + ["train.pp=2", V + "ref.megatron.pipeline_model_parallel_size=2",
                                VPP + "=2"],
    "pp_via_overrides": OFF + [V + "actor.megatron.pipeline_model_parallel_size=2"],
    "etp_via_overrides": OFF + [V + "actor.megatron.expert_tensor_parallel_size=2"],
    "recompute_granularity_bad": [RECOMP + "granularity=selective", RECOMP + "num_layers=null"],
    "recompute_method_bad": [RECOMP + "method=block"],
    "recompute_full_no_method": [RECOMP + "method=block"],
    "recompute_full_no_layers": [RECOMP + "num_layers=2"],
    "recompute_selective_with_layers": [RECOMP + "granularity=selective", RECOMP + "num_layers=null"],
    "sequence_parallel_tp_1": OFF + ["train.tp=2",
                                     V + "actor.megatron.override_transformer_config.sequence_parallel=true"],
    "ep_on_dense": OFF + [V + "actor.megatron.expert_model_parallel_size=1"],
    "vpp_splits_stage": ["train.pp=2", VPP + "=3"],
    "ref_layout_differs": OFF + KL + ["train.pp=2", V + "ref.megatron.pipeline_model_parallel_size=2"],
    "dynamic_cp": OFF + ["train.cp=2", V + "actor.megatron.dynamic_context_parallel=false"],
}
# fmt: on


def _build() -> tuple[list[Case], list[Neighbour]]:
    cases, near = [], []
    for cid, row, eng, ov, keys, lines, path, by in _SPEC:
        for verl, line in lines.items():
            base = BASES[verl][eng]
            cases.append(
                Case(f"{cid}@{verl}", row, verl, base + ov, keys, f"verl@{verl}:{path}:{line}", by)
            )
            near.append(Neighbour(f"{cid}@{verl}", row, verl, base + _NEAR[cid]))
    cases += _ONLY_080
    # what 0.8.0 refuses and 0.9.1 accepts: each its neighbour on the other release
    near += [
        Neighbour("policy_loss_dro@0.9.1", 30, "0.9.1", M91 + ["algorithm.policy_loss=dro"]),
        Neighbour(
            "loss_agg_token_sum@0.9.1", 7, "0.9.1", M91 + ["algorithm.loss_agg_mode=token-sum"]
        ),
        Neighbour(
            "train_not_multiple_of_mini@0.9.1",
            35,
            "0.9.1",
            M91 + ["train.train_batch_size=24", "train.ppo_mini_batch_size=16"],
        ),
        Neighbour(
            "filter_groups_on_main_ppo@0.9.1", 35, "0.9.1", M91 + ["algorithm.filter_groups=true"]
        ),
        Neighbour("rollout_pp_2_patched@0.8.0", 11, "0.8.0", M80 + ["rollout.pp=2"]),
        Neighbour(  # 0.8.0 does not order the k1 bounds
            "rs_threshold_inverted@0.8.0",
            32,
            "0.8.0",
            M80 + [RS + "=token_k1", RS + "_threshold='2.0_0.5'"],
        ),
        # verl turns its own sequence_parallel off at tp=1 (McoreEngineConfig.__post_init__)
        Neighbour(
            "sequence_parallel_tp_1_by_train@0.9.1",
            38,
            "0.9.1",
            M91 + ["train.sequence_parallel=true"],
        ),
        Neighbour(
            "tokens_below_seqs_unchunked@0.9.1",
            27,
            "0.9.1",
            M91 + ["rollout.max_num_batched_tokens=16"],
        ),
    ]
    return cases, near


CASES, NEIGHBOURS = _build()
