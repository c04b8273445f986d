"""Tiled causal attention with an explicit KV tile plan and online-softmax merge.

Both engines call `attend` for the query rows of *one* sequence against that sequence's keys;
the training engine per packed sequence (varlen), the rollout engine through `attend_paged`, one
call per layer and step for the whole continuous batch (its keys read from cache pages). When a
switch is off, the plan differs:

- tiles:   "left"  tiles start at multiples of the KV tile (training FA / FA3 num_splits=1);
           "split" native split-KV decode: the tiles are grouped into `splits` even splits, each
           reduced on its own, its normalised output stored in the model dtype and combined at the
           end (flash-decoding / paged-attention v2); the batch picks `splits`.
- visible: only keys <= the query position enter the reduction, or (False) softmax over the
           whole padded tile, then the mask (the max shift includes keys the query cannot see).
- merge:   "online" running (max, sum, out) updated tile after tile; "oneshot" each tile's
           normalised output stored in the model dtype, combined by the global max at the end
           (paged-attention-v2's reduce).
- fp32:    the softmax sum accumulates fp32 probabilities; False sums the rounded ones (mixed).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SMS = 132  # an H200's streaming multiprocessors: what the native split-KV heuristic tries to fill


@dataclass(frozen=True)
class Plan:
    tile: int
    tiles: str = "left"  # left | split
    visible: bool = True
    merge: str = "online"  # online | oneshot
    fp32: bool = True


def num_splits(sequences: int, heads: int, max_q_rows: int, max_keys: int, tile: int) -> int:
    """How many KV splits a native split-KV kernel uses for this batch: enough work items to fill
    the device, 1 when batch x heads x query blocks already do. A simplified form of
    flash-attention's heuristic (flash-attention@v2.7:csrc/flash_attn/flash_api.cpp:
    num_splits_heuristic: 1 split once batch*heads*m_blocks >= 0.8 * SMs, else up to the number
    of KV blocks); vLLM's FlashAttention backend passes it through for decode batches.
    """
    work = sequences * heads * -(-max_q_rows // 64)
    if work >= 0.8 * SMS:
        return 1
    return max(1, min(-(-SMS // work), -(-max_keys // tile), 128))


def _partial(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan: Plan,
    vis: torch.Tensor,
    valid: torch.Tensor,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max, sum, unnormalised out) of one whole KV tile for rows q [R, H, D]; k, v [R, tile, H, D]
    (each row's own sequence's tile, fp32, zero past the sequence's end), `vis` [R] keys of the tile
    each row may see, `valid` [R] keys that exist. Every reduction runs over the full tile width,
    whatever the row, so a row's bits do not depend on where its tile ends or which rows share the call.

    As in FlashAttention, P is rounded to the model dtype for the P@V product (fp32 accumulate),
    so the max each tile is shifted by shows up in the result. Padded-tile semantics
    (plan.visible False): the max is taken over every existing key, then keys past `vis` are zeroed."""
    s = (q[:, :, None, :] * k.transpose(1, 2)).sum(-1)  # [R, H, n], reduced over D per element
    idx = torch.arange(k.shape[1])
    see = idx[None, :] < vis[:, None]
    s = s.masked_fill(
        ~(see if plan.visible else idx[None, :] < valid[:, None])[:, None, :], float("-inf")
    )
    m = s.amax(-1)
    p = torch.exp(s - m[..., None])
    if not plan.visible:
        p = p.masked_fill(~see[:, None, :], 0.0)
    pb = p.to(dtype)
    l = p.sum(-1) if plan.fp32 else pb.sum(-1).float()
    return m, l, (pb.float()[..., None] * v.transpose(1, 2)).sum(-2)


