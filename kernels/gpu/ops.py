"""Batch-invariant matmul, RMSNorm and log-softmax in Triton.

Each output row is reduced in an order fixed by the kernel's constants alone: the same tile sizes
whatever M is, no split-K, one program per row for the reductions.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# Tile plan: fixed for every M (a row's K loop and MMA shape never change with the batch).
# TOPL_MM_CONFIG="BM,BN,BK,warps,stages" overrides it for exploration (scripts/bench_gpu.py).
MM_CONFIG = tuple(int(v) for v in os.environ.get("TOPL_MM_CONFIG", "128,128,64,8,3").split(","))


@triton.jit
def _bi_matmul(X, W, Y, M, N, K, sxm, sxk, swn, swk, sym, syn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        x = tl.load(X + rm[:, None] * sxm + kk[None, :] * sxk, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(W + rn[:, None] * swn + kk[None, :] * swk, mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        acc = tl.dot(x, tl.trans(w), acc)
    tl.store(Y + rm[:, None] * sym + rn[None, :] * syn, acc.to(Y.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def bi_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w [N, K].T with a plan that does not depend on M."""
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    bm, bn, bk, warps, stages = MM_CONFIG
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _bi_matmul[grid](x, w, y, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
                     BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages)
    return y


@triton.jit
def _rms_norm(X, Wt, Y, N, sx, sy, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * sx + cols, mask=cols < N, other=0.0).to(tl.float32)
    var = tl.sum(x * x, 0) / N
    y = (x * tl.rsqrt(var + eps)).to(Y.dtype.element_ty)
    w = tl.load(Wt + cols, mask=cols < N, other=0.0)
    tl.store(Y + row * sy + cols, (w.to(tl.float32) * y.to(tl.float32)).to(Y.dtype.element_ty), mask=cols < N)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """One program per row, fp32 sum of squares: a row never depends on the batch."""
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _rms_norm[(x2.shape[0],)](x2, w, y, x2.shape[1], x2.stride(0), y.stride(0), eps,
                              BLOCK=triton.next_power_of_2(x2.shape[1]))
    return y.view(x.shape)


@triton.jit
def _log_softmax(X, Y, N, sx, sy, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, N, BLOCK):  # lane-wise online max / sum, blocks in a fixed order
        x = tl.load(X + row * sx + c0 + cols, mask=c0 + cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    mx = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - mx), 0)
    lse = mx + tl.log(total)
    for c0 in range(0, N, BLOCK):
        x = tl.load(X + row * sx + c0 + cols, mask=c0 + cols < N, other=0.0).to(tl.float32)
        tl.store(Y + row * sy + c0 + cols, x - lse, mask=c0 + cols < N)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """fp32 log-softmax over the last dim, one program per row."""
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty(x2.shape, device=x.device, dtype=torch.float32)
    _log_softmax[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), y.stride(0), BLOCK=1024)
    return y.view(x.shape)
