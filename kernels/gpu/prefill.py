"""Training / prefill attention in Gluon (Hopper): `_attn`'s one-pass path with its 128 rows split
between two warpgroups that take turns on the tensor cores, fed by a loader warp.

Triton runs `_attn`'s 8 warps in lock step (one barrier a tile), so both warpgroups issue their
MMAs together and then do their softmax and fold together: on an H200 the tensor cores idle while
the exponentials run (issue slots 30% busy, docs/performance.md). Here (FlashAttention-3's layout
and forced ping-pong) a loader warp streams the tiles' K and V through a two-stage ring by the
tensor-memory engine, and each warpgroup takes its 64 rows through every tile: it issues its P @ V
and the next tile's Q @ K^T only after the other warpgroup issued its own (two mbarriers passed
back and forth), so one's softmax and fold run under the other's MMAs, and the fold of tile j
under its own Q @ K^T of tile j+1. That MMA is issued by a compile-time branch (`_tile`'s NEXT;
the last tile peeled off): with a run-time `if`, ptxas serialised every wgmma (C7511) and the
kernel was no faster than `_attn` (tests/numerics/test_gpu_compile.py now fails on it).
Everything a row computes is `_attn`'s arithmetic on the 64-row MMA layout of `_decode_states` (64
and 128 rows give the same bits: attention.py), in the same order: the parity test compares every
row (tests/numerics/test_gpu.py).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

R = gl.constexpr(64)  # rows (token x head) of one warpgroup
NS = gl.constexpr(2)  # K/V ring stages (two: 128 KiB of tiles, 32 KiB of Q)


@gluon.jit
def _load_tile(KD, VD, k_s, v_s, ready, empty, BT, seq, sbt, kv0, kvh, j, c, PAGED: gl.constexpr):
    """Tile j's K and V into stage c % NS (the loader's c-th tile) once both warpgroups released it."""
    BLOCK_N: gl.constexpr = KD.block_type.shape[0]
    D: gl.constexpr = KD.block_type.shape[1]
    st = c % NS
    mbarrier.wait(empty.index(st), (c // NS & 1) ^ 1)
    if PAGED:
        row0 = gl.load(BT + seq * sbt + j) * BLOCK_N
    else:
        row0 = kv0 + j * BLOCK_N
    mbarrier.expect(ready.index(st), 2 * BLOCK_N * D * 2)
    tma.async_copy_global_to_shared(KD, [row0, kvh * D], ready.index(st), k_s.index(st))
    tma.async_copy_global_to_shared(VD, [row0, kvh * D], ready.index(st), v_s.index(st))


@gluon.jit
def _load(KD, VD, k_s, v_s, ready, empty, BT, seq, sbt, kv0, kvh, n_tiles, PAGED: gl.constexpr):
    """The loader warp: every tile of the program's run."""
    for j in range(n_tiles):
        _load_tile(KD, VD, k_s, v_s, ready, empty, BT, seq, sbt, kv0, kvh, j, j, PAGED)


