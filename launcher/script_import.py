"""`topl recipes import SCRIPT.sh`: a verl launch script -> a recipe, plus a report by line.

1. `read_script` (pure): bash text -> the launch's Hydra overrides and env, each with its line
   (`bash_resolve` reads the bash; Hydra's own override parser types the values).
2. `build_recipe`: verl keys go back onto spec fields through the inverse of the renderer's table
   (`render.VERL_KEYS` + engine table: one table, read backwards); every other key, and any value
   the spec would render differently, stays a verbatim verl override; env vars topl would not
   render the same go to `cluster.env`. The recipe is checked by rendering it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from topl.launcher import render as R
from topl.launcher.bash_resolve import Item, resolve
from topl.launcher.errors import ToplError
from topl.launcher.redact import secret_name
from topl.launcher.render import CODE_KEYS


@dataclass
class Setting:
    """One `key=value` of the script."""

    key: str  # without `+` / `++`
    value: Any  # typed as Hydra reads it
    line: int  # where the override is written
    deps: tuple[int, ...] = ()  # lines of the variables its value came from
    add: bool = False  # written with `+`


@dataclass
class Script:
    entrypoint: str
    config_name: str | None
    overrides: dict[str, Setting]
    env: dict[str, Item]
    notes: list[tuple[int, str]] = field(default_factory=list)


def read_script(
    text: str, env: dict[str, str] | None = None, args: list[str] | None = None
) -> Script:
    """Resolve the script's python launch (nothing is executed)."""
    r = resolve(text, env, args)
    if r.launch is None:
        raise ToplError(
            "no `python -m ...` launch found in the script",
            fix="import a script that runs verl (python3 -m verl.trainer.main_ppo ...)",
        )
    parser, notes = OverridesParser.create(), list(r.notes)
    config_name, out = None, {}
    items = list(r.launch.args)
    while items:
        it = items.pop(0)
        if it.text.startswith("--config-name") or it.text.startswith("--config-path"):
            name, _, value = it.text.partition("=")
            if not _ and items:
                value = items.pop(0).text
            if name == "--config-name":
                config_name = value
            else:
                notes.append(
                    (it.line, f"{name}={value} not kept (topl uses verl's packaged configs)")
                )
            continue
        try:
            o = parser.parse_override(it.text)
        except Exception as e:  # noqa: BLE001 - Hydra's grammar errors, reported by line
            notes.append(
                (it.line, f"`{it.text}` is not a Hydra override ({str(e).splitlines()[0]})")
            )
            continue
        if o.is_delete():
            notes.append((it.line, f"deletion `{it.text}` not kept"))
            continue
        if set(o.key_or_group.split(".")) & CODE_KEYS:  # recipes are data (see render.CODE_KEYS)
            notes.append((it.line, f"`{o.key_or_group}` instantiates code in verl: not kept"))
            continue
        out[o.key_or_group] = Setting(o.key_or_group, o.value(), it.line, it.deps, o.is_add())
    env_items = {}
    for k, v in r.launch.env.items():
        if secret_name(k):  # never written to a recipe or report
            notes.append((v.line, f"secret {k} not kept (set it in the launching environment)"))
        else:
            env_items[k] = v
    return Script(r.launch.entrypoint, config_name, out, env_items, sorted(set(notes)))


# Env vars `render.env_vars` derives from a spec field. Only a hint: each is kept on its field only
# when rendering the recipe gives the script's value back, otherwise it stays in cluster.env.
ENV_FIELDS = {
    "HCCL_CONNECT_TIMEOUT": "collective.connect_timeout_s",
    "HCCL_EXEC_TIMEOUT": "collective.exec_timeout_s",
    "HCCL_OP_EXPANSION_MODE": "collective.op_expansion_mode",
    "HCCL_DETERMINISTIC": "collective.hccl_deterministic",
    "HCCL_ALGO": "collective.hccl_algo",
    "VERL_USE_EXTERNAL_MODULES": "cluster.external_modules",
}


