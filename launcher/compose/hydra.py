"""One place where Hydra composes `conf/` + recipe + overrides into a typed JobSpec.

Hydra does not say where a value came from, so we replay its defaults list: every config file
in composition order, then the command-line overrides; the last writer of a key is its source.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.compose import did_you_mean, overrides_guard, recipes, untrusted
from topl.launcher.compose.composed import Composed
from topl.launcher.compose.env_refs import UnsetEnv
from topl.launcher.compose.sources import conf_dir, recipe_sweeps, record_defaults, sources_of
from topl.launcher.spec.job import JobSpec, register_configs

if TYPE_CHECKING:
    pass


def split_recipe(overrides: list[str]) -> tuple[list[str], recipes.RecipeRoot | None]:
    """Refuse unsafe Hydra overrides (overrides_guard.guard_overrides), then replace `recipe=NAME|PATH`
    by the validated recipe on a private temporary search path. The caller owns root.cleanup()."""
    out: list[str] = []
    root: recipes.RecipeRoot | None = None
    for o in overrides_guard.guard_overrides(overrides):
        key, sep, value = o.lstrip("+").partition("=")
        if sep and key == "recipe" and value not in ("", "null"):
            values = _recipe_sweep(o) or [value]
            names = []
            for v in values:
                path = recipes.resolve(v)
                if root is None:
                    root = recipes.RecipeRoot(path)
                    names.append(root.name)
                else:
                    names.append(root.add(path))
            assert root is not None  # values is never empty
            root.user_value = ",".join(values)  # the sweep as the user spelled it, in order
            o = f"recipe={','.join(names)}"
        out.append(o)
    if root:
        out.append(f"hydra.searchpath=[file://{root.dir}]")
    return out, root


def _strict_bools(hydra_overrides: list[str]) -> None:
    """OmegaConf reads 2, "yes" or "on" as true for a bool field; on the command line a switch is
    `true` or `false`, so `rollout.prefix_caching=2` is a typo, not a yes."""
    import typing

    for ov in OverridesParser.create().parse_overrides(
        [o for o in hydra_overrides if not o.startswith("hydra.")]
    ):
        if ov.is_sweep_override() or ov.is_delete():
            continue
        node: Any = JobSpec
        typ: Any = None
        for part in ov.key_or_group.split("."):
            hints = typing.get_type_hints(node) if isinstance(node, type) else {}
            typ = hints.get(part)
            node = typ
        if typ is bool and not isinstance(ov.value(), bool):
            raise ToplError(
                f"{ov.key_or_group}={ov.get_value_element_as_str()}: a switch is true or false",
                where=f"command line `{ov.input_line}`",
                fix=f"write {ov.key_or_group}=true or =false",
            )


def _recipe_sweep(override: str) -> list[str] | None:
    """The recipes of a sweep over recipes (`recipe=a,b`, `choice(a,b)`, `glob(qwen3_4b_*)`), in
    Hydra's order; None when the value is one recipe."""
    from hydra.core.override_parser.types import Glob

    try:
        ov = OverridesParser.create().parse_override(override)
    except HydraException:
        return None  # not a sweep Hydra can read: resolved (and refused) as one name
    if not ov.is_sweep_override():
        return None
    value = ov.value()
    if isinstance(value, Glob):
        return value.filter(list(recipes.available()))
    if not ov.is_discrete_sweep():
        raise ToplError(
            f"{override}: a sweep over recipes needs a list, choice() or glob()",
            where=override,
            fix="e.g. recipe=a,b",
        )
    return [str(v) for v in ov.sweep_string_iterator()]


