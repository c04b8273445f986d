"""Field constraints, declared next to the field they constrain (`c(default, ge=1, src=...)`).

A constraint is plain dataclass metadata, so Hydra and OmegaConf ignore it and `kernels/` can
declare its own without importing the launcher. `problems(spec)` checks every field of a job
spec; `table()` lists them for the README. Each constraint that mirrors another package's check
names it in `src` (`package@version:path:symbol`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def c(
    default: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    ne: float | None = None,
    one_of: Sequence[Any] | None = None,
    each_of: Sequence[str] | None = None,
    src: str = "",
) -> Any:  # a dataclass field default, as dataclasses.field is typed for the class body
    """A dataclass field with a constraint: bounds (ge/gt/le/ne), one_of (allowed values),
    each_of (allowed items of a comma-separated string), src (who enforces it)."""
    given = {"ge": ge, "gt": gt, "le": le, "ne": ne, "one_of": one_of, "each_of": each_of}
    meta = {k: v for k, v in given.items() if v is not None}
    meta["src"] = src
    return dataclasses.field(default=default, metadata=meta)


@dataclass
class Problem:
    key: str  # dotted spec key
    value: Any
    message: str
    src: str  # who enforces the constraint

    @property
    def fix(self) -> str:
        return f"set {self.key} to a value that is {self.message.split(': must be ', 1)[-1]}"


def describe(meta: Mapping[str, Any]) -> str:
    """The constraint in words: `>= 1`, `one of a | b`."""
    parts = []
    if "ge" in meta:
        parts.append(f">= {meta['ge']}")
    if "gt" in meta:
        parts.append(f"> {meta['gt']}")
    if "le" in meta:
        parts.append(f"<= {meta['le']}")
    if "ne" in meta:
        parts.append(f"!= {meta['ne']}")
    if "one_of" in meta:
        parts.append("one of " + ", ".join(_show(v) for v in meta["one_of"]))
    if "each_of" in meta:
        parts.append("comma-separated items of " + ", ".join(meta["each_of"]))
    return ", ".join(parts)


def _show(v: object) -> str:
    return "null" if v is None else str(v)


def violated(value: object, meta: Mapping[str, Any]) -> bool:
    if value is None:
        return "one_of" in meta and None not in meta["one_of"]
    if "one_of" in meta and value not in meta["one_of"]:
        return True
    if "each_of" in meta:
        items = [x.strip() for x in str(value).split(",")]
        return not all(items) or any(x not in meta["each_of"] for x in items)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and math.isnan(value):
            return any(k in meta for k in ("ge", "gt", "le", "ne"))
        return (
            ("ge" in meta and value < meta["ge"])
            or ("gt" in meta and value <= meta["gt"])
            or ("le" in meta and value > meta["le"])
            or ("ne" in meta and value == meta["ne"])
        )
    return False


def fields(
    cls: type[DataclassInstance], prefix: str = ""
) -> Iterator[tuple[str, dataclasses.Field[Any]]]:
    """(dotted key, field) for every constrained field of a dataclass type, recursively."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        typ = hints.get(f.name)
        if isinstance(typ, type) and dataclasses.is_dataclass(typ):  # a section's class
            yield from fields(typ, key + ".")
        elif "src" in f.metadata:
            yield key, f


def problems(spec: DataclassInstance, prefix: str = "") -> list[Problem]:
    """Every field whose value breaks its declared constraint."""
    out = []
    for f in dataclasses.fields(spec):
        value, key = getattr(spec, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a section
            out += problems(value, key + ".")
        elif "src" in f.metadata and violated(value, f.metadata):
            out.append(
                Problem(
                    key,
                    value,
                    f"{key}={_show(value)}: must be {describe(f.metadata)}",
                    f.metadata["src"] or "topl",
                )
            )
    return out


def table(cls: type[DataclassInstance]) -> str:
    """Markdown: every constrained field, its constraint and who enforces it."""
    lines = ["| field | constraint | enforced by |", "|---|---|---|"]
    for key, f in fields(cls):
        src = f.metadata["src"] or "topl (its own values)"
        lines.append(f"| `{key}` | {describe(f.metadata)} | {src} |")
    return "\n".join(lines)
