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
  states in parallel programs, stores them in fp32 (exact) and a second launch (or, in short
  contexts, the last program of each run to finish) folds them in the same order with `_fold`'s
  arithmetic: the same bits, with up to one program per tile. The fold first takes every tile's
  factors from a prefix max (max is exact, so a scan equals the loop), leaving only the fma chain
  in order. Where Triton has Gluon (its explicit-layout language), split-KV decode runs the Gluon
  kernels of decode_states.py: the same arithmetic on the same layouts, with K and V in flight
  together and the fold's tile states in shared memory; the one pass of training and prefill runs
  prefill.py's warp-specialised kernel (a loader warp, two 64-row warpgroups) where it applies:
  the same bits, 1.05-1.24x faster than `_attn` on an H200 (docs/performance.md), and for short
  runs its persistent form in prefill_items.py (one program per SM; PREFILL_ITEMS).
Training reads K/V from a packed buffer, prefill and decode from the paged cache: only the address
differs.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

import torch
import triton

from topl.kernels.gpu.attention_kernels import _attn, _combine
from topl.kernels.gpu.descriptors import gluon_desc, kv_desc, q_desc, tma_ok
from topl.kernels.gpu.device import arrival_counts, dummy, sm_count

try:  # Gluon, Triton's explicit-layout language: split-KV decode's kernels (decode_states.py),
    # written against Triton 3.6's (the version measured; Gluon is experimental and changes)
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 6):
        raise ImportError(f"Gluon kernels need Triton >= 3.6, not {triton.__version__}")
    from topl.kernels.gpu.decode_states import _decode_states, _fold_states
    from topl.kernels.gpu.prefill import _prefill
    from topl.kernels.gpu.prefill_items import _prefill_items

    # the separate fold: (channels, tiles per step) in Gluon, (heads, channels, tiles per load
    # step) in Triton (`_combine`)
    FOLD: tuple[int, ...] = (128, 8)
except ImportError:  # a Triton without triton.experimental.gluon's Hopper API: Triton only
    _decode_states = _fold_states = _prefill = _prefill_items = None
    FOLD = (1, 32, 32)
# prefill.py's warp-specialised one-pass kernel by default (`gluon=None`) where it applies: every row
# equal to `_attn`'s and faster at every shape measured on an H200 (docs/performance.md, issue 52,
# seventh round); `gluon=False` keeps `_attn`
PREFILL_GLUON = True
# ... and as prefill_items.py's persistent kernel for short runs (sequences of at most 1,024 queries
# on average): H200 B4 S1024 1.27 -> 1.13x SDPA default, B1 S1024 1.08 -> 0.91x (GPU time), the
# same bits as `_prefill` there; from 4,096 queries 4-9% slower than `_prefill`, which they keep
# (docs/performance.md, issue 52, eighth and ninth rounds; its parity test, tests/numerics/
# test_gpu.py -k warp_specialised, passed on the H200 in the ninth)
PREFILL_ITEMS = True

# (rows per program = queries x G, warps, pipeline stages) the engine and the benchmark may launch
# with; the parity test runs every one of them and checks every row.
CONFIGS = ((128, 8, 3), (128, 8, 2), (128, 4, 3), (64, 4, 3), (64, 4, 2), (64, 8, 2))
NUM_STAGES = int(os.environ.get("TOPL_ATTN_STAGES", "3"))  # K/V prefetch depth (numerics: none)
INF = float("inf")


