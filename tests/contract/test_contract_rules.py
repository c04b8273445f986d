"""Every rule: one config that violates it (rejected with that id), one that does not."""

import pytest
from helpers import STRICT_A3

from topl.launcher.contract import check
from topl.launcher.contract.core import RULES

B = STRICT_A3
OFF = ["recipe=qwen3_4b_grpo_a3_off"]
ARR = "actor_rollout_ref"
PPO = ["algorithm.adv_estimator=gae", "algorithm.use_critic=true"]
SL = B + ["cluster=slurm_a3"]  # the Slurm preset of the same A3 nodes
SL_OK = SL + ["cluster.slurm.partition=a3", "cluster.slurm.time_min=600"]
REL = ["recipe=qwen3_4b_grpo_a2_release_strict"]  # verl 0.9.1, Megatron, 1 x 8
RC = "+verl_overrides.algorithm.rollout_correction"
FS = ["stack=release", "cluster.backend=ray_job", "cluster.devices_per_node=8"]  # FSDP, verl 0.9.1
CASES = {
    "TOP-RES-001": (B + ["train.pp=3"], B),
    "TOP-RES-002": (B + ["train.ep=3"], B + ["train.ep=2"]),
    "TOP-RES-003": (B + ["rollout.tp=3"], B + ["rollout.tp=2", "train.tp=2"]),
    "TOP-RES-004": (B + ["rollout.dp=3"], B + ["rollout.dp=2"]),
    "TOP-RES-005": (B + ["train.ppo_mini_batch_size=64"], B),
    "TOP-RES-006": (B + ["rollout.ep=2"], B + ["rollout.ep=2", "rollout.dp=2"]),
    "TOP-RES-007": (B + ["rollout.pp=5"], B),
    "TOP-RES-008": (
        B + ["train.sequence_parallel=true"],
        B + ["train.sequence_parallel=true", "train.tp=2", "rollout.tp=2"],
    ),
    "TOP-RES-009": (["model=qwen3_8b"], ["model=tiny_moe"]),
    "TOP-RES-010": (
        B + ["cluster.devices_per_node=32"],
        B + ["cluster.nodes=2", "cluster.devices_per_node=16"],
    ),
    "TOP-MEM-001": (B + ["train.pp=2"], B + ["train.pp=2", "train.ep=8"]),
    "TOP-MEM-002": (B + ["rollout.pp=1"], B + ["rollout.pp=1", "rollout.tp=2", "train.tp=2"]),
    "TOP-MEM-003": (B + ["rollout.max_num_seqs=1024"], B),
    "TOP-ALN-001": (B + ["alignment.batch_invariant=false"], B),
    "TOP-ALN-002": (B + ["alignment=off"], B),
    "TOP-ALN-003": (
        B
        + [
            "alignment=mitigated",
            "alignment.rollout_correction.rollout_is=null",
            "alignment.rollout_correction.rollout_rs=null",
        ],
        B + ["alignment=mitigated"],
    ),
    "TOP-ATTN-001": (B + ["rollout.attention_backend=ASCEND"], B),
    "TOP-ATTN-002": (["model=deepseek_v3"], ["model=deepseek_v3", "alignment=mitigated"]),
    "TOP-ATTN-003": (B + ["model.sliding_window=4096"], B),
    "TOP-ATTN-004": (["alignment.kv_tile=12"], ["alignment.kv_tile=16"]),
    "TOP-GRAPH-001": (B + ["rollout.graph_mode=full"], B + ["rollout.graph_mode=piecewise"]),
    "TOP-CACHE-001": (B + ["rollout.prefix_caching=true"], B),
    "TOP-CACHE-002": (B + ["rollout.chunked_prefill=true"], B),
    "TOP-COLL-001": (
        B + ["collective=default", "train.tp=2", "rollout.tp=2"],
        B + ["train.tp=2", "rollout.tp=2"],
    ),
    "TOP-COLL-002": (B + ["collective.lccl_deterministic=false"], B),
    "TOP-COLL-003": (
        B + ["collective.hccl_algo='level0:pipeline'"],
        B + ["collective.hccl_algo='level0:ring'"],
    ),
    "TOP-TP-001": (B + ["rollout.tp=2"], B + ["rollout.tp=2", "train.tp=2"]),
    "TOP-TP-002": (B + ["train.ep=2"], B),
    "TOP-LOGP-001": (B + ["rollout.calculate_log_probs=false"], B),
    "TOP-LOGP-002": (
        B + ["rollout.top_p=0.9"],
        B + ["rollout.top_p=0.9", "rollout.logprobs_mode=raw_logprobs"],
    ),
    # raw log-probs are pre-temperature: wrong at T != 1 even without top-p (facts)
    "TOP-SAMP-001": (B + ["rollout.temperature=0"], B + ["rollout.temperature=0.7"]),
    "TOP-LOGP-003": (B + ["rollout.log_prob_micro_batch_size_per_gpu=4"], B),
    "TOP-LOGP-004": (B + ["train.use_dynamic_bsz=true"], B),
    "TOP-STACK-001": (B + ["cluster.versions.verl_patches=[]"], B),
    "TOP-STACK-002": (
        B + ["cluster.versions.vllm_ascend_patches=[]"],
        B + ["stack=release", "rollout.pp=1"],
    ),
    "TOP-STACK-003": (
        B + ["cluster.versions.torch_npu=2.9.1"],
        B + ["cluster.versions.torch_npu=2.9.0.post2"],
    ),
    "TOP-STACK-004": (B + ["cluster.versions.batch_invariant_ops=false"], B),
    "TOP-STACK-005": (B + ["cluster.external_modules=null"], B),
    "TOP-STACK-006": (B + ["cluster.versions.cann=8.5.0"], B + ["cluster.versions.cann=9.0.0"]),
    "TOP-STACK-007": (B + ["cluster.versions.mindspeed=master"], B),
    "TOP-GRAPH-002": (  # vllm-ascend 0.21.0rc1's FA3 docs: enforce_eager=True
        B
        + [
            "stack=release",
            "cluster.versions.vllm_ascend=0.21.0rc1",
            "rollout.graph_mode=piecewise",
        ],
        B + ["stack=release", "rollout.graph_mode=piecewise"],
    ),
    "TOP-VER-001": (
        B + ["cluster.versions.cann=CANN900B160"],
        B + ["cluster.versions.cann=9.0.0.B160"],
    ),
    "TOP-SEED-001": (
        B + ["cluster.versions.verl_patches=[vllm_pp]", "rollout.per_request_seed=true"],
        B + ["rollout.per_request_seed=true"],
    ),
    "TOP-CLUS-001": (B, B + ["cluster.ray_address=http://head:8265"]),  # presets name no head
    "TOP-SLURM-001": (SL, SL + ["cluster.slurm.partition=a3"]),  # the preset names none
    "TOP-SLURM-002": (SL, SL + ["cluster.slurm.time_min=600"]),
    "TOP-SLURM-003": (
        SL_OK + ["cluster.slurm.gres=gpu"],  # NPUs counted as GPUs: never used
        SL_OK,
    ),
    "TOP-SLURM-004": (
        SL_OK + ["cluster.slurm.sbatch=['--wrap=rm -rf x','--mem=500G']"],
        SL_OK + ["cluster.slurm.sbatch=['--mem=500G','--exclusive']"],
    ),
    "TOP-ALG-001": (["algorithm.filter_groups=true"], ["algorithm=dapo"]),
    "TOP-ALG-002": (
        ["algorithm=dapo", "algorithm.overlong_buffer_fraction=1.0"],
        ["algorithm=dapo"],
    ),
    "TOP-SPEC-001": (B + ["train.tp=0"], B + ["train.tp=2", "rollout.tp=2"]),
    "TOP-ENG-001": (["train.tp=2", "rollout.tp=2"], ["train.fsdp_size=1"]),
    "TOP-ENG-002": (B + ["train.cp=2"], B + ["train.cp=2", "alignment=mitigated"]),
    "TOP-ENG-003": (
        B + ["rollout.n=1"],
        B
        + [
            "rollout.n=1",
            "algorithm=ppo",
            "algorithm.adv_estimator=gae",
            "algorithm.use_critic=true",
        ],
    ),
    "TOP-ALG-003": (
        B + ["algorithm=ppo"],  # the seed recipe's own adv_estimator=grpo stays
        B + ["algorithm=ppo", "algorithm.adv_estimator=gae", "algorithm.use_critic=true"],
    ),
    "TOP-ENG-004": (
        B + ["train.max_response_length=40000"],
        B + ["train.max_response_length=4096"],
    ),
    "TOP-ENG-005": (B + ["train.pp=5"], B + ["train.pp=4"]),
    "TOP-ENG-006": (B + ["train.ep=4"], B + ["train.ep=2"]),
    "TOP-ENG-008": (
        B + ["cluster.versions.verl=0.9.1"],
        B + ["cluster.versions.verl=0.9.1", "rollout.max_num_batched_tokens=40960"],
    ),
    "TOP-ENG-009": (["train.steps=null"], B + ["train.steps=null"]),  # verl's own default there
    "TOP-ENG-007": (
        B + ["alignment=mitigated", "alignment.rollout_correction.rollout_rs_threshold=null"],
        B + ["alignment=mitigated"],
    ),
    "TOP-ENV-001": (
        B + ["+cluster.env.VLLM_BATCH_INVARIANT=0"],
        B + ["+cluster.env.HCCL_EXEC_TIMEOUT=7200"],
    ),
    "TOP-ENV-002": (
        B + ["alignment=off", "+cluster.env.HCCL_DETERMINISTIC=true"],
        B + ["alignment=off"],
    ),
    "TOP-ENV-003": (B + ["+cluster.env={A.B: x}"], B + ["+cluster.env={A_B: x}"]),
    "TOP-SCHEMA-001": (B + ["cluster.versions.verl_patches=[mindspeed_batch_invariant]"], B),
    "TOP-SCHEMA-002": (
        B + ["cluster.versions.verl=0.9.1", "train.param_offload=false"],
        B + ["cluster.versions.verl=0.9.1"],
    ),
    "TOP-SCHEMA-003": (B + ["cluster.versions.verl_patches=[vllm_pp,per_request_seed]"], B),
    "TOP-SCHEMA-004": (B + ["experiment=$TOPL_TEST_SURELY_UNSET"], B + ["experiment=plain"]),
    "TOP-SCHEMA-005": (B + ["train=fsdp"], B),
    "TOP-SCHEMA-006": (B + ["train.dtype=float32"], B + ["train.dtype=float16"]),
    "TOP-VERL-001": (
        B + ["+algorithm.extra_overrides.trainer.totl_epochs=3"],
        B + ["+algorithm.extra_overrides.trainer.log_val_generations=0"],
    ),
    "TOP-VERL-002": (
        B + ["+algorithm.extra_overrides.actor_rollout_ref.rollout.enforce_eager=false"],
        B + ["+algorithm.extra_overrides.trainer.log_val_generations=0"],
    ),
    "TOP-VERL-003": (
        [
            *OFF,
            "rollout.per_request_seed=true",
            f"+verl_overrides.{ARR}.rollout.per_request_seed=false",
        ],
        [*OFF, "rollout.per_request_seed=true"],
    ),
    "TOP-VERL-004": (
        B + ["+verl_overrides.trainer.total_epochs=many"],
        B + ["+verl_overrides.trainer.total_epochs=2"],
    ),
    "TOP-INIT-001": (
        [*OFF, f"+verl_overrides.{ARR}.rollout.log_prob_use_dynamic_bsz=false"],
        [*OFF, "train.use_dynamic_bsz=false"],
    ),
    "TOP-INIT-002": (
        B + ["+verl_overrides.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"],
        B,
    ),
    "TOP-INIT-003": (B + ["rollout.n=3", "train.ppo_mini_batch_size=1"], B + ["rollout.n=4"]),
    "TOP-INIT-004": (
        ["train=fsdp", "model=qwen3_4b", "train.ulysses_sp=3"],
        ["train=fsdp", "model=qwen3_4b", "train.ulysses_sp=2"],
    ),
    "TOP-INIT-005": (
        B + ["+verl_overrides.actor_rollout_ref.rollout.data_parallel_size=3"],
        B + ["+verl_overrides.actor_rollout_ref.rollout.data_parallel_size=2"],
    ),
    "TOP-INIT-006": ([*OFF, "train.train_batch_size=3"], [*OFF, "train.train_batch_size=2"]),
    "TOP-INIT-007": (
        [*OFF, "train.train_batch_size=8", f"+verl_overrides.{ARR}.actor.use_prefix_grouper=true"],
        [*OFF, "train.train_batch_size=16", f"+verl_overrides.{ARR}.actor.use_prefix_grouper=true"],
    ),
    "TOP-INIT-008": (
        [*OFF, *PPO, "rollout.n=1", "train.ppo_mini_batch_size=2", "train.train_batch_size=16"],
        [*OFF, *PPO, "rollout.n=1", "train.ppo_mini_batch_size=16", "train.train_batch_size=16"],
    ),
    "TOP-INIT-009": (
        [
            *OFF,
            *PPO,
            "train.use_dynamic_bsz=false",
            "+verl_overrides.critic.ppo_mini_batch_size=32",
        ],
        [*OFF, *PPO, "train.use_dynamic_bsz=false"],
    ),
    "TOP-TP-003": (B + ["train.etp=2"], B),
    # issue 46: the layout verl's workers build (tests/contract/test_verl_layout.py has the keys)
    "TOP-INIT-010": (
        [*REL, f"+verl_overrides.{ARR}.rollout.log_prob_micro_batch_size_per_gpu=3"],
        [*REL, f"+verl_overrides.{ARR}.rollout.log_prob_micro_batch_size_per_gpu=2"],
    ),
    "TOP-INIT-011": (
        [*FS, "train.use_dynamic_bsz=true", "train.ppo_max_token_len_per_gpu=16"],
        [*FS, "train.use_dynamic_bsz=true", "train.ppo_max_token_len_per_gpu=64"],
    ),
    "TOP-INIT-012": ([*FS, "train.fsdp_size=3"], [*FS, "train.fsdp_size=4"]),
    "TOP-INIT-013": (
        [*FS, "cluster.nodes=3", "rollout.tp=12"],
        [*FS, "cluster.nodes=3", "rollout.tp=8"],
    ),
    "TOP-INIT-014": (
        [*REL, "rollout.chunked_prefill=true", "rollout.max_num_batched_tokens=16"],
        [*REL, "rollout.chunked_prefill=true", "rollout.max_num_batched_tokens=2048"],
    ),
    "TOP-INIT-015": (
        [*REL, f"+verl_overrides.{ARR}.actor.megatron.use_mbridge=false"],
        [*REL, f"+verl_overrides.{ARR}.actor.megatron.use_mbridge=true"],
    ),
    "TOP-INIT-016": ([*REL, "algorithm.gen_batch_size=3"], [*REL, "algorithm.gen_batch_size=8"]),
    "TOP-INIT-017": (
        ["recipe=qwen3_4b_grpo_a2_strict", "algorithm.policy_loss=dro"],  # verl 0.8.0: no `dro`
        [*REL, "algorithm.policy_loss=dro"],
    ),
    "TOP-INIT-019": (
        [*REL, f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold='2.0_1.0'"],
        [*REL, f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold='0.5_2.0'"],
    ),
    "TOP-INIT-018": (
        [*REL, f"+verl_overrides.{ARR}.actor.ppo_micro_batch_size=4"],
        [*REL, f"+verl_overrides.{ARR}.actor.ppo_micro_batch_size_per_gpu=4"],
    ),
    "TOP-INIT-020": (
        [
            *REL,
            "train.pp=2",
            f"+verl_overrides.{ARR}.actor.megatron.virtual_pipeline_model_parallel_size=4",
        ],
        [
            *REL,
            "train.pp=2",
            f"+verl_overrides.{ARR}.actor.megatron.virtual_pipeline_model_parallel_size=3",
        ],
    ),
    "TOP-INIT-021": (  # the critic's groups serve the actor: its sizes differ
        [*REL, "algorithm.adv_estimator=gae", "algorithm.use_critic=true", "train.pp=2"]
        + ["+verl_overrides.critic.megatron.pipeline_model_parallel_size=1"],
        [*REL, "algorithm.adv_estimator=gae", "algorithm.use_critic=true", "train.pp=2"],
    ),
    "TOP-INIT-022": (  # no megatron-core release has verl's dynamic context parallel
        [*REL, f"+verl_overrides.{ARR}.actor.megatron.dynamic_context_parallel=true"],
        [*REL, f"+verl_overrides.{ARR}.actor.megatron.dynamic_context_parallel=false"],
    ),
}


def ids(compose, overrides):
    return {v.rule for v in check(compose(overrides))}


def test_every_rule_has_a_case():
    assert {r.id for r in RULES} == set(CASES)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_rejects_and_accepts(compose, rule_id):
    bad, good = CASES[rule_id]
    assert rule_id in ids(compose, bad)
    assert rule_id not in ids(compose, good)


def test_shipped_defaults_pass_clean(compose):
    assert ids(compose, []) == set()
    # a shipped cluster preset names no Ray head: a warning for `check`, a refusal for `launch`
    # (the seed's CANN build on A3 passes TOP-STACK-006: the seed measured logdiff 0 on it)
    assert ids(compose, B) == {"TOP-CLUS-001"}


def test_violation_names_keys_values_and_sources(compose):
    vs = {v.rule: v for v in check(compose(B + ["rollout.tp=2"]))}
    v = vs["TOP-TP-001"]
    assert v.severity == "error"
    assert v.keys["rollout.tp"] == {"value": 2, "source": "command line `rollout.tp=2`"}
    assert v.keys["train.tp"] == {
        "value": 1,
        "source": "recipes/seed_qwen3_30b_a3b_grpo_on.yaml",  # the matrix recipe includes it
    }
    assert "same tp" in v.fix


def test_rules_have_docs_and_unique_ids():
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        assert r.why and r.title and r.fix and r.keys, r.id


@pytest.mark.parametrize("verl,fires", [("0.8.0", False), ("0.9.0", False), ("0.9.1", True)])
def test_unchunked_token_budget_warns_where_verl_raises_it(compose, verl, fires):
    """verl 0.9.1 raises max_num_batched_tokens to max_model_len without chunked prefill; 0.9.0 and
    0.8.0 pass the value on (the fact's range edge)."""
    assert ("TOP-ENG-008" in ids(compose, B + [f"cluster.versions.verl={verl}"])) == fires
    assert "TOP-ENG-008" not in ids(compose, [])  # the local backend runs the value as set


@pytest.mark.parametrize("max_model_len,fires", [(4096, False), (8192, False), (16384, True)])
def test_unchunked_token_budget_reads_max_model_len_from_verl_overrides(
    compose, max_model_len, fires
):
    """verl compares max_num_batched_tokens with rollout.max_model_len, set here through
    verl_overrides (verl@0.9.1:verl/workers/rollout/vllm_rollout/vllm_async_server.py:
    vLLMHttpServer._validate_configs): 8192 >= 4096 runs as set (review #5)."""
    key = "+verl_overrides.actor_rollout_ref.rollout.max_model_len"
    o = B + ["cluster.versions.verl=0.9.1", "rollout.chunked_prefill=false"]
    o += ["rollout.max_num_batched_tokens=8192"]
    vs = {v.rule: v for v in check(compose(o + [f"{key}={max_model_len}"]))}
    assert ("TOP-ENG-008" in vs) == fires
    if fires:
        assert f"runs {max_model_len} " in vs["TOP-ENG-008"].message


@pytest.mark.parametrize(
    "value,problem",
    [
        ("lots", "verl 0.9.1 takes int, got str"),  # the type RolloutConfig declares
        ("50000", "> model.max_position_embeddings=40960"),  # verl 0.9.1 raises ValueError
        ("4096", None),
    ],
)
def test_verl_override_values_are_typed_and_max_model_len_bounded(compose, value, problem):
    """TOP-VERL-004 (review #4): the key, value, expected type and source are named."""
    key = "verl_overrides.actor_rollout_ref.rollout.max_model_len"
    vs = {
        v.rule: v
        for v in check(compose(["recipe=qwen3_4b_grpo_a2_release_strict", f"+{key}={value}"]))
    }
    if problem is None:
        assert "TOP-VERL-004" not in vs
        return
    v = vs["TOP-VERL-004"]
    assert f"max_model_len={value} (set by {key})" in v.message and problem in v.message
    assert v.keys[key]["source"].startswith("command line")


@pytest.mark.parametrize("key", ["trainer.n_gpus_per_node", "trainer.nnodes"])
def test_a_value_rules_compute_with_given_as_a_string_is_one_type_error(compose, key):
    """Rules that compute with a verl value (the actor's data-parallel size from the GPU count)
    wait for a string where verl holds an int: TOP-VERL-004 names it, no traceback; check and the
    sweep's evaluate alike."""
    from topl.launcher.contract import evaluate

    c = compose(["recipe=qwen3_4b_grpo_a2_release_strict", f"+verl_overrides.{key}=abc"])
    vs = {v.rule: v for v in check(c)}
    assert f"{key.split('.')[-1]}=abc" in vs["TOP-VERL-004"].message
    assert "TOP-VERL-004" in {r.id for r, *_ in evaluate(c.to_object())}


def test_a_rule_that_raises_on_well_typed_values_is_not_hidden(compose, monkeypatch):
    """The wait above is for bad input only: with every value of verl's type, a rule's error is
    a bug and surfaces."""
    from topl.launcher.contract.core import Rule

    def broken(s):
        raise TypeError("a bug")

    broken_rule = Rule("TOP-TEST-001", "error", "t", (), "f", broken)
    monkeypatch.setattr("topl.launcher.contract.RULES", [*RULES, broken_rule])
    with pytest.raises(TypeError, match="a bug"):
        check(compose(["recipe=qwen3_4b_grpo_a2_release_strict"]))
