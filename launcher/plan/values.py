"""Override values as the typed spec holds them, the way Hydra + OmegaConf would compose them.

Shared by `plan` (each sweep point sets its values on a copy of a composed spec) and `check --fix`
(each candidate fix does the same): both must type a value, know when that shortcut equals a
full Hydra compose (launcher/plan/interp.py re-resolves interpolations after values change).
`neighbours`: the other values `check --fix` tries for a field a violated rule read.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from topl.launcher.base.errors import ToplError
from topl.launcher.base.tree import parent_of
from topl.launcher.spec.constraints import violated
from topl.launcher.spec.job import JobSpec

# Integer fields whose valid values are divisors or multiples of others: try the powers of two.
SIZES = {"tp", "pp", "ep", "cp", "dp", "etp", "sp", "n_gpus_per_node", "nnodes", "rollout_n", "n"}
POW2 = (1, 2, 4, 8, 16, 32, 64, 128)
VO = "verl_overrides."  # entries are whole dotted verl keys, not nested spec paths


@functools.cache
def field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, typ: Any, key: str) -> Any:
    args = typing.get_args(typ)
    if value is None and type(None) in args:
        return None
    base = (
        next((a for a in args if a is not type(None)), typ)
        if args and typing.get_origin(typ) is typing.Union
        else typ
    )
    try:
        if base is bool and not isinstance(value, bool):
            raise ValueError
        if base is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError
        if base in (float, int, str, bool):
            return base(value)
    except (TypeError, ValueError):
        raise ToplError(
            f"value {value!r} for {key} is not a {getattr(base, '__name__', base)}",
            where=f"`{key}={value}`",
            fix="give a value of the field's type (see launcher/spec/job.py)",
        ) from None
    return value


def typed_value(dotted: str, value: Any) -> Any:
    """`value` as the spec field `dotted` holds it (inside a dict field: as it is)."""
    cls: Any = JobSpec
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        hints = field_hints(cls)
        if part not in hints:
            raise ToplError(
                f"unknown key {dotted}",
                where=f"`{dotted}=...`",
                fix="check the spelling (`topl launch --cfg job` lists every key)",
            )
        typ = hints[part]
        if i == len(parts) - 1:
            return _coerce(value, typ, dotted)
        if not dataclasses.is_dataclass(typ):
            return value  # an entry of a dict field
        cls = typ
    return value


def replayable(text: str, key: str, value: Any) -> bool:
    """True when setting `value` on the typed spec equals what Hydra + OmegaConf would compose."""
    if text.startswith(("+", "~")) or (isinstance(value, str) and "${" in value):
        return False
    cls: Any = JobSpec
    parts = key.split(".")
    for i, part in enumerate(parts):
        hints = field_hints(cls)
        if part not in hints:
            return False  # unknown key: Hydra's own message
        typ = hints[part]
        if dataclasses.is_dataclass(typ):
            cls = typ
            continue
        if i != len(parts) - 1:
            return False  # inside a dict field (cluster.env, extra_overrides)
        args = typing.get_args(typ)
        if value is None:
            return type(None) in args
        base = next((a for a in args if a is not type(None)), typ) if args else typ
        return (type(value) is base or (base is float and type(value) is int)) and base in (
            int,
            float,
            str,
            bool,
        )
    return False


def neighbours(spec: JobSpec, key: str) -> list[Any]:
    """Other values worth trying for a field a violated rule read."""
    if key.startswith(VO):  # a recipe's verl key: flip a switch, nothing else
        value = spec.verl_overrides.get(key[len(VO) :])
        return [not value] if isinstance(value, bool) else []
    try:
        obj, leaf = parent_of(spec, key)
    except (AttributeError, KeyError, TypeError):
        return []
    if isinstance(obj, dict) or not dataclasses.is_dataclass(obj):
        return []
    meta: Any = next((f.metadata for f in dataclasses.fields(obj) if f.name == leaf), {})
    cls: type = type(obj)
    typ = field_hints(cls).get(leaf)
    value = getattr(obj, leaf)
    out: list[Any] = []
    if "one_of" in meta:
        out += [v for v in meta["one_of"] if v != value]
    if isinstance(value, bool) or typ is bool:
        out.append(not value)
    elif isinstance(value, int):
        # sizes, batch sizes, sequence budgets: the powers of two up to 4x, and x2 / /2
        top = max(POW2[-1] if leaf in SIZES else 4 * value, 1)
        out += [
            p
            for p in (1 << i for i in range(top.bit_length()))
            if p <= top and p != value and 32 * p >= value
        ]
        out += [v for v in (value * 2, value // 2) if v > 0 and v != value and v not in out]
    elif isinstance(value, float):
        out += [value * 2, value / 2]
    if value is not None and "Optional" in str(typ):
        out.append(None)
    return [v for v in out if not (meta.get("src") is not None and violated(v, meta))]
