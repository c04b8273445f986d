"""Did you mean ...? The nearest valid spelling of a mistyped key or command, from the real
candidates (difflib), and readable messages for the Hydra errors a typo or an empty value gives.
Used by compose._friendly / _refuse_unknown, the verl key rule (TOP-VERL-001) and the CLI."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from topl.launcher.base.errors import ToplError
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


def spec_key_fix(key: str) -> str:
    """The fix for an unknown spec key: the nearest field's full key, else how to list them."""
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
    return ToplError(
        f"unknown key {key}: the job spec has no such field",
        where=f"recipe {recipe[1]}, key {key}" if recipe and not o else f"overrides: {given}",
        fix=spec_key_fix(key),
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


def _keys(overrides: list[str]) -> list[str]:
    return [o.lstrip("+~").partition("=")[0] for o in overrides]


def verl_key(key: str, sch: Schema) -> str:
    """` (did you mean K?)` for a key the declared verl lacks: siblings first, then any key."""
    parent, _, last = key.rpartition(".")
    pre = parent + "." if parent else ""
    sibs = [k[len(pre) :] for k in sch.keys if k.startswith(pre) and "." not in k[len(pre) :]]
    close = [pre + c for c in nearest(last, sibs, 2)] or nearest(key, sch.keys, 2)
    return f" (did you mean {', '.join(close)}?)" if close else ""
