"""The Triton kernels of kernels/gpu/attention.py (numerics described there)."""

import triton
import triton.language as tl


@triton.jit
def _tile_state(q, K, V, rows, kmask, n, pos, valid, d, skt, skh, kvh, scale_log2):
    """(max, sum, unnormalised P @ V) of one KV tile for every row, from scratch (log2 units)."""
    k = tl.load(K + rows[:, None] * skt + kvh * skh + d[None, :], mask=kmask[:, None], other=0.0)
    v = tl.load(V + rows[:, None] * skt + kvh * skh + d[None, :], mask=kmask[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale_log2
    s = tl.where((n[None, :] <= pos[:, None]) & valid[:, None], s, float("-inf"))
    m = tl.max(s, 1)
    p = tl.exp2(s - tl.where(m == float("-inf"), 0.0, m)[:, None])
    return m, tl.sum(p, 1), tl.dot(p.to(v.dtype), v)


@triton.jit
def _full_tile(
    q,
    K,
    V,
    KD,
    VD,
    row0,
    d,
    skt,
    skh,
    kvh,
    scale_log2,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TMA: tl.constexpr,
):
    """`_tile_state` of a tile every row sees whole (no key past any row's position): no mask, no
    masked loads, K/V by the tensor-memory engine where available. The same bits as the masked form:
    there every comparison is true and the max is finite (the kernel runs without FP contraction,
    so `s - m` is not fused into the scaling multiply here and not there)."""
    if TMA:
        k = KD.load([row0, kvh * D])
        v = VD.load([row0, kvh * D])
    else:
        r = row0 + tl.arange(0, BLOCK_N)
        k = tl.load(K + r[:, None] * skt + kvh * skh + d[None, :])
        v = tl.load(V + r[:, None] * skt + kvh * skh + d[None, :])
    s = tl.dot(q, tl.trans(k)) * scale_log2
    m = tl.max(s, 1)
    p = tl.exp2(s - m[:, None])
    return m, tl.sum(p, 1), tl.dot(p.to(v.dtype), v)


@triton.jit
def _masked_tile(
    q,
    K,
    V,
    BT,
    seq,
    sbt,
    kv0,
    j,
    max_pos,
    pos,
    valid,
    d,
    skt,
    skh,
    kvh,
    scale_log2,
    BLOCK_N: tl.constexpr,
    PAGED: tl.constexpr,
):
    """`_tile_state` of tile j with the causal mask, its K/V rows from the page table or packed."""
    n = j * BLOCK_N + tl.arange(0, BLOCK_N)
    if PAGED:
        rows = tl.load(BT + seq * sbt + j) * BLOCK_N + tl.arange(0, BLOCK_N)
    else:
        rows = kv0 + n
    return _tile_state(q, K, V, rows, n <= max_pos, n, pos, valid, d, skt, skh, kvh, scale_log2)


@triton.jit
def _store_state(WM, WL, WA, hrow, j, mt, lt, acct, valid, d, D: tl.constexpr):
    """Store tile j's state (fp32, exact) for `_combine`."""
    tl.store(WM + hrow + j, mt, mask=valid)
    tl.store(WL + hrow + j, lt, mask=valid)
    tl.store(WA + (hrow + j)[:, None] * D + d[None, :], acct, mask=valid[:, None])


@triton.jit
def _fold(m, l, acc, mt, lt, acct):
    """Merge the next tile's state into the running one (explicit fma: no contraction choices)."""
    m_new = tl.maximum(m, mt)
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    a = tl.exp2(m - m_safe)
    b = tl.exp2(mt - m_safe)
    l = tl.fma(l, a, lt * b)
    acc = tl.fma(
        acc, tl.broadcast_to(a[:, None], acc.shape), acct * tl.broadcast_to(b[:, None], acc.shape)
    )
    return m_new, l, acc


@triton.jit
def _attn(
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
    G: tl.constexpr,
    QT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
    PAGED: tl.constexpr,
    SPLIT: tl.constexpr,
    TMA: tl.constexpr,
    WHOLE: tl.constexpr,
    FUSED: tl.constexpr,
    FOLD_U: tl.constexpr,
):
    blk, kvh = tl.program_id(0), tl.program_id(1)
    seq, q0, nq = tl.load(BSEQ + blk), tl.load(BQ0 + blk), tl.load(BNQ + blk)
    r = tl.arange(0, QT * G)
    t, g = r // G, r % G
    valid = t < nq
    pos = tl.load(QPOS + q0 + t, mask=valid, other=0)
    d = tl.arange(0, D)
    q = tl.load(
        Q + (q0 + t)[:, None] * sqt + (kvh * G + g)[:, None] * sqh + d[None, :],
        mask=valid[:, None],
        other=0.0,
    )
    max_pos = tl.max(tl.where(valid, pos, 0), 0)
    kv0 = tl.load(KV0 + seq)
    last = max_pos // BLOCK_N
    # tiles [0, whole) lie at or before every valid row's position: seen whole by every row
    whole = tl.min(tl.where(valid, pos, max_pos), 0) // BLOCK_N
    if SPLIT:  # tiles [j0, j0 + TILES_PER_PROG): each tile's state stored for _combine
        j0 = tl.program_id(2) * TILES_PER_PROG
        j1 = tl.minimum(j0 + TILES_PER_PROG, last + 1)
        hrow = (q0 + t) * swt + (kvh * G + g) * swh
        if WHOLE:
            for j in range(j0, tl.minimum(j1, whole)):
                row0 = tl.load(BT + seq * sbt + j) * BLOCK_N if PAGED else kv0 + j * BLOCK_N
                mt, lt, acct = _full_tile(
                    q, K, V, KD, VD, row0, d, skt, skh, kvh, scale_log2, D, BLOCK_N, TMA
                )
                _store_state(WM, WL, WA, hrow, j, mt, lt, acct, valid, d, D)
        else:
            whole = 0
        for j in tl.range(tl.maximum(j0, whole), j1, num_stages=1 if WHOLE else None):
            mt, lt, acct = _masked_tile(
                q,
                K,
                V,
                BT,
                seq,
                sbt,
                kv0,
                j,
                max_pos,
                pos,
                valid,
                d,
                skt,
                skh,
                kvh,
                scale_log2,
                BLOCK_N,
                PAGED,
            )
            _store_state(WM, WL, WA, hrow, j, mt, lt, acct, valid, d, D)
        if FUSED:  # the last program of this (run, KV head) to finish folds the run's tile states
            # every thread's states are written before one thread's release (CUTLASS's split-K
            # semaphore pattern); the fold reads them from L2 (.cg), never a stale L1 line
            tl.debug_barrier()
            cnt = CNT + blk * tl.num_programs(1) + kvh
            if tl.atomic_add(cnt, 1, sem="acq_rel") == tl.num_programs(2) - 1:
                gg = tl.arange(0, G)
                for tt in range(0, nq):  # the run's tokens one by one: only real rows fold
                    base = (q0 + tt) * swt + (kvh * G + gg) * swh
                    n_tiles = tl.load(QPOS + q0 + tt) // BLOCK_N + 1
                    l, acc = _fold_states(WM, WL, WA, base, d, n_tiles, D, FOLD_U)
                    tl.store(
                        O + (q0 + tt) * sot + (kvh * G + gg)[:, None] * soh + d[None, :],
                        (acc / l[:, None]).to(O.dtype.element_ty),
                    )
                tl.atomic_xchg(cnt, 0)
    else:
        m = tl.full([QT * G], float("-inf"), tl.float32)
        l = tl.zeros([QT * G], tl.float32)
        acc = tl.zeros([QT * G, D], tl.float32)
        if WHOLE:
            for j in range(whole):
                row0 = tl.load(BT + seq * sbt + j) * BLOCK_N if PAGED else kv0 + j * BLOCK_N
                mt, lt, acct = _full_tile(
                    q, K, V, KD, VD, row0, d, skt, skh, kvh, scale_log2, D, BLOCK_N, TMA
                )
                m, l, acc = _fold(m, l, acc, mt, lt, acct)
        else:
            whole = 0
        # the masked tiles (prefill: the diagonal one) are few: no second prefetch buffer
        for j in tl.range(whole, last + 1, num_stages=1 if WHOLE else None):
            mt, lt, acct = _masked_tile(
                q,
                K,
                V,
                BT,
                seq,
                sbt,
                kv0,
                j,
                max_pos,
                pos,
                valid,
                d,
                skt,
                skh,
                kvh,
                scale_log2,
                BLOCK_N,
                PAGED,
            )
            m, l, acc = _fold(m, l, acc, mt, lt, acct)
        out = acc / l[:, None]
        tl.store(
            O + (q0 + t)[:, None] * sot + (kvh * G + g)[:, None] * soh + d[None, :],
            out.to(O.dtype.element_ty),
            mask=valid[:, None],
        )


@triton.jit
def _fold_states(WM, WL, WA, base, d, n_tiles, D: tl.constexpr, U: tl.constexpr):
    """Fold the stored tile states 0 .. n_tiles - 1 of rows `base` (channels d) in tile order with
    `_fold`: the training loop replayed. The loop body is unrolled U times, so the U tiles' loads
    are independent of the fold chain and issue ahead of it; a tile past the last loads as
    (-inf, 0, 0), which `_fold` leaves exact (a = 1, b = 0). Returns (sum, unnormalised output)."""
    m = tl.full(base.shape, float("-inf"), tl.float32)
    l = tl.zeros(base.shape, tl.float32)
    acc = tl.zeros([base.shape[0], d.shape[0]], tl.float32)
    for j0 in range(0, n_tiles, U):
        for k in tl.static_range(U):
            live = j0 + k < n_tiles
            idx = base + j0 + k
            mt = tl.load(WM + idx, mask=live, other=float("-inf"), cache_modifier=".cg")
            lt = tl.load(WL + idx, mask=live, other=0.0, cache_modifier=".cg")
            acct = tl.load(
                WA + idx[:, None] * D + d[None, :], mask=live, other=0.0, cache_modifier=".cg"
            )
            m, l, acc = _fold(m, l, acc, mt, lt, acct)
    return l, acc


@triton.jit
def _max2(a, b):
    return tl.maximum(a, b)


@triton.jit
def _fold_factors(WM, AB, base, fbase, sab, n_tiles, SB: tl.constexpr):
    """The factors `_fold` multiplies tile j's state by, for every tile at once: the running max
    after tile j is a prefix max (max is exact, so a scan gives the bits of the in-order loop), and
    from it a_j = exp2(m_{j-1} - m_j) and b_j = exp2(mt_j - m_j) with `_fold`'s own operations.
    Stored at AB[fbase + j] (a) and AB[sab + fbase + j] (b) for `_fold_chain`: left to it, only the
    fma chain itself is sequential. (H200 decode, same layout: within 2% of the plain loop, so the
    fold waits on its loads, not its chain: docs/performance.md.)"""
    carry = tl.full(base.shape, float("-inf"), tl.float32)
    for j0 in range(0, n_tiles, SB):
        jj = j0 + tl.arange(0, SB)
        live = jj[None, :] < n_tiles
        mt = tl.load(WM + base[:, None] + jj[None, :], mask=live, other=float("-inf"))
        # the max before tile j: over tiles < j (tile j0 - 1 is in carry already)
        prev = tl.load(
            WM + base[:, None] + jj[None, :] - 1, mask=live & (jj[None, :] > 0), other=float("-inf")
        )
        m_new = tl.maximum(tl.associative_scan(mt, 1, _max2), carry[:, None])
        m = tl.maximum(tl.associative_scan(prev, 1, _max2), carry[:, None])
        top = tl.max(mt, 1)
        # a select, not tl.maximum: Triton 3.6's thread-locality pass fails on a loop-carried
        # maximum of a reduction with fewer than 4 warps (the same value either way)
        carry = tl.where(top > carry, top, carry)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        idx = fbase[:, None] + jj[None, :]
        tl.store(AB + idx, tl.exp2(m - m_safe), mask=live)
        tl.store(AB + sab + idx, tl.exp2(mt - m_safe), mask=live)


@triton.jit
def _fold_chain(WL, WA, AB, base, fbase, sab, d, n_tiles, D: tl.constexpr, U: tl.constexpr):
    """`_fold` of tile states 0 .. n_tiles - 1 in tile order with the factors of `_fold_factors`:
    l = fma(l, a, lt * b), acc = fma(acc, a, acct * b), the same operations on the same values.
    U tiles' loads per step issue ahead of the chain; a tile past the last loads as a = 1, b = 0,
    lt = acct = 0, which leaves the state exact (as `_fold_states`'s padding does)."""
    l = tl.zeros(base.shape, tl.float32)
    acc = tl.zeros([base.shape[0], d.shape[0]], tl.float32)
    for j0 in range(0, n_tiles, U):
        for k in tl.static_range(U):
            j = j0 + k
            live = j < n_tiles
            a = tl.load(AB + fbase + j, mask=live, other=1.0)
            b = tl.load(AB + sab + fbase + j, mask=live, other=0.0)
            lt = tl.load(WL + base + j, mask=live, other=0.0)
            acct = tl.load(WA + (base + j)[:, None] * D + d[None, :], mask=live, other=0.0)
            l = tl.fma(l, a, lt * b)
            acc = tl.fma(
                acc,
                tl.broadcast_to(a[:, None], acc.shape),
                acct * tl.broadcast_to(b[:, None], acc.shape),
            )
    return l, acc


@triton.jit
def _combine(
    O,
    QPOS,
    WM,
    WL,
    WA,
    AB,
    sot,
    soh,
    swt,
    swh,
    sab,
    GH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
    DC: tl.constexpr,
    U: tl.constexpr,
    SB: tl.constexpr,
):
    """Fold one query token's stored tile states (GH heads, DC of the D channels) in tile order:
    `_fold`'s arithmetic in two phases (`_fold_factors`, then `_fold_chain`), the same bits as the
    loop. Heads and channels are independent in the fold: splitting them over programs changes no
    bits. Each program keeps its factors in its own rows of AB (no program waits for another)."""
    tok = tl.program_id(0)
    h = tl.program_id(1) * GH + tl.arange(0, GH)
    c = tl.program_id(2)
    d = c * DC + tl.arange(0, DC)
    n_tiles = tl.load(QPOS + tok) // BLOCK_N + 1
    base = tok * swt + h * swh
    # this program's factor rows: the state rows of its heads, one set per channel slice
    fbase = (tok * tl.num_programs(1) * GH + h) * (swh * tl.num_programs(2)) + c * swh
    _fold_factors(WM, AB, base, fbase, sab, n_tiles, SB)
    tl.debug_barrier()  # the factors every thread stored, before any thread reads them
    l, acc = _fold_chain(WL, WA, AB, base, fbase, sab, d, n_tiles, D, U)
    tl.store(
        O + tok * sot + h[:, None] * soh + d[None, :], (acc / l[:, None]).to(O.dtype.element_ty)
    )
