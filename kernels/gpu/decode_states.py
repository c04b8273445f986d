"""Split-KV decode in Gluon (Hopper): `_attn`'s SPLIT path with K and V in flight together, and
`_combine`'s fold with its tile states in shared memory.

Triton lowers each tensor-memory load of `_attn` on its own (copy, wait; copy, wait), so a
program's V tile leaves only after its K tile has landed: on an H200 the tile states of B4 ctx16384
moved K/V at ~2.9 TB/s (docs/performance.md, issue 52). Here both copies of a tile signal one
barrier and the program waits once. Everything else is `_attn`'s arithmetic on `_attn`'s layouts
(the 64-row warpgroup MMA with 4 warps, [16, 128, 16] instructions; the same reductions over the
same layout), so every tile state has the same bits. The fold waited on L2 once per few tiles
(7.5 of 19 us at B1 ctx16384); here one asynchronous copy brings 128 tiles' states to shared
memory while the factors are computed. Same operations on the same values: the parity test
compares every row (tests/numerics/test_gpu.py).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _state(
    q_s,
    k_s,
    v_s,
    keep,
    scale_log2,
    R: gl.constexpr,
    BLOCK_N: gl.constexpr,
    D: gl.constexpr,
    MMA: gl.constexpr,
    MASKED: gl.constexpr,
):
    """`_tile_state` / `_full_tile` of the tile in k_s, v_s (shared memory): (max, sum, P @ V)."""
    s = warpgroup_mma(
        q_s, k_s.permute((1, 0)), gl.zeros([R, BLOCK_N], gl.float32, MMA), is_async=True
    )
    s = warpgroup_mma_wait(0, deps=(s,)) * scale_log2
    if MASKED:
        s = gl.where(keep, s, float("-inf"))
    m = gl.max(s, 1)
    if MASKED:
        p = gl.exp2(s - gl.where(m == float("-inf"), 0.0, m)[:, None])
    else:
        p = gl.exp2(s - m[:, None])
    pa = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(0, MMA, 2))
    acc = warpgroup_mma(pa, v_s, gl.zeros([R, D], gl.float32, MMA), is_async=True)
    return m, gl.sum(p, 1), warpgroup_mma_wait(0, deps=(acc,))


@gluon.jit
def _store(WM, WL, WA, hrow, j, m, l, acc, valid, d, D: gl.constexpr):
    gl.store(WM + hrow + j, m, mask=valid)
    gl.store(WL + hrow + j, l, mask=valid)
    gl.store(WA + (hrow + j)[:, None] * D + d[None, :], acc, mask=valid[:, None])


@gluon.jit
def _decode_states(  # `_attn`'s parameters; O, KV0, CNT, sot, soh unread (paged, unfused)
    Q,
    K,
    V,
    KD,
    VD,
    O,
    QPOS,
    BSEQ,
    BQ0,
    BNQ,
    KV0,
    BT,
    WM,
    WL,
    WA,
    CNT,
    sqt,
    sqh,
    skt,
    skh,
    sot,
    soh,
    sbt,
    swt,
    swh,
    scale_log2,
    TILES_PER_PROG,
    G: gl.constexpr,
    QT: gl.constexpr,
    BLOCK_N: gl.constexpr,
    D: gl.constexpr,
):
    """Tiles [j0, j0 + TILES_PER_PROG) of one run of queries x one KV head (paged cache): each
    tile's state stored for `_combine`; whole tiles by tensor-memory copies, K and V on one barrier,
    the masked ones through masked pointer loads (rows past a page's end must read as zero)."""
    R: gl.constexpr = QT * G
    MMA: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]
    )
    LD: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # 16-byte loads of rows
    ROW: gl.constexpr = gl.SliceLayout(1, MMA)
    COL: gl.constexpr = gl.SliceLayout(0, MMA)
    blk, kvh = gl.program_id(0), gl.program_id(1)
    seq, q0, nq = gl.load(BSEQ + blk), gl.load(BQ0 + blk), gl.load(BNQ + blk)

    r = gl.arange(0, R, ROW)
    t, g = r // G, r % G
    valid = t < nq
    pos = gl.load(QPOS + q0 + t, mask=valid, other=0)
    rl = gl.arange(0, R, gl.SliceLayout(1, LD))
    dl = gl.arange(0, D, gl.SliceLayout(0, LD))
    tl_, gl_ = rl // G, rl % G
    q = gl.load(
        Q + (q0 + tl_)[:, None] * sqt + (kvh * G + gl_)[:, None] * sqh + dl[None, :],
        mask=(tl_ < nq)[:, None],
        other=0.0,
    )
    q_s = gl.allocate_shared_memory(gl.bfloat16, [R, D], KD.layout, q)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, D], KD.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_N, D], VD.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    fence_async_shared()

    max_pos = gl.max(gl.where(valid, pos, 0), 0)
    last = max_pos // BLOCK_N
    whole = gl.min(gl.where(valid, pos, max_pos), 0) // BLOCK_N
    j0 = gl.program_id(2) * TILES_PER_PROG
    j1 = gl.minimum(j0 + TILES_PER_PROG, last + 1)
    hrow = (q0 + t) * swt + (kvh * G + g) * swh
    d = gl.arange(0, D, COL)
    phase = 0
    for j in range(j0, gl.minimum(j1, whole)):
        row0 = gl.load(BT + seq * sbt + j) * BLOCK_N
        mbarrier.expect(bar, 2 * BLOCK_N * D * 2)
        tma.async_copy_global_to_shared(KD, [row0, kvh * D], bar, k_s)
        tma.async_copy_global_to_shared(VD, [row0, kvh * D], bar, v_s)
        mbarrier.wait(bar, phase)
        phase ^= 1
        m, l, acc = _state(q_s, k_s, v_s, valid, scale_log2, R, BLOCK_N, D, MMA, False)
        _store(WM, WL, WA, hrow, j, m, l, acc, valid, d, D)
    mbarrier.invalidate(bar)
    kn = gl.arange(0, BLOCK_N, gl.SliceLayout(1, LD))
    n_mma = gl.arange(0, BLOCK_N, COL)
    for j in range(gl.maximum(j0, whole), j1):
        n = j * BLOCK_N + kn
        rows = gl.load(BT + seq * sbt + j) * BLOCK_N + kn
        off = rows[:, None] * skt + kvh * skh + dl[None, :]
        kmask = (n <= max_pos)[:, None]
        k_s.store(gl.load(K + off, mask=kmask, other=0.0))
        v_s.store(gl.load(V + off, mask=kmask, other=0.0))
        fence_async_shared()
        nm = j * BLOCK_N + n_mma
        keep = (nm[None, :] <= pos[:, None]) & valid[:, None]
        m, l, acc = _state(q_s, k_s, v_s, keep, scale_log2, R, BLOCK_N, D, MMA, True)
        _store(WM, WL, WA, hrow, j, m, l, acc, valid, d, D)


