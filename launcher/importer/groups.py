"""The config groups an imported script points to (algorithm, engine, alignment, cluster, stack,
model): they only seed topl's own fields (`script_import.build_recipe`)."""

from __future__ import annotations

from topl.launcher.importer.fit import MODEL_KEY, model_group
from topl.launcher.importer.read import Script
from topl.launcher.importer.version import stack_choice
from topl.launcher.render import invocation as R


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
    gpus = v.get("trainer.n_gpus_per_node")
    groups = {
        "algorithm": algo,
        "train": "megatron" if megatron else "fsdp",
        "rollout": "vllm_ascend",
        "alignment": "strict" if strict else "off",
        "collective": "default",
        "cluster": ({16: "atlas_a3"}.get(gpus, "atlas_a2") if on_npu_script(s) else "local"),
    }
    stack = stack_choice(s)  # the seed's patch module: its pinned stack (conf/stack/seed.yaml)
    if stack and (conf_dir() / "stack").is_dir():
        groups["stack"] = stack[0]
    path = v.get(MODEL_KEY)
    group = model_group(path) if path is not None else None
    if group:
        groups["model"] = group
    return groups
