"""The environment a rendered job's processes get: derived from the spec, `cluster.env`, topl's
guard; which of it may travel on the command line (never a secret), and how values are spelt.

Pure like render.py: no I/O, no environment reads. render.py re-exports every name here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from topl.launcher import facts
from topl.launcher.align import targets as align_targets
from topl.launcher.base.redact import secret_entry
from topl.launcher.spec.job import is_strict, on_npu

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

# What OmegaConf makes of a YAML bool in `cluster.env` (a Dict[str, str]): str(True) == "True"
# (omegaconf@2.3.1:omegaconf/nodes.py:StringNode._validate_and_convert_impl returns str(value)).
_PY_BOOLS = {"True": "true", "False": "false"}


def env_value(v: Any) -> str:
    """An env value as the processes get it: YAML booleans as `true` / `false` (not Python's
    `True`), ints as their digits, strings as written."""
    if isinstance(v, bool):
        return "true" if v else "false"
    s = str(v)
    return _PY_BOOLS.get(s, s)


def env_vars(s: JobSpec) -> dict[str, str]:
    """Environment every process (driver and each Ray worker) must see: derived, then cluster.env,
    then topl's guard (strict runs). Secrets included: see `argv_env` for what may be printed."""
    env = {**derived_env(s), **{k: env_value(v) for k, v in s.cluster.env.items()}}
    return {**env, **guard_env(s, env)}


def secret_names(env: dict[str, str]) -> list[str]:
    """The entries that must never reach a command line, a file or output: a secret-looking name
    (MY_API_KEY, HF_TOKEN) or a credential-shaped value (a URL with a password, a hub token)."""
    return [k for k, v in env.items() if secret_entry(k, v)]


def argv_env(s: JobSpec) -> dict[str, str]:
    """The part of `env_vars` the rendered command forwards to Ray workers on its command line
    (`+ray_kwargs.ray_init.runtime_env.env_vars.K=V`): everything but secrets, which the backend
    passes through the environment instead (backends/subprocess.py, backends/ray_job.py)."""
    env = env_vars(s)
    hidden = set(secret_names(env))
    return {k: v for k, v in env.items() if k not in hidden}


def ray_worker_env(s: JobSpec) -> dict[str, str]:
    """What every Ray worker of the rendered job sees from topl: the command line forwards
    `argv_env`, the backend the secrets (subprocess: the driver's environment, inherited by the
    Ray that verl starts; ray_job: the job's runtime_env)."""
    return env_vars(s)


def derived_env(s: JobSpec) -> dict[str, str]:
    """The environment the spec's own fields decide (without cluster.env)."""
    c, strict, npu = s.collective, is_strict(s), on_npu(s)
    env: dict[str, str] = {}
    if npu:
        env.update(
            TASK_QUEUE_ENABLE="2",
            CPU_AFFINITY_CONF="1",
            HCCL_CONNECT_TIMEOUT=str(c.connect_timeout_s),
            HCCL_EXEC_TIMEOUT=str(c.exec_timeout_s),
        )
    if c.op_expansion_mode:
        env["HCCL_OP_EXPANSION_MODE"] = c.op_expansion_mode
    if c.hccl_deterministic != "false":
        env["HCCL_DETERMINISTIC"] = c.hccl_deterministic
    if c.lccl_deterministic:
        env["LCCL_DETERMINISTIC"] = "1"
    if c.hccl_algo:
        env["HCCL_ALGO"] = c.hccl_algo
    if strict:
        env["VLLM_BATCH_INVARIANT"] = "1"
        if npu:
            env.update(
                CLOSE_MATMUL_K_SHIFT="1", ATB_MATMUL_SHUFFLE_K_ENABLE="0", ATB_LLM_LCOC_ENABLE="0"
            )
            if facts.supports("nz_env", s.cluster.versions):  # gone from vllm-ascend 0.27.1rc1
                env["VLLM_ASCEND_ENABLE_NZ"] = "0"
    if s.cluster.external_modules:
        env["VERL_USE_EXTERNAL_MODULES"] = s.cluster.external_modules
    return env


# env var -> the contract rule that requires it (what topl's guard checks in every process)
GUARDED_ENV = {
    "VLLM_BATCH_INVARIANT": "TOP-ALN-001",
    "VLLM_ASCEND_ENABLE_NZ": "TOP-ALN-001",
    "CLOSE_MATMUL_K_SHIFT": "TOP-ALN-001",
    "ATB_MATMUL_SHUFFLE_K_ENABLE": "TOP-ALN-001",
    "ATB_LLM_LCOC_ENABLE": "TOP-ALN-001",
    "HCCL_DETERMINISTIC": "TOP-COLL-001",
    "LCCL_DETERMINISTIC": "TOP-COLL-002",
    "HCCL_ALGO": "TOP-COLL-003",
}
GUARD_MODULE = "topl.launcher.guard"  # = guard.MODULE (not imported: render stays import-light)


def align_module(s: JobSpec, patch: list[str]) -> list[str]:
    """topl's alignment module (TOP-STACK-005), before the guard, on NPU strict runs whose
    vllm-ascend it has targets for and where the seed's module is not declared."""
    seed = "verl_ascend_recipe.true_on_policy.patch"  # = contract.stack.SEED_MODULE
    v = s.cluster.versions.vllm_ascend
    if on_npu(s) and seed not in patch and align_targets.version_key(v):
        return [align_targets.LOAD_MODULE]
    return []


def guard_env(s: JobSpec, env: dict[str, str]) -> dict[str, str]:
    """Strict runs: topl's guard after the patch module in VERL_USE_EXTERNAL_MODULES (verl imports
    them in order in every process, verl@0.9.1:verl/__init__.py) and its manifest (TOPL_GUARD):
    the env vars and modules every process must have, each with the rule that requires it."""
    if not is_strict(s):
        return {}
    patch = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    patch += align_module(s, patch)
    modules = {m: ["loaded", "TOP-STACK-005"] for m in patch}
    if on_npu(s):
        modules["batch_invariant_ops"] = ["importable", "TOP-STACK-004"]
    manifest = {
        "strict": True,
        "modules": modules,
        "env": {k: [v, GUARDED_ENV[k]] for k, v in env.items() if k in GUARDED_ENV},
    }
    return {
        "VERL_USE_EXTERNAL_MODULES": ",".join([*patch, GUARD_MODULE]),
        "TOPL_GUARD": json.dumps(manifest, separators=(",", ":"), sort_keys=True),
    }


def without_guard(env: dict[str, str]) -> dict[str, str]:
    """The env as a launch script writes it: what guard_env adds taken back out (round trips)."""
    out = {k: v for k, v in env.items() if k != "TOPL_GUARD"}
    added = (GUARD_MODULE, align_targets.LOAD_MODULE)
    mods = [m for m in out.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m not in added]
    if "VERL_USE_EXTERNAL_MODULES" in out:
        out["VERL_USE_EXTERNAL_MODULES"] = ",".join(m for m in mods if m)
        if not out["VERL_USE_EXTERNAL_MODULES"]:
            del out["VERL_USE_EXTERNAL_MODULES"]
    return out
