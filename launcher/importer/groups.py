"""The config groups an imported script points to (algorithm, engine, alignment, cluster, stack,
model): they only seed topl's own fields (`script_import.build_recipe`). A script that does not
say it runs on Ascend (a GPU script) gets the Ascend cluster group whose nodes hold its devices
per node, or keeps `local` with the layout that would fit, and a report row saying which and why
(`cluster_choice`)."""

from __future__ import annotations

from topl.launcher.importer.fit import (
    MISSING,
    MODEL_KEY,
    model_group,
    script_config,
    verl_default,
)
from topl.launcher.importer.read import Script
from topl.launcher.importer.version import stack_choice
from topl.launcher.render import invocation as R
from topl.launcher.spec.job import whole_nodes


def on_npu_script(s: Script) -> bool:
    """Does the script itself say it runs on Ascend (trainer.device=npu, Ascend / HCCL env)?"""
    dev = s.overrides.get("trainer.device")
    if dev is not None:
        return dev.value == "npu"
    return any(k.startswith(("ASCEND_", "HCCL_", "TASK_QUEUE", "VLLM_ASCEND")) for k in s.env)


def guess_groups(s: Script) -> dict[str, str]:
    """Config-group options the script's settings point to (the user can override each). The
    groups only seed topl's own fields: every key the script leaves to verl stays verl's (see
    `build_recipe`), so a group never re-targets the run."""
    from topl.launcher.compose.sources import conf_dir  # lazy: OmegaConf only when this runs

    v = {k: st.value for k, st in s.overrides.items()}
    loss = v.get(f"{R.ARR}.actor.policy_loss.loss_mode")
    algo = (
        "dapo"
        if "dapo" in s.entrypoint
        else "gspo"
        if loss == "gspo"
        else "ppo"
        if v.get("algorithm.adv_estimator") == "gae"
        else "grpo"
    )
    megatron = (
        v.get("model_engine") == "megatron"
        or "megatron" in (s.config_name or "")
        or any(".megatron." in k for k in v)
    )
    strict = s.env.get("VLLM_BATCH_INVARIANT") and s.env["VLLM_BATCH_INVARIANT"].text == "1"
    groups = {
        "algorithm": algo,
        "train": "megatron" if megatron else "fsdp",
        "rollout": "vllm_ascend",
        "alignment": "strict" if strict else "off",
        "collective": "default",
        "cluster": cluster_choice(s)[0],
    }
    stack = stack_choice(s)  # the seed's patch module: its pinned stack (conf/stack/seed.yaml)
    if stack and (conf_dir() / "stack").is_dir():
        groups["stack"] = stack[0]
    path = v.get(MODEL_KEY)
    group = model_group(path) if path is not None else None
    if group:
        groups["model"] = group
    return groups


GPUS, NODES = "trainer.n_gpus_per_node", "trainer.nnodes"
MAX_WORLD = 1 << 16  # devices in one job; a script's larger count is not searched for a layout
CLUSTER_KIND = "cluster"  # the report row's kind (the CLI adds the verdict to it)


def ascend_clusters() -> dict[str, tuple[int, str]]:
    """conf/cluster/*.yaml with device npu: name -> (devices one node holds, backend), as declared:
    max_devices_per_node (the hardware, which TOP-RES-010 holds devices_per_node to), else the
    group's devices_per_node."""
    import yaml

    from topl.launcher.compose.sources import conf_dir  # lazy: OmegaConf only when this runs

    out = {}
    for f in sorted((conf_dir() / "cluster").glob("*.yaml")):
        c = yaml.safe_load(f.read_text()) or {}
        holds = c.get("max_devices_per_node", c.get("devices_per_node"))
        if c.get("device") == "npu" and _is_count(holds):
            out[f.stem] = (holds, str(c.get("backend", "local")))
    return out


