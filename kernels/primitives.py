"""Row-wise primitives with an explicit reduction order.

"Invariant" versions give a row the same bits whatever else shares its batch; the "native"
versions emulate what inference kernels do for speed (split-K for small batches, split
reductions, fused ops), which is exactly what breaks bitwise agreement.
"""

from __future__ import annotations

from typing import Any

import torch

M_TILE = 16  # batch-invariant matmul: every row is computed inside a GEMM of exactly this many rows
SPLIT_BELOW = 64  # native kernels switch to split-K / split reductions below this many rows
SPLITS = 4


class _InvariantLinear(torch.autograd.Function):  # type: ignore[misc]  # torch is Any
    """Forward in fixed 16-row tiles (row results independent of M); ordinary backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        if x.is_cuda:  # Triton: fixed 128x128x64 tiles for every M, no split-K
            from topl.kernels.gpu.ops import bi_matmul  # lazy: Triton only when this runs

            return bi_matmul(x.contiguous(), w)
        m = x.shape[0]
        pad = (-m) % M_TILE
        xp = torch.cat([x, x.new_zeros(pad, x.shape[1])]) if pad else x
        out = torch.cat([t @ w.t() for t in xp.split(M_TILE)])
        return out[:m]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return g @ w.to(g.dtype), g.t() @ x.to(g.dtype)


def linear(x: torch.Tensor, w: torch.Tensor, invariant: bool) -> torch.Tensor:
    """x [M, K] @ w[N, K].T. Native: small M takes split-K (an M-dependent plan) whose partials are
    added into the output in the model dtype, as a split-K GEMM that reduces by atomic adds into a
    bf16 output does; the invariant path accumulates all of K in fp32 and rounds once."""
    if invariant:
        return _InvariantLinear.apply(x, w)
    if x.is_cuda:
        return x @ w.t()  # cuBLAS: its own (M-dependent) plan
    m, k = x.shape
    if m < SPLIT_BELOW and k % SPLITS == 0:
        parts = [xs @ ws.t() for xs, ws in zip(x.split(k // SPLITS, 1), w.split(k // SPLITS, 1))]
        return sum(parts[1:], parts[0])
    return x @ w.t()


# Real collectives, set inside a torch.distributed job (tests/numerics/test_collectives.py); None: emulate.
# Each is a callable with `.rank` and `.size` that sum-all-reduces a tensor and returns it (for
# order="tree": pairwise over the ranks, `_tree`'s order).
ALLREDUCE = None  # tensor-parallel group: row-parallel partials
EXPERT_PARALLEL = None  # expert-parallel group: experts e with e % size == rank live on this rank


def _tree(parts: list[torch.Tensor]) -> torch.Tensor:
    """Pairwise sum ((p0 + p1) + (p2 + p3)), an odd last part carried up a level: the one fixed tree
    of the aligned reduction, for any number of parts."""
    while len(parts) > 1:
        parts = [
            parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    return parts[0]


def _subtree_blocks(n: int, tp: int) -> bool:
    """Whether every rank's n/tp contiguous leaves form one node of `_tree` over n leaves: true
    exactly when n/tp is a power of two (the first levels then pair whole blocks, and the upper
    levels are `_tree` over the tp block sums)."""
    per = n // tp
    return per & (per - 1) == 0


def row_parallel(
    x: torch.Tensor, w: torch.Tensor, tp: int, order: str, invariant: bool, leaves: int = 0
) -> torch.Tensor:
    """A TP=tp row-parallel linear on one device: rank r multiplies its K slice into one partial
    (model dtype) and the collective sums the tp partials in its order.

    ring: gloo's ring all-reduce (checked against torch.distributed gloo bit for bit): the flattened
    output is cut into tp chunks and chunk c sums ranks c-1, c-2, ..., c (each add rounded), so an
    element's order depends on the output's shape.
    tree: one fixed pairwise tree `_tree` over n K-chunks (n = `leaves`, the aligned reduction's
    finest common split lcm(train tp, rollout tp); else tp): the result is `_tree` of the n chunk
    products for every tp dividing n and every batch shape. Where a rank's n/tp chunks form one
    node of that tree (n/tp a power of two) the rank pre-sums them and the collective tree-sums the
    ranks; otherwise (e.g. tp 2 of 6 chunks: blocks {0,1,2} and {3,4,5} are not nodes of the tree
    that tp 3 needs, {0,1} {2,3} {4,5}) the ranks exchange their chunk products unsummed (an
    all-gather) and every rank sums all n in the one tree.
    """
    n = max(leaves, tp) if order == "tree" else tp
    if n == 1:
        return linear(x, w, invariant)
    k = x.shape[1]
    if n % tp or k % n:
        raise ValueError(f"row-parallel: {n} K-chunks must split over tp={tp} and divide K={k}")
    c, per = k // n, n // tp

    def chunk(j: int) -> torch.Tensor:  # the product of K-chunk j (rank j // per holds it)
        return linear(x[:, j * c : (j + 1) * c], w[:, j * c : (j + 1) * c], invariant)

    collective = ALLREDUCE if ALLREDUCE is not None and ALLREDUCE.size == tp else None
    if order != "tree":
        if collective is not None:  # the other side's TP stays emulated
            return collective(chunk(collective.rank).contiguous())
        return ring([chunk(r) for r in range(tp)])
    if collective is None:
        return _tree([chunk(j) for j in range(n)])
    mine = [chunk(j) for j in range(collective.rank * per, (collective.rank + 1) * per)]
    if _subtree_blocks(n, tp):
        return collective(_tree(mine).contiguous())
    # All-gather through the sum all-reduce: each slot has one rank's chunk and zeros elsewhere,
    # and x + 0 == x (only an exact -0.0 may come back as +0.0).
    slots = x.new_zeros((n, x.shape[0], w.shape[0]))
    slots[collective.rank * per : (collective.rank + 1) * per] = torch.stack(mine)
    return _tree(list(collective(slots.contiguous()).unbind(0)))


def ring(parts: list[torch.Tensor]) -> torch.Tensor:
    """gloo's ring all-reduce order: the flattened tensor is cut into len(parts) chunks and chunk c
    sums ranks c-1, c-2, ..., c, rounding after each add."""
    n = len(parts)
    chunks = [p.reshape(-1).tensor_split(n) for p in parts]
    out = []
    for c in range(n):
        ranks = [(c - 1 - i) % n for i in range(n)]
        acc = chunks[ranks[0]][c]
        for r in ranks[1:]:
            acc = acc + chunks[r][c]
        out.append(acc)
    return torch.cat(out).view(parts[0].shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, invariant: bool) -> torch.Tensor:
    """fp32 RMSNorm. Native: small batches split the mean of squares into partial sums."""
    if x.is_cuda and invariant:
        from topl.kernels.gpu.ops import (
            rms_norm as gpu_rms_norm,
        )  # lazy: Triton only when this runs

        return gpu_rms_norm(x, weight, eps)
    xf = x.float()
    if x.is_cuda:
        return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    if invariant or x.shape[0] >= SPLIT_BELOW or xf.shape[-1] % SPLITS:
        var = xf.pow(2).mean(-1, keepdim=True)
    else:
        parts = [c.pow(2).sum(-1, keepdim=True) for c in xf.chunk(SPLITS, -1)]
        var = sum(parts[1:], parts[0]) / xf.shape[-1]
    return weight * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    invariant: bool,
    fused: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """residual + x, then RMSNorm. Fused (npu_add_rms_norm style): the norm reads the fp32 sum
    before it is rounded to the model dtype; unfused: add, round, then norm."""
    if fused:
        s32 = x.float() + residual.float()
        var = s32.pow(2).mean(-1, keepdim=True)
        return weight * (s32 * torch.rsqrt(var + eps)).to(x.dtype), s32.to(x.dtype)
    s = x + residual
    return rms_norm(s, weight, eps, invariant), s


def rope_tables(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (
        theta
        ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    )
    freqs = positions.float()[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, fused: bool) -> torch.Tensor:
    """x [R, H, D], rotate-half RoPE. Unfused: in fp32; fused (npu_rotary_mul style): in model dtype."""
    dt = x.dtype
    if fused:
        c, s = cos[:, None].to(dt), sin[:, None].to(dt)
        x1, x2 = x.chunk(2, -1)
        return x * c + torch.cat([-x2, x1], -1) * s
    xf = x.float()
    x1, x2 = xf.chunk(2, -1)
    return (xf * cos[:, None] + torch.cat([-x2, x1], -1) * sin[:, None]).to(dt)


def silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x) with a row's bits independent of the tensor's shape, rounded once.

    torch's CPU fp32 `silu` (and `sigmoid`) take another code path for the elements left over
    after the last full vector, so a row's result depends on the batch size whenever the width
    is not a multiple of the vector length (measured on torch 2.13 CPU; bf16 / fp16 silu compute
    in fp32 and do not). `exp` and the division are elementwise-exact, so x / (1 + exp(-x)) in fp32
    is batch-invariant for every dtype.
    """
    if x.is_cuda:
        return torch.nn.functional.silu(x)
    xf = x.float()
    return (xf / (1.0 + torch.exp(-xf))).to(x.dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor, fused: bool) -> torch.Tensor:
    """silu(gate) * up. Unfused (Megatron native): silu rounded, then multiply; fused: one fp32 pass."""
    if fused:
        return (silu(gate.float()) * up.float()).to(gate.dtype)
    return silu(gate) * up


def log_softmax(logits: torch.Tensor, fp32: bool) -> torch.Tensor:
    """fp32 max-shifted log-softmax, or (mixed precision) in the logits' dtype."""
    if fp32 and logits.is_cuda:
        from topl.kernels.gpu.ops import (
            log_softmax as gpu_log_softmax,
        )  # lazy: Triton only when this runs

        return gpu_log_softmax(logits.float())
    return torch.log_softmax(logits.float(), -1) if fp32 else torch.log_softmax(logits, -1).float()
