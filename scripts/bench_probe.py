"""Time `topl probe`'s two engines on a 2-layer model at Qwen3-30B-A3B widths (CPU or GPU).

    python scripts/bench_probe.py [--moe] [--device cpu|cuda] [--requests 4]

Prints the rollout and training-recompute times, tokens, and whether the log-probs are bitwise
equal (strict), next to the same run with every alignment switch off (the baseline, same inputs).
"""

from __future__ import annotations

import argparse
import time
import types

import torch

from topl.kernels.alignment import Alignment
from topl.kernels.model import QWEN3_30B_A3B, Model
from topl.kernels.probe import make_requests, probe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--moe", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--requests", type=int, default=4)
    a = ap.parse_args()
    experts = {} if a.moe else {"num_experts": 0}  # dense: the same widths without experts
    arch = types.SimpleNamespace(
        name="qwen3_30b_a3b_2layers", **{**QWEN3_30B_A3B, "num_layers": 2, **experts}
    )
    t = time.perf_counter()
    model = Model.random(arch, seed=0).to(a.device)
    print(
        f"model: 2 layers at Qwen3-30B-A3B widths ({'MoE' if a.moe else 'dense'}), {a.device}, "
        f"built in {time.perf_counter() - t:.1f} s"
    )
    off = Alignment(kv_tile=128, mode="off", **{s: False for s in Alignment.SWITCHES})
    for name, al in (("strict", Alignment(kv_tile=128)), ("off (baseline)", off)):
        reqs = make_requests(a.requests, arch.vocab_size, 0, min_len=16, max_len=200, max_new=16)
        out = probe(
            model,
            al,
            requests=reqs,
            block_size=128,
            max_num_batched_tokens=256,
            micro_batch=a.requests,
        )
        total = out["rollout_s"] + out["train_s"]
        print(
            f"{name:15s} rollout {out['rollout_s']:.2f} s  training {out['train_s']:.2f} s  total {total:.2f} s  "
            f"tokens {out['tokens']}  max|Δlogp| {out['max_abs_logprob_diff']:.3e}"
        )


if __name__ == "__main__":
    main()
