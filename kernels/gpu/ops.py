"""Batch-invariant matmul, RMSNorm and log-softmax in Triton.

Each output element is reduced in one fixed order whatever M is: the matmul's K loop runs in order
into one accumulator with no split-K (its tile plan may follow M: no plan changes an element's
additions, see PLANS), and the reductions use one program per row.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# Tile plan of the pointer kernel: fixed for every M (a row's K loop and MMA never change).
# TOPL_MM_CONFIG="BM,BN,BK,warps,stages" overrides it for exploration (scripts/bench_gpu.py).
MM_CONFIG = tuple(int(v) for v in os.environ.get("TOPL_MM_CONFIG", "128,128,64,8,3").split(","))

# The plan by M: (max M, kernel, (BM, BN, BK, warps, stages)). An output element is the same chain
# of 16-deep warpgroup MMAs (wgmma) over K in order into one fp32 accumulator, no split-K, whatever
# the tile and whether TMA or pointer loads feed it: BM >= 64 keeps the wgmma, and the tile, warps
# and stages change which elements a program owns, not an element's additions (measured on an
# H200; tests/test_gpu.py checks every plan against every other, bit for bit). So the plan may
# follow M for speed. Below M = 2048 the TMA launch (host-built descriptors, ~60 us) costs more
# than it saves.
SMALL_M = 256
PLANS = (
    (SMALL_M, "ptr", (64, 64, 128, 4, 4)),  # BN by the grid below
    (2048, "ptr", (128, 128, 64, 8, 3)),
    (1 << 62, "tma", (128, 256, 64, 8, 3)),
)
# Up to M = 256 the projections are bound by reading W, and the grid decides the speed: the widest
# BN (of SMALL_BN, BM = 64, BK = 128) that still gives at least SMALL_GRID x SMs programs. Fitted on
# an H200 over qkv_proj / o_proj / expert gate+up at M = 1 ... 128 (scripts/bench_gpu.py): BN 64 /
# 32 / 32 at M <= 64, 128 / 32 / 32 at M = 128. Like every plan, no BN changes an element's additions.
SMALL_BN, SMALL_GRID = (128, 64, 32), 0.55
TMA_PLANS = (
    (2048, (128, 128, 64, 8, 4)),
    (1 << 62, (128, 256, 64, 8, 3)),
)  # explored: bench_gpu.py


@triton.jit
def _bi_matmul(
    X,
    W,
    Y,
    M,
    N,
    K,
    sxm,
    sxk,
    swn,
    swk,
    sym,
    syn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        x = tl.load(
            X + rm[:, None] * sxm + kk[None, :] * sxk,
            mask=(rm[:, None] < M) & (kk[None, :] < K),
            other=0.0,
        )
        w = tl.load(
            W + rn[:, None] * swn + kk[None, :] * swk,
            mask=(rn[:, None] < N) & (kk[None, :] < K),
            other=0.0,
        )
        acc = tl.dot(x, tl.trans(w), acc)
    tl.store(
        Y + rm[:, None] * sym + rn[None, :] * syn,
        acc.to(Y.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@triton.jit
def _bi_matmul_tma(
    x_desc,
    w_desc,
    y_desc,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    OUT: tl.constexpr,
    PROGRAMS,
):
    """Persistent: PROGRAMS programs walk the output tiles (grouped by GROUP_M rows of tiles for
    L2 reuse); TMA feeds the MMA. Each tile: one accumulator, K in order."""
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), n_m * n_n, PROGRAMS):
        group = tile // (GROUP_M * n_n)
        first = group * GROUP_M
        rows = tl.minimum(n_m - first, GROUP_M)
        pm = first + (tile % (GROUP_M * n_n)) % rows
        pn = (tile % (GROUP_M * n_n)) // rows
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        for k0 in range(0, K, BK):
            acc = tl.dot(x_desc.load([pm * BM, k0]), w_desc.load([pn * BN, k0]).T, acc)
        y_desc.store([pm * BM, pn * BN], acc.to(OUT))


_SMS: dict = {}
_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def _sms(device) -> int:
    dev = device.index or 0
    if dev not in _SMS:
        _SMS[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return _SMS[dev]


def _tma_ok(x: torch.Tensor, w: torch.Tensor) -> bool:
    if torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    aligned = all(
        t.data_ptr() % 16 == 0 and t.stride(0) * t.element_size() % 16 == 0 for t in (x, w)
    )
    return (
        aligned and x.stride(1) == 1 and w.stride(1) == 1 and w.shape[0] % 8 == 0 and x.dtype in _TL
    )


def bi_matmul(
    x: torch.Tensor,
    w: torch.Tensor,
    plan: tuple | None = None,
    tma: bool | None = None,
    graph: bool = False,
) -> torch.Tensor:
    """x [M, K] @ w [N, K].T: every output element the same in-order K reduction for any M.

    The plan for M from PLANS (`plan` / `tma` force one); the persistent TMA kernel needs Hopper or
    later; elsewhere (or with TOPL_MM_CONFIG set) the pointer kernel with MM_CONFIG. `graph=True`:
    the call is captured into a CUDA graph, so the descriptors' host cost is paid once and M above
    SMALL_M takes the persistent TMA kernel too (H200, M = 1024: 1.15 / 0.92 / 1.15x cuBLAS on
    qkv / o_proj / gate+up, against 1.40 / 1.24 / 1.43x pointer-fed)."""
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    _, kind, auto = next(p for p in PLANS if m <= p[0])
    if graph and m <= TMA_PLANS[0][0]:
        kind, auto = "tma", TMA_PLANS[0][1]
    if m <= SMALL_M:
        need = SMALL_GRID * _sms(x.device)
        bn = next((b for b in SMALL_BN if triton.cdiv(m, 64) * triton.cdiv(n, b) >= need), 32)
        kind, auto = "ptr", (64, bn, 128, 4, 4)
    if "TOPL_MM_CONFIG" in os.environ or not _tma_ok(x, w):
        kind, auto = "ptr", MM_CONFIG
    if tma if tma is not None else kind == "tma":
        from triton.tools.tensor_descriptor import TensorDescriptor

        bm, bn, bk, warps, stages = plan or auto
        grid = min(_sms(x.device), triton.cdiv(m, bm) * triton.cdiv(n, bn))
        _bi_matmul_tma[(grid,)](
            TensorDescriptor.from_tensor(x, [bm, bk]),
            TensorDescriptor.from_tensor(w, [bn, bk]),
            TensorDescriptor.from_tensor(y, [bm, bn]),
            m,
            n,
            k,
            BM=bm,
            BN=bn,
            BK=bk,
            GROUP_M=8,
            OUT=_TL[x.dtype],
            PROGRAMS=grid,
            num_warps=warps,
            num_stages=stages,
        )
        return y
    bm, bn, bk, warps, stages = plan or (auto if kind == "ptr" else MM_CONFIG)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _bi_matmul[grid](
        x,
        w,
        y,
        m,
        n,
        k,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        y.stride(0),
        y.stride(1),
        BM=bm,
        BN=bn,
        BK=bk,
        num_warps=warps,
        num_stages=stages,
    )
    return y


@triton.jit
def _rms_norm(X, Wt, Y, N, sx, sy, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * sx + cols, mask=cols < N, other=0.0).to(tl.float32)
    var = tl.sum(x * x, 0) / N
    y = (x * tl.rsqrt(var + eps)).to(Y.dtype.element_ty)
    w = tl.load(Wt + cols, mask=cols < N, other=0.0)
    tl.store(
        Y + row * sy + cols,
        (w.to(tl.float32) * y.to(tl.float32)).to(Y.dtype.element_ty),
        mask=cols < N,
    )


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """One program per row, fp32 sum of squares: a row never depends on the batch."""
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _rms_norm[(x2.shape[0],)](
        x2,
        w,
        y,
        x2.shape[1],
        x2.stride(0),
        y.stride(0),
        eps,
        BLOCK=triton.next_power_of_2(x2.shape[1]),
    )
    return y.view(x.shape)


@triton.jit
def _log_softmax(X, Y, N, sx, sy, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, N, BLOCK):  # lane-wise online max / sum, blocks in a fixed order
        x = tl.load(X + row * sx + c0 + cols, mask=c0 + cols < N, other=float("-inf")).to(
            tl.float32
        )
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
