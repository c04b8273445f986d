"""Reference numerics (issue 17): vLLM's log-prob modes, batch-invariant elementwise ops, the rollout's
own TP degree, batched attention, non-vacuous switch demonstrations on the shipped probe, and the
600-token exactness matrix (quick subset here; the full matrix with `pytest -m matrix`)."""

import itertools

import pytest
import torch

from topl.kernels import primitives as P
from topl.kernels.alignment import Alignment
from topl.kernels.attention import Plan, attend, attend_paged
from topl.kernels.model import Model, sides
from topl.kernels.probe import make_requests, matrix_point, probe
from topl.kernels.rollout import Request, RolloutEngine, SamplingParams
from topl.launcher.cli.probe import run as run_probe
from topl.launcher.compose.hydra import compose_job

STRICT = Alignment(kv_tile=8)


@pytest.fixture(scope="module")
def arch():
    return {n: compose_job([f"model={n}"]).to_object().model for n in ("tiny_dense", "tiny_moe")}


@pytest.fixture(scope="module")
def dense(arch):
    return Model.random(arch["tiny_dense"], seed=0)


def logdiff(model, alignment=STRICT, n=6, **kw):
    reqs = make_requests(n, model.arch.vocab_size, seed=1, max_len=28, max_new=10)
    return probe(model, alignment, requests=reqs, block_size=8, max_num_batched_tokens=48, **kw)[
        "max_abs_logprob_diff"
    ]


# --- 1. log-probs as vLLM's logprobs_mode -------------------------------------------------------
@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_every_mode_the_contract_accepts_is_exact(dense, mode):
    """Strict accepts both modes at top_p=1, top_k=-1 (TOP-LOGP-002); one normalisation each."""
    assert logdiff(dense, sampling=SamplingParams(logprobs_mode=mode)) == 0.0


def test_processed_logprobs_follow_temperature_raw_do_not(dense):
    """processed_* come after temperature (as the trainer's logits / T); raw_* before it (vLLM)."""
    assert logdiff(dense, sampling=SamplingParams(0.7, logprobs_mode="processed_logprobs")) == 0.0
    assert logdiff(dense, sampling=SamplingParams(0.7, logprobs_mode="raw_logprobs")) > 0.0


def test_processed_logprobs_are_one_log_softmax_of_the_masked_logits(dense):
    eng = RolloutEngine(dense, sides(STRICT)[1], block_size=8)
    logits = torch.randn(
        dense.arch.vocab_size, generator=torch.Generator().manual_seed(0)
    ).bfloat16()
    sp = SamplingParams(0.8, top_k=5, logprobs_mode="processed_logprobs")
    r = Request(0, [1], 4)
    tok = eng._sample(r, logits, sp)
    z = logits.float() / 0.8
    masked = z.masked_fill(z < torch.topk(z, 5).values[-1], float("-inf"))
    assert r.logprobs[-1] == float(
        torch.log_softmax(masked, -1)[tok]
    )  # bit for bit, normalised once


# --- 2. batch-invariant elementwise ops ---------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [8, 24, 40, 100, 128])
def test_silu_rows_do_not_depend_on_the_batch(dtype, width):
    x = torch.randn(67, width, generator=torch.Generator().manual_seed(width)).to(dtype)
    full = P.silu(x)
    for r, m in itertools.product(range(0, 67, 5), (1, 3, 17)):
        assert torch.equal(P.silu(x[r : r + m])[0], full[r])


