"""What a setting means, decided once: the settings that choose what runs on this machine (or
where topl writes, or how topl guards itself) are the user's own, never a shared file's.

A recipe (and everything it nests: `hydra.sweeper.params` keys and values, `verl_overrides`,
`algorithm.extra_overrides`, `cluster.env`) may say *what to train*; it may not say *which program
runs*. `command_line_only(key)` names the reason a dotted key is one the user must type on the
command line; `untrusted.check_recipe` refuses such keys wherever a recipe nests them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from topl.launcher.base.tree import flatten
from topl.launcher.compose.composed import SCHEMA_SOURCE

if TYPE_CHECKING:
    from topl.launcher.compose.composed import Composed

# topl's own fields that name what the launching machine executes.
FIELDS = {
    "cluster.python": "the interpreter topl and its doctor execute",
    "cluster.external_modules": "a module every verl process imports (VERL_USE_EXTERNAL_MODULES)",
    "algorithm.entrypoint": "the module `python -m` runs",
    "algorithm.config_name": "the config file verl's Hydra loads (it may configure Hydra itself)",
}
# Python variables that only tune the interpreter (the rest choose code: PYTHONPATH,
# PYTHONSTARTUP, PYTHONHOME, PYTHONWARNINGS and PYTHONBREAKPOINT import modules).
PYTHON_TUNING = {
    "PYTHONUNBUFFERED",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONFAULTHANDLER",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
}
# Variables a shell, loader or interpreter reads to decide what to run or load.
_ENV_PROGRAM = {
    "BASH_ENV",
    "ENV",
    "SHELL",
    "PS4",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "GLOBIGNORE",
    "PERL5OPT",
    "RUBYOPT",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "GCONV_PATH",
    "LOCPATH",
    # verl@0.9.1:verl/__init__.py: import_external_libs(os.environ VERL_USE_EXTERNAL_MODULES)
    "VERL_USE_EXTERNAL_MODULES",
}
# Name shapes of the same meaning: search paths (PATH, LD_LIBRARY_PATH, ASCEND_CUSTOM_OPP_PATH,
# VERL_FILE_LOGGER_PATH, where topl points verl's metrics), loader hooks, install homes.
_ENV_SHAPES = re.compile(r"^(LD_|DYLD_|BASH_FUNC_)|PATH$|LIB$|_PRELOAD$|_HOOK$|_HOME$|_OPTS?$")
# verl keys whose value names code verl imports or runs (verl@0.9.1): model.external_lib
# (verl/workers/config/model.py:HFModelConfig.__post_init__ import_external_libs),
# data.custom_cls / custom_sampler (verl/trainer/ppo/v1/trainer_base.py: load_extern_type),
# custom_reward_function (verl/trainer/ppo/reward.py), checkpoint_engine.custom_backend_module
# (verl/checkpoint_engine/base.py), optim.optimizer_impl (verl/workers/config/optimizer.py),
# reward_loop_module_path / _class_name, agent_loop_config_path, tool / function_tool paths,
# trust_remote_code (the model repository's Python).
_VERL_CODE = re.compile(
    r"^(external_lib|custom_cls|custom_sampler|custom_reward_function|custom_async_server"
    r"|custom_backend_module|optimizer_impl|trust_remote_code|agent_loop_config_path"
    r"|tool_config_path|function_tool_path|reward_loop_module_path|reward_loop_class_name"
    r"|checkpoint_callback_class|module)$"
    r"|_module$|_module_path$|_cls$|_class$|_class_name$|_lib$"
)


def env_reason(name: str) -> str | None:
    """Why an environment variable is the user's own (None: a recipe may set it)."""
    n = str(name).upper()
    if n.startswith(("TOPL_", "HYDRA_")) and n != "HYDRA_FULL_ERROR":
        return "a variable of topl (or its Hydra) itself: its guard, output and control"
    if n.startswith("PYTHON") and n not in PYTHON_TUNING:
        return "a Python variable that chooses code (only tuning ones such as PYTHONUNBUFFERED are data)"
    if n in _ENV_PROGRAM or _ENV_SHAPES.search(n):
        return "a variable a shell, loader or interpreter reads to choose what to run or load"
    return None


