"""A read-recording view of the job spec: a rule reports exactly the fields it read."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, TypeVar

T = TypeVar("T")  # a spec or one of its sections


# What a caller of `unwrap` reads from the plain spec, besides dotted spec keys:
WHOLE = "*"  # all of it (a computation over the whole spec)
RENDERED = "<command>"  # only through the rendered command, whose entries a sweep's trace records


class Reads(dict[str, Any]):
    """Dotted key -> value read, in first-read order; and, apart, what `unwrap` callers declared
    they read from the plain spec (a violation lists the reads; a sweep needs both)."""

    declared: frozenset[str] | set[str] = frozenset()

    def add(self, key: str, value: Any) -> None:
        self.setdefault(key, value)

    def declare(self, keys: tuple[str, ...]) -> None:
        if not isinstance(self.declared, set):
            self.declared = set()
        self.declared.update(keys)


class View:
    """Wraps a spec (or one of its sections); every leaf read is recorded as `a.b.c`.
    Sections stay views; dicts become `DictView`s; leaves come back as they are."""

    __slots__ = ("_obj", "_prefix", "_reads")

    def __init__(self, obj: Any, reads: Reads, prefix: str = ""):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_reads", reads)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        if name.startswith("_") or name.isupper() or callable(value):
            return value  # class constants (Alignment.SWITCHES) and methods are not spec fields
        return wrap(value, self._reads, f"{self._prefix}{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("rules are pure: the spec is read-only")


class DictView:
    """A dict field (cluster.env, algorithm.extra_overrides): each entry read is recorded as
    `field.KEY`; listing the keys records the field itself."""

    __slots__ = ("_d", "_key", "_reads")

    def __init__(self, d: dict[str, Any], reads: Reads, key: str):
        self._d, self._key, self._reads = d, key, reads

    def _entry(self, k: str) -> Any:
        self._reads.add(f"{self._key}.{k}", self._d[k])
        return self._d[k]

    def __getitem__(self, k: str) -> Any:
        return self._entry(k)

    def get(self, k: str, default: Any = None) -> Any:
        return self._entry(k) if k in self._d else default

    def __contains__(self, k: object) -> bool:
        if k in self._d:
            self._reads.add(f"{self._key}.{k}", self._d[k])
        else:
            self._reads.add(self._key, self._d)
        return k in self._d

    def keys(self) -> list[str]:
        self._reads.add(self._key, self._d)
        return list(self._d)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def items(self) -> list[tuple[str, Any]]:
        return [(k, self._entry(k)) for k in self.keys()]

    def __len__(self) -> int:
        self._reads.add(self._key, self._d)
        return len(self._d)

    def __bool__(self) -> bool:
        return len(self) > 0


def wrap(value: Any, reads: Reads, key: str) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return View(value, reads, key + ".")
    if isinstance(value, dict):
        return DictView(value, reads, key)
    reads.add(key, value)
    return value


def record(viewed: Any, key: str, value: Any) -> None:
    """Record `key` as read by the rule reading `viewed` (a view; a plain spec records nothing)."""
    if isinstance(viewed, View):
        viewed._reads.add(key, value)


def unwrap(spec: T, *keys: str) -> T:
    """The plain spec behind a view, for code that computes from it instead of reading fields
    through the view. `keys` says what the caller reads from it (dotted spec keys, WHOLE or
    RENDERED), declared here where it unwraps: a sweep (launcher/plan/) reuses an answer only
    while those keys keep their values, and tests/project/test_layers.py holds every call to declaring."""
    if not keys:
        raise TypeError("unwrap(spec, *keys): declare what is read from the plain spec")
    if isinstance(spec, View):
        spec._reads.declare(keys)
        return spec._obj  # type: ignore[no-any-return]
    return spec
