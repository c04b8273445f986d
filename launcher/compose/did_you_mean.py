"""Did you mean ...? The nearest valid spelling of a mistyped key or command, from the real
candidates (difflib), and readable messages for the Hydra errors a typo or an empty value gives.
Used by compose._friendly / _refuse_unknown, the verl key rule (TOP-VERL-001) and the CLI."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from topl.launcher.base.errors import ToplError, install_hint
from topl.launcher.facts.verl_schema import KNOWN, schema
from topl.launcher.facts.verl_tables import FSDP_KEYS, MEGATRON_KEYS, VERL_KEYS
from topl.launcher.spec.fields import rows
from topl.launcher.spec.job import JobSpec

if TYPE_CHECKING:
    from topl.launcher.base.errors import ToplError
    from topl.launcher.facts.verl_schema import Schema


def nearest(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(candidates)), n=n, cutoff=0.6)


def hint(word: str, candidates: Iterable[str]) -> str:
    """`did you mean a, b?` or ''."""
    close = nearest(word, candidates)
    return f"did you mean {', '.join(close)}?" if close else ""


def spec_fields(dotted_parent: str) -> list[str]:
    """The field names under `dotted_parent` of the job spec ('' for the top level)."""
    import typing

    node: Any = JobSpec
    for part in [p for p in dotted_parent.split(".") if p]:
        hints = typing.get_type_hints(node) if _is_dc(node) else {}
        node = next(
            (a for a in (hints.get(part), *typing.get_args(hints.get(part))) if _is_dc(a)), None
        )
    return [f.name for f in dataclasses.fields(node)] if _is_dc(node) else []


def _is_dc(node: Any) -> bool:
    return isinstance(node, type) and dataclasses.is_dataclass(node)


def topl_fields_of(verl_key: str) -> list[str]:
    """The spec fields that render `verl_key`: the renderer's own tables, read backwards."""
    tables = (VERL_KEYS, MEGATRON_KEYS, FSDP_KEYS)
    return sorted({field for t in tables for field, k in t.items() if k == verl_key})


def verl_key_fix(key: str, value: str | None = None) -> str | None:
    """The fix for a verl key typed where topl reads its own (`actor_rollout_ref.rollout.
    tensor_model_parallel_size=2`): the topl field that renders it, or verl's passthrough for a
    key no field renders; None for a key that is not verl's."""
    given = "VALUE" if value is None else value
    fields = topl_fields_of(key)
    if fields:
        also = f" ({', '.join(fields[1:])} on the other engine)" if fields[1:] else ""
        return f"this is `{fields[0]}` in topl: write {fields[0]}={given}{also}"
    head = key.partition(".")[0]
    if "." in key and head in _verl_heads() and head not in spec_fields(""):
        return (
            f"`{key}` is a verl key no topl field renders: pass it to verl as "
            f"+algorithm.extra_overrides.{key}={given} (TOP-VERL-001 checks it against the "
            "declared verl)"
        )
    return None


def _verl_heads() -> set[str]:
    """verl's top-level config sections (the newest known release's schema)."""
    return {k.partition(".")[0] for k in schema(KNOWN[-1]).keys}


def spec_key_fix(key: str, value: str | None = None) -> str:
    """The fix for an unknown spec key: the topl field of a verl key, else the nearest field's
    full key, else how to list them."""
    verl = verl_key_fix(key, value)
    if verl is not None:
        return verl
    parent, _, last = key.rpartition(".")
    close = [f"{parent}.{c}" if parent else c for c in nearest(last, spec_fields(parent))]
    listing = "`topl launch --cfg job` lists every key; new keys are not accepted"
    return (
        f"did you mean {', '.join(close)}? ({listing})"
        if close
        else f"check the spelling ({listing})"
    )


_NOT_IN = re.compile(r"Key '([^']+)' not in '(\w+)'")
_OVERRIDE = re.compile(r"Could not override '([^']+)'")
_EMPTY = ("", "null", "''", '""')


def compose_error(msg: str, overrides: list[str]) -> ToplError | None:
    """A ToplError for Hydra's "Key 'x' not in 'XSpec'" that names what is wrong, or None."""

    m = _NOT_IN.search(msg)
    if m is None:
        return None
    given = " ".join(overrides) or "(none)"
    if m[1] == "recipe" and m[2] == "JobSpec":
        empty = [o for o in overrides if o.lstrip("+").partition("=")[::2] in _recipe_empty()]
        if empty:
            return ToplError(
                f"`{empty[0]}` names no recipe",
                where=f"command line `{empty[0]}`",
                fix="give a recipe name (`topl recipes` lists them) or a recipe file "
                "(recipe=path/to/x.yaml), or leave `recipe=` out for the defaults",
            )
        return ToplError(
            "a recipe file's keys landed under `recipe.`: the file does not start with "
            "`# @package _global_`",
            where=f"overrides: {given}",
            fix="start the recipe file with the line `# @package _global_` "
            "(`topl recipes import` and every shipped recipe do)",
        )
    o = _OVERRIDE.search(msg)
    key = o[1] if o else _spec_path(m[2], m[1])
    recipe = re.search(r"In 'recipe/([^']+)'", msg)
    value = next((v for k, v in _pairs(overrides) if k == key), None)
    return ToplError(
        f"unknown key {key}: the job spec has no such field",
        where=f"recipe {recipe[1]}, key {key}" if recipe and not o else f"overrides: {given}",
        fix=spec_key_fix(key, value),
    )


