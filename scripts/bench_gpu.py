"""What bitwise consistency costs on a GPU: aligned (Triton, batch-invariant) / unaligned baseline.

    python scripts/bench_gpu.py [--quick]

One run, every figure measured here: each row prints the aligned time, the baseline time measured
in the same run, their ratio, and the bytes/FLOPs floor of the shape (H200: 989 TFLOP/s dense bf16,
4.8 TB/s HBM3e; the floor is the larger of FLOPs/peak and bytes/bandwidth).
Shapes: Qwen3-30B-A3B attention (32 query heads, 4 KV heads, head dim 128) and projections.
"""

# ruff: noqa: B023  (each lambda is timed inside the iteration that defines it)
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import triton

from topl.kernels.gpu.attention import attention, blocks_for
from topl.kernels.gpu.mm_plans import MM_CONFIG, TMA_PLANS, small_plan
from topl.kernels.gpu.ops import K_CHUNK, bi_matmul
from topl.kernels.model import QWEN3_30B_A3B as Q

PEAK_FLOPS, PEAK_BW = 989e12, 4.8e12
H, KVH, D, HID = Q["num_heads"], Q["num_kv_heads"], Q["head_dim"], Q["hidden_size"]
QKV_N, TILE = (H + 2 * KVH) * D, 128


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e-3  # seconds


def graph_bench(fn) -> float:
    fn()  # compile outside the capture
    # do_bench_cudagraph runs on a stream of its own: let this call end first (split-K and the
    # fused fold share one arrival-count buffer per device, which two streams at once would race on)
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=100) * 1e-3


def floor(flops: float, nbytes: float) -> float:
    return max(flops / PEAK_FLOPS, nbytes / PEAK_BW)


def row(name: str, t_aligned: float, t_base: float, fl: float) -> None:
    print(
        f"| {name} | {t_aligned * 1e3:.3f} | {t_base * 1e3:.3f} | {t_aligned / t_base:.2f} | {fl * 1e3:.3f} |"
    )


