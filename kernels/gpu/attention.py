"""One Triton attention kernel family for training (causal varlen), prefill and paged decode.

Numerics, the same on every path and at every launch setting in CONFIGS:
- a program owns up to QT consecutive queries of one sequence x the G query heads that share a
  KV head (rows = token x head). With ROWS = QT * G >= 64 the dot products run as Hopper
  warpgroup MMAs (64-row wgmma) and a row's bits do not depend on QT, warps or stages (measured
  on an H200: docs/performance.md); fewer rows (QT = 2 with G = 8: 16 rows) take another MMA and
  change ~2% of rows, so they are refused (`tests/test_gpu.py` checks every row across CONFIGS).
- keys are cut into tiles of BLOCK_N = Alignment.kv_tile (= the KV cache page); every tile is a
  split: its own (max, sum, P @ V) from scratch (`_tile_state`), and a row's tile states are folded
  in tile order 0, 1, 2, ... by `_fold`: the reference plan of kernels/attention.py (per-range
  partials merged in order). So the split points are fixed by the context length (one per tile).
- training and prefill fold in registers while walking the tiles; split-KV decode computes tile
  states in parallel programs, stores them in fp32 (exact) and `_combine` folds them in the same
  order with the same `_fold`: the same bits, with up to one program per tile.
Training reads K/V from a packed buffer, prefill and decode from the paged cache: only the address
differs.
"""

from __future__ import annotations

import itertools
import math
import os

import torch
import triton
import triton.language as tl

# (rows per program = queries x G, warps, pipeline stages) the engine and the benchmark may launch
# with; the parity test runs every one of them and checks every row.
CONFIGS = ((128, 8, 3), (128, 8, 2), (128, 4, 3), (64, 4, 3), (64, 4, 2), (64, 8, 2))
NUM_STAGES = int(os.environ.get("TOPL_ATTN_STAGES", "3"))  # K/V prefetch depth (numerics: none)
INF = float("inf")


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
    nb = tl.arange(0, BLOCK_N)
    last = max_pos // BLOCK_N
    if SPLIT:  # tiles [j0, j0 + TILES_PER_PROG): each tile's state stored for _combine
        j0 = tl.program_id(2) * TILES_PER_PROG
        hrow = (q0 + t) * swt + (kvh * G + g) * swh
        for j in range(j0, tl.minimum(j0 + TILES_PER_PROG, last + 1)):
            n = j * BLOCK_N + nb
            if PAGED:
                rows = tl.load(BT + seq * sbt + j) * BLOCK_N + nb
            else:
                rows = kv0 + n
            mt, lt, acct = _tile_state(
                q, K, V, rows, n <= max_pos, n, pos, valid, d, skt, skh, kvh, scale_log2
            )
            tl.store(WM + hrow + j, mt, mask=valid)
            tl.store(WL + hrow + j, lt, mask=valid)
            tl.store(WA + (hrow + j)[:, None] * D + d[None, :], acct, mask=valid[:, None])
    else:
        m = tl.full([QT * G], float("-inf"), tl.float32)
        l = tl.zeros([QT * G], tl.float32)
        acc = tl.zeros([QT * G, D], tl.float32)
        for j in range(last + 1):
            n = j * BLOCK_N + nb
            if PAGED:
                rows = tl.load(BT + seq * sbt + j) * BLOCK_N + nb
            else:
                rows = kv0 + n
            mt, lt, acct = _tile_state(
                q, K, V, rows, n <= max_pos, n, pos, valid, d, skt, skh, kvh, scale_log2
            )
            m, l, acc = _fold(m, l, acc, mt, lt, acct)
        out = acc / l[:, None]
        tl.store(
            O + (q0 + t)[:, None] * sot + (kvh * G + g)[:, None] * soh + d[None, :],
            out.to(O.dtype.element_ty),
            mask=valid[:, None],
        )