def inverse_table(engine: str) -> dict[str, str]:
    """verl key -> spec field, read backwards from the renderer's own table."""
    table = {**R.VERL_KEYS, **(R.MEGATRON_KEYS if engine == "megatron" else R.FSDP_KEYS)}
    return {verl: f for f, verl in table.items()}


def same(a: Any, b: Any) -> bool:
    """Values equal as verl would read them (True is not 1; 1 equals 1.0)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def guess_groups(s: Script) -> dict[str, str]:
    """Config-group options the script's settings point to (the user can override each)."""
    import yaml

    from topl.launcher.compose import conf_dir

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
        "cluster": {16: "atlas_a3", 8: "atlas_a2"}.get(gpus, "local"),
    }
    mod = s.env.get("VERL_USE_EXTERNAL_MODULES")
    if (
        mod
        and mod.text.startswith("verl_ascend_recipe.true_on_policy")
        and (conf_dir() / "stack").is_dir()
    ):
        groups["stack"] = "seed"  # the seed's patch module: its pinned stack (conf/stack/seed.yaml)
    path = str(v.get(f"{R.ARR}.model.path", "")).rstrip("/").split("/")[-1].lower()
    for f in sorted((conf_dir() / "model").glob("*.yaml")):
        hf = str((yaml.safe_load(f.read_text()) or {}).get("hf_path", "")).split("/")[-1].lower()
        if hf and path.startswith(hf) and len(hf) > len(groups.get("_hf", "")):
            groups["model"], groups["_hf"] = f.stem, hf
    groups.pop("_hf", None)
    return groups


@dataclass
class Imported:
    recipe: dict  # the recipe's content (without the defaults list)
    defaults: dict[str, str]  # group -> option
    report: list[dict]  # {line, kind, key, detail}
    round_trip: list[dict]  # script settings the recipe does not render identically (should be [])


