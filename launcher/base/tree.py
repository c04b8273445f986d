"""Nested configs as dotted keys: one flattener and one dotted getter for the whole launcher."""

from __future__ import annotations

from typing import Any


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; leaves (anything but a dict) keep their value."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) else {key: v})
    return out


def parent_of(obj: Any, dotted: str) -> tuple[Any, str]:
    """(the object holding the last part of `dotted`, that part), through dicts and attributes."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj, leaf


def overlap(a: str, b: str) -> bool:
    """Dotted keys `a` and `b` name the same value, or one holds the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def get_path(obj: Any, dotted: str) -> Any:
    """obj.a.b (or obj["a"]["b"]) for "a.b"."""
    parent, leaf = parent_of(obj, dotted)
    return parent[leaf] if isinstance(parent, dict) else getattr(parent, leaf)
