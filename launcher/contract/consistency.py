"""Strict mode: every requirement for bitwise-equal log-probs (facts §2-§5)."""

from topl.kernels.alignment import Alignment
from topl.launcher import facts
from topl.launcher.contract.core import ERROR, WARNING, is_moe, is_strict, on_npu, rule


@rule(
    "TOP-ALN-001",
    ERROR,
    "strict alignment turns every switch on",
    ("alignment.mode", *(f"alignment.{k}" for k in Alignment.SWITCHES)),
    "set the switch back to true, or use alignment=off",
)
def all_switches(s):
    """Any one switch off re-opens a path where the engines add in a different order (see `topl probe`)."""
    off = [k for k in Alignment.SWITCHES if not getattr(s.alignment, k)]
    if is_strict(s) and off:
        return f"alignment=strict with {', '.join(off)} off"


@rule(
    "TOP-ALN-002",
    WARNING,
    "alignment=off runs off-policy",
    ("alignment.mode",),
    "use alignment=strict for logdiff 0, or alignment=mitigated for TIS/MIS correction",
)
def off_policy(s):
    """Without alignment the rollout's log-probs differ from the trainer's: the update is off-policy."""
    if s.alignment.mode == "off":
        return "log-probs of rollout and training will differ: the run is silently off-policy"


@rule(
    "TOP-ALN-003",
    ERROR,
    "mitigated mode configures verl's rollout correction",
    (
        "alignment.mode",
        "alignment.rollout_correction.rollout_is",
        "alignment.rollout_correction.rollout_rs",
        "alignment.rollout_correction.bypass_mode",
    ),
    "set alignment.rollout_correction.rollout_is=token (and bypass_mode=false to keep the diff metrics)",
)
def mitigation_set(s):
    """TIS/MIS only act when an IS or RS level is set; bypass_mode skips the diff metrics entirely."""
    rc = s.alignment.rollout_correction
    if s.alignment.mode == "mitigated" and not (rc.rollout_is or rc.rollout_rs):
        return "alignment=mitigated but neither rollout_is nor rollout_rs is set"
    if s.alignment.mode == "mitigated" and rc.bypass_mode:
        return "bypass_mode=true: verl stops computing rollout_probs_diff metrics"


@rule(
    "TOP-ATTN-001",
    ERROR,
    "the aligned (FA3) attention backend on the rollout side",
    (
        "rollout.attention_backend",
        "alignment.mode",
        "cluster.device",
        "cluster.versions.vllm_ascend",
        "cluster.versions.vllm_ascend_patches",
    ),
    "set rollout.attention_backend=FLASH_ATTN",
    facts=("fa3_by_attention_backend", "rl_config"),
)
def fa3_backend(s):
    """Default FIA attention uses different kernels for prefill and decode, neither equal to
    training's. Where FA3 is chosen by the attention backend (vllm-ascend 0.20.2rc1 to 0.26.0rc1,
    the seed's patched 0.18.0) it must be FLASH_ATTN; from 0.27.1rc1 rl_config chooses it and the
    backend is ignored (topl renders rl_config there)."""
    by_backend = not on_npu(s) or facts.supports("fa3_by_attention_backend", s.cluster.versions)
    if is_strict(s) and by_backend and s.rollout.attention_backend != "FLASH_ATTN":
        return (
            f"rollout.attention_backend={s.rollout.attention_backend} is not the aligned FA3 path"
        )


@rule(
    "TOP-ATTN-002",
    ERROR,
    "no MLA / SFA attention in strict mode",
    ("alignment.mode", "model.attention", "model.name"),
    "use a GQA model, or alignment=mitigated for MLA models",
    facts=("fa3_rejects_mla",),
)
def no_mla(s):
    """The FA3 backend raises ValueError for MLA / SFA attention (batch invariance alone does not)."""
    if is_strict(s) and s.model.attention != "gqa":
        return f"model.attention={s.model.attention}"


