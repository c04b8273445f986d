"""CPU seconds and peak RSS of the everyday commands, each a fresh `topl` process as a user runs it,
next to a per-point Hydra compose + check baseline measured in the same run.

    python scripts/bench_cli.py [--quick] [--no-probe] [--no-100k] [--before GITREF] [--repeat N]

`--before GITREF` runs every command from that commit too (exported to a temporary directory and
imported ahead of the installed topl), alternating with this tree's, so that both columns see the
same load. Bytecode is written and used, as by an installed topl (pip compiles it), whatever
PYTHONDONTWRITEBYTECODE says here; each command runs once first, unmeasured, for that (and so
`check` / `render` find their compose in the cache, as on a rerun: launcher/compose/cache.py). The
`cold` column runs them with TOPL_COMPOSE_CACHE=0: Hydra composes, as after an edit.

CPU = user + system seconds of the child (os.wait4), so a busy machine inflates it far less than
wall time; peak RSS = the child's ru_maxrss. Targets (docs/performance.md): `check` <= 0.3 s on
every shipped recipe and the default config; `check --deep` <= 5 s (docs/startup.md); `plan` 10k <=
3 s and >= 300x the baseline; 100k <= 30 s with peak RSS <= 150 MB.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# 10 x 10 x 10 x 10 points on the seed's 30B strict recipe: layouts and the KV budget, most invalid
SWEEP_10K = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "train.tp=range(1,11)",
    "rollout.tp=range(1,11)",
    "train.pp=range(1,11)",
    "rollout.max_num_seqs=range(16,1016,100)",
]
SWEEP_100K = SWEEP_10K + ["train.ppo_micro_batch_size_per_gpu=range(1,11)"]
DEEP_RECIPE = "qwen3_4b_grpo_a2_release_strict"  # verl 0.9.1 (installed): the dry run's figure
# What any first `check` of an input pays before topl's own work, in a fresh process: importing
# Hydra (and OmegaConf) and composing a one-key config; then Hydra composing topl's default config
# (its schema registered, no checks). The `cold` column can be read against these.
HYDRA_FLOOR = (
    "import pathlib, tempfile\n"
    "from hydra import compose, initialize_config_dir\n"
    "d = tempfile.mkdtemp(); pathlib.Path(d, 'config.yaml').write_text('a: 1\\n')\n"
    "with initialize_config_dir(config_dir=d, version_base=None): compose('config')\n"
)
HYDRA_TOPL = (
    "from hydra import compose, initialize_config_dir\n"
    "from topl.launcher.compose.sources import conf_dir\n"
    "from topl.launcher.spec.job import register_configs\n"
    "register_configs()\n"
    "with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):\n"
    "    compose('config', return_hydra_config=True)\n"
)


def run(
    args: list[str], root: str | None = None, python: bool = False, extra: dict | None = None
) -> tuple[float, float, int]:
    """(CPU s, peak RSS MB, exit code) of `topl ARGS` (`python ARGS` with `python`), output
    discarded; `root`: a directory imported ahead of the installed topl (--before); `extra`: more
    environment (the `cold` column turns the compose cache off)."""
    env = {**os.environ, "PYTHONSAFEPATH": "1", **(extra or {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if root:
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.Popen(
        [sys.executable, *args] if python else [sys.executable, "-m", "topl.launcher.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    _, status, ru = os.wait4(p.pid, 0)
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def before_root(ref: str) -> str:
    """`ref`'s launcher, conf, kernels and recipes, laid out as the installed `topl` package
    (a namespace package: the first `topl.launcher` on the path wins)."""
    repo = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="topl-before-"))
    src = tmp / "src"
    src.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", ref], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = tmp / "root" / "topl"
    pkg.mkdir(parents=True)
    for d in ("launcher", "conf", "kernels", "recipes"):
        if (src / d).exists():
            (pkg / d).symlink_to(src / d)
    plugins = tmp / "root" / "hydra_plugins"
    plugins.mkdir()
    (plugins / "topl_sweeper").symlink_to(src / "launcher" / "hydra_plugins" / "topl_sweeper")
    return str(tmp / "root")


def baseline(points: list[list[str]]) -> float:
    """CPU seconds per point of composing it through Hydra and running the contract (what
    `topl check` does per point; what a sweep costs without the planner)."""
    from topl.launcher.compose.hydra import compose_job
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
    ap.add_argument("--before", metavar="GITREF", help="measure that commit too, alternating")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each check: the least is kept")
    args = ap.parse_args()

    from topl.launcher.compose.recipes import available
    from topl.launcher.plan.sweep import iter_expand

    # `after`: this tree as a user reruns a command (the compose cache holds its inputs: `check`
    # and `render` skip Hydra); `cold`: the same with TOPL_COMPOSE_CACHE=0, as after an edit.
    os.environ["TOPL_CACHE_DIR"] = tempfile.mkdtemp(prefix="topl-bench-cache-")
    trees: dict[str, tuple[str | None, dict]] = {"after": (None, {})}
    if args.before:
        trees = {"before": (before_root(args.before), {}), **trees}
    cold = {**trees, "cold": (None, {"TOPL_COMPOSE_CACHE": "0"})}
    rows: list[tuple[str, dict[str, tuple[float, float]], str]] = []

    def measure(
        label: str, argv: list[str], repeat: int = 1, variants: dict | None = None
    ) -> dict[str, tuple[float, float]]:
        got: dict[str, tuple[float, float]] = {}
        for root, extra in (variants or trees).values():
            run(argv, root, extra=extra)  # bytecode written, caches warm: a user's rerun
        for _ in range(repeat):
            for name, (root, extra) in (variants or trees).items():
                cpu, rss, rc = run(argv, root, extra=extra)
                if name not in got or cpu < got[name][0]:
                    got[name] = (cpu, rss)
        note = "  ".join(f"{n} {c:6.2f} s {r:4.0f} MB" for n, (c, r) in got.items())
        print(f"{label:<40} {note}", flush=True)
        rows.append((label, got, ""))
        return got

    recipes = sorted(available())
    if args.quick:
        recipes = recipes[:: max(1, len(recipes) // 3)][:3]
    start = min(run(["-c", "pass"], python=True)[0] for _ in range(5))
    rows.append(("python -c pass (start-up, for scale)", {"after": (start, 0.0)}, ""))
    for label, code in (
        ("Hydra floor: import + compose a one-key config", HYDRA_FLOOR),
        ("Hydra alone: compose topl's default config", HYDRA_TOPL),
    ):
        floor = min(run(["-c", code], python=True)[0] for _ in range(max(3, args.repeat)))
        rows.append((label, {"cold": (floor, 0.0)}, "a fresh process, no topl checks"))
        print(f"{label:<48} {floor:6.2f} s", flush=True)
    measure("check (default config)", ["check"], args.repeat, cold)
    worst: dict[str, tuple[float, str]] = {}
    each: dict[str, list[float]] = {}
    for r in recipes:  # every shipped recipe: the slowest one is the figure
        got = measure(f"  check recipe={r}", ["check", f"recipe={r}"], args.repeat, cold)
        rows.pop()
        for name, (cpu, _) in got.items():
            each.setdefault(name, []).append(cpu)
            if cpu > worst.get(name, (0.0, ""))[0]:
                worst[name] = (cpu, r)
    median = {n: (statistics.median(c), 0.0) for n, c in each.items()}
    rows.append((f"check, median of {len(recipes)} recipes", median, ""))
    rows.append(
        (
            f"check, slowest of {len(recipes)} recipes",
            {n: (c, 0.0) for n, (c, _) in worst.items()},
            ", ".join(f"{n}: {r}" for n, (_, r) in worst.items()),
        )
    )
    measure("render --json (default config)", ["render", "--json"], args.repeat, cold)
    measure("rules --json", ["rules", "--json"], args.repeat)
    # the dry run (issue 46): verl's own start-up checks in a child; this tree only (the child
    # runs the installed topl, whatever --before puts on the path); the child's CPU is counted
    # (os.wait4 of `topl` includes the children it waited for)
    after = {"after": trees["after"]}
    plain = measure(f"check recipe={DEEP_RECIPE}", ["check", f"recipe={DEEP_RECIPE}"], 1, after)
    deep = measure(
        f"check --deep recipe={DEEP_RECIPE}",
        ["check", "--deep", f"recipe={DEEP_RECIPE}"],
        args.repeat,
        after,
    )
    rows.append(
        (
            "check --deep against plain check (x)",
            {"after": (deep["after"][0] / plain["after"][0], 0.0)},
            "target: <= 5 s CPU",
        )
    )

    points = list(iter_expand(SWEEP_10K))
    step = max(1, len(points) // args.sample)
    per_point = baseline(points[::step][: args.sample])
    rows.append(("baseline: Hydra compose + check, per point", {"after": (per_point, 0.0)}, ""))
    print(f"baseline: Hydra compose + check {per_point * 1e3:.0f} ms CPU per point", flush=True)
    t10 = measure("plan 10k --json", ["plan", *SWEEP_10K, "--json"])
    ratio = {n: (per_point * 1e4 / c, 0.0) for n, (c, _) in t10.items()}
    rows.append(("plan 10k against the baseline (x)", ratio, ""))
    print("  plan 10k is " + ", ".join(f"{n} {x:.0f}x" for n, (x, _) in ratio.items()))
    if not args.no_100k:
        measure("plan 100k --json", ["plan", *SWEEP_100K, "--json"])
    if not args.no_probe:
        measure("probe (default)", ["probe"])

    names = list(cold)
    head = " | ".join(f"{n} CPU s | {n} peak RSS MB" for n in names)
    print(f"\n| command | {head} | note |\n|---|" + "---:|---:|" * len(names) + "---|")
    for label, got, note in rows:
        cells = " | ".join(
            f"{got[n][0]:.2f} | {got[n][1]:.0f}" if n in got else " | " for n in names
        )
        print(f"| {label.strip()} | {cells} | {note} |")
    print(
        f"\n(python {sys.version.split()[0]}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f} at the end)"
    )
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