@gluon.jit
def _tile(
    qh,
    k_s,
    v_s,
    ready,
    empty,
    zero,
    turn,
    tphase,
    s_tok,
    m,
    l,
    acc,
    zphase,
    j,
    c,
    zv,
    pos,
    valid,
    max_pos,
    scale_log2,
    HALF: gl.constexpr,
    MMA: gl.constexpr,
    MASKED: gl.constexpr,
    NEXT: gl.constexpr,
):
    """Tile j for one warpgroup (the program's c-th: its ring stage): its state from the scores in
    flight (`_full_tile`, or `_masked_tile` with MASKED), P @ V and (NEXT) the next tile's scores
    issued, `_fold` under the latter. zv: V rows past `max_pos` may hold another sequence's keys or
    a page's tail, and are zeroed (prefill_items.py says where they cannot)."""
    BLOCK_N: gl.constexpr = k_s.type.shape[1]
    D: gl.constexpr = k_s.type.shape[2]
    LD: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # 16-byte rows
    st = c % NS
    s = warpgroup_mma_wait(0, deps=(s_tok,)) * scale_log2
    v_t = v_s.index(st)
    if MASKED:  # keys past a row's position masked
        n = j * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, MMA))
        s = gl.where((n[None, :] <= pos[:, None]) & valid[:, None], s, float("-inf"))
        mt = gl.max(s, 1)
        p = gl.exp2(s - gl.where(mt == float("-inf"), 0.0, mt)[:, None])
        if zv:
            # `_attn` reads V rows past the program's last position as zero (a page's tail may
            # hold anything, NaN included, and 0 x NaN is NaN): each warpgroup zeroes its half of
            # the stage, and both meet before either MMA reads it
            vh = v_t.slice(HALF * R, R)
            kz = j * BLOCK_N + HALF * R + gl.arange(0, R, gl.SliceLayout(1, LD))
            vh.store(gl.where((kz <= max_pos)[:, None], vh.load(LD), 0.0))
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(zero, count=1)
            mbarrier.wait(zero, zphase)
            zphase ^= 1
    else:
        mt = gl.max(s, 1)
        p = gl.exp2(s - mt[:, None])
    lt = gl.sum(p, 1)
    pa = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(0, MMA, 2))
    # forced ping-pong (FlashAttention-3): this warpgroup's MMAs wait until the other's are issued,
    # so the tensor cores take the warpgroups' tiles in turn and each one's softmax and fold run
    # under the other's MMAs
    mbarrier.wait(turn.index(HALF), tphase)
    tphase ^= 1
    acct = warpgroup_mma(pa, v_t, gl.zeros([R, D], gl.float32, MMA), is_async=True)
    acct = warpgroup_mma_wait(0, deps=(acct,))
    mbarrier.arrive(empty.index(st), count=1)  # this warpgroup is done with the stage
    if NEXT:  # the next tile's scores run on the tensor cores under the fold
        nx = (c + 1) % NS
        mbarrier.wait(ready.index(nx), (c + 1) // NS & 1)
        s_tok = warpgroup_mma(
            qh,
            k_s.index(nx).permute((1, 0)),
            gl.zeros([R, BLOCK_N], gl.float32, MMA),
            is_async=True,
        )
    mbarrier.arrive(turn.index(1 - HALF), count=1)  # the other warpgroup's turn
    # `_fold` (explicit fma, as there)
    m_new = gl.maximum(m, mt)
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    a = gl.exp2(m - m_safe)
    b = gl.exp2(mt - m_safe)
    l = gl.fma(l, a, lt * b)
    a2, _ = gl.broadcast(a[:, None], acc)
    b2, _ = gl.broadcast(b[:, None], acc)
    return m_new, l, gl.fma(acc, a2, acct * b2), s_tok, zphase, tphase


@gluon.jit
def _rows(
    q_s,
    k_s,
    v_s,
    ready,
    empty,
    zero,
    turn,
    Q,
    O,
    QPOS,
    q0,
    nq,
    kvh,
    sqt,
    sqh,
    sot,
    soh,
    scale_log2,
    whole,
    n_tiles,
    max_pos,
    HALF: gl.constexpr,
    G: gl.constexpr,
):
    """One warpgroup: rows [64 HALF, 64 HALF + 64) of the program through every tile, `_attn`'s
    `_full_tile` / `_masked_tile` and `_fold` on each, then its part of O."""
    BLOCK_N: gl.constexpr = k_s.type.shape[1]
    D: gl.constexpr = k_s.type.shape[2]
    MMA: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]
    )
    LD: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])  # 16-byte rows
    ROW: gl.constexpr = gl.SliceLayout(1, MMA)
    COL: gl.constexpr = gl.SliceLayout(0, MMA)
    r = HALF * R + gl.arange(0, R, ROW)
    t, g = r // G, r % G
    valid = t < nq
    pos = gl.load(QPOS + q0 + t, mask=valid, other=0)
    rl = HALF * R + gl.arange(0, R, gl.SliceLayout(1, LD))
    dl = gl.arange(0, D, gl.SliceLayout(0, LD))
    tl_, gl_ = rl // G, rl % G
    q = gl.load(
        Q + (q0 + tl_)[:, None] * sqt + (kvh * G + gl_)[:, None] * sqh + dl[None, :],
        mask=(tl_ < nq)[:, None],
        other=0.0,
    )
    qh = q_s.index(HALF)
    qh.store(q)
    fence_async_shared()
    gl.thread_barrier()  # every thread's Q row in shared memory before the MMA reads it

    m = gl.full([R], float("-inf"), gl.float32, ROW)
    l = gl.zeros([R], gl.float32, ROW)
    acc = gl.zeros([R, D], gl.float32, MMA)
    mbarrier.wait(ready.index(0), 0)
    s_tok = warpgroup_mma(
        qh, k_s.index(0).permute((1, 0)), gl.zeros([R, BLOCK_N], gl.float32, MMA), is_async=True
    )
    zphase = 0
    tphase = 1 - HALF  # warpgroup 0 first: its first wait is on the phase before the barrier's
    # two loops, as in `_attn`: the masked tiles' index vectors stay out of the whole tiles' loop
    for j in range(whole):
        m, l, acc, s_tok, zphase, tphase = _tile(
            qh, k_s, v_s, ready, empty, zero, turn, tphase, s_tok, m, l, acc, zphase, j, j, True, pos,
            valid, max_pos, scale_log2, HALF, MMA, False, True,
        )  # fmt: skip
    for j in range(whole, n_tiles - 1):
        m, l, acc, s_tok, zphase, tphase = _tile(
            qh, k_s, v_s, ready, empty, zero, turn, tphase, s_tok, m, l, acc, zphase, j, j, True, pos,
            valid, max_pos, scale_log2, HALF, MMA, True, True,
        )  # fmt: skip
    m, l, acc, s_tok, zphase, tphase = _tile(
        qh, k_s, v_s, ready, empty, zero, turn, tphase, s_tok, m, l, acc, zphase, n_tiles - 1,
        n_tiles - 1, True, pos, valid, max_pos, scale_log2, HALF, MMA, True, False,
    )  # fmt: skip
    d = gl.arange(0, D, COL)
    gl.store(
        O + (q0 + t)[:, None] * sot + (kvh * G + g)[:, None] * soh + d[None, :],
        (acc / l[:, None]).to(O.dtype.element_ty),
        mask=valid[:, None],
    )