@rule(
    "TOP-ATTN-003",
    ERROR,
    "no sliding-window attention in strict mode",
    ("alignment.mode", "model.sliding_window"),
    "use a full-attention model, or alignment=mitigated",
    facts=("fa3_rejects_sliding_window",),
)
def no_sliding(s):
    """The FA3 backend raises ValueError for sliding-window attention: its tiles would not match."""
    if is_strict(s) and s.model.sliding_window:
        return f"sliding_window={s.model.sliding_window}"


@rule(
    "TOP-ATTN-004",
    ERROR,
    "KV tile, decode split and cache block agree",
    ("alignment.mode", "alignment.kv_tile", "rollout.block_size", "cluster.device"),
    "set rollout.block_size=128 (the block the FA3 consistency backend on Ascend needs) and "
    "alignment.kv_tile to a multiple of rollout.block_size (alignment.kv_tile=128)",
)
def tile_vs_block(s):
    """The training tile must start and end on cache-block boundaries, or decode splits differ;
    the FA3 consistency path on Ascend fixes the block at 128."""
    if not is_strict(s):
        return None
    if s.alignment.kv_tile % s.rollout.block_size:
        return (
            f"kv_tile={s.alignment.kv_tile} is not a multiple of block_size={s.rollout.block_size}"
        )
    if s.cluster.device == "npu" and s.rollout.block_size != 128:
        return f"block_size={s.rollout.block_size}: the FA3 consistency backend needs 128"


@rule(
    "TOP-GRAPH-001",
    ERROR,
    "eager or piecewise graphs in strict mode",
    ("alignment.mode", "rollout.graph_mode"),
    "set rollout.graph_mode=eager (or piecewise)",
    facts=(
        "fa3_docs_piecewise_only",
        "fa3_rejects_full_decode_only",
        "verl_default_full_and_piecewise",
    ),
)
def graph_mode(s):
    """Full-graph capture bakes batch-size-specific kernels. FA3 raises for FULL_DECODE_ONLY and
    its docs ask for PIECEWISE; topl states the mode to vLLM (compilation_config.cudagraph_mode),
    since verl's default FULL_AND_PIECEWISE is no longer downgraded from vllm-ascend 0.21.0rc1."""
    if is_strict(s) and s.rollout.graph_mode not in ("eager", "piecewise"):
        return f"graph_mode={s.rollout.graph_mode}"


SEED_EVIDENCE = "seed_logdiff0_with_cache_and_chunking"
BREAKS_BI = "bi_breaks_with_chunked_prefill_prefix_cache_preemption"


def _scheduling(s, what: str):
    """Error, or a warning on the seed's stack, which reported logdiff 0 with it on."""
    v = s.cluster.versions
    if facts.supports(SEED_EVIDENCE, v) and not facts.supports(BREAKS_BI, v):
        return WARNING, (
            f"{what} on: the seed ran it at logdiff 0 on this stack, but the trainer "
            "recomputes without it (unproven in general)"
        )
    return ERROR, f"{what} reuses or splits work under a different batch than the trainer's"


@rule(
    "TOP-CACHE-001",
    ERROR,
    "prefix caching off in strict mode",
    (
        "alignment.mode",
        "rollout.prefix_caching",
        "cluster.versions.profile",
        "cluster.versions.vllm_ascend",
    ),
    "set rollout.prefix_caching=false",
    facts=(BREAKS_BI, SEED_EVIDENCE),
)
def prefix_cache(s):
    """A cached prefix was computed in another batch and chunking than the trainer's recompute;
    vllm-ascend's own docs say it breaks batch invariance from 0.28.0rc1. A warning on the seed
    stack, where the seed ran verl's default (on) and reported logdiff 0."""
    if is_strict(s) and s.rollout.prefix_caching:
        return _scheduling(s, "prefix caching")


@rule(
    "TOP-CACHE-002",
    ERROR,
    "chunked prefill off in strict mode",
    (
        "rollout.chunked_prefill",
        "alignment.mode",
        "cluster.device",
        "cluster.versions.profile",
        "cluster.versions.vllm_ascend",
    ),
    "set rollout.chunked_prefill=false (with block_size=128)",
    facts=(BREAKS_BI, SEED_EVIDENCE, "verl_defaults_cache_and_chunking_on"),
)
def chunked_prefill(s):
    """A chunked prefill splits a prompt's attention over steps the trainer does not; vllm-ascend's
    own docs say it breaks batch invariance from 0.28.0rc1 (and verl turns it on by default). A
    warning on the seed stack, where the seed ran it and reported logdiff 0."""
    if is_strict(s) and on_npu(s) and s.rollout.chunked_prefill:  # the reference engines align it
        return _scheduling(s, "chunked prefill")


