"""The plain-torch maths of each alignment: what Megatron computes in training, written once so
the NPU replacements (`patches`) and the CPU tests (tests/align/test_align.py, against megatron-core's
own functions) run the same code. torch only; no torch_npu, no vllm.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def silu_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU as Megatron's bias_swiglu / glu activation: silu(first half) * second half."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def select_experts(
    router_logits: torch.Tensor,
    top_k: int,
    num_groups: int | None = None,
    group_topk: int | None = None,
    scaling_factor: float | None = None,
    pre_softmax: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax routing as Megatron's topk_routing_with_score_function with
    score_function="softmax" (megatron-core@0.16.1:megatron/core/transformer/moe/moe_utils.py):
    top-k of the logits (group-limited when num_groups / group_topk are set), softmax over the k
    chosen logits in float32, cast back, then scaled. With `pre_softmax` (Megatron's
    use_pre_softmax; vLLM's renormalize=False) the softmax over all experts comes first and the
    top-k of it are the weights. Returns (weights [T, k], expert ids [T, k] int64)."""
    num_tokens, num_experts = router_logits.shape
    scores = router_logits
    if pre_softmax:
        scores = torch.softmax(router_logits, dim=-1, dtype=torch.float32).type_as(router_logits)
    if group_topk:
        assert num_groups, "group-limited routing (group_topk) needs num_groups"
        group_scores = (
            scores.view(num_tokens, num_groups, -1).topk(top_k // group_topk, dim=-1)[0].sum(dim=-1)
        )
        group_idx = torch.topk(group_scores, k=group_topk, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        mask = (
            group_mask.unsqueeze(-1)
            .expand(num_tokens, num_groups, num_experts // num_groups)
            .reshape(num_tokens, -1)
        )
        top, ids = torch.topk(scores.masked_fill(~mask.bool(), float("-inf")), top_k)
    else:
        top, ids = torch.topk(scores, k=top_k, dim=1)
    if pre_softmax:
        weights = top
    else:
        weights = torch.softmax(top, dim=-1, dtype=torch.float32).type_as(router_logits)
    if scaling_factor:
        weights = weights * scaling_factor
    return weights, ids


def expert_major_order(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Token index of each permuted row, rows ordered by expert then token: Megatron's
    `sorted_indices` from permute(tokens, routing_map) (no drop-and-pad)."""
    num_tokens = topk_ids.shape[0]
    routing = torch.zeros(num_tokens, num_experts, dtype=torch.bool, device=topk_ids.device)
    routing.scatter_(1, topk_ids.long(), True)
    tokens = torch.arange(num_tokens, device=topk_ids.device).unsqueeze(0).expand(num_experts, -1)
    return tokens.masked_select(routing.T.contiguous())


def order_from_permutation(row_of_entry: torch.Tensor, top_k: int) -> torch.Tensor:
    """The same expert-major token order, from a permutation mapping as vllm-ascend's
    dispatch keeps it (`reversed_local_input_permutation_mapping`: entry j of the flattened
    [T, k] ids goes to permuted row row_of_entry[j]): row p holds token j // k."""
    row = row_of_entry.reshape(-1).long()
    out = torch.empty_like(row)
    out[row] = torch.arange(row.numel(), device=row.device) // top_k
    return out


def permute_weights(topk_weights: torch.Tensor, row_of_entry: torch.Tensor) -> torch.Tensor:
    """Each routing weight moved to its token's permuted row ([rows, 1]), so the expert MLP can
    apply it after the activation as Megatron's experts do."""
    flat = topk_weights.reshape(-1)
    out = torch.zeros(flat.numel(), 1, dtype=flat.dtype, device=flat.device)
    out[row_of_entry.reshape(-1).long(), 0] = flat
    return out


def unpermute(
    permuted: torch.Tensor, order: torch.Tensor, restore_shape: tuple[int, int]
) -> torch.Tensor:
    """Megatron's unpermute without probs: scatter-add each permuted row back to its token."""
    _, hidden = restore_shape
    out = torch.zeros(restore_shape, dtype=permuted.dtype, device=permuted.device)
    if torch.are_deterministic_algorithms_enabled():  # as megatron-core: index_add_ then
        out.index_add_(0, order, permuted)
    else:
        out.scatter_add_(0, order.unsqueeze(1).expand(-1, hidden), permuted)
    return out


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-probs as Megatron's vocab-parallel cross entropy forms them (one TP rank):
    (x - max) - log(sum(exp(x - max))), in float32."""
    x = logits.float()
    shifted = x - x.max(dim=-1, keepdim=True)[0]
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()


def pad_rows(x: torch.Tensor, tp: int) -> tuple[torch.Tensor, int]:
    """Rows padded with zeros to a multiple of `tp` (reduce-scatter along dim 0 needs equal
    chunks, as Megatron's sequence-parallel regions require); returns (padded, pad)."""
    pad = (tp - x.shape[0] % tp) % tp
    return (F.pad(x, (0, 0, 0, pad)) if pad else x), pad


def row_parallel_reduce(
    partial: torch.Tensor,
    tp: int,
    reduce_scatter: Callable[[torch.Tensor], torch.Tensor],
    all_gather: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The row-parallel output: pad rows, reduce-scatter (sum of ranks, this rank's chunk),
    all-gather the chunks, drop the padding. `reduce_scatter(x)` / `all_gather(x)` along dim 0."""
    padded, pad = pad_rows(partial, tp)
    out = all_gather(reduce_scatter(padded))
    return out[: out.shape[0] - pad] if pad else out