@gluon.jit
def _run(blk, BSEQ, BQ0, BNQ, QPOS, KV0, QT: gl.constexpr, BLOCK_N: gl.constexpr, LT: gl.constexpr):
    """Run blk's scalars: (sequence, first row, rows, whole tiles, tiles, last position, first key
    row); tiles [0, whole) lie at or before every valid row's position (`_attn`'s split)."""
    seq, q0, nq = gl.load(BSEQ + blk), gl.load(BQ0 + blk), gl.load(BNQ + blk)
    t = gl.arange(0, QT, LT)
    pos = gl.load(QPOS + q0 + t, mask=t < nq, other=0)
    max_pos = gl.max(gl.where(t < nq, pos, 0), 0)
    whole = gl.min(gl.where(t < nq, pos, max_pos), 0) // BLOCK_N
    return seq, q0, nq, whole, max_pos // BLOCK_N + 1, max_pos, gl.load(KV0 + seq)


@gluon.jit
def _prefill(  # `_attn`'s parameters that the one pass reads (fewer to launch from the host)
    Q,
    KD,
    VD,
    O,
    QPOS,
    BSEQ,
    BQ0,
    BNQ,
    KV0,
    BT,
    sqt,
    sqh,
    sot,
    soh,
    sbt,
    scale_log2,
    G: gl.constexpr,
    QT: gl.constexpr,
    BLOCK_N: gl.constexpr,
    D: gl.constexpr,
    PAGED: gl.constexpr,
):
    """One run of up to QT queries (QT * G = 128 rows) x one KV head, every tile of its keys: the
    default partition and a second 4-warp partition take 64 rows each, a 1-warp partition loads."""
    blk, kvh = gl.program_id(0), gl.program_id(1)
    seq, q0, nq, whole, n_tiles, max_pos, kv0 = _run(
        blk, BSEQ, BQ0, BNQ, QPOS, KV0, QT, BLOCK_N, gl.BlockedLayout([1], [32], [4], [0])
    )

    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, R, D], KD.layout)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [NS, BLOCK_N, D], KD.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [NS, BLOCK_N, D], VD.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    zero = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NS):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per warpgroup
    mbarrier.init(zero, count=2)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)  # one arrival: the other warpgroup's MMAs issued
    fence_async_shared()

    gl.warp_specialize(
        [
            (
                _rows,
                (q_s, k_s, v_s, ready, empty, zero, turn, Q, O, QPOS, q0, nq, kvh, sqt, sqh, sot, soh,
                 scale_log2, whole, n_tiles, max_pos, 0, G),
            ),
            (
                _rows,
                (q_s, k_s, v_s, ready, empty, zero, turn, Q, O, QPOS, q0, nq, kvh, sqt, sqh, sot, soh,
                 scale_log2, whole, n_tiles, max_pos, 1, G),
            ),
            (_load, (KD, VD, k_s, v_s, ready, empty, BT, seq, sbt, kv0, kvh, n_tiles, PAGED)),
        ],
        [4, 1],
        [240, 24],
    )  # fmt: skip