def friendly_error(e: Exception, overrides: list[str]) -> ToplError:
    """Turn Hydra / OmegaConf composition errors into one readable message."""
    msg = str(e).strip()
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause).strip() and str(cause).strip() not in msg:
        msg = f"{msg}\n  {str(cause).strip()}"
    msg = "\n".join(
        l
        for l in msg.splitlines()
        if not l.strip().startswith(("full_key:", "reference_type=", "object_type="))
    )
    fix = "check the key and value names: `topl launch --cfg job` prints the composed config"
    if (named := did_you_mean.compose_error(msg, overrides)) is not None:
        return named  # an unknown key with the nearest field; an empty recipe=
    named = did_you_mean.value_error(e, msg, overrides) or did_you_mean.option_error(e, overrides)
    named = named or did_you_mean.sweep_error(msg)
    if named is not None:
        return named  # a wrong-typed value; a group option that does not exist; a sweep
    unset = re.search(r"Environment variable '([A-Za-z_]\w*)' not found", msg)
    if unset:  # `cluster.env.NAME: ${oc.env:NAME}` reads the launching shell's variable
        name = unset[1]
        return UnsetEnv(
            name,
            f"cluster.env.{name} is read from this shell's environment (`${{oc.env:{name}}}`), "
            f"and {name} is not set here",
            where=f"overrides: {' '.join(overrides) or '(none)'}",
            fix=f"export {name} in the shell that runs topl (its value stays out of every file "
            "and output), or drop the key",
        )
    if "not in" in msg or "Could not override" in msg or "Key '" in msg:
        fix = "check the key's spelling (`topl launch --cfg job` lists every key); new keys are not accepted"
    elif "Could not find" in msg or "not found" in msg:
        fix = (
            "use an existing option: `topl launch --info defaults` lists groups; `ls conf/<group>`"
        )
    elif "Value '" in msg or "could not be converted" in msg or "Invalid value" in msg:
        fix = "give a value of the field's type (see launcher/spec/job.py)"
    elif (
        "mismatched input" in msg
        or "no viable alternative" in msg
        or "Error parsing override" in msg
    ):
        fix = "write overrides as key=value (Hydra override grammar); quote values with spaces"
    return ToplError(
        msg.replace("\n", "\n  "), where=f"overrides: {' '.join(overrides) or '(none)'}", fix=fix
    )


def _check_no_code(cfg: DictConfig, overrides: list[str]) -> None:
    """Nothing composed names code: `_target_` / `()` anywhere, dotted keys of free-form maps
    (algorithm.extra_overrides, rendered into verl, whose workers would instantiate it) included."""
    untrusted.check_values(
        OmegaConf.to_container(cfg, resolve=False),
        f"overrides: {' '.join(overrides) or '(none)'}",
        resolvers=True,
    )


def _refuse_unknown(cfg: DictConfig, schema: Any, prefix: str) -> None:
    """`+new.key=...` is accepted by Hydra; the spec has no such field, so refuse it."""
    import dataclasses

    names = {f.name: f for f in dataclasses.fields(schema)}
    for key in map(str, cfg.keys()):  # a config's keys are names
        if key not in names:
            # `+a.b.c=1` adds the map `a`: name its first leaf, the key the user typed
            full, value = f"{prefix}{key}", cfg[key]
            while isinstance(value, DictConfig) and len(value):
                first = str(next(iter(value.keys())))
                full, value = f"{full}.{first}", value[first]
            # the value as typed (`false`); a map's is not shown
            shown = None if isinstance(value, DictConfig) else str(value)
            shown = str(value).lower() if isinstance(value, bool) else shown
            raise ToplError(
                f"unknown key {full}: the job spec has no such field",
                where=f"`{full}`",
                fix=did_you_mean.spec_key_fix(full, shown),
            )
        node = cfg._get_node(key)
        if isinstance(node, DictConfig) and dataclasses.is_dataclass(node._metadata.object_type):
            _refuse_unknown(node, node._metadata.object_type, f"{prefix}{key}.")


def compose_job(
    overrides: list[str] | None = None,
    prepared: tuple[list[str], recipes.RecipeRoot | None] | None = None,
) -> Composed:
    """Compose the job spec; every input problem becomes a ToplError. `prepared` is a
    `split_recipe` result the caller keeps (launch composes again through Hydra from it)."""
    register_configs()
    hydra_overrides, root = prepared or split_recipe(list(overrides or []))
    overrides = [o for o in overrides or [] if o != overrides_guard.UNSAFE_FLAG]
    try:
        return _compose(overrides, hydra_overrides, root)
    finally:
        if prepared is None and root is not None:
            root.cleanup()


