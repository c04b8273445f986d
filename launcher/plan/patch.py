"""A sweep point's command from its base's, re-rendering only the entries its values change.

`plan` checks thousands of points that differ from one composed base in a few swept keys; most
of them are table rows of render (`rollout.tp` -> one verl key). Building the whole command per
point (`command.build`, ~100 entries) was half of `plan`'s time. Here a key is *patchable* for a
base when rendering proves that its value reaches the command in exactly one entry and nowhere
else, and then a point's command is the base's with those entries' values replaced.

The proof, once per (base, key), on the base itself (render is pure: same reads, same output):
- render through the recording view (`contract.view`) reads the key exactly once, and reads
  nothing outside the view;
- render with the key set to a sentinel that refuses every use but being passed along (no ==, <,
  hash, bool, str) succeeds and returns the sentinel as the value of exactly one entry, as
  given: nothing compared, converted or copied it, and no later writer replaced that entry;
- the base's value and the point's are of one type among int, float and str (no None, no bool):
  a check of the kind `is None`, `is True` or `isinstance` the sentinel cannot trap gives the
  same answer for both.
Anything else (a group choice, verl_overrides, a value read twice, a None) builds the command
whole. tests/plan/test_speed.py compares patched commands with built ones, entry by entry.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, Any

from topl.launcher.base.tree import copy_on_write, get_path
from topl.launcher.render import invocation as R
from topl.launcher.render.command import Command, Entry, build
from topl.launcher.spec import view
from topl.launcher.spec.view import Reads

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

PATCHABLE_TYPES = (int, float, str)


class _Refuses:
    """A value render may only pass along: any use of it raises."""

    def _no(self, *_: Any) -> Any:
        raise _Used

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _no
    __str__ = __repr__ = __format__ = __len__ = __iter__ = __int__ = __float__ = __index__ = _no
    __add__ = __radd__ = __mul__ = __rmul__ = __contains__ = __getitem__ = _no


class _Used(Exception):
    pass


class _Counting(Reads):
    """Reads that also count how often each key was read."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    def add(self, key: str, value: Any) -> None:
        self.count[key] += 1
        super().add(key, value)


def _plain(s: JobSpec) -> JobSpec:
    """What `build` renders topl's own entries from (no verbatim overrides)."""
    return dataclasses.replace(
        s,
        algorithm=dataclasses.replace(s.algorithm, extra_overrides={}),
        verl_overrides={},
    )


class Template:
    """One spec's command (plan: a sweep's first point, so the values no point changes are in
    it) and, per key, the verl key its value alone decides (or None)."""

    def __init__(self, base: JobSpec):
        self.base = base
        self.cmd: Command | None = None
        try:
            self.cmd = build(base)
        except Exception:  # noqa: BLE001 - a point render refuses: patch nothing (plan retries)
            pass
        self._plain = _plain(base)
        self._counted: _Counting | None = None
        self._rows: dict[str, str | None] = {}
        self._was: dict[str, Any] = {}  # key -> the base's value (patched reads it per point)

    def row(self, key: str) -> str | None:
        """The verl key whose value is the spec's `key` and nothing else, or None."""
        if key not in self._rows:
            self._rows[key] = self._prove(key)
        return self._rows[key]

    def _prove(self, key: str) -> str | None:
        try:
            value = get_path(self.base, key)
        except (AttributeError, KeyError, TypeError):
            return None
        if type(value) not in PATCHABLE_TYPES or self.cmd is None:
            return None
        if self._counted is None:
            self._counted = _render_reads(self._plain)
        count = self._counted.count
        if "*" in count or count.get(key) != 1 or any(key.startswith(k + ".") for k in count):
            return None  # read twice, or a section above it read whole
        sentinel = _Refuses()
        try:
            pairs = R.overrides(copy_on_write(self._plain, [(key, sentinel)]))
        except Exception:  # noqa: BLE001 - render used the value (or failed): not patchable
            return None
        hits = [k for k, v in pairs if v is sentinel]
        if len(hits) != 1 or any(_holds(v, sentinel) for k, v in pairs if k != hits[0]):
            return None
        own = self.cmd.own.get(hits[0])
        return hits[0] if own is not None and own.value is value else None


def _render_reads(plain: JobSpec) -> _Counting:
    """What rendering `plain` reads, counted; `*` when it reads the spec outside the view (an
    `unwrap`: its reads are not counted) or cannot render a view."""
    reads, escaped = _Counting(), False
    try:
        R.overrides(view.View(plain, reads))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - render needs the plain spec: nothing is patchable
        escaped = True
    if escaped or reads.declared:  # an unwrap: what it reads is not counted
        reads.count["*"] = 1
    return reads


def _holds(v: Any, sentinel: _Refuses) -> bool:
    if v is sentinel:
        return True
    if isinstance(v, (list, tuple)):
        return any(_holds(x, sentinel) for x in v)
    if isinstance(v, dict):
        return any(_holds(x, sentinel) for x in v.values())
    return False


def patched(
    template: Template,
    spec: JobSpec,
    changed: tuple[str, ...],
    values: dict[str, Any] | None = None,
) -> Command | None:
    """`spec`'s command from the template's (the base's), or None where a changed key is not
    patchable (the caller builds it whole). `spec` equals the base outside `changed`; `values`:
    spec's value of each changed key, where the caller has them (else read from `spec`)."""
    if values is None:
        values = {k: get_path(spec, k) for k in changed}
    got = swaps(template, changed, values)
    return None if got is None else apply(template, spec, got)


def swaps(
    template: Template, changed: tuple[str, ...], values: dict[str, Any]
) -> list[tuple[str, Any]] | None:
    """(verl key, new value) for each entry a point with these `values` of the `changed` keys
    replaces in the template's command, or None where one is not patchable. (Decided without
    the point's spec: plan builds that only where a rule or an estimate runs.)"""
    base, cmd = template.base, template.cmd
    if cmd is None:
        return None
    out: list[tuple[str, Any]] = []
    was_of = template._was
    for key in changed:
        value = values[key]
        was = was_of[key] if key in was_of else was_of.setdefault(key, get_path(base, key))
        if value is was or (
            type(value) is type(was) and type(value) in (int, str) and value == was
        ):
            continue  # the same (an interpolation resolved again: an equal int or str)
        verl = template.row(key)
        if verl is None or type(value) is not type(was):
            return None
        out.append((verl, value))
    return out


def apply(template: Template, spec: JobSpec, swaps: list[tuple[str, Any]]) -> Command:
    """The template's command with `swaps` (from `swaps`) made: `spec`'s."""
    cmd = template.cmd
    assert cmd is not None  # swaps() gave None otherwise
    own = dict(cmd.own)
    entries = dict(cmd.entries)
    for verl, value in swaps:
        old = own[verl]
        own[verl] = new = Entry(old.key, value, old.prefix, old.by, old.origin)
        if entries.get(verl) is old:  # not replaced by a verbatim override
            entries[verl] = new
    return Command(entries, own, spec, cmd.user)  # no verbatim entry was replaced
