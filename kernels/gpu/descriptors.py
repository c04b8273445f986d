"""Tensor-memory descriptors for the attention kernels' host code: K/V tiles for Triton's `_attn`
and Gluon's kernels, and the Q box of prefill_items.py."""

from __future__ import annotations

import functools
from typing import Any

import torch


def tma_ok(dev: torch.device) -> bool:
    """Hopper or newer, and a Triton that takes host-side tensor descriptors."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    major: int = torch.cuda.get_device_capability(dev)[0]
    return major >= 9


def kv_desc(x: torch.Tensor, tile: int) -> Any:  # a triton TensorDescriptor
    """A [rows, KVH * D] view of packed or paged K/V, read a whole tile [tile, D] at a time."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(x.view(x.shape[0], -1), [tile, x.shape[-1]])


@functools.cache
def gluon_layout(*block: int) -> Any:  # built once: most of a descriptor's host time
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(list(block), gl.bfloat16)


def gluon_desc(x: torch.Tensor, tile: int) -> Any:  # a Gluon TensorDescriptor
    """`kv_desc` for `_decode_states` and `_prefill`: the block in the shared layout the
    warpgroup MMA reads (128-byte swizzle, `_attn`'s)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    block = [tile, x.shape[-1]]
    return TensorDescriptor.from_tensor(x.view(x.shape[0], -1), block, gluon_layout(*block))


def q_desc(q: torch.Tensor, qt: int, group: int) -> Any | None:
    """A Gluon descriptor of q [T, H, D] read a [qt tokens, group heads, D] box at a time (a program's
    rows in order), or None where the tensor-memory engine cannot read q (strides not 16-byte)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if q.stride(-1) != 1 or any(s * q.element_size() % 16 for s in q.stride()[:-1]):
        return None
    block = [qt, group, q.shape[-1]]
    return TensorDescriptor(q, list(q.shape), list(q.stride()), block, gluon_layout(*block))