def _compose(
    overrides: list[str], hydra_overrides: list[str], root: recipes.RecipeRoot | None
) -> Composed:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None, job_name="topl"):
            hydra = GlobalHydra.instance().hydra
            assert hydra is not None  # initialize_config_dir just set it
            seen = record_defaults(hydra.config_loader, hydra_overrides, root)
            cfg = compose(
                "config",
                overrides=hydra_overrides + _unused_hydra(hydra_overrides),
                return_hydra_config=True,
            )
            sources = sources_of(None, hydra_overrides, root, seen)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise friendly_error(e, overrides) from None
    finally:
        GlobalHydra.instance().clear()
    choices = {
        k: v for k, v in cfg.hydra.runtime.choices.items() if v is not None and "hydra/" not in k
    }
    with open_dict(cfg):
        del cfg["hydra"]
    _check_no_code(cfg, overrides)
    _strict_bools(hydra_overrides)
    redact.remember(
        cast(dict[str, Any], OmegaConf.to_container(cfg.cluster.env)) if "cluster" in cfg else {}
    )
    try:
        _refuse_unknown(cfg, JobSpec, "")
        OmegaConf.to_object(cfg)  # resolves interpolations and checks MISSING fields now
        untrusted.check_no_secret_on_argv(
            OmegaConf.to_container(cfg, resolve=True),
            f"overrides: {' '.join(overrides) or '(none)'}",
        )
    except OmegaConfBaseException as e:
        raise friendly_error(e, overrides) from None
    return Composed(cfg, sources, overrides, choices, str(root.source) if root else None)


# Hydra's own groups whose configs only fill the `hydra` section, which a job spec drops (its
# choices are read from hydra.runtime.choices, filled whatever these are): not composed for it,
# about a fifth of the compose (help texts, logging configs; hydra-core@1.3.8:hydra/conf/__init__.py:
# HydraConf.defaults lists them). `topl launch` runs Hydra's app, which composes them all.
UNUSED_HYDRA_GROUPS = (
    "output",
    "launcher",
    "sweeper",
    "help",
    "hydra_help",
    "hydra_logging",
    "job_logging",
    "env",
)


def _unused_hydra(hydra_overrides: list[str]) -> list[str]:
    """`~hydra/GROUP` for each of UNUSED_HYDRA_GROUPS, unless an override names the hydra
    section or its groups (then it is composed as the user wrote it, errors included)."""
    for o in hydra_overrides:
        if o.lstrip("+~").startswith("hydra") and not o.startswith("hydra.searchpath="):
            return []
    return [f"~hydra/{g}" for g in UNUSED_HYDRA_GROUPS]


def output_dirs(hydra_overrides: list[str]) -> tuple[Path, Path]:
    """(hydra.run.dir, hydra.sweep.dir) as Hydra would resolve them now, absolute; sweep overrides
    are left out (Hydra resolves the sweep dir from the config without them)."""
    try:
        parsed = OverridesParser.create().parse_overrides(hydra_overrides)
        plain = [o for o, p in zip(hydra_overrides, parsed) if not p.is_sweep_override()]
    except HydraException:
        plain = hydra_overrides
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base=None, job_name="topl"):
            cfg = compose("config", overrides=plain, return_hydra_config=True)
            dirs = str(cfg.hydra.run.dir), str(cfg.hydra.sweep.dir)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        raise friendly_error(e, plain) from None
    finally:
        GlobalHydra.instance().clear()
    for d in dirs:
        overrides_guard.check_run_path(d, "hydra.run.dir / hydra.sweep.dir (run_root, experiment)")
    return Path(dirs[0]).absolute(), Path(dirs[1]).absolute()


def from_hydra_job(
    cfg: DictConfig,
    hydra_overrides: list[str],
    choices: dict[str, Any],
    root: recipes.RecipeRoot | None,
    user_overrides: list[str],
) -> Composed:
    """The Composed of a job Hydra composed itself (`topl launch -m`: one per sweep point)."""
    typed = cast(DictConfig, OmegaConf.merge(OmegaConf.structured(JobSpec), cfg))
    _check_no_code(typed, user_overrides)
    redact.remember(cast(dict[str, Any], OmegaConf.to_container(typed.cluster.env)))
    untrusted.check_no_secret_on_argv(
        OmegaConf.to_container(typed, resolve=True), f"overrides: {' '.join(user_overrides)}"
    )
    chosen = {k: v for k, v in choices.items() if v is not None and "hydra/" not in k}
    sources = sources_of(None, hydra_overrides, root, swept=recipe_sweeps(root, user_overrides))
    recipe = str(root.source_of(chosen.get("recipe"))) if root else None
    return Composed(typed, sources, user_overrides, chosen, recipe)