def _count(s: Script, key: str) -> tuple[object, str]:
    """The script's value of `key` and where it was read; unset, verl's default (8 devices per
    node, 1 node: verl@0.9.1:verl/trainer/config/ppo_trainer.yaml:trainer.n_gpus_per_node,
    trainer.nnodes), read from the installed verl's config."""
    st = s.overrides.get(key)
    if st is None:
        d = verl_default(key, script_config(s, False))
        return (
            (None, f"{key} not set (verl's default: unknown, verl not installed)")
            if (d is MISSING)
            else (d, f"{key} not set (verl's default {d})")
        )
    src = f", its value from line {', '.join(map(str, st.deps))}" if st.deps else ""
    return st.value, f"{key}={st.value} (line {st.line}{src})"


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _layout(world: int, clusters: dict[str, tuple[int, str]]) -> tuple[str, int, int] | None:
    """(group, nodes, devices per node): the fewest whole nodes of one ray_job group holding
    `world` devices, each node using the same count (the layout TOP-RES-010 names), on the
    smallest group whose nodes hold that count."""
    sizes = sorted((d, n) for n, (d, b) in clusters.items() if b == "ray_job")
    if not sizes or world > MAX_WORLD:
        return None
    nodes, per = whole_nodes(world, sizes[-1][0])
    return next(n for d, n in sizes if d >= per), nodes, per


def cluster_choice(s: Script) -> tuple[str, dict | None]:
    """The cluster group for the script, and for a GPU script the report row saying why. Both get
    the smallest Ascend group of backend ray_job (a slurm group also needs a partition and a time
    limit no script says) whose nodes hold trainer.n_gpus_per_node devices; where none does, an
    Ascend script gets atlas_a2 (as it always had) and a GPU script stays `local` (the embedded
    engines), its row giving the layout of the same devices that would fit."""
    clusters = ascend_clusters()
    gpus, said_gpus = _count(s, GPUS)
    nodes, said_nodes = _count(s, NODES)
    fits = sorted(
        (d, n) for n, (d, b) in clusters.items() if b == "ray_job" and _is_count(gpus) and gpus <= d
    )
    if on_npu_script(s):
        return (fits[0][1] if fits else "atlas_a2"), None
    dev = s.overrides.get("trainer.device")
    why = (
        f"trainer.device={dev.value} (line {dev.line})"
        if dev is not None
        else "no trainer.device=npu, no ASCEND_* / HCCL_* env"
    )
    read = f"a script that does not say it runs on Ascend ({why}): {said_gpus}, {said_nodes}"
    others = ", ".join(f"{n}: {d} per node" for n, (d, _b) in clusters.items())
    st = s.overrides.get(GPUS)
    row = {"line": st.line if st is not None else s.line, "kind": CLUSTER_KIND, "key": None}
    if fits:
        d, name = fits[0]
        use = "" if gpus == d else f", the run uses {gpus} of them"
        others = ", ".join(f"{n}: {c} per node" for n, (c, _b) in clusters.items() if n != name)
        row["detail"] = (
            f"cluster={name} chosen for {read}; conf/cluster/{name}.yaml: {d} NPUs per node{use}. "
            f"To change it: `topl recipes import SCRIPT cluster=NAME -o OUT --force` ({others}; "
            "local: the embedded engines on this machine)"
        )
        return name, {**row, "cluster": name, "fix": None}
    layout = _layout(gpus * nodes, clusters) if _is_count(gpus) and _is_count(nodes) else None
    if not _is_count(gpus):
        has = f"is chosen: {GPUS} is not a device count"
        fix = "`topl recipes import SCRIPT cluster=NAME -o OUT --force`"
    elif layout:
        g, n, per = layout
        has = f"has {gpus} devices per node"
        fix = (
            f"`topl recipes import SCRIPT cluster={g} -o ASCEND.yaml`, then run it as {n} "
            f"node(s) x {per} (the script's {gpus * nodes} devices): `topl launch "
            f"recipe=ASCEND.yaml cluster.nodes={n} cluster.devices_per_node={per}`"
        )
    else:  # trainer.nnodes is not a count (or the world is too large): the layout is the user's
        has = f"has {gpus} devices per node"
        fix = (
            "`topl recipes import SCRIPT cluster=NAME -o ASCEND.yaml`, then `topl launch recipe="
            f"ASCEND.yaml cluster.nodes=N cluster.devices_per_node=M` with M at most the group's "
            f"({others})"
        )
    row["detail"] = (
        f"cluster=local kept for {read}; no Ascend cluster group {has} ({others}). "
        f"To run it on Ascend: {fix}"
    )
    return "local", {**row, "cluster": "local", "fix": fix}
