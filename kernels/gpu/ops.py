"""Batch-invariant matmul, RMSNorm and log-softmax in Triton.

Each output element is reduced in one fixed order whatever M is. The matmul cuts K into chunks of
K_CHUNK (fixed by K alone, like the attention's KV tile): each chunk is an in-order chain of MMAs
into its own fp32 accumulator from zero, and the chunks are added in order, 0 + c0 + c1 + ...,
rounded to the output dtype once. Whether one program walks every chunk and adds them in registers
(large M) or the chunks run in parallel programs whose fp32 partials the last one to finish adds
in the same order (small M: split-K without an M-dependent order), an element's additions are the
same. The reductions use one program per row.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from topl.kernels.gpu.device import arrival_counts, sm_count
from topl.kernels.gpu.mm_plans import (
    MM_CONFIG,
    PLANS,
    SMALL_M,
    SWAP_M,
    TMA_PLANS,
    small_plan,
    swap_plan,
)

# The one reduction order: K in chunks of K_CHUNK (the last one shorter), added in chunk order.
# Every plan (mm_plans.py) and every M use it; only this constant (and K) sets an element's additions, so
# no environment variable may change it (training and rollout processes must agree). 1024 over 512
# on an H200: fewer chunk ends at large M, enough programs at small M.
K_CHUNK = 1024


@triton.jit  # type: ignore[untyped-decorator]  # a Triton kernel: parameters stay unannotated
def _bi_matmul(  # type: ignore[no-untyped-def]
    X,
    W,
    XD,
    WD,
    Y,
    P,
    CNT,
    M,
    N,
    K,
    sxm,
    sxk,
    swn,
    swk,
    sym,
    syn,
    CPP,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    KC: tl.constexpr,
    SPLIT: tl.constexpr,
    SWAP: tl.constexpr,
    TMA: tl.constexpr,
):
    """SPLIT False: a program walks every chunk of its tile and adds them in registers. SPLIT True:
    program (m, n, s) computes chunks [s * CPP, (s + 1) * CPP), stores their fp32 partials in P, and
    the last program of the tile to finish (arrival count in CNT) adds all of them in chunk order
    and resets the count: one launch, and the additions of the unsplit form. The K loop is one
    flat loop with the chunk end under a condition (a loop per chunk restarts the load pipeline
    at every chunk: H200, qkv_proj M = 16, 9.1 vs 8.1 us). SWAP: the tile transposed, BM tokens
    on the MMA's narrow side against BN rows of W; TMA: X and W tiles from the descriptors XD, WD."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if SWAP:  # the tile transposed, y.T = w @ x.T: W's rows on the MMA's 64-row side
        yoff = rn[:, None] * syn + rm[None, :] * sym
        out = (rn[:, None] < N) & (rm[None, :] < M)
        part = P + rm[None, :] * N + rn[:, None]
        acc = tl.zeros([BN, BM], dtype=tl.float32)
        total = tl.zeros([BN, BM], dtype=tl.float32)
    else:
        yoff = rm[:, None] * sym + rn[None, :] * syn
        out = (rm[:, None] < M) & (rn[None, :] < N)
        part = P + rm[:, None] * N + rn[None, :]
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        total = tl.zeros([BM, BN], dtype=tl.float32)
    per: tl.constexpr = KC // BK  # K steps per chunk
    n_k = tl.cdiv(K, BK)
    i0 = tl.program_id(2) * CPP * per if SPLIT else 0
    i1 = tl.minimum(i0 + CPP * per, n_k) if SPLIT else n_k
    for i in range(i0, i1):
        if TMA:  # out-of-range rows and K arrive as zeros
            x = XD.load([pid_m * BM, i * BK])
            w = WD.load([pid_n * BN, i * BK])
        else:
            kk = i * BK + rk
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
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc)
        if (i % per == per - 1) | (i == n_k - 1):  # a chunk ends
            if SPLIT:
                tl.store(part + (i // per) * M * N, acc, mask=out)
            else:
                total += acc
            acc = tl.zeros_like(acc)
    if SPLIT:
        # every thread's partials are written before one thread's release (CUTLASS's split-K
        # semaphore pattern); the acquire side reads the partials from L2 (.cg), not a stale L1
        tl.debug_barrier()
        cnt = CNT + pid_m * tl.num_programs(1) + pid_n
        if tl.atomic_add(cnt, 1, sem="acq_rel") == tl.num_programs(2) - 1:
            for c in range(0, tl.cdiv(K, KC)):
                total += tl.load(part + c * M * N, mask=out, other=0.0, cache_modifier=".cg")
            tl.store(Y + yoff, total.to(Y.dtype.element_ty), mask=out)
            tl.atomic_xchg(cnt, 0)
    else:
        tl.store(Y + yoff, total.to(Y.dtype.element_ty), mask=out)


@triton.jit  # type: ignore[untyped-decorator]  # a Triton kernel: parameters stay unannotated
def _bi_matmul_tma(  # type: ignore[no-untyped-def]
    x_desc,
    w_desc,
    y_desc,
    M,
    N,
    K,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    KC: tl.constexpr,
    GROUP_M: tl.constexpr,
    OUT: tl.constexpr,
    PROGRAMS,
    FLAT: tl.constexpr,
):
    """Persistent: PROGRAMS programs walk the output tiles (grouped by GROUP_M rows of tiles for
    L2 reuse); TMA feeds the MMA. Each tile: K chunks in order, each its own accumulator, added in
    registers, in one flat K loop (FLAT False: a loop per chunk, explored)."""
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per: tl.constexpr = KC // BK
    n_k = tl.cdiv(K, BK)
    for tile in range(tl.program_id(0), n_m * n_n, PROGRAMS):
        group = tile // (GROUP_M * n_n)
        first = group * GROUP_M
        rows = tl.minimum(n_m - first, GROUP_M)
        pm = first + (tile % (GROUP_M * n_n)) % rows
        pn = (tile % (GROUP_M * n_n)) // rows
        total = tl.zeros([BM, BN], dtype=tl.float32)
        acc = tl.zeros([BM, BN], dtype=tl.float32)
        if FLAT:
            for i in range(0, n_k):
                acc = tl.dot(x_desc.load([pm * BM, i * BK]), w_desc.load([pn * BN, i * BK]).T, acc)
                if (i % per == per - 1) | (i == n_k - 1):
                    total += acc
                    acc = tl.zeros([BM, BN], dtype=tl.float32)
        else:
            for c0 in range(0, K, KC):
                acc = tl.zeros([BM, BN], dtype=tl.float32)
                for k0 in range(c0, tl.minimum(c0 + KC, K), BK):
                    acc = tl.dot(x_desc.load([pm * BM, k0]), w_desc.load([pn * BN, k0]).T, acc)
                total += acc
        y_desc.store([pm * BM, pn * BN], total.to(OUT))


_CNT: dict[int, torch.Tensor] = {}  # split-K arrival counts per device, zero between calls
_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


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
    plan: tuple[int, ...] | None = None,
    tma: bool | None = None,
    graph: bool = False,
    split: int | None = None,
    kc: int | None = None,
    flat: bool | None = None,
    swap: bool | None = None,
    desc: bool | None = None,
) -> torch.Tensor:
    """x [M, K] @ w [N, K].T: every output element the same chunked in-order K reduction for any M.

    The plan for M from PLANS (`plan` / `tma` force one; `split`: K chunks per program, 0 for a
    program per tile walking all chunks); the persistent TMA kernel needs Hopper or later;
    elsewhere (or with TOPL_MM_CONFIG set) the pointer kernel with MM_CONFIG. `graph=True`: the call
    is captured into a CUDA graph, so the descriptors' host cost is paid once and M above SMALL_M
    takes the persistent TMA kernel too, M in (SWAP_M, SMALL_M] the TMA-fed transposed tile.
    `kc` (exploration only) replaces K_CHUNK: other bits; `flat` (exploration) picks the TMA
    kernel's K-loop form, `swap` the transposed tile (`plan` then (BT, BW, BK, warps, stages)) and
    `desc` TMA loads in the tile kernel: same bits."""
    m, k = x.shape
    n = w.shape[0]
    kc = kc or K_CHUNK
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    auto: tuple[int, ...]  # (BM, BN, BK, warps, stages)
    _, kind, auto = next(p for p in PLANS if m <= p[0])
    if graph and m <= TMA_PLANS[0][0]:
        kind, auto = "tma", TMA_PLANS[0][1]
    cpp, t_swap, t_desc = 0, False, False
    if m <= SMALL_M and (m <= SWAP_M or graph):
        auto, cpp = swap_plan(m, n, triton.cdiv(k, K_CHUNK), sm_count(x.device))
        kind, t_swap, t_desc = "ptr", True, m > SWAP_M
    elif m <= SMALL_M:
        bn, cpp = small_plan(m, n, triton.cdiv(k, K_CHUNK), sm_count(x.device))
        kind, auto = "ptr", (64, bn, 128, 4, 3)
    if "TOPL_MM_CONFIG" in os.environ or not _tma_ok(x, w):
        kind, auto, cpp, t_swap, t_desc = "ptr", MM_CONFIG, 0, False, False
    if plan is not None:  # a forced plan is the plain tile unless told
        t_swap = t_desc = False
    swap = t_swap if swap is None else swap
    desc = t_desc if desc is None else desc
    if tma if tma is not None else kind == "tma":
        from triton.tools.tensor_descriptor import TensorDescriptor

        bm, bn, bk, warps, stages = plan or auto
        assert kc % bk == 0, "a K step must not straddle a chunk end"
        grid = min(sm_count(x.device), triton.cdiv(m, bm) * triton.cdiv(n, bn))
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
            KC=kc,
            GROUP_M=8,
            OUT=_TL[x.dtype],
            PROGRAMS=grid,
            # one flat K loop, except 128 x 256 tiles: the loop per chunk (H200, M = 8192:
            # qkv_proj 1.15 -> 1.05x cuBLAS), where the flat loop holds two 128-register accumulators
            FLAT=bn < 256 if flat is None else flat,
            num_warps=warps,
            num_stages=stages,
        )
        return y
    bm, bn, bk, warps, stages = plan or (auto if kind == "ptr" else MM_CONFIG)
    assert kc % bk == 0, "a K step must not straddle a chunk end"
    cpp = cpp if split is None else split
    chunks = triton.cdiv(k, kc)
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    cnt = arrival_counts(_CNT, x.device, tiles, 1 << 16) if 0 < cpp < chunks else None
    if cnt is None:
        cpp = 0
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn), triton.cdiv(chunks, cpp) if cpp else 1)
    part = torch.empty(chunks, m, n, device=x.device, dtype=torch.float32) if cpp else y
    xd, wd = x, w
    if desc:
        from triton.tools.tensor_descriptor import TensorDescriptor

        xd, wd = (
            TensorDescriptor.from_tensor(x, [bm, bk]),
            TensorDescriptor.from_tensor(w, [bn, bk]),
        )
    _bi_matmul[grid](
        x,
        w,
        xd,
        wd,
        y,
        part,
        cnt if cnt is not None else y,
        m,
        n,
        k,
        x.stride(0),
        x.stride(1),
        w.stride(0),
        w.stride(1),
        y.stride(0),
        y.stride(1),
        cpp,
        BM=bm,
        BN=bn,
        BK=bk,
        KC=kc,
        SPLIT=cpp > 0,
        SWAP=swap,
        TMA=desc,
        num_warps=warps,
        num_stages=stages,
    )
    return y


@triton.jit  # type: ignore[untyped-decorator]  # a Triton kernel: parameters stay unannotated
def _rms_norm(X, Wt, Y, N, sx, sy, eps, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
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


@triton.jit  # type: ignore[untyped-decorator]  # a Triton kernel: parameters stay unannotated
def _log_softmax(X, Y, N, sx, sy, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
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
