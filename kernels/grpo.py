"""Deprecated: the toy task moved to topl.kernels.task; these names stay importable from here."""

from __future__ import annotations

import warnings

from topl.kernels import task as _task

_MOVED = ("DIGITS", "BOS", "SEP", "EOS", "DigitTokenizer", "ReverseTask")


def __getattr__(name: str):
    if name in _MOVED:
        warnings.warn(
            f"topl.kernels.grpo.{name} moved to topl.kernels.task.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_task, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
