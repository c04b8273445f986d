"""`topl check ... --fix -o FILE.yaml`: the fixed spec written as a recipe (Hydra's experiment format,
like recipes/*.yaml): the user's recipe (included by name; a recipe given as a path is copied in,
since a defaults entry names recipes only), then the command line's group choices and keys, then
the fix's overrides. `topl check recipe=FILE.yaml` gives the verdict the fix promised. Never over an
existing file without --force; never a secret in the file."""

from __future__ import annotations

import os
from typing import Any

import yaml

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.compose.recipes import resolve
from topl.launcher.compose.sources import conf_dir

WHERE = "topl check --fix -o FILE.yaml"


def _put(tree: dict[str, Any], key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for p in parents:
        nxt = tree.get(p)
        if not isinstance(nxt, dict):
            tree[p] = nxt = {}
        tree = nxt
    tree[last] = value


def _group_entry(entry: Any) -> str | None:
    """`override /GROUP: OPTION` -> GROUP."""
    if isinstance(entry, dict) and len(entry) == 1:
        key = str(next(iter(entry)))
        if key.startswith("override /"):
            return key.removeprefix("override /")
    return None


def recipe(overrides: list[str]) -> dict[str, Any]:
    """The recipe's data: `defaults` first, then the keys."""
    from hydra.core.override_parser.overrides_parser import (
        OverridesParser,
    )  # lazy: Hydra only when -o writes a file

    parsed = OverridesParser.create().parse_overrides(overrides)
    groups = {p.name for p in conf_dir().iterdir() if p.is_dir()} - {"hydra", "recipe"}
    defaults: list[Any] = []
    body: dict[str, Any] = {}
    for text, o in zip(overrides, parsed):
        key = o.key_or_group
        if o.is_delete() or o.is_sweep_override() or key.startswith("hydra"):
            raise ToplError(
                f"{text}: a recipe cannot say it (a deletion, a sweep or a Hydra setting)",
                where=WHERE,
                fix=f"drop {text} from the command line, or write the recipe by hand",
            )
        if key == "recipe":
            defaults += _base(str(o.value()), body)
        elif key in groups:
            defaults = [e for e in defaults if _group_entry(e) != key]
            defaults.append({f"override /{key}": o.value()})
        else:
            _put(body, key, o.value())
    return {"defaults": [*defaults, "_self_"], **body}


def _base(value: str, body: dict[str, Any]) -> list[Any]:
    """The user's recipe: by name, or (a path) its defaults and keys copied in."""
    if not (value.endswith((".yaml", ".yml")) or os.sep in value):
        resolve(value)  # an unknown name: the usual message
        return [value]
    data = yaml.safe_load(resolve(value).read_text()) or {}
    defaults = [e for e in data.pop("defaults", []) if e != "_self_"]
    body.update(data)
    return defaults


def text(overrides: list[str], fix_overrides: list[str], command: str) -> str:
    data = recipe([*overrides, *fix_overrides])
    head = (
        "# @package _global_\n"
        f"# written by `{command}`\n"
        f"# the fix: {' '.join(fix_overrides) or 'none (already accepted)'}\n"
    )
    out = head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    if redact.text(out) != out:
        raise ToplError(
            "a value on the command line is a secret: it is never written into a recipe file",
            where=WHERE,
            fix="read it from the environment in the recipe (`${oc.env:NAME}`), not a literal",
        )
    return out