@triton.jit
def _combine(
    O,
    QPOS,
    WM,
    WL,
    WA,
    sot,
    soh,
    swt,
    swh,
    G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D: tl.constexpr,
    DC: tl.constexpr,
    U: tl.constexpr,
):
    """Fold one query token's stored tile states (G heads, DC of the D channels) in tile order,
    with `_fold`: the training loop replayed. U tiles are loaded at once (independent loads
    overlap), then folded one by one; picking tile u out of the U loaded is exact (a max, or a sum
    with zeros). Channels are independent in the fold: splitting them changes no bits."""
    tok, kvh = tl.program_id(0), tl.program_id(1)
    g = tl.arange(0, G)
    u = tl.arange(0, U)
    d = tl.program_id(2) * DC + tl.arange(0, DC)
    n_tiles = tl.load(QPOS + tok) // BLOCK_N + 1
    base = tok * swt + (kvh * G + g) * swh  # [G]
    m = tl.full([G], float("-inf"), tl.float32)
    l = tl.zeros([G], tl.float32)
    acc = tl.zeros([G, DC], tl.float32)
    for j0 in range(0, n_tiles, U):
        live = (j0 + u < n_tiles)[None, :]  # [1, U]
        idx = base[:, None] + j0 + u[None, :]  # [G, U]
        ms = tl.load(WM + idx, mask=live, other=float("-inf"))
        ls = tl.load(WL + idx, mask=live, other=0.0)
        accs = tl.load(
            WA + idx[:, :, None] * D + d[None, None, :], mask=live[:, :, None], other=0.0
        )
        for k in tl.static_range(U):
            pick = (u == k)[None, :]
            mt = tl.max(tl.where(pick, ms, float("-inf")), 1)
            lt = tl.sum(tl.where(pick, ls, 0.0), 1)
            acct = tl.sum(tl.where(pick[:, :, None], accs, 0.0), 1)
            m, l, acc = _fold(m, l, acc, mt, lt, acct)
    out = acc / l[:, None]
    tl.store(O + tok * sot + (kvh * G + g)[:, None] * soh + d[None, :], out.to(O.dtype.element_ty))


def blocks_for(q_seq, q_tokens: int = 16):
    """Program descriptors (seq, first row, rows): runs of up to q_tokens consecutive queries of the
    same sequence."""
    q_seq = q_seq.tolist() if torch.is_tensor(q_seq) else q_seq
    if q_seq and q_seq.count(q_seq[0]) == len(q_seq):  # one sequence (the engines' training call)
        firsts = range(0, len(q_seq), q_tokens)
        return (
            [q_seq[0]] * len(firsts),
            list(firsts),
            [min(q_tokens, len(q_seq) - a) for a in firsts],
        )
    bseq, bq0, bnq = [], [], []
    i = 0
    for s, run in itertools.groupby(q_seq):
        n = len(list(run))
        for a in range(0, n, q_tokens):
            bseq.append(s), bq0.append(i + a), bnq.append(min(q_tokens, n - a))
        i += n
    return bseq, bq0, bnq


