"""What bitwise consistency costs on a GPU: aligned (Triton, batch-invariant) / unaligned baseline.

    python scripts/bench_gpu.py [--quick]

One run, every figure measured here: each row prints the aligned time, the baseline time measured
in the same run, their ratio, and the bytes/FLOPs floor of the shape (H200: 989 TFLOP/s dense bf16,
4.8 TB/s HBM3e; the floor is the larger of FLOPs/peak and bytes/bandwidth).
Shapes: Qwen3-30B-A3B attention (32 query heads, 4 KV heads, head dim 128) and projections.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import triton

from topl.kernels.gpu.attention import attention, blocks_for
from topl.kernels.gpu.ops import bi_matmul

PEAK_FLOPS, PEAK_BW = 989e12, 4.8e12
H, KVH, D, TILE = 32, 4, 128, 128


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e-3  # seconds


def floor(flops: float, nbytes: float) -> float:
    return max(flops / PEAK_FLOPS, nbytes / PEAK_BW)


def row(name: str, t_aligned: float, t_base: float, fl: float) -> None:
    print(f"| {name} | {t_aligned * 1e3:.3f} | {t_base * 1e3:.3f} | {t_aligned / t_base:.2f} | {fl * 1e3:.3f} |")


def prefill(batches, seqs):
    print("\n### Training / prefill attention (causal, varlen) vs torch SDPA (flash backend)\n")
    print("| shape | aligned ms | SDPA ms | ratio | floor ms |\n|---|---|---|---|---|")
    for b in batches:
        for s in seqs:
            q = torch.randn(b * s, H, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(b * s, KVH, D, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            q_seq = [i for i in range(b) for _ in range(s)]
            q_pos = torch.arange(s, device="cuda").repeat(b).to(torch.int32)
            starts = (torch.arange(b, device="cuda") * s).to(torch.int32)
            desc = [torch.tensor(x, dtype=torch.int32, device="cuda") for x in blocks_for(q_seq)]
            qs, ks, vs = (x.view(b, s, -1, D).transpose(1, 2) for x in (q, k, v))
            ta = bench(lambda: attention(q, k, v, q_seq, q_pos, kv_start=starts, tile=TILE, descriptors=desc))
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                ks_e, vs_e = ks.repeat_interleave(H // KVH, 1), vs.repeat_interleave(H // KVH, 1)
                tb = bench(lambda: F.scaled_dot_product_attention(qs, ks_e, vs_e, is_causal=True))
            fl = 4 * b * s * s * H * D / 2
            row(f"B{b} S{s}", ta, tb, floor(fl, 2 * (q.numel() * 2 + k.numel() * 4)))


def decode(batches, ctxs):
    print("\n### Paged decode (one token per sequence) vs SDPA on a contiguous KV cache\n")
    print("| shape | aligned (paged) ms | SDPA ms | ratio | floor ms |\n|---|---|---|---|---|")
    for b in batches:
        for c in ctxs:
            nb = c // TILE
            cache_k = torch.randn(b * nb, TILE, KVH, D, device="cuda", dtype=torch.bfloat16)
            cache_v = torch.randn_like(cache_k)
            table = torch.randperm(b * nb, device="cuda").view(b, nb).to(torch.int32)
            q = torch.randn(b, H, D, device="cuda", dtype=torch.bfloat16)
            pos = torch.full((b,), c - 1, device="cuda", dtype=torch.int32)
            seqs = list(range(b))
            desc = [torch.tensor(x, dtype=torch.int32, device="cuda") for x in blocks_for(seqs, 2)]
            ta = bench(lambda: attention(q, cache_k, cache_v, seqs, pos, block_table=table, tile=TILE, q_tokens=2,
                                         descriptors=desc))
            kc = cache_k.view(b, c, KVH, D).transpose(1, 2).contiguous()
            vc = cache_v.view(b, c, KVH, D).transpose(1, 2).contiguous()
            qd = q[:, :, None, :]
            tb = bench(lambda: F.scaled_dot_product_attention(qd, kc, vc, enable_gqa=True))
            nbytes = 2 * b * c * KVH * D * 2
            row(f"B{b} ctx{c}", ta, tb, floor(4 * b * c * H * D, nbytes))


def matmul(ms):
    print("\n### Batch-invariant matmul vs torch.matmul (cuBLAS)\n")
    print("| shape (M x K -> N) | aligned ms | cuBLAS ms | ratio | floor ms |\n|---|---|---|---|---|")
    for k, n, what in ((2048, 5120, "qkv_proj"), (4096, 2048, "o_proj"), (2048, 1536, "expert gate+up")):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ta = bench(lambda: bi_matmul(x, w))
            tb = bench(lambda: x @ w.t())
            row(f"{what} {m}x{k}->{n}", ta, tb, floor(2 * m * n * k, 2 * (m * k + n * k + m * n)))


def rollout(n_req: int):
    import types

    from topl.kernels.alignment import Alignment
    from topl.kernels.model import Model, sides
    from topl.kernels.probe import make_requests
    from topl.kernels.rollout import RolloutEngine, SamplingParams

    print("\n### Reference rollout engine, 2 layers at Qwen3-30B-A3B widths (MoE), tokens/s\n")
    print("| engine | aligned tok/s | unaligned tok/s | ratio (time) |\n|---|---|---|---|")
    arch = types.SimpleNamespace(name="w", num_layers=2, hidden_size=2048, intermediate_size=6144, num_heads=H,
                                 num_kv_heads=KVH, head_dim=D, vocab_size=151936, num_experts=128,
                                 experts_per_token=8, moe_intermediate_size=768, rms_norm_eps=1e-6, rope_theta=1e6,
                                 tie_word_embeddings=False, max_position_embeddings=40960, attention="gqa",
                                 sliding_window=None)
    model = Model.random(arch, seed=0).to("cuda")
    off = Alignment(kv_tile=TILE, mode="off", **{s: False for s in Alignment.SWITCHES})
    res = {}
    for name, a in (("aligned", Alignment(kv_tile=TILE)), ("unaligned", off)):
        reqs = make_requests(n_req, arch.vocab_size, 0, min_len=64, max_len=512, max_new=64)
        eng = RolloutEngine(model, sides(a)[1], TILE, max_num_batched_tokens=2048)
        torch.cuda.synchronize()
        t = time.perf_counter()
        eng.generate(reqs, SamplingParams())
        torch.cuda.synchronize()
        res[name] = sum(len(r.output) for r in reqs) / (time.perf_counter() - t)
    print(f"| continuous batching, {n_req} requests | {res['aligned']:.0f} | {res['unaligned']:.0f} | "
          f"{res['unaligned'] / res['aligned']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["prefill", "decode", "matmul", "rollout"], default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    if a.only in (None, "prefill"):
        prefill([1, 4], [1024, 4096] if a.quick else [1024, 4096, 8192])
    if a.only in (None, "decode"):
        decode([1, 16, 64], [1024, 4096])
    if a.only in (None, "matmul"):
        matmul([1, 16, 128, 1024, 8192])
    if a.only in (None, "rollout"):
        rollout(16 if a.quick else 32)


if __name__ == "__main__":
    main()
