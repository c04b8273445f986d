"""One Triton attention kernel for training (causal varlen), prefill and paged decode.

A program owns Q_TOKENS consecutive queries of one sequence times the G query heads that share a
KV head (rows = token x head), walks the KV tiles 0, 1, 2, ... of BLOCK_N keys in order with the
online-softmax update, and masks keys past each row's position to -inf. Training reads K/V from a
packed buffer, prefill and decode from a paged cache whose page is the tile: only the address
differs, so a token's output has the same bits on all three paths.
"""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

Q_TOKENS = 16  # queries per program on every path (rows = Q_TOKENS x G)
NUM_STAGES = int(os.environ.get("TOPL_ATTN_STAGES", "3"))  # K/V tile prefetch depth (no effect on numerics)


@triton.jit
def _attn(Q, K, V, O, QPOS, BSEQ, BQ0, BNQ, KV0, BT,
          sqt, sqh, skt, skh, sot, soh, sbt, scale_log2,
          G: tl.constexpr, QT: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, PAGED: tl.constexpr):
    blk, kvh = tl.program_id(0), tl.program_id(1)
    seq, q0, nq = tl.load(BSEQ + blk), tl.load(BQ0 + blk), tl.load(BNQ + blk)
    r = tl.arange(0, QT * G)
    t, g = r // G, r % G
    valid = t < nq
    pos = tl.load(QPOS + q0 + t, mask=valid, other=0)
    d = tl.arange(0, D)
    q = tl.load(Q + (q0 + t)[:, None] * sqt + (kvh * G + g)[:, None] * sqh + d[None, :], mask=valid[:, None], other=0.0)
    m = tl.full([QT * G], float("-inf"), tl.float32)
    l = tl.zeros([QT * G], tl.float32)
    acc = tl.zeros([QT * G, D], tl.float32)
    max_pos = tl.max(tl.where(valid, pos, 0), 0)
    kv0 = tl.load(KV0 + seq)
    nb = tl.arange(0, BLOCK_N)
    for j in range(0, max_pos // BLOCK_N + 1):
        n = j * BLOCK_N + nb
        if PAGED:
            rows = tl.load(BT + seq * sbt + j) * BLOCK_N + nb
        else:
            rows = kv0 + n
        kmask = n <= max_pos
        k = tl.load(K + rows[:, None] * skt + kvh * skh + d[None, :], mask=kmask[:, None], other=0.0)
        v = tl.load(V + rows[:, None] * skt + kvh * skh + d[None, :], mask=kmask[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale_log2
        s = tl.where((n[None, :] <= pos[:, None]) & valid[:, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / l[:, None]
    tl.store(O + (q0 + t)[:, None] * sot + (kvh * G + g)[:, None] * soh + d[None, :], out.to(O.dtype.element_ty),
             mask=valid[:, None])


def blocks_for(q_seq: list[int], q_tokens: int = Q_TOKENS):
    """Program descriptors: runs of up to q_tokens consecutive queries of the same sequence."""
    bseq, bq0, bnq = [], [], []
    i = 0
    while i < len(q_seq):
        j = i
        while j < len(q_seq) and q_seq[j] == q_seq[i] and j - i < q_tokens:
            j += 1
        bseq.append(q_seq[i]), bq0.append(i), bnq.append(j - i)
        i = j
    return bseq, bq0, bnq


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_seq: list[int], q_pos: torch.Tensor, *,
              kv_start: torch.Tensor | None = None, block_table: torch.Tensor | None = None, tile: int = 128,
              q_tokens: int = Q_TOKENS, descriptors=None) -> torch.Tensor:
    """q [Tq, H, D] (queries of a sequence contiguous); k, v either packed [Tk, KVH, D] with
    `kv_start` [S] (training) or paged [blocks, tile, KVH, D] with `block_table` [S, max_blocks]."""
    tq, h, dim = q.shape
    kvh = k.shape[-2]
    paged = block_table is not None
    kf, vf = (k.reshape(-1, kvh, dim), v.reshape(-1, kvh, dim)) if paged else (k, v)
    dev = q.device
    as_t = lambda x: torch.as_tensor(x, dtype=torch.int32, device=dev)  # noqa: E731  (no copy if already so)
    bseq, bq0, bnq = (as_t(x) for x in (descriptors or blocks_for(q_seq, q_tokens)))
    o = torch.empty_like(q)
    bt = block_table if paged else torch.zeros(1, 1, dtype=torch.int32, device=dev)
    k0 = kv_start if kv_start is not None else torch.zeros(1, dtype=torch.int32, device=dev)
    _attn[(len(bseq), kvh)](q, kf, vf, o, as_t(q_pos), bseq, bq0, bnq, as_t(k0), as_t(bt),
                            q.stride(0), q.stride(1), kf.stride(0), kf.stride(1), o.stride(0), o.stride(1),
                            bt.stride(0), (1.0 / math.sqrt(dim)) * 1.4426950408889634,
                            G=h // kvh, QT=q_tokens, BLOCK_N=tile, D=dim, PAGED=paged,
                            num_warps=8 if q_tokens * h // kvh >= 128 else 4, num_stages=NUM_STAGES)
    return o