# --- 3. the rollout's own TP degree -------------------------------------------------------------
def test_rollout_really_computes_its_tp_partials(dense, monkeypatch):
    widths = []
    real = P.linear
    monkeypatch.setattr(P, "linear", lambda x, w, inv: widths.append(x.shape[1]) or real(x, w, inv))
    _, rollout = sides(STRICT, train_tp=1, rollout_tp=4)
    assert rollout.tp == 4
    RolloutEngine(dense, rollout, 8).generate([Request(0, [1, 2, 3], 2)], SamplingParams())
    a = dense.arch
    assert widths.count(a.num_heads * a.head_dim // 4) >= 4 * a.num_layers  # o_proj: 4 K-slices
    assert widths.count(a.intermediate_size // 4) >= 4 * a.num_layers  # down_proj: 4 K-slices


@pytest.mark.parametrize("train_tp, rollout_tp", [(1, 4), (2, 4), (4, 2)])
def test_different_tp_degrees_strict_exact_unaligned_not(dense, train_tp, rollout_tp):
    kw = {"train_tp": train_tp, "rollout_tp": rollout_tp}
    assert logdiff(dense, **kw) == 0.0
    assert logdiff(dense, STRICT.without("tp_aligned_reduction"), **kw) > 0.0


def test_rollout_output_changes_with_its_tp_degree(dense):
    """Not identical by construction: unaligned, TP 2 and TP 4 sum different partials."""
    out = []
    for tp in (2, 4):
        reqs = make_requests(4, dense.arch.vocab_size, seed=1, max_len=20, max_new=8)
        side = sides(STRICT.without("tp_aligned_reduction"), 1, tp)[1]
        RolloutEngine(dense, side, 8).generate(reqs, SamplingParams(logprobs_mode="raw_logprobs"))
        out.append(torch.tensor([lp for r in reqs for lp in r.logprobs]))
    assert out[0].shape != out[1].shape or not torch.equal(out[0], out[1])


# --- 4. batched attention -----------------------------------------------------------------------
def _paged_batch(n, length=40, bs=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    k_pages, v_pages = torch.randn(2, n * 8, bs, 2, 16, generator=g).bfloat16()
    q = torch.randn(n, 4, 16, generator=g).bfloat16()
    tables = [list(range(i * 8, i * 8 + 8)) for i in range(n)]
    return (
        q,
        k_pages,
        v_pages,
        tables,
        [(i, i + 1) for i in range(n)],
        [length - 1 - i for i in range(n)],
    )


def test_aligned_rows_do_not_depend_on_the_batch():
    q, kp, vp, tables, spans, pos = _paged_batch(16)
    plan = Plan(8)
    batched = attend_paged(q, kp, vp, tables, spans, pos, [plan] * 16, 0.25)
    alone = attend_paged(q[:1], kp, vp, tables[:1], spans[:1], pos[:1], [plan], 0.25)
    assert torch.equal(batched[:1], alone)


def test_native_split_kv_depends_on_the_batch():
    """reduction_order off: the split count comes from the batch (few requests: more splits)."""
    q, kp, vp, tables, spans, pos = _paged_batch(16)
    plan = Plan(8, "split")
    batched = attend_paged(q, kp, vp, tables, spans, pos, [plan] * 16, 0.25)
    alone = attend_paged(q[:1], kp, vp, tables[:1], spans[:1], pos[:1], [plan], 0.25)
    assert not torch.equal(batched[:1], alone)


def test_training_packed_attention_equals_one_sequence_at_a_time():
    g = torch.Generator().manual_seed(1)
    k, v = torch.randn(2, 3, 30, 2, 16, generator=g).bfloat16()
    q = torch.randn(30, 4, 16, generator=g).bfloat16()
    rows = list(range(30))
    batched = attend(q, rows, k, v, Plan(8), 0.25, seq=[i % 3 for i in rows], lens=[30, 30, 30])
    for s in range(3):
        idx = [i for i in rows if i % 3 == s]
        assert torch.equal(batched[idx], attend(q[idx], idx, k[s], v[s], Plan(8), 0.25))


def test_unchunked_prefill_refuses_a_prompt_over_the_budget(dense):
    eng = RolloutEngine(
        dense, sides(STRICT)[1], 8, max_num_batched_tokens=16, chunked_prefill=False
    )
    with pytest.raises(ValueError, match="max_num_batched_tokens=16"):
        eng.generate([Request(0, list(range(20)), 2)], SamplingParams())


# --- 5. each switch off alone differs on the shipped probe defaults ----------------------------
CASES = [
    (s, "tiny_dense", [])
    for s in Alignment.SWITCHES
    if s not in ("moe_fixed_combine", "tp_aligned_reduction")
]
CASES += [
    ("moe_fixed_combine", "tiny_moe", []),
    ("batch_invariant", "tiny_moe", []),
    ("tp_aligned_reduction", "tiny_dense", ["rollout.tp=4", "train.tp=1"]),
]


@pytest.mark.parametrize("switch, model, extra", CASES)
def test_each_switch_off_alone_differs_on_the_default_probe(switch, model, extra):
    spec = compose_job(
        [f"model={model}", f"alignment.{switch}=false", "alignment.mode=off", *extra]
    ).to_object()
    out = run_probe(spec)
    assert out["max_abs_logprob_diff"] > 0.0 and out["switches_off"] == [switch]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model=tiny_moe"],
        ["train.dtype=float32"],
        ["model=tiny_moe", "train.dtype=float32"],
        ["rollout.tp=4", "train.tp=1"],
    ],
)
def test_default_probe_is_exact(overrides):
    for seed in (0, 2):
        out = run_probe(compose_job([*overrides, f"local.seed={seed}"]).to_object())
        assert out["max_abs_logprob_diff"] == 0.0, (overrides, seed)


# --- 7. the 600-token exactness matrix ----------------------------------------------------------
QUICK = [
    ("tiny_dense", 0, "bfloat16", True, 1),
    ("tiny_moe", 1, "float16", False, 1),
    ("tiny_dense", 2, "float32", False, 1),
    ("tiny_moe", 3, "bfloat16", True, 1),
]


@pytest.mark.parametrize("model, seed, dtype, chunked, batch", QUICK)
def test_matrix_quick(arch, model, seed, dtype, chunked, batch):
    out = matrix_point(arch[model], seed, dtype, chunked, batch)
    assert out["max_abs_logprob_diff"] == 0.0 and out["tokens"] >= 32


def test_matrix_quick_batch16(arch):
    """16 requests of 300 tokens: batch composition changes every step, the result does not."""
    out = matrix_point(arch["tiny_moe"], 4, "bfloat16", True, 16, length=300, tile=32)
    assert out["max_abs_logprob_diff"] == 0.0 and out["distinct_batch_sizes"] > 3


FULL = list(
    itertools.product(
        ("tiny_dense", "tiny_moe"),
        range(21),
        ("bfloat16", "float16", "float32"),
        (True, False),
        (1, 16),
    )
)


@pytest.mark.matrix
@pytest.mark.parametrize("model, seed, dtype, chunked, batch", FULL)
def test_matrix_full(arch, model, seed, dtype, chunked, batch):
    assert matrix_point(arch[model], seed, dtype, chunked, batch)["max_abs_logprob_diff"] == 0.0