@rule(
    "TOP-COLL-001",
    ERROR,
    "deterministic, order-preserving collectives when anything is parallel",
    (
        "alignment.mode",
        "collective.hccl_deterministic",
        "train.tp",
        "train.ep",
        "train.cp",
        "rollout.tp",
        "rollout.ep",
        "rollout.dp",
    ),
    "use collective=hccl_strict",
)
def strict_collectives(s):
    """HCCL picks algorithms by message size; only HCCL_DETERMINISTIC=strict keeps the order fixed.

    Kept for every parallel degree, 2 included: on NCCL 2.28.9 a 2-rank all-reduce gave the same bits
    under every NCCL_ALGO / NCCL_PROTO / channel pin (one addition per element; docs/performance.md,
    scripts/bench_nccl.py), but HCCL is not NCCL and >= 3 ranks were not measured."""
    parallel = max(s.train.tp, s.train.ep, s.train.cp, s.rollout.tp, s.rollout.ep, s.rollout.dp) > 1
    if is_strict(s) and parallel and s.collective.hccl_deterministic != "strict":
        return f"HCCL_DETERMINISTIC={s.collective.hccl_deterministic} with parallel reductions"


@rule(
    "TOP-COLL-002",
    ERROR,
    "LCCL determinism on the AIV path within 8 ranks",
    (
        "alignment.mode",
        "collective.op_expansion_mode",
        "collective.lccl_deterministic",
        "rollout.tp",
        "train.tp",
    ),
    "set collective.lccl_deterministic=true (collective=hccl_strict), and keep tp <= 8 on AIV",
)
def lccl_aiv(s):
    """With HCCL_OP_EXPANSION_MODE=AIV small collectives go through LCCL, deterministic only with
    LCCL_DETERMINISTIC=1 and rank size <= 8."""
    if not is_strict(s) or s.collective.op_expansion_mode != "AIV":
        return None
    if not s.collective.lccl_deterministic:
        return "AIV expansion without LCCL_DETERMINISTIC=1"
    if max(s.train.tp, s.rollout.tp) > 8:
        return f"tp={max(s.train.tp, s.rollout.tp)} exceeds LCCL's deterministic rank size 8"


@rule(
    "TOP-COLL-003",
    ERROR,
    "no non-deterministic HCCL algorithm pinned",
    ("alignment.mode", "collective.hccl_algo"),
    "unset collective.hccl_algo or pin a ring/tree algorithm on every rank",
)
def hccl_algo(s):
    """HCCL's `pipeline` algorithm reduces in a data-dependent order."""
    if is_strict(s) and s.collective.hccl_algo and "pipeline" in s.collective.hccl_algo:
        return f"HCCL_ALGO={s.collective.hccl_algo}"


@rule(
    "TOP-TP-001",
    ERROR,
    "the same tensor-parallel reduction pattern on both sides",
    ("alignment.mode", "train.tp", "rollout.tp"),
    "use the same tp for train and rollout (the seed: tp=1 and pipeline parallel)",
)
def same_tp(s):
    """A TP=k row-parallel layer sums k partials in the collective's order; TP=1 sums them in the
    GEMM. Different k means a different addition order in every o_proj and down_proj."""
    if is_strict(s) and s.train.tp != s.rollout.tp:
        return f"train.tp={s.train.tp} but rollout.tp={s.rollout.tp}"


@rule(
    "TOP-TP-002",
    WARNING,
    "expert parallel alignment is unproven on Ascend",
    ("alignment.mode", "train.ep", "rollout.ep", "model.num_experts"),
    "prefer ep=1 with pipeline parallelism, as the seed does",
)
def ep_unproven(s):
    """The seed reports TP+EP 'extremely difficult to align' and used PP instead."""
    if is_strict(s) and is_moe(s) and max(s.train.ep, s.rollout.ep) > 1:
        return f"train.ep={s.train.ep}, rollout.ep={s.rollout.ep} in strict mode"


