"""Generate the shipped recipe matrix: model x algorithm x cluster x alignment (36 files), and
the strict matrix of the stock stacks: model x algorithm x cluster x stack (24 files).

    python scripts/gen_recipes.py            # rewrite recipes/<model>_<algo>_<cluster>_<mode>.yaml
    python scripts/gen_recipes.py --check    # exit 1 when a shipped file differs from its output

Each matrix recipe includes the seed recipe of its model and algorithm (recipes/seed_*.yaml, the
seed's script key by key) and changes only what its point of the matrix needs: the cluster, the
alignment mode where the seed has no such run (mitigated), the run name (docs/seed.md: the matrix
vs the seed). The stock-stack recipes (<model>_<algo>_<cluster>_<stack>_strict, stack=release /
prerelease) include the seed's strict run too and change what `topl check` refuses there (found
with `topl check --fix`; docs/seed.md lists each). Hand-written recipes (any other file in recipes/) are free-form and untouched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

RECIPES = Path(__file__).resolve().parent.parent / "recipes"  # where the matrix is written
SEEDS = RECIPES  # where the seed recipes are read from
CONF_MODEL = RECIPES.parent / "conf" / "model"  # the models' fields (max_position_embeddings)

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
# stack -> what the seed's strict run changes there, per model: each clears a rule that is an error
# on the stock stacks (the seed's own measured logdiff 0 makes some of them warnings on stack=seed)
STOCK_COMMON = {
    # TOP-CACHE-002, TOP-CACHE-001 (the seed ran verl 0.8.0's default, prefix caching on, with its
    # measured logdiff 0: a warning on stack=seed only)
    "rollout": {"chunked_prefill": False, "prefix_caching": False},
    "train": {"use_dynamic_bsz": False},  # TOP-LOGP-004; the rollout's log-prob pass follows it
}
# verl 0.9.1 has no rollout PP (TOP-STACK-001): the 30B's rollout goes PP=2 -> TP=2, and the
# trainer's TP follows (TOP-TP-001: the same row-parallel reduction on both sides)
STOCK_MODEL = {"qwen3_30b_a3b": {"rollout": {"pp": 1, "tp": 2}, "train": {"tp": 2}}}
# vllm-ascend 0.30.0rc2 documents that preemption breaks batch invariance (TOP-MEM-003 is an error
# there): max_num_seqs within the KV room topl estimates for the seed's lengths (DAPO's responses
# are the longest), per model and algorithm
STOCK_SEQS = {
    "prerelease": {
        **{("qwen3_4b", a): 32 for a in ("grpo", "gspo")},
        **{("qwen3_30b_a3b", a): 64 for a in ("grpo", "gspo")},
        ("qwen3_4b", "dapo"): 16,
        ("qwen3_30b_a3b", "dapo"): 16,
    }
}
STACKS = {
    "release": "verl 0.9.1 + vllm-ascend 0.23.0.post1",
    "prerelease": "verl 0.9.1 + vllm-ascend 0.30.0rc2",
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


def _merge(into: dict, extra: dict) -> dict:
    out = dict(into)
    for k, v in extra.items():
        out[k] = _merge(out.get(k, {}), v) if isinstance(v, dict) else v
    return out


def max_model_len(model: str) -> int:
    """The max_model_len verl 0.9.1 runs when no recipe sets one: the model's
    max_position_embeddings (conf/model/<model>.yaml, else topl's ModelSpec default)."""
    from topl.launcher.spec.job import ModelSpec

    conf = yaml.safe_load((CONF_MODEL / f"{model}.yaml").read_text()) or {}
    return int(conf.get("max_position_embeddings", ModelSpec().max_position_embeddings))


def stock_changes(model: str, algo: str, stack: str) -> dict:
    """What the stock-stack recipe sets on top of the seed's strict run. Without chunked prefill
    verl 0.9.1 raises max_num_batched_tokens to max_model_len (verl@0.9.1:verl/workers/rollout/
    vllm_rollout/vllm_async_server.py:vLLMHttpServer._validate_configs; TOP-ENG-008): the recipe
    sets the value that runs, so the rendered command says it."""
    out = _merge(STOCK_COMMON, STOCK_MODEL.get(model, {}))
    out = _merge(out, {"rollout": {"max_num_batched_tokens": max_model_len(model)}})
    seqs = STOCK_SEQS.get(stack, {}).get((model, algo))
    return _merge(out, {"rollout": {"max_num_seqs": seqs}}) if seqs else out


def stock_recipe(model: str, algo: str, cluster: str, stack: str) -> str:
    cluster_name, per_node, nodes = CLUSTERS[cluster]
    n = nodes[model]
    seed_name = f"seed_{model}_{algo}_on"
    changes = stock_changes(model, algo, stack)
    seed = _merge(yaml.safe_load((SEEDS / f"{seed_name}.yaml").read_text()), changes)
    if cluster != SEED_CLUSTER:
        changes = _merge({"cluster": {"nodes": n, "devices_per_node": per_node}}, changes)
    body = yaml.safe_dump(changes, sort_keys=False, default_flow_style=False)
    lines = [
        "# @package _global_",
        f"# {MODELS[model]} {ALGORITHMS[algo]}, true on-policy on stack={stack} ({STACKS[stack]}).",
        f"# {cluster_name}: {n} node(s) x {per_node} NPUs, Megatron + vLLM-Ascend with topl's "
        "alignment module.",
        f"# Layout: {layout(seed)}.",
        f"# The seed's settings: {seed_name}, changed where stack={stack} refuses them;",
        "# docs/seed.md lists what this file changes.",
        "defaults:",
        f"  - {seed_name}",
        f"  - override /stack: {stack}",
        *([f"  - override /cluster: atlas_{cluster}"] if cluster != SEED_CLUSTER else []),
        "  - _self_",
        "",
        f"experiment: {model}_{algo}_{cluster}_{stack}_strict",
    ]
    return "\n".join(lines) + "\n" + body


def matrix() -> dict[str, str]:
    """File name -> content, for every point of the matrix and of the stock-stack matrix."""
    out = {
        f"{model}_{algo}_{cluster}_{mode}.yaml": recipe(model, algo, cluster, mode)
        for model in MODELS
        for algo in ALGORITHMS
        for cluster in CLUSTERS
        for mode in MODES
    }
    for stack in STACKS:
        for model in MODELS:
            for algo in ALGORITHMS:
                for cluster in CLUSTERS:
                    name = f"{model}_{algo}_{cluster}_{stack}_strict.yaml"
                    out[name] = stock_recipe(model, algo, cluster, stack)
    return out


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
