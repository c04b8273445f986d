"""Tile plans of the batch-invariant matmul (kernels/gpu/ops.py) by M: which tile, loads, stages
and K split run where. No plan changes an element's additions (ops.py says why), so the plan may
follow M and the GPU for speed; `chunks` below is the number of K_CHUNK chunks of K.
"""

from __future__ import annotations

import os

import triton

# Tile plan of the pointer kernel: fixed for every M (a row's K loop and MMA never change).
# TOPL_MM_CONFIG="BM,BN,BK,warps,stages" overrides it for exploration (scripts/bench_gpu.py).
MM_CONFIG = tuple(int(v) for v in os.environ.get("TOPL_MM_CONFIG", "128,128,64,8,3").split(","))

# The plan by M: (max M, kernel, (BM, BN, BK, warps, stages)). Within a chunk an element is the
# same chain of 16-deep warpgroup MMAs (wgmma) over K in order into one fp32 accumulator, whatever
# the tile and whether TMA or pointer loads feed it: BM >= 64 keeps the wgmma, and the tile, warps,
# stages and chunks per program change which elements and chunks a program owns, not an element's
# additions (measured on an H200; tests/test_gpu.py checks every plan against every other, bit for
# bit). So the plan may follow M for speed. Below M = 2048 the TMA launch (host-built descriptors,
# ~60 us) costs more than it saves, except under CUDA-graph capture (`graph=True`).
SMALL_M = 256
PLANS = (
    (SMALL_M, "ptr", (64, 64, 128, 4, 3)),  # BN and chunks per program by the grid below
    (2048, "ptr", (128, 128, 64, 8, 3)),
    (1 << 62, "tma", (128, 256, 64, 8, 3)),
)
# Up to M = 256 the projections are bound by reading W, and the grid decides the speed
# (`small_plan`). Like every plan, no BN, split or stage count changes an element's additions.
SMALL_BN, SMALL_GRID, SPLIT_GRID = (64, 32), 0.55, 0.9
# The transposed tile (`swap`: y.T = w @ x.T, W's rows on the MMA's 64-row side, the tokens on its
# narrow side, 16 or more) instead of 64-row token tiles that are mostly padding: up to SWAP_M
# pointer-fed, and up to SMALL_M under CUDA-graph capture TMA-fed (host-built descriptors). The
# same wgmma chain per element, so the same bits (H200: every plan of the sweep equal to the
# M = 1000 TMA plan's rows). H200, qkv_proj: M = 16 8.0 -> 5.4 us, M = 128 11.3 -> 8.1 us.
SWAP_M = 16
TMA_PLANS = (
    (2048, (128, 128, 64, 8, 4)),
    (1 << 62, (128, 256, 64, 8, 3)),
)  # explored: bench_gpu.py


def small_plan(m: int, n: int, chunks: int, sms: int) -> tuple[int, int]:
    """(BN, K chunks per program) up to SMALL_M (BM = 64, BK = 128, 3 stages): the widest BN of
    SMALL_BN with SMALL_GRID x SMs tiles; where even the narrowest leaves too few tiles and the K
    chunks make up a grid (o_proj, K = 4096: 32 tiles x 4 chunks), a program per chunk at the
    widest BN with SPLIT_GRID x SMs programs. H200: the split pays there (o_proj M = 1: 9.7 ->
    8.0 us) and costs elsewhere (qkv_proj M = 16: 7.9 -> 9.6 us), so it is kept to that case."""
    tiles_m = triton.cdiv(m, 64)
    bn = next((b for b in SMALL_BN if tiles_m * triton.cdiv(n, b) >= SMALL_GRID * sms), None)
    if bn is not None or tiles_m * triton.cdiv(n, SMALL_BN[-1]) * chunks < sms:
        return bn or SMALL_BN[-1], 0
    grid = SPLIT_GRID * sms
    return next((b for b in SMALL_BN if tiles_m * triton.cdiv(n, b) * chunks >= grid), 32), 1


def swap_plan(m: int, n: int, chunks: int, sms: int) -> tuple[tuple[int, int, int, int, int], int]:
    """((BT, BW, BK, warps, stages), K chunks per program) of the transposed tile: 64 rows of W
    against BT tokens. Up to SWAP_M: BT = 16, BK = 256, 3 stages, split over K chunks where few W
    tiles leave SMs idle and the chunks fill them (o_proj: 32 tiles x 4 chunks). Above: BT = 64, or
    128 (half the X reads) above M = 64 where the W tiles alone make SMALL_GRID x SMs programs; BK
    128 while the programs fit one per SM, else 64 (two fit: qkv_proj M = 256 16.7 -> 13.0 us)."""
    tiles = triton.cdiv(n, 64)
    if m <= SWAP_M:
        split = tiles < SMALL_GRID * sms and tiles * chunks >= SPLIT_GRID * sms
        return (16, 64, 256, 4, 3), int(split)
    bt = 128 if m > 64 and tiles >= SMALL_GRID * sms else 64
    return (bt, 64, 128 if triton.cdiv(m, bt) * tiles <= sms else 64, 4, 4), 0
