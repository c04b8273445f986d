"""GPU (Triton) kernels: bitwise parity between training, prefill and paged decode, batch
invariance, and the reference engines on CUDA. Skipped without CUDA (CI has none)."""
import types

import pytest
import torch

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("triton")
pytestmark = cuda

QWEN3_30B_WIDTHS = dict(hidden_size=2048, intermediate_size=6144, num_heads=32, num_kv_heads=4, head_dim=128,
                        vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False,
                        max_position_embeddings=40960, attention="gqa", sliding_window=None)


def arch(layers: int, moe: bool):
    extra = dict(num_experts=128, experts_per_token=8, moe_intermediate_size=768) if moe else \
        dict(num_experts=0, experts_per_token=0, moe_intermediate_size=0)
    return types.SimpleNamespace(name="qwen3_30b_a3b_widths", num_layers=layers, **QWEN3_30B_WIDTHS, **extra)


def test_training_prefill_and_paged_decode_are_bitwise_equal():
    from topl.kernels.gpu.attention import attention

    torch.manual_seed(0)
    h, kvh, d, tile = 32, 4, 128, 128
    lens = [1, 127, 128, 129, 700, 1500]
    k = torch.randn(sum(lens), kvh, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    q = torch.randn(sum(lens), h, d, device="cuda", dtype=torch.bfloat16)
    starts = torch.tensor([0] + lens[:-1]).cumsum(0)
    q_seq = [s for s, n in enumerate(lens) for _ in range(n)]
    q_pos = torch.cat([torch.arange(n) for n in lens]).cuda()
    train = attention(q, k, v, q_seq, q_pos, kv_start=starts.to(torch.int32).cuda(), tile=tile)
    # the same K/V in a paged cache with a shuffled block table
    max_blocks = max(-(-n // tile) for n in lens)
    n_blocks = sum(-(-n // tile) for n in lens)
    perm = torch.randperm(n_blocks)
    cache_k = torch.zeros(n_blocks, tile, kvh, d, device="cuda", dtype=torch.bfloat16)
    cache_v = torch.zeros_like(cache_k)
    table = torch.zeros(len(lens), max_blocks, dtype=torch.int32)
    b = 0
    for s, n in enumerate(lens):
        for j in range(-(-n // tile)):
            page = int(perm[b]); b += 1
            table[s, j] = page
            lo, hi = int(starts[s]) + j * tile, int(starts[s]) + min((j + 1) * tile, n)
            cache_k[page, : hi - lo], cache_v[page, : hi - lo] = k[lo:hi], v[lo:hi]
    table = table.cuda()
    prefill = attention(q, cache_k, cache_v, q_seq, q_pos, block_table=table, tile=tile)
    assert torch.equal(prefill, train)
    # decode: the last token of each sequence alone, in batches of different composition
    last = torch.tensor([int(starts[s]) + n - 1 for s, n in enumerate(lens)])
    for order in (list(range(len(lens))), [5, 2, 0], [3]):
        idx = last[order]
        out = attention(q[idx], cache_k, cache_v, order, q_pos[idx], block_table=table, tile=tile)
        assert torch.equal(out, train[idx]), order
    # and the decode kernel with fewer rows per program gives the same bits
    out = attention(q[last], cache_k, cache_v, list(range(len(lens))), q_pos[last], block_table=table, tile=tile,
                    q_tokens=2)
    assert torch.equal(out, train[last])


def test_attention_matches_sdpa():
    from topl.kernels.gpu.attention import attention

    torch.manual_seed(0)
    n, h, kvh, d = 513, 32, 4, 128
    q = torch.randn(n, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn(n, kvh, d, device="cuda", dtype=torch.bfloat16), torch.randn(n, kvh, d, device="cuda", dtype=torch.bfloat16)
    ours = attention(q, k, v, [0] * n, torch.arange(n).cuda(), kv_start=torch.zeros(1, dtype=torch.int32).cuda())
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                                           v.transpose(0, 1)[None], is_causal=True, enable_gqa=True)
    torch.testing.assert_close(ours, ref[0].transpose(0, 1), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("k, n", [(2048, 5120), (4096, 2048), (2048, 151936)])
def test_bi_matmul_rows_do_not_depend_on_m(k, n):
    from topl.kernels.gpu.ops import bi_matmul

    torch.manual_seed(0)
    x = torch.randn(8192, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    ref = bi_matmul(x[:1], w)
    for m in (16, 128, 1024, 8192):
        assert torch.equal(bi_matmul(x[:m], w)[:1], ref), m
    torch.testing.assert_close(ref.float(), (x[:1] @ w.t()).float(), atol=5e-2, rtol=2e-2)


def test_rms_norm_and_log_softmax_rows_do_not_depend_on_the_batch():
    from topl.kernels.gpu.ops import log_softmax, rms_norm

    torch.manual_seed(0)
    x = torch.randn(300, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(rms_norm(x[:1], w, 1e-6), rms_norm(x, w, 1e-6)[:1])
    z = torch.randn(64, 151936, device="cuda")
    assert torch.equal(log_softmax(z[:1]), log_softmax(z)[:1])
    torch.testing.assert_close(log_softmax(z), torch.log_softmax(z, -1), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
@pytest.mark.parametrize("layers", [2, 4])
def test_engines_bitwise_equal_on_gpu_at_qwen3_30b_widths(moe, layers):
    from topl.kernels.alignment import Alignment
    from topl.kernels.model import Model
    from topl.kernels.probe import make_requests, probe

    model = Model.random(arch(layers, moe), seed=0).to("cuda")
    reqs = make_requests(12, 151936, seed=0, min_len=20, max_len=300, max_new=40)
    out = probe(model, Alignment(kv_tile=128), requests=reqs, block_size=128, chunked_prefill=True,
                max_num_batched_tokens=512, micro_batch=4)
    assert out["distinct_batch_sizes"] > 3
    assert out["max_abs_logprob_diff"] == 0.0 and out["bitwise_equal_fraction"] == 1.0, out
    off = probe(model, Alignment(kv_tile=128, mode="off", attention_semantics=False, reduction_order=False,
                                 softmax_tiling=False, fp32_critical_path=False, batch_invariant=False,
                                 fused_ops_matched=False, moe_fixed_combine=False, tp_aligned_reduction=False),
                requests=make_requests(12, 151936, seed=0, min_len=20, max_len=300, max_new=40), block_size=128,
                max_num_batched_tokens=512, micro_batch=4)
    assert off["max_abs_logprob_diff"] > 0