@rule(
    "TOP-LOGP-001",
    ERROR,
    "the rollout returns its log-probs",
    ("rollout.calculate_log_probs", "alignment.mode"),
    "set rollout.calculate_log_probs=true",
)
def calc_logprobs(s):
    """Without rollout log-probs there is nothing to compare (or correct) against."""
    if s.alignment.mode != "off" and not s.rollout.calculate_log_probs:
        return "calculate_log_probs=false: logdiff cannot be measured"


@rule(
    "TOP-LOGP-002",
    ERROR,
    "log-prob mode agrees with the trainer's full-vocabulary log-softmax",
    (
        "alignment.mode",
        "rollout.logprobs_mode",
        "rollout.temperature",
        "rollout.top_p",
        "rollout.top_k",
    ),
    "set rollout.logprobs_mode=auto (raw_logprobs at temperature 1, else processed_logprobs with "
    "rollout.top_p=1.0 and rollout.top_k=-1)",
    facts=("raw_logprobs_before_temperature",),
)
def logprobs_mode(s):
    """The trainer takes log_softmax(logits / temperature) over the whole vocabulary.
    processed_logprobs renormalise over the top-p/top-k set; raw_logprobs are taken before the
    temperature, so they match only at temperature 1."""
    r = s.rollout
    mode = (
        "raw_logprobs"
        if r.logprobs_mode == "auto" and r.temperature == 1.0
        else "processed_logprobs"
        if r.logprobs_mode == "auto"
        else r.logprobs_mode
    )
    if not is_strict(s):
        return None
    if mode == "processed_logprobs" and (r.top_p < 1.0 or r.top_k > 0):
        return f"processed_logprobs with top_p={r.top_p}, top_k={r.top_k}"
    if mode == "raw_logprobs" and r.temperature != 1.0:
        return f"raw_logprobs are pre-temperature but temperature={r.temperature}"
    if mode.endswith("logits"):
        return f"logprobs_mode={r.logprobs_mode} returns logits, not log-probs"


@rule(
    "TOP-LOGP-003",
    ERROR,
    "log-prob micro batch sizes match on both sides",
    (
        "alignment.mode",
        "rollout.log_prob_micro_batch_size_per_gpu",
        "train.log_prob_micro_batch_size_per_gpu",
        "train.ppo_micro_batch_size_per_gpu",
    ),
    "set rollout.log_prob_micro_batch_size_per_gpu = train.ppo_micro_batch_size_per_gpu",
)
def micro_batches(s):
    """A different micro batch makes old_log_prob differ from log_prob (verl pitfall, facts §3.5)."""
    sizes = {
        s.rollout.log_prob_micro_batch_size_per_gpu,
        s.train.log_prob_micro_batch_size_per_gpu,
        s.train.ppo_micro_batch_size_per_gpu,
    }
    if is_strict(s) and len(sizes) > 1:
        return f"micro batch sizes differ: {sorted(sizes)}"


@rule(
    "TOP-LOGP-004",
    ERROR,
    "no dynamic batch size in strict mode (a warning on the seed's stack, which measured it)",
    ("alignment.mode", "cluster.versions.profile", "train.use_dynamic_bsz"),
    "set train.use_dynamic_bsz=false",
    facts=("seed_logdiff0_with_dynamic_bsz",),
)
def dynamic_bsz(s):
    """Token-budget micro-batching regroups sequences each step, so the recompute sees other batch
    shapes than the rollout did: only batch-invariant kernels make that harmless. The seed ran its
    strict scripts with it on (actor and recompute) and reported logdiff 0, so on the seed's stack
    this is a warning with that evidence; elsewhere it stays an error until measured."""
    if is_strict(s) and s.train.use_dynamic_bsz:
        if facts.supports("seed_logdiff0_with_dynamic_bsz", s.cluster.versions):
            return WARNING, "use_dynamic_bsz=true: the seed ran it at logdiff 0 on this stack"
        return "use_dynamic_bsz=true"
