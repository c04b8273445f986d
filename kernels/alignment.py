"""The alignment switches: defined once, read by the contract, the renderer and the kernels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

# Field metadata ("ge", "one_of", "src", ...) declares a field's constraint; the launcher checks
# it (launcher/spec/constraints.py). verl 0.9.1's rollout correction checks, cited per field:
_RC = "verl@0.9.1:verl/trainer/ppo/rollout_corr_helper.py"
_RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)


@dataclass
class RolloutCorrection:
    """verl's `algorithm.rollout_correction` (TIS/MIS): mitigation when exactness is not the goal."""

    # importance-sampling level: null | token | sequence
    rollout_is: Optional[str] = field(
        default=None,
        metadata={
            "one_of": (None, "token", "sequence"),
            "src": f"{_RC}:compute_rollout_correction_weights",
        },
    )
    # truncation threshold of the IS weight
    rollout_is_threshold: float = field(
        default=2.0, metadata={"gt": 0, "src": f"{_RC}:_parse_rollout_is_threshold"}
    )
    # rejection sampling: null or comma-separated options, e.g. token_k1, seq_mean_k3
    rollout_rs: Optional[str] = field(
        default=None,
        metadata={"each_of": _RS_OPTIONS, "src": f"{_RC}:SUPPORTED_ROLLOUT_RS_OPTIONS"},
    )
    # rejection threshold (k1 options: ratio bounds [1/t, t]); required when rollout_rs is set
    rollout_rs_threshold: Optional[float] = field(
        default=None, metadata={"gt": 0, "src": f"{_RC}:_parse_rollout_rs_thresholds"}
    )
    bypass_mode: bool = False  # True skips the old-log-prob recompute (and the diff metrics)


@dataclass
class Alignment:
    """What the rollout engine and the training engine agree on.

    Each switch names one way the two engines may add numbers in a different order; `strict`
    turns all of them on, `off` none.
    """

    # strict (true on-policy) | off (plain run) | mitigated (TIS/MIS)
    mode: str = field(
        default="strict", metadata={"one_of": ("strict", "off", "mitigated"), "src": ""}
    )
    # (a) only visible tokens enter the softmax reduction, both sides
    attention_semantics: bool = True
    # (b) the same KV split/tile boundaries in decode, prefill and training
    reduction_order: bool = True
    softmax_tiling: bool = True  # (c) the same online-softmax block and sequential merge cadence
    fp32_critical_path: bool = True  # (d) fp32 softmax sums and fp32 log-softmax at the same points
    # a row's matmul/RMSNorm result independent of rows sharing the batch
    batch_invariant: bool = True
    # swiglu / add+RMSNorm / RoPE: same fused-or-not form on both sides
    fused_ops_matched: bool = True
    moe_fixed_combine: bool = True  # top-k expert outputs summed in a fixed (rank) order
    tp_aligned_reduction: bool = True  # rollout reduces row-parallel partials in training's order
    # KV tile = decode split = online-softmax block (FA3 consistency block: 128)
    kv_tile: int = field(default=128, metadata={"ge": 1, "src": ""})
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
            raise ValueError(
                f"unknown alignment switch {switch!r}; known: {', '.join(self.SWITCHES)}"
            )
        off: dict[str, Any] = {switch: False}  # one bool switch, named at run time
        return replace(self, **off, mode="off")
