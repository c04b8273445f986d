"""The alignment switches: defined once, read by the contract, the renderer and the kernels."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class RolloutCorrection:
    """verl's `algorithm.rollout_correction` (TIS/MIS): mitigation when exactness is not the goal."""

    rollout_is: Optional[str] = None  # importance-sampling level: null | token | sequence
    rollout_is_threshold: float = 2.0  # truncation threshold of the IS weight
    rollout_rs: Optional[str] = None  # rejection sampling: null | token | sequence | geometric
    rollout_rs_threshold: Optional[float] = None  # rejection threshold (None: verl default)
    bypass_mode: bool = False  # True skips the old-log-prob recompute (and the diff metrics)


@dataclass
class Alignment:
    """What the rollout engine and the training engine agree on.

    Each switch names one way the two engines may add numbers in a different order; `strict`
    turns all of them on, `off` none.
    """

    mode: str = "strict"  # strict (true on-policy) | off (plain run) | mitigated (TIS/MIS)
    attention_semantics: bool = True  # (a) only visible tokens enter the softmax reduction, both sides
    reduction_order: bool = True  # (b) the same KV split/tile boundaries in decode, prefill and training
    softmax_tiling: bool = True  # (c) the same online-softmax block and sequential merge cadence
    fp32_critical_path: bool = True  # (d) fp32 softmax sums and fp32 log-softmax at the same points
    batch_invariant: bool = True  # a row's matmul/RMSNorm result independent of rows sharing the batch
    fused_ops_matched: bool = True  # swiglu / add+RMSNorm / RoPE: same fused-or-not form on both sides
    moe_fixed_combine: bool = True  # top-k expert outputs summed in a fixed (rank) order
    tp_aligned_reduction: bool = True  # rollout reduces row-parallel partials in training's order
    kv_tile: int = 128  # KV tile = decode split = online-softmax block (FA3 consistency block: 128)
    rollout_correction: RolloutCorrection = field(default_factory=RolloutCorrection)

    SWITCHES = (
        "attention_semantics",
        "reduction_order",
        "softmax_tiling",
        "fp32_critical_path",
        "batch_invariant",
        "fused_ops_matched",
        "moe_fixed_combine",
        "tp_aligned_reduction",
    )

    @property
    def exact(self) -> bool:
        """All switches on: the engines must agree bit for bit."""
        return all(getattr(self, s) for s in self.SWITCHES)

    def without(self, switch: str) -> "Alignment":
        """A copy with one switch turned off (used to show each switch matters)."""
        from dataclasses import replace

        if switch not in self.SWITCHES:
            raise ValueError(f"unknown alignment switch {switch!r}; known: {', '.join(self.SWITCHES)}")
        return replace(self, **{switch: False}, mode="off")
