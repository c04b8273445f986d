"""Generate the shipped recipe matrix: model x algorithm x cluster x alignment (36 files).

    python scripts/gen_recipes.py            # rewrite recipes/<model>_<algo>_<cluster>_<mode>.yaml
    python scripts/gen_recipes.py --check    # exit 1 when a shipped file differs from its output

Hand-written recipes (any other file in recipes/) are free-form and untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

RECIPES = Path(__file__).resolve().parent.parent / "recipes"

# model -> (title, layout comment, {cluster: nodes}, train layout, rollout layout)
MODELS = {
    "qwen3_4b": (
        "Qwen3-4B",
        "actor TP=1 PP=1; rollout TP=1 (data parallel over every device).",
        {"a2": 1, "a3": 1},
        {"tp": 1, "pp": 1},
        {"tp": 1},
    ),
    "qwen3_30b_a3b": (
        "Qwen3-30B-A3B",
        "actor TP=1 PP=8 EP=1 ETP=1; rollout TP=1 with vLLM PP=2 (the seed: TP+EP is hard to align).",
        {"a2": 2, "a3": 1},
        {"tp": 1, "pp": 8, "ep": 1, "etp": 1},
        {"tp": 1, "pp": 2},
    ),
}
ALGORITHMS = {"grpo": "GRPO", "dapo": "DAPO", "gspo": "GSPO"}
CLUSTERS = {"a2": ("Atlas A2", 8), "a3": ("Atlas A3", 16)}  # name, NPUs per node
MODES = {
    "strict": ("true on-policy (logdiff 0)", "hccl_strict"),
    "mitigated": ("baseline: verl TIS/MIS rollout correction", "default"),
    "off": ("baseline: no alignment, off-policy", "default"),
}


def recipe(model: str, algo: str, cluster: str, mode: str) -> str:
    title, layout, nodes, train, rollout = MODELS[model]
    cluster_name, per_node = CLUSTERS[cluster]
    what, collective = MODES[mode]
    n = nodes[cluster]
    alignment = '"off"' if mode == "off" else mode  # YAML would read a bare off as false
    lines = [
        "# @package _global_",
        f"# {title} {ALGORITHMS[algo]}, {what}; {cluster_name}: {n} node(s) x {per_node} NPUs, "
        "Megatron + vLLM-Ascend.",
        f"# Layout: {layout}",
        "defaults:",
        f"  - override /model: {model}",
        f"  - override /algorithm: {algo}",
        "  - override /train: megatron",
        "  - override /rollout: vllm_ascend",
        f"  - override /alignment: {alignment}",
        f"  - override /collective: {collective}",
        f"  - override /cluster: atlas_{cluster}",
        "  - override /stack: seed  # the seed's stack: the one with a measured logdiff of 0",
        "  - _self_",
        "",
        "cluster:",
        f"  nodes: {n}",
        "train:",
        *[f"  {k}: {v}" for k, v in train.items()],
        "rollout:",
        *[f"  {k}: {v}" for k, v in rollout.items()],
    ]
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
