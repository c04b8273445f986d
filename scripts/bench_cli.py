"""CPU seconds and peak RSS of the everyday commands, each a fresh `topl` process as a user runs it,
next to a per-point Hydra compose + check baseline measured in the same run.

    python scripts/bench_cli.py [--quick] [--no-probe] [--markdown]

CPU = user + system seconds of the child (os.wait4), so a busy machine inflates it far less than
wall time; peak RSS = the child's ru_maxrss. Targets (docs/performance.md): `check` <= 0.3 s on
every shipped recipe and the default config; `plan` 10k <= 3 s and >= 300x the baseline; 100k
<= 30 s with peak RSS <= 150 MB.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

# 10 x 10 x 10 x 10 points on the seed's 30B strict recipe: layouts and the KV budget, most invalid
SWEEP_10K = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "train.tp=range(1,11)",
    "rollout.tp=range(1,11)",
    "train.pp=range(1,11)",
    "rollout.max_num_seqs=range(16,1016,100)",
]
SWEEP_100K = SWEEP_10K + ["train.ppo_micro_batch_size_per_gpu=range(1,11)"]


def run(args: list[str]) -> tuple[float, float, int]:
    """(CPU s, peak RSS MB, exit code) of `topl ARGS`, output discarded."""
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "topl.launcher.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    _, status, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def baseline(points: list[list[str]]) -> float:
    """CPU seconds per point of composing it through Hydra and running the contract (what
    `topl check` does per point; what a sweep costs without the planner)."""
    from topl.launcher.compose import compose_job
    from topl.launcher.contract import check

    compose_job(points[0])  # imports and first-use caches out of the figure
    t0 = time.process_time()
    for p in points:
        check(compose_job(p))
    return (time.process_time() - t0) / len(points)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="default config and 3 recipes for check")
    ap.add_argument("--no-probe", action="store_true", help="skip `probe` (needs torch)")
    ap.add_argument("--no-100k", action="store_true")
    ap.add_argument("--sample", type=int, default=20, help="points in the per-point baseline")
    args = ap.parse_args()

    from topl.launcher.plan import iter_expand
    from topl.launcher.recipes import available

    rows: list[tuple[str, float, float, str]] = []

    def measure(label: str, argv: list[str], note: str = "") -> float:
        cpu, rss, rc = run(argv)
        rows.append((label, cpu, rss, note or f"exit {rc}"))
        print(f"{label:<44} {cpu:7.2f} s CPU  {rss:6.0f} MB  {note or f'exit {rc}'}", flush=True)
        return cpu

    recipes = sorted(available())
    if args.quick:
        recipes = recipes[:: max(1, len(recipes) // 3)][:3]
    measure("check (default config)", ["check"])
    worst = max(
        (run(["check", f"recipe={r}"])[0], r) for r in recipes
    )  # every shipped recipe: the slowest one is the figure
    rows.append((f"check, slowest of {len(recipes)} recipes", worst[0], 0.0, worst[1]))
    print(f"check, slowest of {len(recipes)} recipes: {worst[0]:.2f} s CPU ({worst[1]})")
    measure("render --json (default config)", ["render", "--json"])
    measure("rules --json", ["rules", "--json"])

    points = list(iter_expand(SWEEP_10K))
    step = max(1, len(points) // args.sample)
    per_point = baseline(points[::step][: args.sample])
    rows.append(("baseline: Hydra compose + check, per point", per_point, 0.0, "in-process"))
    print(f"baseline: Hydra compose + check {per_point * 1e3:.0f} ms CPU per point", flush=True)
    t10 = measure("plan 10k --json", ["plan", *SWEEP_10K, "--json"])
    rows.append(
        (
            "  10k baseline (scaled)",
            per_point * 1e4,
            0.0,
            f"plan is {per_point * 1e4 / t10:.0f}x faster",
        )
    )
    print(f"  plan 10k is {per_point * 1e4 / t10:.0f}x the per-point baseline")
    if not args.no_100k:
        measure("plan 100k --json", ["plan", *SWEEP_100K, "--json"])
    if not args.no_probe:
        measure("probe (default)", ["probe"])

    print("\n| command | CPU s | peak RSS MB | note |\n|---|---:|---:|---|")
    for label, cpu, rss, note in rows:
        print(f"| {label.strip()} | {cpu:.2f} | {rss:.0f} | {note} |")
    print(
        f"\n(python {sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