def _spec_path(cls_name: str, key: str) -> str:
    """`tpp` of `TrainSpec` -> `train.tpp` (the spec's dataclasses are each used in one place)."""
    import typing

    todo: list[tuple[Any, str]] = [(JobSpec, "")]
    while todo:
        node, path = todo.pop()
        if node.__name__ == cls_name:
            return path + key
        for name, ann in typing.get_type_hints(node).items():
            todo += [(a, f"{path}{name}.") for a in (ann, *typing.get_args(ann)) if _is_dc(a)]
    return key


def _recipe_empty() -> set[tuple[str, str]]:
    return {("recipe", v) for v in _EMPTY}


def _pairs(overrides: list[str]) -> list[tuple[str, str]]:
    return [(k, v) for k, _, v in (o.lstrip("+~").partition("=") for o in overrides)]


def verl_key(key: str, sch: Schema) -> str:
    """` (did you mean K?)` for a key the declared verl lacks: siblings first, then any key."""
    parent, _, last = key.rpartition(".")
    pre = parent + "." if parent else ""
    sibs = [k[len(pre) :] for k in sch.keys if k.startswith(pre) and "." not in k[len(pre) :]]
    close = [pre + c for c in nearest(last, sibs, 2)] or nearest(key, sch.keys, 2)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# A field's type as a person reads it (spec/fields.py spells the types as docs/fields.md does).
_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


def _type_words(typ: str) -> str:
    inner = re.fullmatch(r"Optional\[(\w+)\]", typ)
    if inner:
        return f"{_WORDS.get(inner[1], inner[1])}, or null"
    if typ.startswith(("Dict", "dict")):
        return "a map, {key: value}"
    if typ.startswith(("List", "list")):
        return "a list, [a, b]"
    return _WORDS.get(typ, typ)


def value_error(e: BaseException, msg: str, overrides: list[str]) -> ToplError | None:
    """A ToplError for a value OmegaConf cannot convert to its field's type (`train.tp=two`): the
    field, its type and meaning, the value given and where; None for other errors."""
    from omegaconf.errors import ValidationError  # lazy: OmegaConf only once a compose failed

    cause = next(
        (x for x in (e, e.__cause__, e.__context__) if isinstance(x, ValidationError)), None
    )
    if cause is None:
        return None
    key, value = str(cause.full_key), getattr(cause, "value", None)
    given = "null" if value is None else str(value)
    shown = repr(value) if isinstance(value, str) else given
    row = {k: (t, d, doc) for k, t, d, doc in rows(JobSpec)}.get(key)
    if row is None:
        return None
    typ, default, doc = row
    typed = next((o for o in overrides if o.lstrip("+").partition("=")[0] == key), None)
    recipe = next((v for k, v in _pairs(overrides) if k == "recipe"), None)
    in_recipe = bool(re.search(r"In 'recipe/", msg) and recipe)  # composed first: fix it there
    if in_recipe:
        where = f"recipe {recipe}, key {key}"
    else:
        where = f"command line `{typed}`" if typed else f"overrides: {' '.join(overrides)}"
    example = default.strip("`") if default.startswith("`") and default != "`None`" else None
    example = example.lower() if example and typ == "bool" else example
    fix = f"give {key} {_type_words(typ)}" + (" in the recipe" if in_recipe else "")
    if example and in_recipe:
        parent, _, last = key.rpartition(".")
        fix += f", e.g. `{last}: {example}`" + (f" under `{parent}:`" if parent else "")
    elif example:
        fix += f", e.g. {key}={example}"
    return ToplError(
        f"{key}={given}: {key} takes {_type_words(typ)} ({doc}), not {shown}",
        where=where,
        fix=fix,
    )


def sweep_error(msg: str) -> ToplError | None:
    """A sweep (`train.tp=2,4`, `range()`) given to a command that takes one spec: Hydra's own
    hint (--multirun) is not a flag of check / render / a plain launch; name the ones that are."""
    found = re.search(r"(?:argument|Sweep parameters) '([^']+)'", msg)
    if found is None or not ("--multirun" in msg or "Ambiguous value" in msg):
        return None
    typed = found[1]
    key = typed.partition("=")[0]
    return ToplError(
        f"{typed} is a sweep: this command takes one spec",
        where=f"command line `{typed}`",
        fix=f"`topl plan {typed}` checks every point, `topl launch -m {typed}` runs them; "
        f"one value checks one spec ({key}=VALUE); a list value is written {key}=[a,b]",
    )


# Hydra plugins docs/guide.md names, by the option they add (each registers its config group
# option when installed): the PyPI package and topl's extra that bring it.
PLUGINS = {"hydra/launcher=joblib": ("hydra-joblib-launcher", "local")}


def option_error(e: BaseException, overrides: list[str]) -> ToplError | None:
    """A ToplError for a config group option that does not exist (`model=qwen3_4B`): the nearest
    options and the full list; None for other errors."""
    missing, options = getattr(e, "missing_cfg_file", None), getattr(e, "options", None)
    if not missing or not options:
        return None
    group, _, name = str(missing).rpartition("/")
    typed = next((o for o in overrides if o.lstrip("+~").partition("=")[0] == group), None)
    close = [f"{group}={c}" for c in nearest(name, options)]
    listing = f"options of `{group}`: {', '.join(sorted(options))}"
    plugin = PLUGINS.get(f"{group}={name}")
    if plugin:  # a documented plugin that is not installed here: install it, not a near name
        package, extra = plugin
        listing = (
            f"the {name} {group.rpartition('/')[2]} is Hydra's plugin {package}, not installed here: "
            f"{install_hint(extra)} brings it (or pip install {package}) ({listing})"
        )
        close = []
    return ToplError(
        f"{group}={name}: `{group}` has no option {name!r}",
        where=f"command line `{typed}`"
        if typed
        else f"overrides: {' '.join(overrides) or '(none)'}",
        fix=f"did you mean {', '.join(close)}? ({listing})" if close else listing,
    )
