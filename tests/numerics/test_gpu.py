"""GPU (Triton) kernels: bitwise parity between training, prefill and paged decode, batch
invariance, and the reference engines on CUDA. Skipped without CUDA (CI has none)."""

import itertools
import types

import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("triton")
pytestmark = cuda

from topl.kernels.model import QWEN3_30B_A3B as Q  # noqa: E402 (after the skips)

HID, H, KVH, D, VOCAB = (
    Q[k] for k in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size")
)
# (K, N) of the projections: qkv_proj, o_proj, an expert's gate+up
QKV, O_PROJ, GATE_UP = (HID, (H + 2 * KVH) * D), (H * D, HID), (HID, 2 * Q["moe_intermediate_size"])


def arch(layers: int, moe: bool):
    """Qwen3-30B-A3B `layers` deep; dense: the same widths without experts."""
    return types.SimpleNamespace(
        name="qwen3_30b_a3b_widths",
        **{**Q, "num_layers": layers, **({} if moe else {"num_experts": 0})},
    )


def _packed_and_paged(lens, h=H, kvh=KVH, d=D, tile=128, seed=0, tail=0.0):
    """Random q/k/v of packed sequences, and the same K/V in a paged cache with shuffled pages (a
    last page's rows past its sequence hold `tail`)."""
    torch.manual_seed(seed)
    k = torch.randn(sum(lens), kvh, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    q = torch.randn(sum(lens), h, d, device="cuda", dtype=torch.bfloat16)
    starts = torch.tensor([0] + lens[:-1]).cumsum(0)
    n_pages = sum(-(-n // tile) for n in lens)
    perm = torch.randperm(n_pages).tolist()
    cache_k = torch.full((n_pages, tile, kvh, d), tail, device="cuda", dtype=torch.bfloat16)
    cache_v = torch.zeros_like(cache_k)
    tables = []
    for s, n in enumerate(lens):
        tables.append([perm.pop() for _ in range(-(-n // tile))])
        for j, page in enumerate(tables[-1]):
            lo, hi = int(starts[s]) + j * tile, int(starts[s]) + min((j + 1) * tile, n)
            cache_k[page, : hi - lo], cache_v[page, : hi - lo] = k[lo:hi], v[lo:hi]
    width = max(map(len, tables))
    table = torch.tensor(
        [t + [0] * (width - len(t)) for t in tables], dtype=torch.int32, device="cuda"
    )
    q_seq = [s for s, n in enumerate(lens) for _ in range(n)]
    q_pos = torch.cat([torch.arange(n) for n in lens]).to(torch.int32).cuda()
    return q, k, v, starts.to(torch.int32).cuda(), cache_k, cache_v, table, q_seq, q_pos


LENS = [1, 127, 128, 129, 700, 1500, 2333]


def test_every_row_is_bitwise_equal_across_paths_and_launch_settings():
    """Training (packed), prefill (paged) and decode (every token as its own decode query, split-KV
    or not) at every launch setting the engine may pick (CONFIGS), with whole tiles on their own
    unmasked path (K/V through the tensor-memory engine, or pointer loads): all 4,918 rows, all
    heads, against the kernel that masks every tile and loads through pointers."""
    from topl.kernels.gpu.attention import CONFIGS, attention

    q, k, v, starts, ck, cv, table, q_seq, q_pos = _packed_and_paged(LENS)
    ref = attention(q, k, v, q_seq, q_pos, kv_start=starts, split=False, whole=False, tma=False)
    rows = list(
        range(len(q_seq))
    )  # decode: every row is a sequence of its own (its request's pages)
    dtable = table[torch.tensor(q_seq, device="cuda")]
    for (r, warps, stages), tma in itertools.product(CONFIGS, (None, False, True)):
        kw = {"q_tokens": r // 8, "warps": warps, "stages": stages, "tma": tma}
        # 128 rows: `_attn` at this setting (gluon=False); by default its one pass with the
        # tensor-memory loads is prefill.py's kernel, which has no launch settings (its own test)
        kw["gluon"] = False if r == 128 else None
        for split in (False, True):
            got = {
                "train": attention(q, k, v, q_seq, q_pos, kv_start=starts, split=split, **kw),
                "prefill": attention(q, ck, cv, q_seq, q_pos, block_table=table, split=split, **kw),
                "decode": attention(q, ck, cv, rows, q_pos, block_table=dtable, split=split, **kw),
            }
            for path, out in got.items():
                bad = (out != ref).any(-1).any(-1)
                assert not bad.any(), (
                    f"{path} rows={r} warps={warps} stages={stages} split={split} tma={tma}: "
                    f"{int(bad.sum())} of {len(bad)} rows differ"
                )
    # split-KV decode at its own defaults (stages, tiles per program) and other tile counts per
    # program, tile states in Gluon or Triton, with every layout of the in-order fold: Gluon's
    # (channels, tiles per step), Triton's (heads, channels, tiles per load per program)
    folds = (None, (32, 8), (128, 8), (64, 16), (8, 128, 8), (1, 128, 32), (2, 64, 16), (4, 32, 8))
    folds += ((1, 16, 8), (1, 32, 32))
    for tma, tpp, fold, gluon in itertools.product(
        (None, False, True), (None, 1, 3), folds, (False, True)
    ):
        out = attention(
            q, ck, cv, rows, q_pos, block_table=dtable, split=True, tma=tma,
            tiles_per_prog=tpp, combine=fold, gluon=gluon,
        )  # fmt: skip
        bad = (out != ref).any(-1).any(-1)
        assert not bad.any(), (
            f"split decode tma={tma} tiles/program={tpp} fold={fold} gluon={gluon}: "
            f"{int(bad.sum())}"
        )


def test_the_warp_specialised_one_pass_gives_every_row_of_attn():
    """prefill.py's warp-specialised one pass (128 rows, K/V by the tensor-memory engine, masked
    tiles too), one program per run or (prefill_items.py) one per SM, against the kernel that masks
    every tile and loads through pointers: all 4,918 rows, all heads."""
    from topl.kernels.gpu.attention import attention

    q, k, v, starts, _, _, table, q_seq, q_pos = _packed_and_paged(LENS)
    ref = attention(q, k, v, q_seq, q_pos, kv_start=starts, split=False, whole=False, tma=False)
    # training, prefill from a cache whose page tails are NaN (they must read as zero, as `_attn`'s
    # masked loads make them), a chunked prefill whose runs straddle a tile, and training where the
    # next sequence's first keys hold NaN (the 700-token sequence's last tile reaches 68 rows of the
    # next: zeroed, as `_attn` makes them; prefill_items.py skips the zeroing only where a tile
    # stays in its own sequence)
    _, _, _, _, nk, nv, _, _, _ = _packed_and_paged(LENS, tail=float("nan"))
    s4 = sum(LENS[:4])  # the 700-token sequence, queried from position 100 on
    s5 = s4 + LENS[4]
    vn = v.clone()
    vn[s5 : s5 + 68] = float("nan")
    others = torch.ones(len(q_seq), dtype=torch.bool, device="cuda")
    others[s5 : s5 + LENS[5]] = False  # the sequence whose own keys are NaN
    for persistent in (False, True):
        kw = {"split": False, "tma": True, "gluon": True, "persistent": persistent}
        got = {
            "train": attention(q, k, v, q_seq, q_pos, kv_start=starts, **kw),
            "prefill": attention(q, nk, nv, q_seq, q_pos, block_table=table, **kw),
            "chunked prefill": attention(
                q[s4 + 100 : s4 + 700], nk, nv, [0] * 600, q_pos[s4 + 100 : s4 + 700],
                block_table=table[4:5], **kw,
            ),
            "train, NaN keys next": attention(q, k, vn, q_seq, q_pos, kv_start=starts, **kw),
        }  # fmt: skip
        for path, out in got.items():
            want = ref[s4 + 100 : s4 + 700] if path == "chunked prefill" else ref
            if path == "train, NaN keys next":
                out, want = out[others], want[others]
            bad = (out != want).any(-1).any(-1)
            assert not bad.any(), (
                f"{path} (persistent={persistent}): {int(bad.sum())} of {len(bad)} rows differ"
            )


def test_launch_settings_outside_the_family_are_refused_and_do_change_the_bits():
    from topl.kernels.gpu.attention import attention

    q, k, v, starts, *_, q_seq, q_pos = _packed_and_paged(LENS)
    ref = attention(q, k, v, q_seq, q_pos, kv_start=starts, split=False)
    with pytest.raises(ValueError, match="changes the bits"):
        attention(q, k, v, q_seq, q_pos, kv_start=starts, q_tokens=4)
    for qt in (1, 2, 4):  # 8-32 row programs: another MMA, other bits (H200: 107-118 of 4,918 rows)
        small = attention(
            q, k, v, q_seq, q_pos, kv_start=starts, split=False, q_tokens=qt, check=False
        )
        assert (small != ref).any(-1).any(-1).sum() > 0, qt


def test_decode_batches_of_any_composition_give_the_training_bits():
    from topl.kernels.gpu.attention import attention, paged_step

    q, k, v, starts, ck, cv, table, q_seq, q_pos = _packed_and_paged(LENS, seed=1)
    train = attention(q, k, v, q_seq, q_pos, kv_start=starts)
    last = [int(starts[s]) + n - 1 for s, n in enumerate(LENS)]
    tables = [[int(p) for p in table[s][: -(-n // 128)]] for s, n in enumerate(LENS)]
    for order in (list(range(len(LENS))), [6, 5, 2, 0], [3], [0, 1, 2, 3, 4, 5, 6] * 5):
        idx = torch.tensor([last[s] for s in order], device="cuda")
        out = paged_step(
            q[idx],
            ck,
            cv,
            [tables[s] for s in order],
            [(i, i + 1) for i in range(len(order))],
            [LENS[s] - 1 for s in order],
            128,
        )
        assert torch.equal(out, train[idx]), order
    # a continuous-batching step: prefill chunks and decode rows in one call
    chunk = list(range(int(starts[5]) + 512, int(starts[5]) + 640))  # rows 512..639 of sequence 5
    idx = torch.tensor([last[0], last[4]] + chunk + [last[6]], device="cuda")
    spans = [(0, 1), (1, 2), (2, 2 + len(chunk)), (2 + len(chunk), 3 + len(chunk))]
    pos = [LENS[0] - 1, LENS[4] - 1] + list(range(512, 640)) + [LENS[6] - 1]
    out = paged_step(q[idx], ck, cv, [tables[0], tables[4], tables[5], tables[6]], spans, pos, 128)
    assert torch.equal(out, train[idx])


def test_attention_matches_sdpa():
    from topl.kernels.gpu.attention import attention

    torch.manual_seed(0)
    n, h, kvh, d = 513, H, KVH, D
    q = torch.randn(n, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (
        torch.randn(n, kvh, d, device="cuda", dtype=torch.bfloat16),
        torch.randn(n, kvh, d, device="cuda", dtype=torch.bfloat16),
    )
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        is_causal=True,
        enable_gqa=True,
    )
    for split in (False, True):
        ours = attention(
            q,
            k,
            v,
            [0] * n,
            torch.arange(n).cuda(),
            kv_start=torch.zeros(1, dtype=torch.int32).cuda(),
            split=split,
        )
        torch.testing.assert_close(ours, ref[0].transpose(0, 1), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("k, n", [QKV, O_PROJ, (HID, VOCAB)])
def test_bi_matmul_rows_do_not_depend_on_m(k, n):
    from topl.kernels.gpu.ops import bi_matmul

    torch.manual_seed(0)
    x = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    ref = bi_matmul(x[:1], w)
    for m in (16, 64, 65, 128, 256, 1024, 8192):
        assert torch.equal(bi_matmul(x[:m], w)[:1], ref), m
    torch.testing.assert_close(ref.float(), (x[:1] @ w.t()).float(), atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("k, n", [QKV, O_PROJ, GATE_UP])
def test_bi_matmul_every_tile_plan_gives_the_same_bits(k, n):
    """The plan may follow M (PLANS) because no plan changes an element's additions: every plan,
    TMA-fed or pointer-fed, on the same rows, every element compared."""
    from topl.kernels.gpu.mm_plans import MM_CONFIG, PLANS, SMALL_BN, TMA_PLANS
    from topl.kernels.gpu.ops import bi_matmul

    torch.manual_seed(0)
    x = torch.randn(1000, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    plans = [(kind == "tma", p) for _, kind, p in PLANS] + [(True, p) for _, p in TMA_PLANS]
    plans += [(False, (64, bn, 128, 4, 4)) for bn in SMALL_BN]
    ref = bi_matmul(x, w, plan=MM_CONFIG, tma=False)
    for tma, p in plans:
        assert torch.equal(bi_matmul(x, w, plan=p, tma=tma), ref), (tma, p)
    # the transposed tile (W's rows on the MMA's 64-row side), pointer- or TMA-fed
    for p, desc in itertools.product(
        ((16, 64, 256, 4, 3), (64, 64, 128, 4, 4), (128, 64, 64, 4, 4), (128, 128, 64, 8, 3)),
        (False, True),
    ):
        got = bi_matmul(x, w, plan=p, tma=False, swap=True, desc=desc)
        assert torch.equal(got, ref), ("swap", p, desc)


def test_rms_norm_and_log_softmax_rows_do_not_depend_on_the_batch():
    from topl.kernels.gpu.ops import log_softmax, rms_norm

    torch.manual_seed(0)
    x = torch.randn(300, HID, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(HID, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(rms_norm(x[:1], w, 1e-6), rms_norm(x, w, 1e-6)[:1])
    z = torch.randn(64, VOCAB, device="cuda")
    assert torch.equal(log_softmax(z[:1]), log_softmax(z)[:1])
    torch.testing.assert_close(log_softmax(z), torch.log_softmax(z, -1), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
@pytest.mark.parametrize("layers", [2, 4])
def test_engines_bitwise_equal_on_gpu_at_qwen3_30b_widths(moe, layers):
    from topl.kernels.alignment import Alignment
    from topl.kernels.gpu import paged_hook
    from topl.kernels.model import Model, sides
    from topl.kernels.probe import make_requests, probe

    model = Model.random(arch(layers, moe), seed=0).to("cuda")
    reqs = make_requests(12, VOCAB, seed=0, min_len=20, max_len=300, max_new=40)
    assert (
        paged_hook(model, sides(Alignment(kv_tile=128))[1], 128) is not None
    )  # batched paged decode
    out = probe(
        model,
        Alignment(kv_tile=128),
        requests=reqs,
        block_size=128,
        chunked_prefill=True,
        max_num_batched_tokens=512,
        micro_batch=4,
    )
    assert out["distinct_batch_sizes"] > 3
    assert out["max_abs_logprob_diff"] == 0.0 and out["bitwise_equal_fraction"] == 1.0, out
    off = probe(
        model,
        Alignment(kv_tile=128, mode="off", **{s: False for s in Alignment.SWITCHES}),
        requests=make_requests(12, VOCAB, seed=0, min_len=20, max_len=300, max_new=40),
        block_size=128,
        max_num_batched_tokens=512,
        micro_batch=4,
    )
    assert off["max_abs_logprob_diff"] > 0


def test_rollout_batched_paged_decode_one_prompt_alone_or_in_a_batch():
    """The GPU rollout runs every request of a step through one paged kernel call; a request's
    log-probs are the same alone and in a batch of 32 (arriving at different steps), and equal the
    training recompute."""
    from topl.kernels.alignment import Alignment
    from topl.kernels.model import Model, sides
    from topl.kernels.probe import make_requests
    from topl.kernels.rollout import RolloutEngine, SamplingParams
    from topl.kernels.training import TrainingEngine

    model = Model.random(arch(2, False), seed=0).to("cuda")
    train, roll = sides(Alignment(kv_tile=128))

    def run(reqs, batched=True):
        eng = RolloutEngine(model, roll, 128, max_num_batched_tokens=1024)
        assert eng.paged is not None
        calls = []
        hook = eng.paged
        eng.paged = lambda q, *a: calls.append(q.shape[0]) or hook(q, *a)
        eng.generate(reqs, SamplingParams())
        assert not batched or len(set(calls)) > 3  # batched, the composition changing
        return reqs

    batch = run(make_requests(32, VOCAB, seed=3, min_len=100, max_len=400, max_new=24))
    alone = run(
        [
            r
            for r in make_requests(32, VOCAB, seed=3, min_len=100, max_len=400, max_new=24)
            if r.id == 7
        ],
        batched=False,
    )[0]
    assert alone.output == batch[7].output and alone.logprobs == batch[7].logprobs
    lp = TrainingEngine(model, train, 4).logprobs(
        [r.tokens for r in batch], [len(r.prompt) for r in batch]
    )
    assert all(torch.equal(torch.tensor(r.logprobs), x.cpu()) for r, x in zip(batch, lp))
