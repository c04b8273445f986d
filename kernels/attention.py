"""Tiled causal attention with an explicit KV tile plan and online-softmax merge.

Both engines call `attend` for a set of query rows of *one* sequence against that sequence's
keys; they differ in where the rows and keys come from (packed sequences vs. a paged cache and a
continuous batch) and, when a switch is off, in the plan:

- tiles:   "left"  tiles start at multiples of the KV tile (training FA / FA3 num_splits=1);
           "right" decode splits end at the query (an engine-specific split).
- visible: only keys <= the query position enter the reduction, or (False) softmax over the
           whole padded tile, then the mask (the max shift includes keys the query cannot see).
- merge:   "online" running (max, sum, out) updated tile after tile; "oneshot" each split's
           normalised output stored in the model dtype, combined by the global max at the end
           (flash-decoding / paged-attention-v2's reduce).
- fp32:    the softmax sum accumulates fp32 probabilities; False sums the rounded ones (mixed).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Plan:
    tile: int
    tiles: str = "left"  # left | right
    visible: bool = True
    merge: str = "online"  # online | oneshot
    fp32: bool = True


def ranges(pos: int, plan: Plan) -> list[tuple[int, int, int]]:
    """KV ranges (start, end_visible, end_tile) a query at `pos` reduces over, in merge order."""
    t = plan.tile
    if plan.tiles == "right":
        out, end = [], pos + 1
        while end > 0:
            out.append((max(end - t, 0), end, end))
            end -= t
        return out[::-1]
    return [(s, min(s + t, pos + 1), s + t) for s in range(0, pos + 1, t)]


def _partial(q, k, v, plan: Plan, limit: torch.Tensor | None, dtype):
    """(max, sum, unnormalised out) of one KV range for rows q [R, H, D]; k, v [n, H, D] (fp32).

    As in FlashAttention, P is rounded to the model dtype for the P@V product (fp32 accumulate),
    so the max each tile is shifted by shows up in the result. `limit` [R] (padded-tile
    semantics): the max is taken over the whole tile, then keys past `limit` are zeroed."""
    s = (q[:, :, None, :] * k.transpose(0, 1)[None]).sum(-1)  # [R, H, n], reduced over D per element
    m = s.amax(-1)
    p = torch.exp(s - m[..., None])
    if limit is not None:
        idx = torch.arange(k.shape[0])
        p = p.masked_fill(idx[None, None, :] > limit[:, None, None], 0.0)
    pb = p.to(dtype)
    l = p.sum(-1) if plan.fp32 else pb.sum(-1).float()
    return m, l, (pb.float()[..., None] * v.transpose(0, 1)[None]).sum(-2)


def attend(q: torch.Tensor, positions: list[int], k: torch.Tensor, v: torch.Tensor, plan: Plan,
           scale: float) -> torch.Tensor:
    """Causal attention for rows q [R, H, D] at `positions` over keys k, v [L, KVH, D] of one sequence.

    Rows that share a KV range are reduced together; every reduction is per row and per element,
    so a row's result does not depend on which other rows are present.
    """
    if q.is_cuda:
        return _attend_cuda(q, positions, k, v, plan, scale)
    r, h, d = q.shape
    group = h // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    qf = q.float() * scale
    plans = [ranges(p, plan) for p in positions]
    n_max = max(len(x) for x in plans)
    state_m = torch.full((r, h), float("-inf"))
    state_l = torch.zeros(r, h)
    state_o = torch.zeros(r, h, d)
    partials = []
    for j in range(n_max):
        groups: dict[tuple[int, int], list[int]] = {}
        for i, pl in enumerate(plans):
            if j < len(pl):
                s, e_vis, e_tile = pl[j]
                end = e_vis if plan.visible else min(e_tile, k.shape[0])
                groups.setdefault((s, end), []).append(i)
        pm, pl_, po = torch.full((r, h), float("-inf")), torch.zeros(r, h), torch.zeros(r, h, d)
        for (s, end), rows in groups.items():
            idx = torch.tensor(rows)
            limit = None if plan.visible else torch.tensor([positions[i] - s for i in rows])
            m, l, o = _partial(qf[idx], kf[s:end], vf[s:end], plan, limit, q.dtype)
            pm[idx], pl_[idx], po[idx] = m, l, o
        present = torch.tensor([j < len(pl) for pl in plans])
        if plan.merge == "online":
            new_m = torch.where(present[:, None], torch.maximum(state_m, pm), state_m)
            a = torch.exp(state_m - new_m).nan_to_num(0.0)
            b = torch.exp(pm - new_m).nan_to_num(0.0)
            b = torch.where(present[:, None], b, torch.zeros_like(b))
            state_l = state_l * a + pl_ * b
            state_o = state_o * a[..., None] + po * b[..., None]
            state_m = new_m
        else:
            partials.append((pm, pl_, po, present))
    if plan.merge == "oneshot":  # paged-attention-v2 style: normalised partials stored in the model dtype
        gm = torch.stack([p[0] for p in partials]).amax(0)
        for pm, pl_, po, present in partials:
            w = torch.where(present[:, None], pl_ * torch.exp(pm - gm), torch.zeros_like(gm))
            part = (po / pl_.clamp_min(1e-30)[..., None]).to(q.dtype).float()
            state_l = state_l + w
            state_o = state_o + part * w[..., None]
    return (state_o / state_l[..., None]).to(q.dtype)


def _attend_cuda(q, positions, k, v, plan: Plan, scale: float) -> torch.Tensor:
    """GPU: the aligned plan runs the Triton kernel family (kernels/gpu/attention.py); any other
    plan is the native path, torch SDPA."""
    aligned = plan.tiles == "left" and plan.visible and plan.merge == "online" and plan.fp32
    d = q.shape[-1]
    if aligned and plan.tile >= 16 and d >= 16 and (plan.tile & (plan.tile - 1)) == 0:
        from topl.kernels.gpu.attention import attention

        pos = torch.as_tensor(positions, dtype=torch.int32, device=q.device)
        return attention(q.contiguous(), k.contiguous(), v.contiguous(), [0] * q.shape[0], pos,
                         kv_start=torch.zeros(1, dtype=torch.int32, device=q.device), tile=plan.tile)
    pos = torch.as_tensor(positions, device=q.device)
    mask = torch.arange(k.shape[0], device=q.device)[None, :] <= pos[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=mask,
        scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)
