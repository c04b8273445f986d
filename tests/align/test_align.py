"""topl's alignment module (topl.launcher.align) for the stock stacks, its CPU numerics: each
plain-torch alignment in `ops` against megatron-core's own implementation of the same training
step, bitwise (megatron-core 0.16.1 imported from the wheel; skipped without it). torch_npu calls
are not run here. The module's patching and its targets: tests/align/test_align_targets.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _megatron():
    return pytest.importorskip("megatron.core.transformer.moe.moe_utils")


def _logits(t=37, e=16, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, e, generator=g, dtype=torch.float32).to(dtype)


# ---- CPU numerics against megatron-core


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups", [None, (4, 2)])
@pytest.mark.parametrize("scale", [None, 2.5])
@pytest.mark.parametrize("pre", [False, True])
def test_expert_selection_is_megatrons_topk_then_softmax(dtype, groups, scale, pre):
    mu = _megatron()
    from topl.launcher.align import ops

    logits = _logits(dtype=dtype)
    ng, gk = groups or (None, None)
    w, ids = ops.select_experts(
        logits, 4, num_groups=ng, group_topk=gk, scaling_factor=scale, pre_softmax=pre
    )
    probs, routing_map = mu.topk_routing_with_score_function(
        logits, 4, pre, ng, gk, scaling_factor=scale, score_function="softmax"
    )
    mine = torch.zeros_like(logits).scatter(1, ids, w)
    assert torch.equal(mine, probs)
    assert torch.equal(torch.zeros_like(routing_map).scatter(1, ids, True), routing_map)


def _routing(t=37, e=16, k=4, seed=1):
    from topl.launcher.align import ops

    w, ids = ops.select_experts(_logits(t, e, seed, torch.float32), k)
    return w, ids


def _npu_permute_mapping(ids: torch.Tensor) -> torch.Tensor:
    """What vllm-ascend's dispatch keeps as reversed_local_input_permutation_mapping: entry j of
    the flattened ids -> its row after a stable sort by expert (npu_moe_token_permute's
    documented order; the kernel itself is NPU-only, see docs/stacks.md)."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    row = torch.empty_like(order)
    row[order] = torch.arange(order.numel())
    return row


def test_dispatch_order_is_megatrons_permute():
    mu = _megatron()
    from topl.launcher.align import ops

    w, ids = _routing()
    tokens = torch.randn(ids.shape[0], 8)
    routing_map = torch.zeros(ids.shape[0], 16, dtype=torch.bool).scatter(1, ids, True)
    permuted, _, sorted_indices = mu.permute(tokens, routing_map)
    assert torch.equal(ops.expert_major_order(ids, 16), sorted_indices)
    got = ops.order_from_permutation(_npu_permute_mapping(ids), ids.shape[1])
    assert torch.equal(got, sorted_indices)
    assert torch.equal(tokens.index_select(0, got), permuted)


@pytest.mark.parametrize("deterministic", [False, True])
def test_weighted_combine_is_megatrons_unpermute(deterministic):
    """Weights carried by dispatch and applied in the expert (as Megatron's experts apply
    permuted_probs after the activation), then a plain unpermute: the same bits as Megatron's
    unpermute with probs."""
    mu = _megatron()
    from topl.launcher.align import ops

    w, ids = _routing()
    t, k = ids.shape
    routing_map = torch.zeros(t, 16, dtype=torch.bool).scatter(1, ids, True)
    probs = torch.zeros(t, 16).scatter(1, ids, w)
    mapping = _npu_permute_mapping(ids)
    order = ops.order_from_permutation(mapping, k)
    expert_out = torch.randn(t * k, 8)
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        want = mu.unpermute(
            expert_out, order, torch.Size([t, 8]), probs=probs, routing_map=routing_map
        )
        weighted = expert_out * ops.permute_weights(w, mapping)
        got = ops.unpermute(weighted, order, torch.Size([t, 8]))
        plain = mu.unpermute(weighted, order, torch.Size([t, 8]))
    finally:
        torch.use_deterministic_algorithms(old)
    assert torch.equal(got, want) and torch.equal(got, plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_are_megatrons_cross_entropy(dtype):
    pytest.importorskip("megatron.core")
    from megatron.core.tensor_parallel.cross_entropy import VocabParallelCrossEntropy as CE

    from topl.launcher.align import ops

    logits = _logits(9, 1000, 3, dtype)
    target = torch.randint(0, 1000, (9,), generator=torch.Generator().manual_seed(4))
    lp = ops.log_softmax(logits).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    x, m = CE.calculate_logits_max(logits.clone())
    _, _, predicted, sum_exp, exp = CE.calculate_predicted_logits(x, target, m, 0, 1000)
    _, loss = CE.calculate_cross_entropy_loss(exp, predicted, sum_exp)
    assert torch.equal(lp, -loss)
    # vLLM's own compute_logprobs (the fused log_softmax kernel, fact align_logprobs) is not
    # bitwise Megatron's form even on CPU: the replacement matters
    vllm_lp = logits.log_softmax(dim=-1, dtype=torch.float32).gather(-1, target.unsqueeze(-1))
    assert not torch.equal(vllm_lp.squeeze(-1), -loss)


def test_silu_mul_is_megatrons_swiglu():
    pytest.importorskip("megatron.core")
    from megatron.core.fusions.fused_bias_swiglu import swiglu

    from topl.launcher.align import ops

    # megatron-core wraps swiglu in its jit fuser (torch.compile from torch 2.2,
    # megatron-core@0.16.1:megatron/core/jit.py), which in bf16 keeps silu(y1) in float32 before
    # the product: that form is NOT the plain one (docs/stacks.md). Compared here: Megatron's
    # eager swiglu, which MindSpeed's training runs when the fuser is off.
    eager = getattr(swiglu, "_torchdynamo_orig_callable", swiglu)
    x = _logits(11, 64, 5)
    assert torch.equal(ops.silu_mul(x), eager(x))
    assert torch.equal(ops.silu_mul(x.float()), eager(x.float()))


class _Group:
    def __init__(self, size, rank):
        self._s, self._r = size, rank

    def size(self):
        return self._s

    def rank(self):
        return self._r


@pytest.mark.parametrize("rows", [1, 5, 8, 13])
@pytest.mark.parametrize("tp", [2, 4])
def test_padded_row_parallel_splits_as_megatron(rows, tp):
    """Reduce-scatter of rows padded to a multiple of TP: each rank keeps Megatron's
    _split_along_first_dim chunk of the sum; gathered and unpadded it is the sum itself."""
    pytest.importorskip("megatron.core")
    from megatron.core.tensor_parallel.mappings import _split_along_first_dim

    from topl.launcher.align import ops

    parts = [torch.randn(rows, 6, generator=torch.Generator().manual_seed(r)) for r in range(tp)]
    total = parts[0].clone()
    for p in parts[1:]:
        total = total + p  # one order, as the collective's sum
    padded_total = ops.pad_rows(total, tp)[0]
    gathered = torch.cat(list(padded_total.chunk(tp)))
    for rank in range(tp):
        seen = []

        def rs(x, rank=rank, seen=seen):  # this rank's chunk of the sum over ranks
            assert x.shape == padded_total.shape
            seen.append(padded_total.chunk(tp)[rank])
            return seen[-1]

        def ag(x):
            return gathered

        out = ops.row_parallel_reduce(parts[rank], tp, rs, ag)
        want = _split_along_first_dim(padded_total, _Group(tp, rank))
        assert torch.equal(seen[0], want)
        assert torch.equal(out, total)
