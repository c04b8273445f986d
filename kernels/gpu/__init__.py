"""Triton versions of the aligned kernels (GPU; the same language runs on Ascend via triton-ascend).

Importing the modules needs Triton; callers check `available()` first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

    from topl.kernels.model import Model, Side


def available() -> bool:
    try:
        import torch
        import triton  # noqa: F401
    except ImportError:
        return False
    ok: bool = torch.cuda.is_available()
    return ok


def paged_hook(model: Model, side: Side, block_size: int) -> Callable[..., torch.Tensor] | None:
    """The rollout engine's batched paged attention on CUDA (one kernel call per layer and step,
    every request of the step together), or None where the per-request path must stay: CPU, an
    unaligned plan (then SDPA stands in for the native kernel), or a page that is not the tile."""
    p = side.prefill
    aligned = (
        p == side.decode and p.tiles == "left" and p.visible and p.merge == "online" and p.fp32
    )
    pow2 = p.tile >= 16 and p.tile & (p.tile - 1) == 0
    if not (
        aligned and pow2 and p.tile == block_size and model.device.type == "cuda" and available()
    ):
        return None
    from topl.kernels.gpu.attention import paged_step  # lazy: torch and Triton only when this runs

    return lambda q, k, v, tables, spans, pos: paged_step(q, k, v, tables, spans, pos, block_size)
