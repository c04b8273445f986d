"""The reference engines: bitwise equal when aligned, and each switch shown to matter on its own."""

from dataclasses import replace

import pytest
import torch

from topl.kernels import primitives as P
from topl.kernels.alignment import Alignment
from topl.kernels.model import Model, sides
from topl.kernels.probe import make_requests, probe
from topl.kernels.training import TrainingEngine

STRICT = Alignment(kv_tile=8)


@pytest.fixture(scope="module")
def models():
    from topl.launcher.compose.hydra import compose_job

    return {
        name: Model.random(compose_job([f"model={name}"]).to_object().model, seed=0)
        for name in ("tiny_dense", "tiny_moe")
    }


def run(model, alignment, arrival="staggered", chunked=True, **kw):
    reqs = make_requests(10, model.arch.vocab_size, seed=1, arrival=arrival, max_len=28, max_new=14)
    return probe(
        model,
        alignment,
        requests=reqs,
        block_size=8,
        chunked_prefill=chunked,
        max_num_batched_tokens=48,
        **kw,
    )


@pytest.mark.parametrize("name", ["tiny_dense", "tiny_moe"])
@pytest.mark.parametrize("arrival", ["staggered", "burst", "reversed"])
@pytest.mark.parametrize("chunked", [True, False])
def test_strict_is_bitwise_equal(models, name, arrival, chunked):
    out = run(models[name], STRICT, arrival, chunked)
    assert models[name].w["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert out["distinct_batch_sizes"] > 3  # batch composition really changed step to step
    assert out["max_abs_logprob_diff"] == 0.0 and out["bitwise_equal_fraction"] == 1.0, out


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("order", ["ring", "tree"])
def test_same_tp_emulation_on_both_sides_is_equal(models, tp, order):
    out = run(models["tiny_moe"], STRICT, train_tp=tp, rollout_tp=tp, order=order)
    assert out["max_abs_logprob_diff"] == 0.0


def test_a_ring_all_reduce_depends_on_the_batch_shape(models):
    """Same TP=4 and the same ring collective on both sides, but decode and training batches have
    different shapes, so the ring's chunks (and each element's order) differ (vllm-ascend #17169)."""
    out = run(
        models["tiny_dense"],
        STRICT.without("tp_aligned_reduction"),
        train_tp=4,
        rollout_tp=4,
        order="ring",
    )
    assert out["max_abs_logprob_diff"] > 0


@pytest.mark.parametrize(
    "switch, model",
    [
        ("attention_semantics", "tiny_dense"),
        ("reduction_order", "tiny_dense"),
        ("softmax_tiling", "tiny_dense"),
        ("fp32_critical_path", "tiny_dense"),
        ("batch_invariant", "tiny_dense"),
        ("fused_ops_matched", "tiny_dense"),
        ("moe_fixed_combine", "tiny_moe"),
    ],
)
def test_each_switch_off_alone_breaks_equality(models, switch, model):
    out = run(models[model], STRICT.without(switch))
    assert out["max_abs_logprob_diff"] > 0.0, switch
    assert out["bitwise_equal_fraction"] < 1.0


def test_rollout_tp4_against_train_tp1_needs_the_aligned_reduction(models):
    m = models["tiny_dense"]
    assert (
        run(m, STRICT.without("tp_aligned_reduction"), train_tp=1, rollout_tp=4)[
            "max_abs_logprob_diff"
        ]
        > 0
    )
    assert run(m, STRICT, train_tp=1, rollout_tp=4)["max_abs_logprob_diff"] == 0.0


def test_training_micro_batch_does_not_change_logprobs(models):
    m = models["tiny_moe"]
    train_side, _ = sides(STRICT)
    seqs = [r.prompt for r in make_requests(9, m.arch.vocab_size, seed=3)]
    starts = [1] * len(seqs)
    a = TrainingEngine(m, train_side, micro_batch=1).logprobs(seqs, starts)
    b = TrainingEngine(m, train_side, micro_batch=9).logprobs(seqs, starts)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k, n", [(64, 192), (128, 32), (256, 384)])
def test_invariant_linear_rows_do_not_depend_on_the_batch(dtype, k, n):
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(100, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)
    row = P.linear(x[37:38], w, invariant=True)
    for m in (38, 40, 64, 100):
        assert torch.equal(P.linear(x[:m], w, invariant=True)[37:38], row)
    assert torch.equal(
        P.linear(x[30:40], w, invariant=True)[7:8], row
    )  # another position in the tile


def test_native_linear_is_batch_dependent():
    g = torch.Generator().manual_seed(0)
    x, w = (
        torch.randn(100, 256, generator=g),
        torch.randn(384, 256, generator=g),
    )  # fp32: the split shows directly
    assert not torch.equal(
        P.linear(x[:10], w, invariant=False), P.linear(x, w, invariant=False)[:10]
    )


def test_invariant_linear_backward_matches_autograd():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 32, generator=g, requires_grad=True)
    w = torch.randn(16, 32, generator=g, requires_grad=True)
    P.linear(x, w, invariant=True).square().sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    (x @ w.t()).square().sum().backward()
    assert torch.allclose(gx, x.grad, atol=1e-4) and torch.allclose(gw, w.grad, atol=1e-4)


def test_alignment_without_rejects_unknown_switch():
    with pytest.raises(ValueError, match="unknown alignment switch"):
        STRICT.without("nope")
    assert replace(STRICT).exact and not STRICT.without("fp32_critical_path").exact
