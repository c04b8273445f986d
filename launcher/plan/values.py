"""Override values as the typed spec holds them, the way Hydra + OmegaConf would compose them.

Shared by `plan` (each sweep point sets its values on a copy of a composed spec) and `check --fix`
(each candidate fix does the same): both must type a value, know when that shortcut equals a
full Hydra compose (launcher/plan/interp.py re-resolves interpolations after values change).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from topl.launcher.base.errors import ToplError
from topl.launcher.spec.job import JobSpec


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
