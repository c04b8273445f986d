"""topl's own flags, taken out of an argument list before the rest goes to Hydra as overrides."""
from __future__ import annotations

from topl.launcher.errors import ToplError


def flag(args: list[str], name: str) -> tuple[bool, list[str]]:
    """(was `name` given, the other arguments)."""
    return name in args, [a for a in args if a != name]


def option(args: list[str], name: str, default: str | None = None, optional_value: bool = False):
    """(value of `name VALUE`, the other arguments). With optional_value, `name` alone gives ""
    (a following `key=value` override is never taken as its value)."""
    if name not in args:
        return default, args
    i = args.index(name)
    nxt = args[i + 1] if i + 1 < len(args) else None
    if nxt is None or nxt.startswith("-") or (optional_value and "=" in nxt):
        if optional_value:
            return "", args[:i] + args[i + 1:]
        raise ToplError(f"{name} needs a value", where=" ".join(args))
    return nxt, args[:i] + args[i + 2:]