def verl_key_reason(key: str) -> str | None:
    """Why a verl override key (as written, `+`/`~` prefixes allowed) is the user's own."""
    bare = str(key).lstrip("+~").strip()
    parts = re.split(r"[./]", bare)
    if parts[0] == "hydra":
        return "verl is a Hydra app: hydra.* configures its logging, callbacks and output"
    if "runtime_env" in parts:  # verl hands ray_kwargs.ray_init to ray.init (verl@0.9.1:
        # verl/trainer/main_ppo.py:run_ppo): env_vars reach every worker, the rest is code
        rest = parts[parts.index("runtime_env") + 1 :]
        if rest[:1] == ["env_vars"] and len(rest) == 2:
            return env_reason(rest[1])
        if rest[:1] != ["env_vars"]:
            return "Ray's runtime_env (py_modules, pip, working_dir, setup hooks) chooses code"
    if any(_VERL_CODE.search(p) for p in parts):
        return "a verl setting that names code verl imports or runs"
    return None


def command_line_only(key: str) -> str | None:
    """Why a dotted job-spec key (as a recipe or a sweep parameter names it) needs the command
    line; None when a recipe may set it."""
    bare = str(key).lstrip("+~").strip()
    if bare == "hydra" or bare.startswith(("hydra.", "hydra/")):
        return "Hydra's own settings (a recipe may set only hydra.sweeper.params / max_batch_size / on_invalid)"
    if bare in FIELDS:
        return FIELDS[bare]
    for prefix in ("verl_overrides.", "algorithm.extra_overrides."):
        if bare.startswith(prefix) and (why := verl_key_reason(bare[len(prefix) :])):
            return why
    if bare.startswith("cluster.env.") and (why := env_reason(bare[len("cluster.env.") :])):
        return why
    return None


def recipe_hits(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(dotted key, reason) for every command-line-only setting a parsed recipe makes, at every
    level: top-level keys (dotted or nested), the maps verl_overrides / algorithm.extra_overrides /
    cluster.env (their keys are names, not paths), and hydra.sweeper.params keys."""
    hits: list[tuple[str, str]] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for k, v in node.items():
            key = f"{path}.{k}" if path else str(k)
            if path in ("verl_overrides", "algorithm.extra_overrides", "cluster.env"):
                # a map of names: `a.b` is one verl key / one variable, check it whole
                if why := command_line_only(key):
                    hits.append((key, why))
                if path != "cluster.env" and isinstance(v, dict):
                    sub = {f"{k}.{k2}": v2 for k2, v2 in v.items()}
                    walk(sub, path)
                continue
            if key.lstrip("+~").startswith(
                ("verl_overrides.", "algorithm.extra_overrides.", "cluster.env.")
            ):
                if why := command_line_only(key):
                    hits.append((key, why))
                continue
            if (why := command_line_only(key)) and not key.startswith("hydra"):
                hits.append((key, why))
            elif key != "hydra":
                walk(v, key)

    walk({k: v for k, v in data.items() if k not in ("hydra", "defaults")}, "")
    sweeper = (data.get("hydra") or {}) if isinstance(data.get("hydra"), dict) else {}
    params = (sweeper.get("sweeper") or {}) if isinstance(sweeper.get("sweeper"), dict) else {}
    params = params.get("params") if isinstance(params, dict) else None
    for k in params if isinstance(params, dict) else {}:
        if why := command_line_only(str(k)):
            hits.append((f"hydra.sweeper.params.{k}", why))
    return hits


def settings(composed: Composed) -> list[dict[str, Any]]:
    """The command-line-only settings a composed job makes, each with its value and source (for
    `topl check`: a person sees who chose the interpreter, the modules, the loader variables)."""

    out = []
    for key in FIELDS:
        if (src := composed.source(key)) != SCHEMA_SOURCE:
            out.append({"key": key, "value": composed.value(key), "source": src})
    for prefix in ("cluster.env", "verl_overrides", "algorithm.extra_overrides"):
        node = composed.value(prefix)
        tree: Any = node if isinstance(node, dict) or node is None else _plain(node)
        tree = tree or {}
        names = tree if prefix == "cluster.env" else flatten(tree)
        for name in names:
            key = f"{prefix}.{name}"
            if command_line_only(key):
                value = tree[name] if prefix == "cluster.env" else names[name]
                out.append({"key": key, "value": value, "source": composed.source(key)})
    return out


def _plain(node: Any) -> Any:
    """A DictConfig as plain data, interpolations as written (`${oc.env:X}`, never its value)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=False)