def blocks_for(  # q_seq: a tensor or a list of sequence ids
    q_seq: Any, q_tokens: int = 16
) -> tuple[list[int], list[int], list[int]]:
    """Program descriptors (seq, first row, rows): runs of up to q_tokens consecutive queries of the
    same sequence, the runs with the most keys first (a causal run's keys grow with its position:
    launching the long ones first leaves short ones for the tail; B1 S8192 prefill 1.32 -> 1.25 ms
    on an H200). The order is the launch order only: no program's bits depend on it."""
    q_seq = q_seq.tolist() if torch.is_tensor(q_seq) else q_seq
    if q_seq and q_seq.count(q_seq[0]) == len(q_seq):  # one sequence (the engines' training call)
        firsts = range(0, len(q_seq), q_tokens)[::-1]
        return (
            [q_seq[0]] * len(firsts),
            list(firsts),
            [min(q_tokens, len(q_seq) - a) for a in firsts],
        )
    # (last position in its sequence, seq, first row, rows)
    runs: list[tuple[int, int, int, int]] = []
    i = 0
    for s, run in itertools.groupby(q_seq):
        n = len(list(run))
        runs += [
            (min(a + q_tokens, n), s, i + a, min(q_tokens, n - a)) for a in range(0, n, q_tokens)
        ]
        i += n
    runs.sort(key=lambda r: -r[0])  # stable: equal lengths keep their order
    return [r[1] for r in runs], [r[2] for r in runs], [r[3] for r in runs]


