"""Nested configs as dotted keys: one flattener and one dotted getter for the whole launcher."""

from __future__ import annotations

from typing import Any, TypeVar, cast

T = TypeVar("T")  # a spec or one of its sections


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


def copy_on_write(root: T, sets: list[tuple[str, Any]]) -> T:
    """A copy of `root` with each (dotted key, typed value) set: the sections on those paths are
    copied, everything else is shared with `root` (which stays as it was)."""
    copies: dict[str, Any] = {}

    def writable(path: str, obj: Any) -> Any:
        if path not in copies:
            if isinstance(obj, dict):
                copies[path] = dict(obj)
            else:
                copies[path] = new = object.__new__(type(obj))
                new.__dict__.update(obj.__dict__)
        return copies[path]

    new_root = writable("", root)
    for dotted, value in sets:
        *parents, leaf = dotted.split(".")
        obj, path = new_root, ""
        for part in parents:
            path = f"{path}.{part}"
            old = obj[part] if isinstance(obj, dict) else obj.__dict__[part]
            child = writable(path, old)
            if isinstance(obj, dict):
                obj[part] = child
            else:
                obj.__dict__[part] = child
            obj = child
        if isinstance(obj, dict):
            obj[leaf] = value
        else:
            obj.__dict__[leaf] = value
    return cast(T, new_root)
