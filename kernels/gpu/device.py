"""What the GPU kernels' host code asks of a device on every call, kept per device: its SM count,
an int32 stand-in for arguments a path does not read, and arrival counts that kernels leave zero
(asking torch or allocating each call costs host time on every launch)."""

from __future__ import annotations

import torch

_SMS: dict[int, int] = {}
_DUMMY: dict[int, torch.Tensor] = {}


def sm_count(dev: torch.device) -> int:
    i = dev.index or 0
    if i not in _SMS:
        _SMS[i] = torch.cuda.get_device_properties(dev).multi_processor_count
    return _SMS[i]


def dummy(dev: torch.device) -> torch.Tensor:
    """An int32 stand-in for the argument a path does not read (kept: no allocation per call)."""
    i = dev.index or 0
    if i not in _DUMMY:
        _DUMMY[i] = torch.zeros(1, dtype=torch.int32, device=dev)
    return _DUMMY[i]


def arrival_counts(
    table: dict[int, torch.Tensor], device: torch.device, n: int, least: int
) -> torch.Tensor | None:
    """At least `n` zeroed arrival counts for `device` from `table` (each kernel that counts
    leaves them zero; made with at least `least`); None if they would have to be made while a
    CUDA graph is being captured (the zeroing would only run at replay). The split-K matmul and
    the fused split-KV decode each keep their own table."""
    dev = device.index or 0
    if dev not in table or table[dev].numel() < n:
        if torch.cuda.is_current_stream_capturing():
            return None
        table[dev] = torch.zeros(max(n, least), dtype=torch.int32, device=device)
    return table[dev]