def attend(
    q: torch.Tensor,
    positions: list[int],
    k: torch.Tensor,
    v: torch.Tensor,
    plan: Plan,
    scale: float,
    splits: int = 1,
    seq: list[int] | None = None,
    lens: list[int] | None = None,
) -> torch.Tensor:
    """Causal attention for rows q [R, H, D] at `positions` over keys k, v [L, KVH, D] of one
    sequence, or of a batch: k, v [S, L, KVH, D] (padded), row i in sequence seq[i] of lens[...] keys.

    All rows reduce tile j together (over the full tile width); every reduction is per row and per
    element, so a row's result depends on its own keys and position only (and, for a "split" plan,
    on `splits`), not on the other rows or sequences in the call.
    """
    if q.is_cuda:
        if k.dim() == 3:
            return _attend_cuda(q, positions, k, v, plan, scale, splits)
        assert seq is not None and lens is not None, "a batch (k [S, L, KVH, D]) needs seq and lens"
        out = torch.empty_like(q)  # a batch: one sequence at a time
        for s in range(k.shape[0]):
            rows = [i for i, x in enumerate(seq) if x == s]
            out[rows] = _attend_cuda(
                q[rows],
                [positions[i] for i in rows],
                k[s, : lens[s]],
                v[s, : lens[s]],
                plan,
                scale,
                splits,
            )
        return out
    if k.dim() == 3:
        k, v, seq, lens = k[None], v[None], [0] * q.shape[0], [k.shape[0]]
    r, h, d = q.shape
    group = h // k.shape[2]
    t = plan.tile
    pad = (-k.shape[1]) % t  # whole tiles: zero keys past the end, never seen (masked)
    kf = torch.nn.functional.pad(k.float(), (0, 0, 0, 0, 0, pad)).repeat_interleave(group, dim=2)
    vf = torch.nn.functional.pad(v.float(), (0, 0, 0, 0, 0, pad)).repeat_interleave(group, dim=2)
    qf = q.float() * scale
    pos_t, seq_t, len_t = torch.tensor(positions), torch.tensor(seq), torch.tensor(lens)
    n_tiles = pos_t // t + 1  # tiles each row reduces over (left-aligned on every plan)
    per = -(-n_tiles // splits) if plan.tiles == "split" else n_tiles  # tiles per split, per row
    state_m = torch.full((r, h), float("-inf"))
    state_l = torch.zeros(r, h)
    state_o = torch.zeros(r, h, d)
    partials, done = [], []  # oneshot: every tile; split: every finished split (m, l, o, rows)
    for j in range(int(n_tiles.max())):
        s = j * t
        present = n_tiles > j
        idx = present.nonzero()[:, 0]
        rows_seq = seq_t[idx]
        pm, pl_, po = torch.full((r, h), float("-inf")), torch.zeros(r, h), torch.zeros(r, h, d)
        m, l, o = _partial(
            qf[idx],
            kf[rows_seq, s : s + t],
            vf[rows_seq, s : s + t],
            plan,
            (pos_t[idx] + 1 - s).clamp(max=t),
            (len_t[rows_seq] - s).clamp(max=t),
            q.dtype,
        )
        pm[idx], pl_[idx], po[idx] = m, l, o
        if plan.merge == "online":
            new_split = present & (j % per == 0) & (j > 0)
            if new_split.any():  # split-KV: close the finished split, start the next from empty
                done.append((state_m.clone(), state_l.clone(), state_o.clone(), new_split))
                state_m = torch.where(new_split[:, None], float("-inf"), state_m)
                state_l = torch.where(new_split[:, None], 0.0, state_l)
                state_o = torch.where(new_split[:, None, None], 0.0, state_o)
            new_m = torch.where(present[:, None], torch.maximum(state_m, pm), state_m)
            a = torch.exp(state_m - new_m).nan_to_num(0.0)
            b = torch.exp(pm - new_m).nan_to_num(0.0)
            b = torch.where(present[:, None], b, torch.zeros_like(b))
            state_l = state_l * a + pl_ * b
            state_o = state_o * a[..., None] + po * b[..., None]
            state_m = new_m
        else:
            partials.append((pm, pl_, po, present))
    if (
        plan.merge == "oneshot"
    ):  # paged-attention-v2 style: normalised partials stored in the model dtype
        gm = torch.stack([p[0] for p in partials]).amax(0)
        for pm, pl_, po, present in partials:
            w = torch.where(present[:, None], pl_ * torch.exp(pm - gm), torch.zeros_like(gm))
            part = (po / pl_.clamp_min(1e-30)[..., None]).to(q.dtype).float()
            state_l = state_l + w
            state_o = state_o + part * w[..., None]
    elif done:  # split-KV reduce: each split's normalised output stored in the model dtype (as
        # paged-attention v2's tmp_out), weighted by exp(lse_split - lse_max), summed in split order
        done.append((state_m, state_l, state_o, torch.ones(r, dtype=torch.bool)))
        lse = [
            torch.where(rows[:, None], m + torch.log(l), float("-inf")) for m, l, _, rows in done
        ]
        top = torch.stack(lse).amax(0)
        total = sum(torch.exp(x - top).nan_to_num(0.0) for x in lse)
        out = sum(
            torch.exp(x - top).nan_to_num(0.0)[..., None]
            * (o / l.clamp_min(1e-30)[..., None]).to(q.dtype).float()
            for x, (_, l, o, _) in zip(lse, done)
        )
        return (out / total[..., None]).to(q.dtype)
    return (state_o / state_l[..., None]).to(q.dtype)


def attend_paged(
    q: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    tables: list[list[int]],
    spans: list[tuple[int, int]],
    pos: list[int],
    plans: list[Plan],
    scale: float,
) -> torch.Tensor:
    """One attention call for a continuous batch: rows q[a:b] of item n (spans[n]) at positions
    pos[a:b] attend over the keys 0..pos[b-1] of that request, read from cache pages
    k_pages / v_pages [blocks, block_size, KVH, D] through its block table; plans[n] per item.

    Items with the same plan are reduced together, tile by tile (decode rows of every request in
    one pass). A native split-KV plan takes its split count from the whole batch (how many
    requests, how many query rows), so the batch's composition changes the reduction; the aligned
    plan does not.
    """
    bs = k_pages.shape[1]
    lens = [pos[b - 1] + 1 for a, b in spans]
    splits = 1
    if any(p.tiles == "split" for p in plans):
        splits = num_splits(
            len(spans), q.shape[1], max(b - a for a, b in spans), max(lens), plans[0].tile
        )
    out = torch.empty_like(q)
    for plan in dict.fromkeys(plans):
        items = [n for n, p in enumerate(plans) if p == plan]
        width = max(lens[n] for n in items)
        ks, vs = [], []
        for n in items:  # this request's keys, gathered from its pages and padded to the longest
            idx = torch.arange(lens[n], device=k_pages.device)
            blocks = torch.as_tensor(tables[n], device=k_pages.device)[idx // bs]
            fill = (0, 0, 0, 0, 0, width - lens[n])
            ks.append(torch.nn.functional.pad(k_pages[blocks, idx % bs], fill))
            vs.append(torch.nn.functional.pad(v_pages[blocks, idx % bs], fill))
        rows = torch.cat([torch.arange(*spans[n]) for n in items])
        seq = [i for i, n in enumerate(items) for _ in range(*spans[n])]
        out[rows] = attend(
            q[rows],
            [pos[i] for i in rows.tolist()],
            torch.stack(ks),
            torch.stack(vs),
            plan,
            scale,
            splits,
            seq,
            [lens[n] for n in items],
        )
    return out


def _attend_cuda(
    q: torch.Tensor,
    positions: list[int],
    k: torch.Tensor,
    v: torch.Tensor,
    plan: Plan,
    scale: float,
    splits: int = 1,
) -> torch.Tensor:
    """GPU: the aligned plan runs the Triton kernel family (kernels/gpu/attention.py); any other
    plan is the native path, torch SDPA."""
    aligned = (
        plan.tiles == "left"
        and plan.visible
        and plan.merge == "online"
        and plan.fp32
        and splits == 1
    )
    d = q.shape[-1]
    if aligned and plan.tile >= 16 and d >= 16 and (plan.tile & (plan.tile - 1)) == 0:
        from topl.kernels.gpu.attention import attention  # lazy: Triton only when this runs

        pos = torch.as_tensor(positions, dtype=torch.int32, device=q.device)
        return attention(
            q.contiguous(),
            k.contiguous(),
            v.contiguous(),
            [0] * q.shape[0],
            pos,
            kv_start=torch.zeros(1, dtype=torch.int32, device=q.device),
            tile=plan.tile,
        )
    pos = torch.as_tensor(positions, device=q.device)
    mask = torch.arange(k.shape[0], device=q.device)[None, :] <= pos[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=mask,
        scale=scale,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1)
