"""Generate the shipped recipe matrix: model x algorithm x cluster x alignment (36 files).

    python scripts/gen_recipes.py            # rewrite recipes/<model>_<algo>_<cluster>_<mode>.yaml
    python scripts/gen_recipes.py --check    # exit 1 when a shipped file differs from its output

Each matrix recipe includes the seed recipe of its model and algorithm (recipes/seed_*.yaml, the
seed's script key by key) and changes only what its point of the matrix needs: the cluster, the
alignment mode where the seed has no such run (mitigated), the run name (docs/seed.md: the matrix
vs the seed). Hand-written recipes (any other file in recipes/) are free-form and untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

RECIPES = Path(__file__).resolve().parent.parent / "recipes"  # where the matrix is written
SEEDS = RECIPES  # where the seed recipes are read from

MODELS = {"qwen3_4b": "Qwen3-4B", "qwen3_30b_a3b": "Qwen3-30B-A3B"}
ALGORITHMS = {"grpo": "GRPO", "dapo": "DAPO", "gspo": "GSPO"}
# cluster -> (name, NPUs per node, {model: nodes}). The seed ran every script on one A3 node
# (16 NPUs); on A2 (8 NPUs per node) the 4B takes one node (DP 8 instead of 16, same global
# batch) and the 30B two (the seed's 16 devices: PP=8 x DP=2, as its layout needs).
CLUSTERS = {
    "a2": ("Atlas A2", 8, {"qwen3_4b": 1, "qwen3_30b_a3b": 2}),
    "a3": ("Atlas A3", 16, {"qwen3_4b": 1, "qwen3_30b_a3b": 1}),
}
# mode -> (what, the seed run it starts from, alignment group to select on top, or None)
MODES = {
    "strict": ("true on-policy (logdiff 0)", "on", None),
    "mitigated": ("baseline: verl TIS/MIS rollout correction", "off", "mitigated"),
    "off": ("baseline: no alignment, off-policy", "off", None),
}
SEED_CLUSTER = "a3"  # the cluster the seed's scripts ran on (its recipes select atlas_a3)


def layout(seed: dict) -> str:
    """The parallel layout the seed recipe sets, for the header comment."""
    t, r = seed["train"], seed["rollout"]
    ep = f" EP={t['ep']} ETP={t['etp']}" if "ep" in t else ""
    return f"actor TP={t['tp']} PP={t['pp']}{ep}; rollout TP={r['tp']} PP={r['pp']}"


def recipe(model: str, algo: str, cluster: str, mode: str) -> str:
    cluster_name, per_node, nodes = CLUSTERS[cluster]
    what, run, alignment = MODES[mode]
    n = nodes[model]
    seed_name = f"seed_{model}_{algo}_{run}"
    seed = yaml.safe_load((SEEDS / f"{seed_name}.yaml").read_text())
    lines = [
        "# @package _global_",
        f"# {MODELS[model]} {ALGORITHMS[algo]}, {what}; {cluster_name}: {n} node(s) x {per_node} "
        "NPUs, Megatron + vLLM-Ascend.",
        f"# Layout: {layout(seed)}.",
        f"# The seed's settings: {seed_name} (its ENABLE_TRUE_ON_POLICY={int(run == 'on')} run);",
        "# docs/seed.md lists what this file changes.",
        "defaults:",
        f"  - {seed_name}",
        *([f"  - override /alignment: {alignment}"] if alignment else []),
        *([f"  - override /cluster: atlas_{cluster}"] if cluster != SEED_CLUSTER else []),
        "  - _self_",
        "",
        f"experiment: {model}_{algo}_{cluster}_{mode}  # the seed names on and off runs alike",
    ]
    if cluster != SEED_CLUSTER:
        lines += ["cluster:", f"  nodes: {n}", f"  devices_per_node: {per_node}"]
    return "\n".join(lines) + "\n"


def matrix() -> dict[str, str]:
    """File name -> content, for every point of the matrix."""
    return {
        f"{model}_{algo}_{cluster}_{mode}.yaml": recipe(model, algo, cluster, mode)
        for model in MODELS
        for algo in ALGORITHMS
        for cluster in CLUSTERS
        for mode in MODES
    }


def main(argv: list[str]) -> int:
    stale = []
    for name, text in matrix().items():
        path = RECIPES / name
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    for name in stale:
        print(f"recipes/{name} differs from scripts/gen_recipes.py's output", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
