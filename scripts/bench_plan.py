"""Planning throughput: topl's planner vs composing each point through Hydra's compose API.

    python scripts/bench_plan.py [--points 10000] [--compose-sample 200]

Both are measured in this run; the Hydra figure is the per-point time of composing a sample of
the same points one by one (composing all 10,000 would take minutes), scaled to the full sweep.
"""

from __future__ import annotations

import argparse
import time

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from topl.launcher.compose.hydra import split_recipe
from topl.launcher.compose.sources import conf_dir
from topl.launcher.plan.sweep import Planner, expand, expand_items
from topl.launcher.spec.job import register_configs

SWEEP = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "train.tp=1,2,4,8",
    "train.pp=1,2,4,8,16",
    "train.ep=1,2,4,8,16",
    "rollout.tp=1,2,4,8",
    "rollout.pp=1,2,4",
    "rollout.dp=1,2",
    "train.ppo_micro_batch_size_per_gpu=1,2,4,8,16",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--compose-sample", type=int, default=200)
    args = ap.parse_args()
    items = expand_items(SWEEP)[: args.points]
    strings = expand(SWEEP)[: args.points]
    t0 = time.perf_counter()
    planner = Planner()
    verdicts = [planner.verdict(p) for p in items]
    t_plan = time.perf_counter() - t0
    sample = strings[:: max(1, len(strings) // args.compose_sample)][: args.compose_sample]
    register_configs()
    hydra_sample = [split_recipe(p)[0] for p in sample]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        t0 = time.perf_counter()
        for p in hydra_sample:
            compose("config", overrides=p)
        per_compose = (time.perf_counter() - t0) / len(sample)
    n = len(items)
    print(f"points: {n}   valid: {sum(v.valid for v in verdicts)}")
    print(
        f"topl planner (compose + contract + memory): {t_plan:.2f} s  = {n / t_plan:,.0f} points/s"
    )
    print(
        f"Hydra compose API, one point at a time:     {per_compose * 1e3:.1f} ms/point "
        f"(sample of {len(sample)}) = {1 / per_compose:,.0f} points/s -> {per_compose * n:.0f} s for {n}"
    )
    print(f"speed-up: {per_compose * n / t_plan:.0f}x")


if __name__ == "__main__":
    main()
