"""Memory fit: layouts whose states cannot live on one device are rejected before launch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.spec.memory import GB, rollout_fit, train_bytes

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

HEADROOM = 0.9  # leave 10% for activations, workspace and fragmentation
# The model widths memory_estimate sizes weights and KV from (both estimates read them).
MODEL_SIZE_KEYS = (
    "model.head_dim",
    "model.hidden_size",
    "model.intermediate_size",
    "model.moe_intermediate_size",
    "model.num_experts",
    "model.num_heads",
    "model.num_kv_heads",
    "model.num_layers",
    "model.tie_word_embeddings",
    "model.vocab_size",
)
# What memory_estimate.rollout_fit reads (TOP-MEM-002 and -003 declare it).
ROLLOUT_FIT_KEYS = (
    "rollout.tp",
    "rollout.pp",
    "rollout.gpu_memory_utilization",
    "cluster.device_memory_gb",
    *MODEL_SIZE_KEYS,
    "rollout.ep",
    "train.max_prompt_length",
    "train.max_response_length",
)


@rule(
    "TOP-MEM-001",
    ERROR,
    "training model states fit one device",
    (
        "model.name",
        "train.engine",
        "train.tp",
        "train.pp",
        "train.ep",
        "train.etp",
        "train.param_offload",
        "train.optimizer_offload",
        "cluster.device_memory_gb",
        "cluster.devices_per_node",
        "cluster.nodes",
        *MODEL_SIZE_KEYS,
        "train.cp",
    ),
    "raise tp/pp/ep, turn on train.param_offload / train.optimizer_offload, or add nodes",
)
def train_fit(s: JobSpec) -> Outcome:
    """Megatron: shard = dense/(tp*pp) + expert/(ep*etp*pp); bytes = 2 (bf16 weights) + 4 (fp32
    grads) per shard parameter + 12 (fp32 master, Adam m, v) / dp with the distributed optimizer.
    FSDP: the closed form of DeepSpeed's ZeRO-3 estimator (estimate_zero3_model_states_mem_needs,
    memory_estimate.zero3_gpu_bytes; a test proves them equal, DeepSpeed is not imported here)."""
    need, device = train_bytes(s) / GB, s.cluster.device_memory_gb
    if need > HEADROOM * device:
        return f"training needs ~{need:.1f} GB per device, {HEADROOM * device:.1f} GB usable"


@rule(
    "TOP-MEM-002",
    ERROR,
    "rollout weights leave room for at least one full-length sequence's KV cache",
    ("model.name", *ROLLOUT_FIT_KEYS),
    "raise rollout.tp/pp or rollout.gpu_memory_utilization, or shorten max_prompt/response_length",
)
def rollout_room(s: JobSpec) -> Outcome:
    """weights = 2 B x (dense/(tp*pp) + expert/(max(ep,tp)*pp)); KV/token = 2 x layers/pp x
    max(kv_heads/tp, 1) x head_dim x 2 B; room = utilisation x device - weights."""
    e = rollout_fit(s)
    if e["kv_seqs"] < 1:
        return (
            f"rollout weights ~{e['rollout_weights_gb']:.1f} GB leave {e['kv_room_gb']:.1f} GB: "
            "not one full-length sequence fits the KV cache"
        )


@rule(
    "TOP-MEM-003",
    WARNING,
    "the KV cache holds max_num_seqs full-length sequences",
    (
        "rollout.max_num_seqs",
        "alignment.mode",
        "cluster.device",
        "cluster.versions.vllm_ascend",
        *ROLLOUT_FIT_KEYS,
    ),
    "lower rollout.max_num_seqs or raise rollout.tp (vLLM will preempt and recompute otherwise)",
    facts=("bi_breaks_with_chunked_prefill_prefix_cache_preemption",),
)
def rollout_concurrency(s: JobSpec) -> Outcome:
    """Preemption recomputes a request's generated tokens through the prefill path, not the decode
    path it first took: a different batch history, and slower. An error in strict mode where
    vllm-ascend's docs say preemption breaks batch invariance (0.28.0rc1 on)."""
    e = rollout_fit(s)
    if 1 <= e["kv_seqs"] < s.rollout.max_num_seqs:
        msg = f"KV room for ~{int(e['kv_seqs'])} full-length sequences, max_num_seqs={s.rollout.max_num_seqs}"
        breaks = facts.supports(
            "bi_breaks_with_chunked_prefill_prefix_cache_preemption", s.cluster.versions
        )
        return (
            (ERROR, msg + ": preemption breaks batch invariance")
            if s.alignment.mode == "strict" and s.cluster.device == "npu" and breaks
            else msg
        )