def _set(tree: dict, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for part in head:
        tree = tree.setdefault(part, {})
    tree[last] = value


def build_recipe(s: Script, choices: dict[str, str] | None = None) -> Imported:
    """Map the script onto spec fields over the chosen groups; the rest stays verbatim."""
    from omegaconf import OmegaConf

    from topl.launcher.compose import compose_job

    groups = {**guess_groups(s), **(choices or {})}
    base_over = [f"{g}={o}" for g, o in groups.items()]
    base = compose_job(base_over)
    inv = inverse_table(OmegaConf.select(base.cfg, "train.engine"))
    fields: dict[str, Any] = {}
    verbatim: dict[str, Any] = {}
    if s.entrypoint != base.cfg.algorithm.entrypoint:
        fields["algorithm.entrypoint"] = s.entrypoint
    if (s.config_name or "ppo_trainer") != (base.cfg.algorithm.config_name or "ppo_trainer"):
        fields["algorithm.config_name"] = s.config_name
    for key, st in s.overrides.items():
        f = inv.get(key)
        if f and isinstance(st.value, (str, int, float, bool)):
            fields[f] = st.value
    env_base = R.env_vars(base.to_object())
    env = {k: it.text for k, it in s.env.items() if env_base.get(k) != it.text}
    for k in [k for k in env if k in ENV_FIELDS]:  # a field when rendering it gives the same env
        v = env.pop(k)
        fields[ENV_FIELDS[k]] = int(v) if v.isdigit() and k.endswith("TIMEOUT") else v

    def attempt():
        over = {**fields, **{f"cluster.env.{k}": v for k, v in env.items()}}
        rec = {}
        for k, v in over.items():
            _set(rec, k, v)
        if verbatim:
            rec["verl_overrides"] = dict(verbatim)
        cfg = base.cfg.copy()
        OmegaConf.set_struct(cfg, False)  # Dict fields (cluster.env, verl_overrides) take new keys
        cfg.merge_with(rec)  # typed merge: a value a field's type rejects raises here
        spec = OmegaConf.to_object(cfg)
        return rec, dict(R.overrides(spec)), R.env_vars(spec)

    for _ in range(4):
        try:
            rec, pairs, env_r = attempt()
        except Exception as e:
            bad = next((f for f in fields if f.split(".")[-1] in str(e)), None)
            if bad is None:
                raise
            fields.pop(bad)
            continue
        moved = False
        for k, f in ENV_FIELDS.items():  # not rendered as the script has it: back to cluster.env
            if k in s.env and env_r.get(k) != s.env[k].text and f in fields:
                env[k] = s.env[k].text
                fields.pop(f)
                moved = True
        for key, st in s.overrides.items():
            got = pairs.get(key, pairs.get("+" + key, _MISSING))
            if got is _MISSING or not same(got, st.value):
                f = inv.get(key)
                fields.pop(f, None) if f else None
                vkey = ("+" if st.add else "") + key
                if vkey not in verbatim:
                    verbatim[vkey] = st.value
                    moved = True
        if not moved:
            break
    report = [
        {"line": st.line, "kind": "verl override (no spec field)", "key": k, "detail": st.value}
        for k, st in s.overrides.items()
        if ("+" if st.add else "") + k in verbatim
    ]
    report += [
        {"line": s.env[k].line, "kind": "env kept in cluster.env", "key": k, "detail": v}
        for k, v in env.items()
    ]
    report += [
        {"line": ln, "kind": "not resolved", "key": None, "detail": msg} for ln, msg in s.notes
    ]
    report += [
        {"line": None, "kind": "env added by topl", "key": k, "detail": v}
        for k, v in env_r.items()
        if k not in s.env
    ]
    report += [
        {"line": None, "kind": "verl key added by topl", "key": k.lstrip("+"), "detail": v}
        for k, v in pairs.items()
        if k.lstrip("+") not in s.overrides
    ]
    report += [
        {"line": s.overrides[k].line, "kind": "unknown to verl", "key": k, "detail": why}
        for k, why in unknown_to_verl(s).items()
    ]
    as_script = R.without_guard(env_r)  # the guard is topl's addition, as the `+` and forwarding
    trip = [
        {
            "line": st.line,
            "key": k,
            "script": st.value,
            "rendered": pairs.get(k, pairs.get("+" + k)),
        }
        for k, st in s.overrides.items()
        if not same(pairs.get(k, pairs.get("+" + k, _MISSING)), st.value)
    ]
    trip += [
        {"line": it.line, "key": k, "script": it.text, "rendered": as_script.get(k)}
        for k, it in s.env.items()
        if as_script.get(k) != it.text
    ]
    report.sort(key=lambda r: (r["line"] is None, r["line"] or 0))
    return Imported(rec, groups, report, trip)


_MISSING = object()


def unknown_to_verl(s: Script) -> dict[str, str]:
    """Keys written without `+` that the installed verl's full config lacks (Hydra would reject
    them). verl ships its resolved configs as trainer/config/_generated_ppo*_trainer.yaml
    (verl@0.9.1); nothing is checked when verl is not installed or the entrypoint is not verl's."""
    import importlib.util
    from pathlib import Path

    from omegaconf import OmegaConf

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations or not s.entrypoint.startswith("verl."):
        return {}
    root = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    megatron = any(
        st.key == "model_engine" and st.value == "megatron" for st in s.overrides.values()
    )
    f = root / (
        "_generated_ppo_megatron_trainer.yaml" if megatron else "_generated_ppo_trainer.yaml"
    )
    if not f.is_file():
        return {}
    cfg = OmegaConf.load(f)
    out = {}
    for k, st in s.overrides.items():
        if st.add or k.startswith(R.FREE_FORM) or k == "model_engine":
            continue
        parent, _, last = k.rpartition(".")
        node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False) if parent else cfg
        if node is None or not hasattr(node, "keys") or last not in list(node.keys()):
            out[k] = f"not in {f.name} of the installed verl"
    return out


def recipe_text(imp: Imported, source: str) -> str:
    """The recipe file: Hydra experiment format, groups first, then the differing values."""
    import yaml

    head = [
        "# @package _global_",
        f"# Imported from {source} by `topl recipes import`.",
        "defaults:",
    ]
    head += [
        f"  - override /{g}: {o if o != 'off' else chr(34) + 'off' + chr(34)}"
        for g, o in imp.defaults.items()
    ]
    head.append("  - _self_")
    body = yaml.safe_dump(imp.recipe, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(head) + "\n\n" + body
