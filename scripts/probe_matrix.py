"""Strict exactness over the numerics matrix: seeds x {tiny_dense, tiny_moe} x {bf16, fp16, fp32}
x chunked prefill on/off x batch 1 / 16, 600-token sequences. Every point must give max |Δ log p|
exactly 0.

    python scripts/probe_matrix.py                      # the full matrix (seeds 0..20), one process
    python scripts/probe_matrix.py --jobs 16 --json out.json
    python scripts/probe_matrix.py --seeds 0-2          # a smaller run

Exit code 1 if any point differs. (The quick subset runs in tests/numerics/test_numerics.py; the full matrix
with `pytest -m matrix`.)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")

MODELS, DTYPES, CHUNKED = (
    ("tiny_dense", "tiny_moe"),
    ("bfloat16", "float16", "float32"),
    (True, False),
)


def arch_of(name: str):
    from topl.launcher.compose.hydra import compose_job

    return compose_job([f"model={name}"]).to_object().model


def point(args) -> dict:
    name, seed, dtype, chunked, batch = args
    import torch

    torch.set_num_threads(1)
    from topl.kernels.probe import matrix_point

    t = time.perf_counter()
    out = matrix_point(arch_of(name), seed, dtype, chunked, batch)
    out["wall_s"] = time.perf_counter() - t
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-20", help="a range a-b or a comma list")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument(
        "--batches", default="1,16", help="requests per point, a comma list of 1 and 16"
    )
    ap.add_argument("--json", help="write every point here")
    a = ap.parse_args(argv)
    seeds = (
        range(int(a.seeds.split("-")[0]), int(a.seeds.split("-")[1]) + 1)
        if "-" in a.seeds
        else [int(s) for s in a.seeds.split(",")]
    )
    batches = [int(b) for b in a.batches.split(",")]
    points = [
        (m, s, d, c, b)
        for s, m, d, c, b in itertools.product(seeds, MODELS, DTYPES, CHUNKED, batches)
    ]
    t0 = time.perf_counter()
    results = []
    with ProcessPoolExecutor(a.jobs) as pool:
        for r in pool.map(point, points):  # in order; one line per point as it completes
            results.append(r)
            print(
                f"{r['model']} seed={r['seed']} {r['dtype']} chunked={r['chunked']} batch={r['batch']}: "
                f"max |Δ log p| = {r['max_abs_logprob_diff']:.3e} ({r['tokens']} tokens, {r['wall_s']:.1f} s)",
                flush=True,
            )
    bad = [r for r in results if r["max_abs_logprob_diff"] != 0]
    for r in bad:
        print(
            f"DIFFERS {r['model']} seed={r['seed']} {r['dtype']} chunked={r['chunked']} batch={r['batch']}: "
            f"max |Δ log p| = {r['max_abs_logprob_diff']:.3e}"
        )
    tokens = sum(r["tokens"] for r in results)
    print(
        f"{len(results)} points, {tokens} sampled tokens, {len(bad)} differ; "
        f"{time.perf_counter() - t0:.0f} s wall with {a.jobs} job(s), "
        f"{sum(r['wall_s'] for r in results):.0f} s of point time"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
