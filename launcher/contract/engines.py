"""Cross-field constraints the engines enforce at start-up or at the first step (each cited)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.render.command import command, note
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_strict, world_size

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

MCORE = "megatron_core@0.16.0:megatron/core"
VERL = "verl@0.9.1:verl"
MAX_MODEL_LEN = "actor_rollout_ref.rollout.max_model_len"
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized")


@rule(
    "TOP-ENG-001",
    ERROR,
    "FSDP training has no tensor, pipeline, expert or context parallel",
    ("train.engine", "train.tp", "train.pp", "train.ep", "train.etp", "train.cp"),
    "use train=megatron for tp/pp/ep/cp, or set them to 1 (FSDP shards with train.fsdp_size, "
    "splits sequences with train.ulysses_sp)",
)
def fsdp_layout(s: JobSpec) -> Outcome:
    """verl's FSDP engine has only fsdp_size and ulysses_sequence_parallel_size
    (verl@0.9.1:verl/workers/config/engine.py:FSDPEngineConfig); topl's renderer has nowhere to
    put Megatron sizes, so they would silently vanish."""
    t = s.train
    if t.engine == "fsdp":
        set_ = [
            f"{k}={getattr(t, k)}" for k in ("tp", "pp", "ep", "etp", "cp") if getattr(t, k) != 1
        ]
        if set_:
            return f"train.engine=fsdp with {', '.join(set_)}: FSDP ignores Megatron parallel sizes"


@rule(
    "TOP-ENG-002",
    ERROR,
    "no context parallel with MindSpeed's batch-invariant flash attention",
    ("alignment.mode", "train.engine", "train.cp"),
    "set train.cp=1 in strict mode (shard long sequences with pipeline parallel instead)",
)
def strict_cp(s: JobSpec) -> Outcome:
    """Strict Megatron runs render use_flash_attn_npu_batch_invariant, whose validate_args raises
    for context_parallel_size != 1 (mindspeed@core_r0.16.0:mindspeed/features_manager/
    batch_invariant/batch_invariant.py:BatchInvariantFeature.validate_args)."""
    if is_strict(s) and s.train.engine == "megatron" and s.train.cp != 1:
        return f"train.cp={s.train.cp}: MindSpeed's batch-invariant flash attention requires cp=1"


@rule(
    "TOP-ENG-003",
    ERROR,
    "group-relative advantages need at least two samples per prompt",
    ("algorithm.adv_estimator", "rollout.n"),
    "set rollout.n >= 2 (the seed uses 8)",
)
def group_size(s: JobSpec) -> Outcome:
    """With one sample per prompt verl's GRPO uses mean 0 and std 1 for the group, so the
    advantage is the raw reward with no group baseline (verl@0.9.1:verl/trainer/ppo/core_algos.py:
    compute_grpo_outcome_advantage): not GRPO any more."""
    if s.algorithm.adv_estimator in GROUP_ESTIMATORS and s.rollout.n < 2:
        return f"adv_estimator={s.algorithm.adv_estimator} with rollout.n={s.rollout.n}: no group baseline"


@rule(
    "TOP-ENG-004",
    ERROR,
    "prompt plus response fit the model's context",
    ("train.max_prompt_length", "train.max_response_length", "model.max_position_embeddings"),
    "shorten train.max_prompt_length / train.max_response_length",
)
def context_fits(s: JobSpec) -> Outcome:
    """verl's vLLM server sets max_model_len to max_position_embeddings and caps each request's
    max_tokens at max_model_len - prompt length (verl@0.9.1:verl/workers/rollout/vllm_rollout/
    vllm_async_server.py:vLLMHttpServer._validate_configs, .generate): longer responses are cut."""
    t, m = s.train, s.model
    if t.max_prompt_length + t.max_response_length > m.max_position_embeddings:
        return (
            f"prompt {t.max_prompt_length} + response {t.max_response_length} tokens exceed "
            f"max_position_embeddings={m.max_position_embeddings}"
        )


@rule(
    "TOP-ENG-005",
    ERROR,
    "pipeline stages hold whole layers",
    ("train.engine", "train.pp", "rollout.pp", "model.num_layers"),
    "choose train.pp dividing model.num_layers, and rollout.pp <= model.num_layers",
)
def pp_layers(s: JobSpec) -> Outcome:
    """Megatron asserts num_layers % pipeline_model_parallel_size == 0 when no uneven first/last
    stage is given (megatron_core@0.16.0:megatron/core/transformer/transformer_block.py:
    get_num_layers_to_build; topl renders none). vLLM splits unevenly, but a stage needs a layer."""
    n = s.model.num_layers
    if s.train.engine == "megatron" and n % s.train.pp:
        return f"{n} layers do not split over train.pp={s.train.pp} Megatron stages"
    if s.rollout.pp > n:
        return f"rollout.pp={s.rollout.pp} stages for {n} layers"


@rule(
    "TOP-ENG-006",
    ERROR,
    "Megatron's expert layout tiles the world (etp*ep*pp divides it)",
    (
        "train.engine",
        "train.ep",
        "train.etp",
        "train.pp",
        "cluster.nodes",
        "cluster.devices_per_node",
    ),
    "choose ep*etp*pp dividing nodes*devices_per_node, or add nodes",
)
def expert_world(s: JobSpec) -> Outcome:
    """Megatron builds expert groups of etp*ep*pp ranks and raises when the world size is not a
    multiple (megatron_core@0.16.0:megatron/core/parallel_state.py:initialize_model_parallel)."""
    t = s.train
    if t.engine == "megatron":
        need = t.etp * t.ep * t.pp
        if world_size(s) % need:
            return f"etp*ep*pp = {need} does not divide the world size {world_size(s)}"


@rule(
    "TOP-ENG-007",
    ERROR,
    "rejection sampling has a threshold",
    (
        "alignment.mode",
        "alignment.rollout_correction.rollout_rs",
        "alignment.rollout_correction.rollout_rs_threshold",
    ),
    "set alignment.rollout_correction.rollout_rs_threshold (e.g. 2.0)",
)
def rs_threshold(s: JobSpec) -> Outcome:
    """verl raises 'rollout_rs_threshold must be provided for rejection sampling' at the first
    step (verl@0.9.1:verl/trainer/ppo/rollout_corr_helper.py:_parse_rollout_rs_thresholds)."""
    rc = s.alignment.rollout_correction
    if s.alignment.mode == "mitigated" and rc.rollout_rs and rc.rollout_rs_threshold is None:
        return f"rollout_rs={rc.rollout_rs} without rollout_rs_threshold"


@rule(
    "TOP-ENG-008",
    WARNING,
    "without chunked prefill, the declared verl runs the token budget it chooses, not the one set",
    (
        "rollout.chunked_prefill",
        "rollout.max_num_batched_tokens",
        "model.max_position_embeddings",
        "cluster.backend",
        "cluster.versions.verl",
        "verl_overrides",
    ),
    "set rollout.max_num_batched_tokens to the max_model_len verl runs (model.max_position_"
    "embeddings unless verl_overrides set actor_rollout_ref.rollout.max_model_len; Qwen3: "
    "rollout.max_num_batched_tokens=40960), so the rendered command says it",
    facts=("unchunked_batched_tokens_raised",),
)
def unchunked_budget(s: JobSpec) -> Outcome:
    """verl 0.9.1 leaves rollout.max_model_len at max_position_embeddings (topl renders none) and,
    with enable_chunked_prefill=False, raises max_num_batched_tokens to it
    (verl@0.9.1:verl/workers/rollout/vllm_rollout/vllm_async_server.py:
    vLLMHttpServer._validate_configs), logging a warning in the worker only: vLLM then profiles
    and schedules prefills for that many tokens, not the value set. verl 0.8.0/0.9.0 pass it on."""
    r = s.rollout
    if not backend_traits.of(s).remote or r.chunked_prefill:
        return None  # the embedded engines run the value as set
    # verl compares against rollout.max_model_len, which a recipe may set in verl_overrides (the
    # final command holds it); only when unset does verl take max_position_embeddings.
    set_len = command(s).entry(MAX_MODEL_LEN)
    limit, why = s.model.max_position_embeddings, "max_model_len = max_position_embeddings"
    if set_len is not None and type(set_len.value) is int and set_len.value > 0:
        note(s, set_len)
        limit, why = set_len.value, set_len.describe()
    if r.max_num_batched_tokens < limit and facts.supports(
        "unchunked_batched_tokens_raised", s.cluster.versions
    ):
        return (
            WARNING,
            f"rollout.max_num_batched_tokens={r.max_num_batched_tokens} with chunked_prefill=false: "
            f"verl {s.cluster.versions.verl} runs {limit} ({why})",
        )


@rule(
    "TOP-ENG-009",
    ERROR,
    "the embedded engines need a number of steps",
    ("cluster.backend", "train.steps"),
    "set train.steps=N (the default config runs 30); null leaves the count to verl's epochs, which "
    "only the backends that run verl read",
)
def local_steps(s: JobSpec) -> Outcome:
    """backend=local runs topl's reference RL loop for train.steps optimizer steps
    (kernels/rl_loop.py:run, `range(1, steps + 1)`); null means verl's own default
    (trainer.total_training_steps unset: total_epochs bounds the run), which that loop has not."""
    if not backend_traits.of(s).remote and s.train.steps is None:
        return "cluster.backend=local with train.steps=null: the embedded loop runs a set number of steps"
