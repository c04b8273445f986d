"""Strict mode, the attention kernel and graph capture: FA3, no MLA or sliding window, tile =
block, eager/piecewise graphs (facts §2-§5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.spec.job import is_strict, on_npu

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec


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
def fa3_backend(s: JobSpec) -> Outcome:
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
def no_mla(s: JobSpec) -> Outcome:
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
def no_sliding(s: JobSpec) -> Outcome:
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
def tile_vs_block(s: JobSpec) -> Outcome:
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
def graph_mode(s: JobSpec) -> Outcome:
    """Full-graph capture bakes batch-size-specific kernels. FA3 raises for FULL_DECODE_ONLY and
    its docs ask for PIECEWISE; topl states the mode to vLLM (compilation_config.cudagraph_mode),
    since verl's default FULL_AND_PIECEWISE is no longer downgraded from vllm-ascend 0.21.0rc1."""
    if is_strict(s) and s.rollout.graph_mode not in ("eager", "piecewise"):
        return f"graph_mode={s.rollout.graph_mode}"
