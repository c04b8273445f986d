"""The cost model of `plan --rank` against its own runs: Spearman's rank correlation between the
predicted step (docs/rank.md) and the measured median step of each point of a sweep.

    python scripts/bench_rank.py SWEEP_DIR          # a sweep already run
    python scripts/bench_rank.py --run [--steps 4]  # runs the local sweep below first (~1-2 min)

The local sweep: the embedded default on the reference engines (CPU), on A2's chip figures so that
each point has a prediction, over what the local engine runs differently: the rollout's batching
(`rollout.max_num_seqs`) and the sequences a step (`rollout.n`). The prediction is for an NPU and the
measurement a CPU: only the order is compared (docs/rank.md says what the model leaves out).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SWEEP = ["rollout.max_num_seqs=4,8,24", "rollout.n=2,4,8", "cluster.soc=A2"]


def ranks(xs: list[float]) -> list[float]:
    """1-based ranks, ties given their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a: list[float], b: list[float]) -> float:
    """Pearson's correlation of the ranks (exact with ties)."""
    ra, rb = ranks(a), ranks(b)
    n = len(ra)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb)


def topl(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "topl.launcher.cli", *args], capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(out.stderr)
    return out.stdout


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("sweep", nargs="?")
    p.add_argument("--run", action="store_true")
    p.add_argument("--steps", type=int, default=4)
    a = p.parse_args()
    if a.run:
        root = Path(tempfile.mkdtemp(prefix="topl-rank-"))
        topl("launch", "-m", *SWEEP, f"train.steps={a.steps}", f"run_root={root}")
        (sweep,) = (root / "multirun").iterdir()
    elif a.sweep:
        sweep = Path(a.sweep)
    else:
        p.error("give a SWEEP_DIR or --run")
    rows = json.loads(topl("compare", str(sweep), "--json"))["runs"]
    rows = [r for r in rows if r["predicted_step_s"] and r["step_s_median"]]
    for r in sorted(rows, key=lambda r: r["predicted_step_s"]):
        label = " ".join(f"{k}={v}" for k, v in r["swept"].items())
        print(
            f"{label:40} predicted {r['predicted_step_s']:.3g} s  measured {r['step_s_median']:.3g} s"
        )
    rho = spearman([r["predicted_step_s"] for r in rows], [r["step_s_median"] for r in rows])
    print(f"{len(rows)} points, Spearman rho (predicted vs measured order) = {rho:.2f}")


if __name__ == "__main__":
    main()
