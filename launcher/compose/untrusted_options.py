"""What a recipe may *choose*, as opposed to what it sets (launcher/compose/untrusted.py): a
config group's option is a name in topl's conf/ (or a recipe's name), never a path, wherever it is
chosen (a `defaults` entry, the command line, a sweep parameter); and a recipe's sweep parameters
(`hydra.sweeper.params`) are recipe data, each value one more recipe to check."""

from __future__ import annotations

import itertools
import re
from importlib.resources import files
from pathlib import Path
from typing import Any, Iterator

from topl.launcher.base.errors import ToplError

# The config groups a recipe may select: the folders of topl's conf/ (one source of truth).
SELECTABLE = frozenset(
    p.name for p in Path(str(files("topl.conf"))).iterdir() if p.is_dir() and p.name[0] not in "_."
)
OPTION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a group's option, a recipe's name
MAX_SWEEP_VALUES = 10_000  # values one key sweeps (a recipe's sweep, `plan`, `launch -m`)


def sweep_params(data: Any) -> dict[str, Any]:
    """A parsed recipe's `hydra.sweeper.params` ({} when it sets none)."""
    node: Any = data
    for part in ("hydra", "sweeper", "params"):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def sweep_points(data: Any, where: str) -> Iterator[dict[str, Any]]:
    """Each value a recipe's sweep parameter may take, as the one-key recipe `{key: value}` it
    amounts to (Hydra applies it as an override of that key, per job): checked like any recipe
    value. A group's options are names (`model: ../../x/evil` would load any YAML)."""
    params = sweep_params(data)
    if not params:
        return
    # lazy: Hydra's override grammar only for a recipe that sweeps
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for key, value in params.items():
        text = f"{key}={value if not isinstance(value, bool) else str(value).lower()}"
        try:
            ov = parser.parse_override(text)
        except HydraException as e:
            raise ToplError(
                f"hydra.sweeper.params.{key}: not a sweep Hydra can read ({e})",
                where=where,
                fix="write `KEY: a,b,c` (Hydra's override grammar)",
            ) from None
        group = ov.key_or_group
        if ov.is_sweep_override() and not ov.is_discrete_sweep():
            values: list[Any] = []  # interval() / range over floats: numbers, nothing to name
        elif isinstance(ov.value(), Glob):  # patterns over a group's option names, never paths
            patterns = [*ov.value().include, *ov.value().exclude]
            paths = [
                p for p in patterns if not OPTION_NAME.match(p.replace("*", "x").replace("?", "x"))
            ]
            if paths:
                check_option(f"hydra.sweeper.params.{key}", group, paths, where)
            continue
        elif ov.is_sweep_override():
            values = list(itertools.islice(ov.sweep_iterator(), MAX_SWEEP_VALUES + 1))
            if len(values) > MAX_SWEEP_VALUES:  # listed whole, range(1,100000000) hung `check`
                raise ToplError(
                    f"hydra.sweeper.params.{key}: a sweep of more than {MAX_SWEEP_VALUES:,} values",
                    where=where,
                    fix=f"sweep at most {MAX_SWEEP_VALUES:,} values per key",
                )
        else:
            values = [ov.value()]
        if "/" in group or "@" in group or group.lstrip("+~") in (*SELECTABLE, "recipe"):
            check_option(f"hydra.sweeper.params.{key}", group, values, where)
            continue
        for v in values:
            yield _nest(group.lstrip("+~"), v)


def _nest(dotted: str, value: Any) -> dict[str, Any]:
    """`a.b.c`, v -> {a: {b: {c: v}}}: the key as a recipe nests it (`cluster: {env: ...}`)."""
    node: Any = value
    for part in reversed(dotted.split(".")):
        node = {part: node}
    return node


def check_option(what: str, group: str, options: list[Any], where: str) -> None:
    """A config group's option is a name in topl's conf/ (or a recipe's name), never a path:
    `../` or `/` would make Hydra load any YAML file, whose `hydra:` section runs code."""
    bare = group.lstrip("+~")
    if bare not in (*SELECTABLE, "recipe"):
        raise ToplError(
            f"{what}: {bare!r} is not one of topl's config groups "
            f"({', '.join(sorted(SELECTABLE))}, recipe)",
            where=where,
            fix="sweep a group's options by name (`model: qwen3_4b,qwen3_8b`) or a key's values",
        )
    bad = [str(o) for o in options if not (isinstance(o, str) and OPTION_NAME.match(o))]
    if bad:
        raise ToplError(
            f"{what}: option(s) {', '.join(map(repr, bad))} are not names: a group's option is "
            "a file of topl's conf/ (a recipe's name), never a path",
            where=where,
            fix=f"use the options `topl launch --info defaults` lists for {bare}",
        )