def launch_config(
    group: int, q_tokens: int | None = None, warps: int | None = None, stages: int | None = None
) -> tuple[int, int, int]:
    """(queries per program, warps, stages); by default 128 rows per program and 8 warps."""
    qt = q_tokens or max(1, 128 // group)
    return qt, warps or min(8, max(4, 4 * qt * group // 64)), stages or NUM_STAGES


_CNT: dict[int, torch.Tensor] = {}  # fused split-KV arrival counts per device, zero between calls
_ITEMS: dict[int, torch.Tensor] = {}  # prefill_items.py's work counter (and its finish count)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_seq: torch.Tensor | list[int],
    q_pos: torch.Tensor | list[int],
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
    descriptors: tuple[list[int], list[int], list[int]] | None = None,
    check: bool = True,
    tma: bool | None = None,
    whole: bool = True,
    combine: tuple[int, ...] | None = None,
    graph: bool = False,
    fused: bool | None = None,
    gluon: bool | None = None,
    persistent: bool | None = None,
) -> torch.Tensor:
    """q [Tq, H, D] (queries of a sequence contiguous; q_seq[i] its sequence, q_pos[i] its position);
    k, v either packed [Tk, KVH, D] with `kv_start` [S] (training) or paged [pages, tile, KVH, D]
    with `block_table` [S, max_pages] (prefill, decode).

    split: None picks split-KV when few programs would walk the tiles (small decode batches); the
    result has the same bits either way, and so do `tma` (None: on Hopper, K/V tiles seen whole by
    every row load through the tensor-memory engine in big calls and in calls captured into a CUDA
    graph, `graph=True`), `whole` (False: every tile takes the masked path, the kernel before
    whole tiles were split off), `fused` (split-KV: the last program of a run folds its tile
    states, instead of a second launch), `combine` (the separate fold: (channels, tiles per step)
    runs Gluon's `_fold_states`, (heads, channels, tiles per load step) Triton's `_combine`),
    `gluon` (split-KV tile states through the tensor-memory engine in Gluon's `_decode_states`, and
    the one pass at 128 rows in prefill.py's warp-specialised `_prefill`; None: the tile states
    where Gluon is available, `_prefill` where PREFILL_GLUON; it needs `tma`), `persistent` (that
    one pass as prefill_items.py's one program per SM; None: for short runs where PREFILL_ITEMS) and
    `tiles_per_prog` / `stages`. `check=False` allows launch settings outside CONFIGS (to show that
    they change the bits)."""
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

    def as_t(x: Any) -> torch.Tensor:  # no copy when x is already an int32 tensor on the device
        return torch.as_tensor(x, dtype=torch.int32, device=dev)

    bseq, bq0, bnq = (as_t(x) for x in (descriptors or blocks_for(q_seq, qt)))
    pos = as_t(q_pos)
    o = torch.empty_like(q)
    bt = as_t(block_table) if block_table is not None else dummy(dev).view(1, 1)
    k0 = as_t(kv_start) if kv_start is not None else dummy(dev)
    n_blk = len(bseq)
    if split is None:  # few programs for the SMs, and tile states that fit in 256 MiB
        split = n_blk * kvh < sm_count(dev)
        if split:
            max_pos = int(pos.max()) if max_pos is None else max_pos
            split = tq * h * (max_pos // tile + 1) * dim * 4 <= 1 << 28
    if tma is None:
        # over 128 rows the Q tile leaves no room for the tensor-memory buffers; the descriptors
        # cost ~70 us of launch on the host, so eager small calls (launch-bound) keep pointer loads,
        # while a call captured into a CUDA graph (`graph=True`: how decode engines run) pays that
        # once (asking torch whether the stream is capturing costs ~22 us a call on the H200 host)
        big = graph or (
            tq >= 2048
            if max_pos is None
            else n_blk * kvh * (max_pos // tile + 1) >= 32 * sm_count(dev)
        )
        tma = (
            big and qt * group <= 128 and tma_ok(dev) and kf.is_contiguous() and vf.is_contiguous()
        )
    scale = (1.0 / math.sqrt(dim)) * 1.4426950408889634
    kw = {"G": group, "QT": qt, "BLOCK_N": tile, "D": dim}
    cnt = None
    if not split:
        wm = wl = wa = o
        grid: tuple[int, ...] = (n_blk, kvh)
        tpp = 0
    else:
        tiles = (int(pos.max()) if max_pos is None else max_pos) // tile + 1
        # about two programs per SM (H200 decode: fewer, longer programs beat one tile each)
        tpp = tiles_per_prog or -(-n_blk * kvh * tiles // (2 * sm_count(dev)))
        wm = torch.empty(tq, h, tiles, device=dev, dtype=torch.float32)
        wl = torch.empty_like(wm)
        wa = torch.empty(tq, h, tiles, dim, device=dev, dtype=torch.float32)
        grid = (n_blk, kvh, triton.cdiv(tiles, tpp))
        # fused: the last program of a (run, KV head) folds, no second launch: faster where the
        # fold is short (H200 decode ctx1024, 8 tiles: B1 / B4 / B16 8 / 9 / 14 us against 9 / 10
        # / 16 for the separate fold), slower from 32 tiles (B1 ctx4096 11 vs 9 us, ctx16384 30
        # vs 19; docs/performance.md). Explicit `combine` layouts are the separate fold's.
        # Gluon's fold in a second launch is as fast or faster (H200 B1 / B4 ctx1024: 7.6 / 8.2 us
        # against 8.3 / 8.9 fused; B16: 15.6 vs 14.7): by default the fused fold only without it
        if fused if fused is not None else (combine is None and tiles <= 8 and len(FOLD) == 3):
            cnt = arrival_counts(_CNT, dev, n_blk * kvh, 1 << 14)
        # tensor-memory loads of a few tiles per program need no prefetch buffer (H200: B4 ctx4096
        # tile states 17.8 -> 12.9 us), long fused runs do (B4 ctx16384 99.5 -> 89.0 us); pointer
        # loads keep 2 (3 overflow shared memory)
        ns = min(stages, 2) if stages else (2 if not tma or (cnt is not None and tpp >= 8) else 1)
    # `_prefill` is `_attn`'s one pass at 128 rows as two 64-row warpgroups of the MMA layout of
    # `_decode_states`, on 128 x 128 tiles (one instruction shape for both products)
    ws = (PREFILL_GLUON if gluon is None else gluon) and _prefill is not None and not split
    ws = ws and tma and whole and q.dtype == torch.bfloat16 and qt * group == 128
    ws = ws and 64 % group == 0 and tile == dim == 128 and kf.is_contiguous() and vf.is_contiguous()
    if gluon is None:
        gluon = _decode_states is not None
    # the Gluon kernel is `_attn`'s split path at 64 rows x 4 warps on bf16 (its MMA layout)
    gluon = gluon and split and tma and paged and cnt is None and whole
    gluon = gluon and qt * group == 64 and nw == 4 and q.dtype == torch.bfloat16
    items = None  # prefill_items.py's Q descriptor where it runs (PREFILL_ITEMS)
    short = tq <= 1024 * (bt.shape[0] if paged else k0.numel())
    if persistent is None:
        persistent = PREFILL_ITEMS and short
    if ws and _prefill_items is not None and persistent:
        icnt = arrival_counts(_ITEMS, dev, 2, 2)  # None while capturing before a first call
        items = q_desc(q, qt, group) if icnt is not None else None
    if gluon or ws:
        kd, vd = (gluon_desc(x, tile) for x in (kf, vf))
    else:
        kd, vd = (kv_desc(x, tile) for x in (kf, vf)) if tma else (kf, vf)
    args = (
        q,
        kf,
        vf,
        kd,
        vd,
        o,
        pos,
        bseq,
        bq0,
        bnq,
        k0,
        bt,
        wm,
        wl,
        wa,
        cnt if cnt is not None else o,
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
    )
    if gluon:
        _decode_states[grid](*args, num_warps=4, enable_fp_fusion=False, **kw)
    elif ws and items is not None:  # prefill_items.py: one program per SM (as `_prefill` below)
        n_items = n_blk * kvh
        _prefill_items[(min(n_items, sm_count(dev)),)](
            items, kd, vd, o, pos, bseq, bq0, bnq, k0, bt, icnt, o.stride(0), o.stride(1),
            bt.stride(0), scale, n_items, k0.numel(), kf.shape[0], kvh,
            PAGED=paged, num_warps=4, maxnreg=168, enable_fp_fusion=False, **kw,
        )  # fmt: skip
    elif ws:  # 4 + 4 + 1 warps in three warpgroups; 168 registers a thread at launch (the whole
        # file), then 240 for each 64-row warpgroup and 24 for the loader (prefill.py). Only the
        # arguments it reads: each costs host time at every launch
        _prefill[grid](
            q, kd, vd, o, pos, bseq, bq0, bnq, k0, bt, q.stride(0), q.stride(1),
            o.stride(0), o.stride(1), bt.stride(0), scale,
            PAGED=paged, num_warps=4, maxnreg=168, enable_fp_fusion=False, **kw,
        )  # fmt: skip
    else:
        _attn[grid](
            *args,
            PAGED=paged,
            SPLIT=split,
            TMA=tma,
            WHOLE=whole,
            FUSED=cnt is not None,
            # the fused fold's unroll (a constant of the kernel: one value where no fold runs in it,
            # so the JIT compiles no copies that differ only there)
            FOLD_U=(combine[-1] if combine else (32 if tiles >= 32 else 8))
            if cnt is not None
            else 8,
            num_warps=nw,
            num_stages=ns,
            enable_fp_fusion=False,  # the masked and whole-tile paths must round alike (_full_tile)
            **kw,
        )
    if split and cnt is None and len(fold := combine or FOLD) == 2:
        dc, u = fold  # Gluon's fold: DC channels of one head per program (one warp per 32)
        _fold_states[(tq, h, dim // dc)](
            o,
            pos,
            wm,
            wl,
            wa,
            o.stride(0),
            o.stride(1),
            wm.stride(0),
            wm.stride(1),
            BLOCK_N=tile,
            D=dim,
            DC=dc,
            CH=128,
            U=u,
            num_warps=dc // 32,
        )
    elif split and cnt is None:
        # one warp per 32 channels of one head (H200 decode B1 ctx16384, 4-warp programs of 128
        # channels: 37.9 -> 20.5 us), the fold's factors before its chain (`_combine`), 32 tiles'
        # loads per step (20.2 us, 16: 21.1); no layout changes a bit
        gh, dc, u = fold
        nc = dim // dc
        ab = torch.empty(2, tq * h * nc * tiles, device=dev, dtype=torch.float32)
        _combine[(tq, h // gh, nc)](
            o,
            pos,
            wm,
            wl,
            wa,
            ab,
            o.stride(0),
            o.stride(1),
            wm.stride(0),
            wm.stride(1),
            ab.stride(0),
            GH=gh,
            BLOCK_N=tile,
            D=dim,
            DC=dc,
            U=u,
            SB=128,
            num_warps=min(4, max(1, gh * dc // 32)),
        )
    return o


def paged_step(
    q: torch.Tensor,
    cache_k: torch.Tensor,
    cache_v: torch.Tensor,
    tables: list[list[int]],
    spans: list[tuple[int, int]],
    pos: list[int],
    tile: int,
    graph: bool = False,
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
        graph=graph,
    )