def launch_config(
    group: int, q_tokens: int | None = None, warps: int | None = None, stages: int | None = None
) -> tuple[int, int, int]:
    """(queries per program, warps, stages); by default 128 rows per program and 8 warps."""
    qt = q_tokens or max(1, 128 // group)
    return qt, warps or min(8, max(4, 4 * qt * group // 64)), stages or NUM_STAGES


def _sms(dev) -> int:
    return torch.cuda.get_device_properties(dev).multi_processor_count


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_seq,
    q_pos: torch.Tensor,
    *,
    kv_start: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    tile: int = 128,
    q_tokens: int | None = None,
    warps: int | None = None,
    stages: int | None = None,
    split: bool | None = None,
    max_pos: int | None = None,
    tiles_per_prog: int | None = None,
    descriptors=None,
    check: bool = True,
) -> torch.Tensor:
    """q [Tq, H, D] (queries of a sequence contiguous; q_seq[i] its sequence, q_pos[i] its position);
    k, v either packed [Tk, KVH, D] with `kv_start` [S] (training) or paged [pages, tile, KVH, D]
    with `block_table` [S, max_pages] (prefill, decode).

    split: None picks split-KV when few programs would walk the tiles (small decode batches); the
    result has the same bits either way. `check=False` allows launch settings outside CONFIGS (to
    show that they change the bits)."""
    tq, h, dim = q.shape
    kvh = k.shape[-2]
    group = h // kvh
    qt, nw, ns = launch_config(group, q_tokens, warps, stages)
    if check and qt * group < 64:
        raise ValueError(
            f"launch setting q_tokens={qt} (x G={group} heads = {qt * group} rows per "
            "program) changes the bits: use at least 64 rows per program"
        )
    paged = block_table is not None
    kf, vf = (k.reshape(-1, kvh, dim), v.reshape(-1, kvh, dim)) if paged else (k, v)
    dev = q.device

    def as_t(x):  # no copy when x is already an int32 tensor on the device
        return torch.as_tensor(x, dtype=torch.int32, device=dev)

    bseq, bq0, bnq = (as_t(x) for x in (descriptors or blocks_for(q_seq, qt)))
    pos = as_t(q_pos)
    o = torch.empty_like(q)
    bt = block_table if paged else torch.zeros(1, 1, dtype=torch.int32, device=dev)
    k0 = kv_start if kv_start is not None else torch.zeros(1, dtype=torch.int32, device=dev)
    n_blk = len(bseq)
    if split is None:  # few programs for the SMs, and tile states that fit in 256 MiB
        split = n_blk * kvh < _sms(dev)
        if split:
            max_pos = int(pos.max()) if max_pos is None else max_pos
            split = tq * h * (max_pos // tile + 1) * dim * 4 <= 1 << 28
    if split:  # per-tile programs gain nothing from deep prefetch; 3 stages overflow shared memory
        ns = min(ns, 2)
    scale = (1.0 / math.sqrt(dim)) * 1.4426950408889634
    kw = {"G": group, "QT": qt, "BLOCK_N": tile, "D": dim}
    if not split:
        wm = wl = wa = o
        grid, tpp = (n_blk, kvh), 0
    else:
        tiles = (int(pos.max()) if max_pos is None else max_pos) // tile + 1
        tpp = tiles_per_prog or max(1, n_blk * kvh * tiles // (4 * _sms(dev)))
        wm = torch.empty(tq, h, tiles, device=dev, dtype=torch.float32)
        wl = torch.empty_like(wm)
        wa = torch.empty(tq, h, tiles, dim, device=dev, dtype=torch.float32)
        grid = (n_blk, kvh, triton.cdiv(tiles, tpp))
    _attn[grid](
        q,
        kf,
        vf,
        o,
        pos,
        bseq,
        bq0,
        bnq,
        as_t(k0),
        as_t(bt),
        wm,
        wl,
        wa,
        q.stride(0),
        q.stride(1),
        kf.stride(0),
        kf.stride(1),
        o.stride(0),
        o.stride(1),
        bt.stride(0),
        wm.stride(0),
        wm.stride(1),
        scale,
        tpp,
        PAGED=paged,
        SPLIT=split,
        num_warps=nw,
        num_stages=ns,
        **kw,
    )
    if split:
        # one program per (token, KV head), all channels, 8 tiles per load (faster on an H200 than
        # 32-channel programs x 16 tiles); neither choice changes a bit
        _combine[(tq, kvh, 1)](
            o,
            pos,
            wm,
            wl,
            wa,
            o.stride(0),
            o.stride(1),
            wm.stride(0),
            wm.stride(1),
            G=group,
            BLOCK_N=tile,
            D=dim,
            DC=dim,
            U=8,
            num_warps=4,
        )
    return o


def paged_step(
    q, cache_k, cache_v, tables: list[list[int]], spans, pos: list[int], tile: int
) -> torch.Tensor:
    """A continuous-batching step in one call: item i owns rows spans[i] of q (a prefill chunk or
    one decode row) at positions pos[a:b], and pages tables[i] of the cache [pages, tile, KVH, D]."""
    q_seq = [i for i, (a, b) in enumerate(spans) for _ in range(b - a)]
    width = max(len(t) for t in tables)
    bt = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    decode = all(b - a == 1 for a, b in spans)  # 64-row programs: less padding, same bits
    group = q.shape[1] // cache_k.shape[-2]
    return attention(
        q.contiguous(),
        cache_k,
        cache_v,
        q_seq,
        pos,
        block_table=bt.to(q.device),
        tile=tile,
        q_tokens=max(1, 64 // group) if decode else None,
        max_pos=max(pos),
    )
