"""prefill.py's kernel, persistent: one program per SM takes (run, KV head) items from a counter
until none is left, for calls of short runs (a causal run of a 1,024-token sequence has 4.5 tiles on
average; one program per run paid its start and end each: B4 S1024 1.27x SDPA default on an H200,
1.13x here; docs/performance.md, issue 52, eighth round). attention.py runs it where PREFILL_ITEMS.

The loader warp takes the next item (the first is the program's own, then an atomic counter: the
longest items first, as `blocks_for` orders the runs; the last program out resets the counter),
loads its Q by the tensor-memory engine (a [QT tokens, G heads, D] box of q [T, H, D]: the
program's 128 rows in order) into one of two Q buffers and writes the item's scalars beside it, on
one mbarrier: the next item's Q and first tiles load under the last item's tiles. The warpgroups
run prefill.py's `_tile` on every tile, in the same order with the same arithmetic.

One difference in what it reads: `_attn` zeroes the last tile's V rows past a run's last position
(a page's tail may hold NaN, and 0 x NaN is NaN), a shared-memory read-modify-write, a fence and a
barrier inside the ping-pong that kept B4 S1024 at 1.26x. In a packed buffer laid out as
cu_seqlens (`kv_start` increasing), the rows past a run's last position up to the next sequence's
first row are its own sequence's later keys (finite wherever its earlier keys are; `_attn` already
lets a later key inside a run reach the run's earlier rows), so the zeroing runs only where the
tile reaches the next sequence, and always for a paged cache: the same bits with finite keys
(tests/numerics/test_gpu.py also puts NaN in a next sequence's first keys).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
)

from topl.kernels.gpu.prefill import NS, R, _load_tile, _run, _tile

# an item's scalars, loader -> warpgroups: i, q0, nq, kvh, whole, tiles, last position, zv
NI = gl.constexpr(8)


@gluon.jit
def _load_items(
    QD, KD, VD, q_s, k_s, v_s, info, qbar, qfree, ready, empty, BT, BSEQ, BQ0, BNQ, QPOS, KV0, CNT,
    sbt, n_items, n_seq, n_rows, KVH_N, PAGED: gl.constexpr,
):  # fmt: skip
    """The loader warp: for each item, its Q and scalars into buffer it % 2 once both warpgroups
    left the item before last there, then its tiles' K and V through the ring (`_load`'s)."""
    QT: gl.constexpr = QD.block_type.shape[0]
    G: gl.constexpr = QD.block_type.shape[1]
    BLOCK_N: gl.constexpr = KD.block_type.shape[0]
    D: gl.constexpr = KD.block_type.shape[1]
    LT: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    idx = gl.arange(0, NI, LT)
    n_progs = gl.num_programs(0)
    i = gl.program_id(0)
    c = 0  # tiles loaded (the ring's count)
    it = 0  # items taken
    while i < n_items:
        kvh = i % KVH_N
        seq, q0, nq, whole, n_tiles, max_pos, kv0 = _run(
            i // KVH_N, BSEQ, BQ0, BNQ, QPOS, KV0, QT, BLOCK_N, LT
        )
        if PAGED:
            zv = 1
        else:  # the next sequence's first row (the buffer's end after the last); not after: zero
            nxt = gl.load(KV0 + seq + 1, mask=seq + 1 < n_seq, other=n_rows)
            zv = ((nxt <= kv0) | ((kv0 + n_tiles * BLOCK_N > nxt) & (nxt < n_rows))).to(gl.int32)
        slot = it % 2
        mbarrier.wait(qfree.index(slot), (it // 2 & 1) ^ 1)
        vec = gl.where(idx == 0, i, gl.where(idx == 1, q0, gl.where(idx == 2, nq, gl.where(
            idx == 3, kvh, gl.where(idx == 4, whole, gl.where(idx == 5, n_tiles, gl.where(
                idx == 6, max_pos, zv)))))))  # fmt: skip
        info.index(slot).store(vec)
        mbarrier.expect(qbar.index(slot), QT * G * D * 2)
        tma.async_copy_global_to_shared(QD, [q0, kvh * G, 0], qbar.index(slot), q_s.index(slot))
        for j in range(n_tiles):
            _load_tile(KD, VD, k_s, v_s, ready, empty, BT, seq, sbt, kv0, kvh, j, c, PAGED)
            c += 1
        it += 1
        i = n_progs + gl.atomic_add(CNT, 1)
    slot = it % 2  # the end: an item index past the last, and no Q
    mbarrier.wait(qfree.index(slot), (it // 2 & 1) ^ 1)
    info.index(slot).store(gl.full([NI], 0, gl.int32, LT) + n_items)
    mbarrier.arrive(qbar.index(slot), count=1)
    if gl.atomic_add(CNT + 1, 1, sem="acq_rel") == n_progs - 1:  # the last program out
        gl.atomic_xchg(CNT, 0)  # every program has taken its last index: zero for the next call
        gl.atomic_xchg(CNT + 1, 0)


@gluon.jit
def _pick(vec, idx, k: gl.constexpr):
    return gl.sum(gl.where(idx == k, vec, 0), 0)


@gluon.jit
def _rows_items(
    q_s, k_s, v_s, info, qbar, qfree, ready, empty, zero, turn, O, QPOS, sot, soh, scale_log2,
    n_items, HALF: gl.constexpr, G: gl.constexpr,
):  # fmt: skip
    """One warpgroup, item after item: rows [64 HALF, 64 HALF + 64) of the item through every
    tile (prefill.py's `_rows` on the item's Q buffer), then its part of O."""
    BLOCK_N: gl.constexpr = k_s.type.shape[1]
    D: gl.constexpr = k_s.type.shape[2]
    ROWS: gl.constexpr = q_s.type.shape[1] * q_s.type.shape[2]
    MMA: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]
    )
    LI: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    ROW: gl.constexpr = gl.SliceLayout(1, MMA)
    c = 0  # tiles taken (the ring's count, as the loader's)
    it = 0
    zphase = 0
    tphase = 1 - HALF  # warpgroup 0 first: its first wait is on the phase before the barrier's
    mbarrier.wait(qbar.index(0), 0)
    vec = info.index(0).load(LI)
    while _pick(vec, gl.arange(0, NI, LI), 0) < n_items:
        idx = gl.arange(0, NI, LI)
        slot = it % 2
        nq, whole, n_tiles = _pick(vec, idx, 2), _pick(vec, idx, 4), _pick(vec, idx, 5)
        max_pos, zv = _pick(vec, idx, 6), _pick(vec, idx, 7)
        qh = q_s.index(slot).reshape([ROWS, D]).slice(HALF * R, R)
        m = gl.full([R], float("-inf"), gl.float32, ROW)
        l = gl.zeros([R], gl.float32, ROW)
        acc = gl.zeros([R, D], gl.float32, MMA)
        mbarrier.wait(ready.index(c % NS), c // NS & 1)
        s_tok = warpgroup_mma(
            qh, k_s.index(c % NS).permute((1, 0)), gl.zeros([R, BLOCK_N], gl.float32, MMA),
            is_async=True,
        )  # fmt: skip
        t = (HALF * R + gl.arange(0, R, ROW)) // G
        valid = t < nq
        pos = gl.load(QPOS + _pick(vec, idx, 1) + t, mask=valid, other=0)
        for j in range(whole):
            m, l, acc, s_tok, zphase, tphase = _tile(
                qh, k_s, v_s, ready, empty, zero, turn, tphase, s_tok, m, l, acc, zphase, j, c, zv,
                pos, valid, max_pos, scale_log2, HALF, MMA, False, True,
            )  # fmt: skip
            c += 1
        for j in range(whole, n_tiles - 1):
            m, l, acc, s_tok, zphase, tphase = _tile(
                qh, k_s, v_s, ready, empty, zero, turn, tphase, s_tok, m, l, acc, zphase, j, c, zv,
                pos, valid, max_pos, scale_log2, HALF, MMA, True, True,
            )  # fmt: skip
            c += 1
        m, l, acc, s_tok, zphase, tphase = _tile(
            qh, k_s, v_s, ready, empty, zero, turn, tphase, s_tok, m, l, acc, zphase, n_tiles - 1,
            c, zv, pos, valid, max_pos, scale_log2, HALF, MMA, True, False,
        )  # fmt: skip
        c += 1
        # the scalars again (the buffer's until both warpgroups leave it): fewer live registers
        vec = info.index(slot).load(LI)
        idx = gl.arange(0, NI, LI)
        q0, kvh = _pick(vec, idx, 1), _pick(vec, idx, 3)
        r = HALF * R + gl.arange(0, R, ROW)
        t, g = r // G, r % G
        mbarrier.arrive(qfree.index(slot), count=1)  # this warpgroup's MMAs of the item have ended
        d = gl.arange(0, D, gl.SliceLayout(0, MMA))
        gl.store(
            O + (q0 + t)[:, None] * sot + (kvh * G + g)[:, None] * soh + d[None, :],
            (acc / l[:, None]).to(O.dtype.element_ty),
            mask=valid[:, None],
        )
        it += 1
        mbarrier.wait(qbar.index(it % 2), it // 2 & 1)
        vec = info.index(it % 2).load(LI)


@gluon.jit
def _prefill_items(
    QD, KD, VD, O, QPOS, BSEQ, BQ0, BNQ, KV0, BT, CNT, sot, soh, sbt, scale_log2, n_items, n_seq,
    n_rows, KVH_N, G: gl.constexpr, QT: gl.constexpr, BLOCK_N: gl.constexpr, D: gl.constexpr,
    PAGED: gl.constexpr,
):  # fmt: skip
    """Items (run i // KVH_N, KV head i % KVH_N) for one program per SM: the default partition and
    a second 4-warp partition take 64 rows each, a 1-warp partition loads."""
    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, QT, G, D], QD.layout)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [NS, BLOCK_N, D], KD.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [NS, BLOCK_N, D], VD.layout)
    info = gl.allocate_shared_memory(gl.int32, [2, NI], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    qbar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    qfree = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    zero = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(qbar.index(i), count=1)  # the loader's expect (or the end's arrival)
        mbarrier.init(qfree.index(i), count=2)  # one arrival per warpgroup
        mbarrier.init(turn.index(i), count=1)
    for i in gl.static_range(NS):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    mbarrier.init(zero, count=2)
    fence_async_shared()
    gl.warp_specialize(
        [
            (_rows_items, (q_s, k_s, v_s, info, qbar, qfree, ready, empty, zero, turn, O, QPOS, sot,
                           soh, scale_log2, n_items, 0, G)),
            (_rows_items, (q_s, k_s, v_s, info, qbar, qfree, ready, empty, zero, turn, O, QPOS, sot,
                           soh, scale_log2, n_items, 1, G)),
            (_load_items, (QD, KD, VD, q_s, k_s, v_s, info, qbar, qfree, ready, empty, BT, BSEQ, BQ0,
                           BNQ, QPOS, KV0, CNT, sbt, n_items, n_seq, n_rows, KVH_N, PAGED)),
        ],
        [4, 1],
        [240, 32],
    )  # fmt: skip