@gluon.jit
def _max2(a, b):
    return gl.maximum(a, b)


@gluon.jit
def _fold_states(
    O,
    QPOS,
    WM,
    WL,
    WA,
    sot,
    soh,
    swt,
    swh,
    BLOCK_N: gl.constexpr,
    D: gl.constexpr,
    DC: gl.constexpr,
    CH: gl.constexpr,
    U: gl.constexpr,
):
    """`_combine` of one query token x one head x DC channels (one warp per 32): the same two
    phases on the same values, with the tile states of CH tiles at a time copied into shared memory
    in one asynchronous copy (cp.async) while the factors are computed, and the fma chain reading
    them there: one round trip to L2 per CH tiles instead of one per U tiles."""
    W: gl.constexpr = DC // 32
    LC: gl.constexpr = gl.BlockedLayout([1], [32], [W], [0])  # one channel per thread
    LB: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [W, 1], [1, 0])  # 16-byte copies
    S1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    S2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    tok, h = gl.program_id(0), gl.program_id(1)
    n_tiles = gl.load(QPOS + tok) // BLOCK_N + 1
    base = tok * swt + h * swh
    # written whole ([CH, DC], [CH]), read a row at a time: the same plain row-major bytes seen
    # as rows (Gluon indexes the leading dimension of a buffer whose layout has one rank less)
    acc_w = gl.allocate_shared_memory(gl.float32, [CH, DC], S2)
    acc_s = acc_w._reinterpret(gl.float32, [CH, DC], S1)
    f_w = gl.allocate_shared_memory(gl.float32, [3, CH], S1)  # a, b, lt of each tile
    a_s = f_w.index(0)._reinterpret(gl.float32, [CH, 1], S1)
    b_s = f_w.index(1)._reinterpret(gl.float32, [CH, 1], S1)
    lt_s = f_w.index(2)._reinterpret(gl.float32, [CH, 1], S1)
    d = gl.program_id(2) * DC + gl.arange(0, DC, LC)
    db = gl.program_id(2) * DC + gl.arange(0, DC, gl.SliceLayout(0, LB))
    jb = gl.arange(0, CH, gl.SliceLayout(1, LB))
    jf = gl.arange(0, CH, LC)
    carry = float("-inf")
    l = gl.zeros([1], gl.float32, LC)
    acc = gl.zeros([DC], gl.float32, LC)
    for j0 in range(0, n_tiles, CH):
        jj = j0 + jb
        async_copy.async_copy_global_to_shared(
            acc_w, WA + (base + jj)[:, None] * D + db[None, :], mask=(jj < n_tiles)[:, None]
        )
        async_copy.commit_group()
        # `_fold_factors` on these CH tiles while the copy is in flight
        jt = j0 + jf
        live = jt < n_tiles
        mt = gl.load(WM + base + jt, mask=live, other=float("-inf"))
        prev = gl.load(WM + base + jt - 1, mask=live & (jt > 0), other=float("-inf"))
        m_new = gl.maximum(gl.associative_scan(mt, 0, _max2), carry)
        m = gl.maximum(gl.associative_scan(prev, 0, _max2), carry)
        top = gl.max(mt, 0)
        carry = gl.where(top > carry, top, carry)
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        # a tile past the last: (a, b, lt, acct) = (1, 0, 0, 0), which leaves the fold exact
        f_w.index(0).store(gl.where(live, gl.exp2(m - m_safe), 1.0))
        f_w.index(1).store(gl.where(live, gl.exp2(mt - m_safe), 0.0))
        f_w.index(2).store(gl.load(WL + base + jt, mask=live, other=0.0))
        async_copy.wait_group(0)
        gl.thread_barrier()
        # `_fold_chain`
        for k0 in range(0, gl.minimum(CH, n_tiles - j0), U):
            for u in gl.static_range(U):
                j = k0 + u
                a = a_s.index(j).load(LC)
                b = b_s.index(j).load(LC)
                l = gl.fma(l, a, lt_s.index(j).load(LC) * b)
                acct = gl.where(j0 + j < n_tiles, acc_s.index(j).load(LC), 0.0)
                a, _ = gl.broadcast(a, acc)
                b, _ = gl.broadcast(b, acc)
                acc = gl.fma(acc, a, acct * b)
        gl.thread_barrier()  # every thread's reads of this chunk before the next copy lands
    out, _ = gl.broadcast(l, acc)
    gl.store(O + tok * sot + h * soh + d, (acc / out).to(O.dtype.element_ty))