def sdpa_flash(q, k, v, **kw):
    """SDPA forced onto its flash backend (K/V heads expanded: the flash path's GQA form)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)

    def run():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, **kw)

    return run


def prefill(batches, seqs):
    print("\n### Training / prefill attention (causal, varlen) vs torch SDPA\n")
    print(
        "*aligned*: the default kernel with prebuilt program descriptors (prefill.py's "
        "warp-specialised Gluon kernel: a loader warp and two 64-row warpgroups); *`_attn`*: the "
        "Triton kernel it replaced (`gluon=False`: the same bits, *bits* column); *masked-tile "
        "kernel*: `_attn` with every tile masked and loaded through pointers (`whole=False, "
        "tma=False`); *engine call*: `attention()` as the engines call it (descriptors from the "
        "Python token list every call). SDPA default: `F.scaled_dot_product_attention(q, k, v, "
        "is_causal=True, enable_gqa=True)` on [B, H, S, D], the backend torch picks; flash: the flash "
        "backend forced (K/V heads expanded). Times with launch (`do_bench`); *GPU*: the aligned "
        "call as a graph-capturing engine makes it (`graph=True`) and SDPA default, replayed in a "
        "CUDA graph (no host time); the aligned call is prefill_items.py's one program per SM for short "
        "runs (tq <= 1,024 x sequences, where PREFILL_ITEMS) and prefill.py's one program per run "
        "otherwise; *persistent* / *per run*: the GPU time with `persistent=True` / `persistent=False` "
        "forced at every shape (all three give the same bits, *bits* column).\n"
    )
    print(
        "| shape | aligned ms | TFLOP/s | `_attn` ms | masked-tile kernel ms | 256-row programs ms | "
        "engine call ms | SDPA default ms | SDPA flash ms | vs default | `_attn` vs default | "
        "vs flash | GPU: aligned / SDPA default us | GPU ratio | GPU persistent us | persistent ratio | "
        "GPU per run us | per-run ratio | bits | floor ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
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

            def aligned(**kw):
                return attention(
                    q, k, v, q_seq, q_pos, kv_start=starts, tile=TILE, descriptors=desc,
                    split=False, **kw,
                )  # fmt: skip

            ta, tt = bench(aligned), bench(lambda: aligned(gluon=False))
            tm = bench(lambda: aligned(whole=False, tma=False))
            d256 = [
                torch.tensor(x, dtype=torch.int32, device="cuda") for x in blocks_for(q_seq, 32)
            ]

            def rows256():
                return attention(
                    q, k, v, q_seq, q_pos, kv_start=starts, tile=TILE, descriptors=d256,
                    split=False, q_tokens=32, warps=8, stages=2,
                )  # fmt: skip

            t256 = bench(rows256)
            out = aligned()
            same = torch.equal(out, attention(q, k, v, q_seq, q_pos, kv_start=starts))
            same = same and torch.equal(out, aligned(gluon=False))
            same = same and torch.equal(out, aligned(tma=True, persistent=True))
            same = same and torch.equal(out, aligned(tma=True, persistent=False))
            te = bench(lambda: attention(q, k, v, q_seq, q_pos, kv_start=starts, tile=TILE))

            def sdpa():
                return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)

            td, tf = bench(sdpa), bench(sdpa_flash(qs, ks, vs, is_causal=True))
            ga, gd = graph_bench(lambda: aligned(graph=True)), graph_bench(sdpa)
            gp = graph_bench(lambda: aligned(graph=True, persistent=True))
            gr = graph_bench(lambda: aligned(graph=True, persistent=False))
            fl_n = 4 * b * s * s * H * D / 2
            fl = floor(fl_n, 2 * (q.numel() * 2 + k.numel() * 4))
            print(
                f"| B{b} S{s} | {ta * 1e3:.3f} | {fl_n / ta / 1e12:.0f} | {tt * 1e3:.3f} | {tm * 1e3:.3f} | {t256 * 1e3:.3f} | {te * 1e3:.3f} | {td * 1e3:.3f} | {tf * 1e3:.3f} | "
                f"{ta / td:.2f} | {tt / td:.2f} | {ta / tf:.2f} | {ga * 1e6:.1f} / {gd * 1e6:.1f} | {ga / gd:.2f} | {gp * 1e6:.1f} | {gp / gd:.2f} | {gr * 1e6:.1f} | {gr / gd:.2f} | {same} | {fl * 1e3:.3f} |"
            )


def decode(batches, ctxs):
    print("\n### Paged decode (one token per sequence) vs SDPA on a contiguous KV cache\n")
    print(
        "GPU time of one call replayed in a CUDA graph (`triton.testing.do_bench_cudagraph`, as decode "
        "engines run it), every column. *split-KV*: tile states in parallel programs + the in-order "
        "fold in a second launch (`fused=False`; Gluon's `_decode_states` and `_fold_states`: K and "
        "V on one barrier; the fold's factors by a prefix max, its tile states copied to shared "
        "memory, then its fma chain; one warp per 32 channels of a head); *fused*: the last program of each "
        "run folds (`fused=True`); `attention()` takes the second launch (the fused fold "
        "only without Gluon, up to 8 tiles); *one pass*: one program per "
        "(sequence, KV head) walks every tile; *bits*: split-KV and fused output equal to one pass. "
        "SDPA default: `F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`, q [B, H, 1, D]; "
        "flash: the flash backend forced.\n"
    )
    print(
        "| shape | split-KV ms | fused ms | one pass ms | SDPA default ms | SDPA flash ms | split vs "
        "default | fused vs default | one pass vs default | split vs flash | bits | floor ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for b in batches:
        for c in ctxs:
            nb = c // TILE
            cache_k = torch.randn(b * nb, TILE, KVH, D, device="cuda", dtype=torch.bfloat16)
            cache_v = torch.randn_like(cache_k)
            table = torch.randperm(b * nb, device="cuda").view(b, nb).to(torch.int32)
            q = torch.randn(b, H, D, device="cuda", dtype=torch.bfloat16)
            pos = torch.full((b,), c - 1, device="cuda", dtype=torch.int32)
            seqs = list(range(b))
            qt = 64 // (H // KVH)
            desc = [torch.tensor(x, dtype=torch.int32, device="cuda") for x in blocks_for(seqs, qt)]

            def ours(split, **kw):
                return lambda: attention(
                    q,
                    cache_k,
                    cache_v,
                    seqs,
                    pos,
                    block_table=table,
                    tile=TILE,
                    q_tokens=qt,
                    descriptors=desc,
                    split=split,
                    max_pos=c - 1,
                    graph=True,
                    **kw,
                )

            ts, t1 = graph_bench(ours(True, fused=False)), graph_bench(ours(False))
            tfu = graph_bench(ours(True, fused=True))
            one = ours(False)()
            same = all(torch.equal(ours(True, fused=f)(), one) for f in (False, True))
            kc = cache_k.view(b, c, KVH, D).transpose(1, 2).contiguous()
            vc = cache_v.view(b, c, KVH, D).transpose(1, 2).contiguous()
            qd = q[:, :, None, :]
            td = graph_bench(lambda: F.scaled_dot_product_attention(qd, kc, vc, enable_gqa=True))
            tf = graph_bench(sdpa_flash(qd, kc, vc))
            fl = floor(4 * b * c * H * D, 2 * b * c * KVH * D * 2)
            print(
                f"| B{b} ctx{c} | {ts * 1e3:.3f} | {tfu * 1e3:.3f} | {t1 * 1e3:.3f} | {td * 1e3:.3f} | "
                f"{tf * 1e3:.3f} | {ts / td:.2f} | {tfu / td:.2f} | {t1 / td:.2f} | {ts / tf:.2f} | "
                f"{same} | {fl * 1e3:.3f} |"
            )


def grid():
    """Which launch settings change the bits: rows differing from the reference setting on the
    parity test's data (7 sequences, 4,918 rows)."""
    lens = [1, 127, 128, 129, 700, 1500, 2333]
    n = sum(lens)
    q = torch.randn(n, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(n, KVH, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    q_seq = [s for s, m in enumerate(lens) for _ in range(m)]
    q_pos = torch.cat([torch.arange(m) for m in lens]).to(torch.int32).cuda()
    starts = torch.tensor([0] + lens[:-1]).cumsum(0).to(torch.int32).cuda()
    ref = attention(q, k, v, q_seq, q_pos, kv_start=starts, split=False)
    print("\n### Launch settings vs the bits (rows differing from 128 rows / 8 warps / 3 stages)\n")
    print(
        "| rows per program (queries x 8 heads) | warps | stages | split-KV | rows differing | max abs diff "
        "|\n|---|---|---|---|---|---|"
    )
    for qt in (1, 2, 4, 8, 16, 32):
        for warps in (4, 8):
            for stages in (2, 3, 4):
                for split in (False, True):
                    if split and stages != 2:  # the split path runs at 2 stages
                        continue
                    try:
                        out = attention(
                            q,
                            k,
                            v,
                            q_seq,
                            q_pos,
                            kv_start=starts,
                            q_tokens=qt,
                            warps=warps,
                            stages=stages,
                            split=split,
                            check=False,
                        )
                    except Exception as e:  # noqa: BLE001  (a setting Triton cannot compile: say so)
                        print(
                            f"| {qt * 8} | {warps} | {stages} | {split} | fails: {type(e).__name__} | |"
                        )
                        continue
                    bad = int((out != ref).any(-1).any(-1).sum())
                    diff = (out.float() - ref.float()).abs().max().item()
                    print(
                        f"| {qt * 8} | {warps} | {stages} | {split} | {bad} of {n} | {diff:.1e} |"
                    )


def matmul(ms):
    print("\n### Batch-invariant matmul vs torch.matmul (cuBLAS)\n")
    print(
        "*aligned*: `bi_matmul` as the engines call it (K in chunks of `K_CHUNK` added in order; plan "
        "by M: up to M = 16 the transposed tile (W's rows on the MMA's 64-row side, `swap_plan`), "
        "pointer-fed; up to M = 256 the TMA-fed transposed tile where *GPU* runs pass `graph=True` "
        "(64-row token tiles split by `small_plan` in eager calls), the persistent TMA kernel above; "
        "every plan the same bits); *before*: the previous round's plan (64-row token tiles up to "
        "M = 256), the same order; *fixed*: the "
        "one 128x128x64 pointer-fed plan for every M (what non-Hopper GPUs run); *bits*: aligned "
        "equal to fixed. *GPU*: one call replayed in a CUDA graph; *with launch*: `do_bench`, Python "
        "launch included (small M is launch-bound).\n"
    )
    print(
        "| shape (M x K -> N) | aligned GPU ms | before GPU ms | cuBLAS GPU ms | aligned vs cuBLAS | "
        "before vs cuBLAS | fixed plan GPU ms | bits | aligned with launch ms | cuBLAS with launch "
        "ms | floor ms |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for k, n, what in (
        (HID, QKV_N, "qkv_proj"),
        (H * D, HID, "o_proj"),
        (HID, 2 * Q["moe_intermediate_size"], "expert gate+up"),
    ):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ta = graph_bench(lambda: bi_matmul(x, w, graph=True))
            tb = graph_bench(lambda: x @ w.t())
            t0 = graph_bench(lambda: bi_matmul(x, w, graph=True, **_before(m, n, k)))
            fixed = dict(plan=MM_CONFIG, tma=False, split=0)
            tp = graph_bench(lambda: bi_matmul(x, w, **fixed))
            same = torch.equal(bi_matmul(x, w, graph=True), bi_matmul(x, w, **fixed))
            la, lb = bench(lambda: bi_matmul(x, w)), bench(lambda: x @ w.t())
            fl = floor(2 * m * n * k, 2 * (m * k + n * k + m * n))
            print(
                f"| {what} {m}x{k}->{n} | {ta * 1e3:.3f} | {t0 * 1e3:.3f} | {tb * 1e3:.3f} | "
                f"{ta / tb:.2f} | {t0 / tb:.2f} | {tp * 1e3:.3f} | {same} | {la * 1e3:.3f} | "
                f"{lb * 1e3:.3f} | {fl * 1e3:.3f} |"
            )


def matmul_plans():
    """Each persistent TMA plan's time at M = 16 and M = 8192 (qkv_proj), and whether it gives the
    bits of the first."""
    print(f"\n### Matmul tile plans (qkv_proj {HID} -> {QKV_N}): time and bits vs the first plan\n")
    print(
        "| plan (BM, BN, BK, warps, stages) | M=16 ms | M=8192 ms | same bits as plan 0 (M=8192) |\n|---|---|---|---|"
    )
    w = torch.randn(QKV_N, HID, device="cuda", dtype=torch.bfloat16) * 0.02
    x = torch.randn(8192, HID, device="cuda", dtype=torch.bfloat16)
    plans = [p for _, p in TMA_PLANS] + [
        (64, 64, 128, 4, 4),
        (64, 128, 64, 4, 4),
        (128, 128, 128, 8, 3),
        (64, 256, 64, 4, 3),
        (128, 64, 64, 4, 4),
    ]
    ref = bi_matmul(x, w, plan=plans[0], tma=True)
    for p in plans:
        t16 = bench(lambda: bi_matmul(x[:16], w, plan=p, tma=True))
        t8k = bench(lambda: bi_matmul(x, w, plan=p, tma=True))
        same = torch.equal(bi_matmul(x, w, plan=p, tma=True), ref)
        print(f"| {p} | {t16 * 1e3:.3f} | {t8k * 1e3:.3f} | {same} |")
    for p in (MM_CONFIG, (64, 64, 128, 4, 4)):
        print(
            f"| pointer-fed {tuple(p)} | | | {torch.equal(bi_matmul(x, w, plan=p, tma=False), ref)} |"
        )


def rollout(n_req: int):
    import types

    from topl.kernels.alignment import Alignment
    from topl.kernels.model import Model, sides
    from topl.kernels.probe import make_requests
    from topl.kernels.rollout import RolloutEngine, SamplingParams

    print("\n### Reference rollout engine, 2 layers at Qwen3-30B-A3B widths (MoE), tokens/s\n")
    print("| engine | aligned tok/s | unaligned tok/s | ratio (time) |\n|---|---|---|---|")
    arch = types.SimpleNamespace(name="w", **{**Q, "num_layers": 2})
    model = Model.random(arch, seed=0).to("cuda")
    off = Alignment(kv_tile=TILE, mode="off", **{s: False for s in Alignment.SWITCHES})
    res = {}
    for name, a in (("aligned", Alignment(kv_tile=TILE)), ("unaligned", off)):
        warm = make_requests(
            4, arch.vocab_size, 1, min_len=64, max_len=300, max_new=4
        )  # compile first
        RolloutEngine(model, sides(a)[1], TILE, max_num_batched_tokens=2048).generate(
            warm, SamplingParams()
        )
        reqs = make_requests(n_req, arch.vocab_size, 0, min_len=64, max_len=512, max_new=64)
        eng = RolloutEngine(model, sides(a)[1], TILE, max_num_batched_tokens=2048)
        torch.cuda.synchronize()
        t = time.perf_counter()
        eng.generate(reqs, SamplingParams())
        torch.cuda.synchronize()
        res[name] = sum(len(r.output) for r in reqs) / (time.perf_counter() - t)
    print(
        f"| continuous batching, {n_req} requests | {res['aligned']:.0f} | {res['unaligned']:.0f} | "
        f"{res['unaligned'] / res['aligned']:.2f} |"
    )


def _before(m: int, n: int, k: int) -> dict:
    """Round two's plan for M (GPU columns: graph=True), to time it beside the new one: up to
    M = 256 64-row token tiles, pointer-fed, split by `small_plan`; above it the same plans."""
    if m <= 256:
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        bn, cpp = small_plan(m, n, triton.cdiv(k, K_CHUNK), sms)
        return {"plan": (64, bn, 128, 4, 3), "tma": False, "split": cpp}
    return {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--only",
        choices=["grid", "prefill", "decode", "matmul", "rollout"],
        default=None,
    )
    a = ap.parse_args()
    torch.manual_seed(0)
    print(
        f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}"
    )
    if a.only in (None, "grid"):
        grid()
    if a.only in (None, "prefill"):
        prefill([1, 4], [1024, 4096] if a.quick else [1024, 4096, 8192])
    if a.only in (None, "decode"):
        decode([1, 4, 16, 64], [1024, 4096, 16384] if not a.quick else [1024, 4096])
    if a.only in (None, "matmul"):
        matmul([1, 16, 128, 1024, 8192])
        matmul_plans()
    if a.only in (None, "rollout"):
        rollout(16 if a.quick else 32)


if __name__ == "__main__":
    main()
