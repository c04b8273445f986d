"""Reference numerics for true on-policy RL: aligned primitives, a Qwen3 model, a rollout
engine and a training engine that agree bit for bit when aligned.

Knows nothing about Hydra: everything reads one :class:`Alignment` object.
"""

from topl.kernels.alignment import Alignment, RolloutCorrection

__all__ = ["Alignment", "RolloutCorrection"]
