"""Expand a sweep exactly as Hydra does and give every point a verdict, fast.

Hydra composes each point from scratch (tens of ms). Here each distinct combination of group
choices is composed once through Hydra; a point then only sets its values on a copy of that
spec (typed like Hydra would) and runs the contract, each rule once per distinct input
(launcher/plan/memo.py): tens of thousands of points per second.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.errors import HydraException

from topl.launcher.base.errors import ERROR, INFO, ToplError
from topl.launcher.base.tree import copy_on_write, overlap
from topl.launcher.compose.composed import Composed
from topl.launcher.compose.hydra import compose_job
from topl.launcher.compose.overrides_guard import guard_overrides
from topl.launcher.compose.recipes import available
from topl.launcher.compose.sources import GROUPS, loader_for
from topl.launcher.compose.untrusted_options import MAX_SWEEP_VALUES
from topl.launcher.contract import evaluate
from topl.launcher.plan.cost import step_cost
from topl.launcher.plan.interp import Interp, collect, resolve, stale
from topl.launcher.plan.memo import BaseMemo
from topl.launcher.plan.patch import Template, apply, swaps
from topl.launcher.plan.values import replayable, typed_value
from topl.launcher.render.command import remember
from topl.launcher.spec.job import JobSpec, world_size
from topl.launcher.spec.memory import estimate


@dataclass
class Verdict:
    overrides: list[str]  # the point, as Hydra overrides
    valid: bool
    rules: list[str] = field(default_factory=list)  # ids of the error rules that rejected it
    warnings: list[str] = field(default_factory=list)
    train_gb: float | None = None  # estimated training states per device
    rollout_gb: float | None = None  # rollout weights per device
    devices: int = 0  # world size the point uses
    cost: dict[str, Any] | None = (
        None  # `plan --rank`: the step estimate of an accepted point (launcher/plan/cost.py)
    )
    ranked: bool = False  # --rank asked: to_dict carries "cost" (null when not estimated)

    def to_dict(
        self,
    ) -> dict[str, Any]:  # what dataclasses.asdict gives, without its deep copy per point
        return {
            "overrides": list(self.overrides),
            "valid": self.valid,
            "rules": list(self.rules),
            "warnings": list(self.warnings),
            "train_gb": self.train_gb,
            "rollout_gb": self.rollout_gb,
            "devices": self.devices,
            **({"cost": self.cost} if self.ranked else {}),
        }


Item = tuple[str, str, Any]  # (override text, key, typed value)
# one composed set of group choices: (composed, its spec, its interpolations)
Base = tuple[Composed, JobSpec, list[Interp]]


MAX_POINTS = 1_000_000  # points of one sweep (the planner takes tens of thousands a second)


def _parse(overrides: list[str]) -> list[Any]:  # Hydra's Overrides (value(): a wide union)
    try:
        return OverridesParser.create(config_loader=loader_for(None)).parse_overrides(
            overrides
        )  # glob() lists options
    except HydraException as e:
        raise ToplError(
            f"bad sweep syntax: {e}",
            where=f"overrides: {' '.join(overrides)}",
            fix="sweeps look like key=a,b,c or key=range(1,9) (Hydra override grammar)",
        ) from None


def expand_items(overrides: list[str]) -> list[list[Item]]:
    """The sweep's points as typed items, in the order and with the override strings that
    Hydra's BasicSweeper.split_arguments produces (parsed once, not once per point)."""
    return [list(p) for p in iter_items(overrides)]


def iter_items(overrides: list[str]) -> Iterator[tuple[Item, ...]]:
    """`expand_items` one point at a time (a 100k-point sweep is never held in memory)."""
    final: dict[str, list[Item]] = {}
    for ov in _parse(overrides):
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if not ov.is_discrete_sweep():
                raise ToplError(
                    f"sweep type {ov.value_type.name} is not supported",
                    where=ov.input_line,
                    fix="use a list (a,b,c), range() or glob() sweep",
                )
            # one list of strings, each parsed back: shuffle() reorders every iterator afresh, so
            # zipping sweep_string_iterator with sweep_iterator pairs strings with other values
            texts = list(itertools.islice(ov.sweep_string_iterator(), MAX_SWEEP_VALUES + 1))
            if (
                len(texts) > MAX_SWEEP_VALUES
            ):  # range(1,100000000) was listed whole: a hang (issue 48)
                raise ToplError(
                    f"a sweep of more than {MAX_SWEEP_VALUES:,} values for {key}",
                    where=ov.input_line,
                    fix=f"sweep at most {MAX_SWEEP_VALUES:,} values per key (range(a,b,step) thins one)",
                )
            if ov.key_or_group == "recipe" and isinstance(ov.value(), Glob):
                texts = ov.value().filter(list(available()))  # recipes live outside conf/
            typed = _parse([f"{key}={t}" for t in texts]) if texts else []
            final[key] = [(f"{key}={t}", ov.key_or_group, o.value()) for t, o in zip(texts, typed)]
        else:
            final[key] = [(f"{key}={ov.get_value_element_as_str()}", ov.key_or_group, ov.value())]
    if math.prod(len(v) for v in final.values()) > MAX_POINTS:
        raise ToplError(
            f"a sweep of {math.prod(len(v) for v in final.values()):,} points; at most "
            f"{MAX_POINTS:,} are planned or launched",
            where=f"overrides: {' '.join(overrides)}"[:400],
            fix="sweep fewer values, or split the sweep into several",
        )
    return itertools.product(*final.values())


def expand(overrides: list[str]) -> list[list[str]]:
    """Cartesian product of the sweep as override strings (what each job receives)."""
    return list(iter_expand(overrides))


def iter_expand(overrides: list[str]) -> Iterator[list[str]]:
    return ([t for t, _, _ in p] for p in iter_items(overrides))


class Planner:
    """Validates points; composes each distinct set of group choices once, and reuses across a
    sweep whatever a point does not change (launcher/plan/memo.py)."""

    def __init__(self, memo: bool = True):
        self._bases: dict[tuple[str, ...], Base] = {}
        self._memos: dict[tuple[Any, ...], BaseMemo] = {}
        self._templates: dict[tuple[Any, ...], Template] = {}  # memo key -> a point's command
        self._items: dict[str, tuple[str, Any, str]] = {}  # override text -> (kind, typed value)
        # (groups, swept keys) -> the stale interpolations; None: one that only Hydra resolves
        self._again: dict[tuple[Any, ...], list[Interp] | None] = {}
        self.memo = memo  # False: every point runs the whole contract (tests compare the two)

    def _base(self, group_overrides: list[str]) -> Base:
        key = tuple(group_overrides)
        if key not in self._bases:
            if len(self._bases) >= 256:  # a sweep over `+` forms: a base per point, kept few
                self._bases.pop(next(iter(self._bases)))
                self._memos.clear()
                self._templates.clear()
            c = compose_job(list(group_overrides))
            self._bases[key] = (c, c.to_object(), collect(c.cfg))
        return self._bases[key]

    def _kind(self, item: Item) -> tuple[str, Any]:
        """("hydra" | "group" | "value" | "compose", typed value), once per override text."""
        text, k, v = item
        got = self._items.get(text)
        if got is None or got[2] != k:
            if k.startswith("hydra."):
                got = ("hydra", None, k)  # Hydra's own settings (sweeper, run dir): not the job's
            elif k.lstrip("+~") in GROUPS or "/" in k or "@" in k:
                got = ("group", None, k)
            elif not replayable(text, k, v):
                # a form the fast path cannot type exactly as Hydra would (+/++/~, a quoted
                # number, a dict entry, an interpolation...): Hydra composes it (_split)
                got = ("compose", None, k)
            else:
                got = ("value", typed_value(k, v), k)
            self._items[text] = got
        return got[0], got[1]

    def _split(self, point: list[Item]) -> tuple[list[str], list[Item], bool]:
        """(the overrides composed into the base, the values replayed on it, whether the point
        must be composed whole). A form the fast path cannot type (`+verl_overrides.k=v`) is
        composed into the base with the group choices, unless a replayed value touches its key
        (then their order matters, and Hydra composes the point)."""
        groups, values, composes = [], [], []
        for item in point:
            kind, typed = self._kind(item)
            if kind in ("group", "compose"):
                groups.append(item[0])
                if kind == "compose":
                    composes.append(item[1].lstrip("+~"))
            elif kind == "value":
                values.append((item[0], item[1], typed))
        composed = any(overlap(k, c) for _, k, _ in values for c in composes)
        return groups, values, composed

    def _fast_spec(self, groups: list[str], values: list[Item]) -> tuple[Base, JobSpec, list[str]]:
        """(base entry, the point's spec sharing unchanged sections with the base, interp keys)."""
        base, make, again, _ = self._point_spec(groups, values)
        return base, make(), again

    def _point_spec(
        self, groups: list[str], values: list[Item]
    ) -> tuple[Base, Callable[[], JobSpec], list[str], dict[str, Any]]:
        """`_fast_spec` with the spec still to make, and the point's value of each key it
        changed (swept, re-resolved)."""
        base = self._base(groups)
        _, obj, _ = base
        sets = [(k, v) for _, k, v in values]
        again = self._stale(groups, values)
        assert again is not None  # callers compose such points through Hydra (see _stale)
        vals = dict(sets)
        if not again:
            return base, lambda: copy_on_write(obj, sets), [], vals
        # resolve the stale interpolations again once the point's values are set, each after the
        # ones it reads (a chain: kv_tile <- rollout.block_size <- a swept key)
        spec = copy_on_write(obj, sets)
        for i in again:
            value = typed_value(i.key, resolve(i, spec))
            spec = copy_on_write(spec, [(i.key, value)])
            vals[i.key] = value
        return base, lambda: spec, [i.key for i in again], vals

    def _stale(self, groups: list[str], values: list[Item]) -> list[Interp] | None:
        """The base's interpolations a point setting `values` makes stale, once per sweep; None
        when one of them is a form only Hydra resolves (the point is then composed whole)."""
        key = (tuple(groups), tuple(k for _, k, _ in values))
        if key not in self._again:
            again = stale(self._base(groups)[2], [k for _, k, _ in values])
            self._again[key] = again if all(i.replay for i in again) else None
        return self._again[key]

    def spec(self, point: list[Item]) -> tuple[JobSpec, dict[str, str]]:
        """(spec object, sources) for one point."""
        groups, values, composed = self._split(point)
        if composed or self._stale(groups, values) is None:
            c = compose_job([t for t, k, _ in point if not k.startswith("hydra.")])
            return c.to_object(), c.sources
        (base, _, _), spec, _ = self._fast_spec(groups, values)
        sources = dict(base.sources)
        for text, k, _ in values:
            sources[k] = f"command line `{text}`"
        return spec, sources

    def verdict(self, point: list[Item], rank: bool = False) -> Verdict:
        """The point's verdict; with `rank`, an accepted point also gets its step estimate."""
        v, spec = self._verdict(point)
        if rank:
            v.ranked, v.cost = True, step_cost(spec()) if v.valid else None
        return v

    def _verdict(self, point: list[Item]) -> tuple[Verdict, Callable[[], JobSpec]]:
        overrides = [t for t, _, _ in point]
        groups, values, composed = self._split(point)
        if composed or not self.memo or self._stale(groups, values) is None:
            spec, _ = self.spec(point)
            return _full_verdict(overrides, spec), lambda: spec
        _, make, interp, vals = self._point_spec(groups, values)
        varying = (*(k for _, k, _ in values), *interp)
        memo_key = (tuple(groups), varying)
        memo = self._memos.get(memo_key)
        if memo is None:
            memo = self._memos[memo_key] = BaseMemo(self._base(groups)[1], varying)
        pt = _Point(make)
        template = self._templates.get(memo_key)
        if template is None or template.cmd is None:  # the first point whose command renders
            template = self._templates[memo_key] = Template(pt())
        patch = swaps(template, varying, vals)  # its command from the base's, where exact
        pt.patch(template, patch)
        errs, warns = memo.verdict(pt, vals, template if patch is not None else None)
        tg, rg = memo.estimate(pt, vals)
        return Verdict(overrides, not errs, errs, warns, tg, rg, memo.devices(pt)), pt


class _Point:
    """A point's spec, made on first use, with its patched command remembered for the rules
    (command.command): where every rule group, the traced rules and the estimate answer from
    their memos, the point needs no spec at all."""

    __slots__ = ("_make", "_spec", "_template", "_swaps")

    def __init__(self, make: Callable[[], JobSpec]):
        self._make = make
        self._spec: JobSpec | None = None
        self._template: Template | None = None
        self._swaps: list[tuple[str, Any]] | None = None

    def patch(self, template: Template, swaps: list[tuple[str, Any]] | None) -> None:
        """Its command is the template's with `swaps` made (None: built whole where needed)."""
        self._template, self._swaps = template, swaps
        if self._spec is not None and swaps is not None:
            remember(self._spec, apply(template, self._spec, swaps))

    def __call__(self) -> JobSpec:
        spec = self._spec
        if spec is None:
            spec = self._spec = self._make()
            if self._template is not None and self._swaps is not None:
                remember(spec, apply(self._template, spec, self._swaps))
        return spec


def _full_verdict(overrides: list[str], spec: JobSpec) -> Verdict:
    """A point's verdict from the whole contract (the reference the memoised path must equal)."""

    errs: list[str] = []
    warns: list[str] = []
    for r, severity, _msg in evaluate(spec):  # the same rules, in the same order, as `check`
        if severity == INFO:  # the stack's own measurement: not a warning
            continue
        bucket = errs if severity == ERROR else warns
        if r.id not in bucket:
            bucket.append(r.id)
    try:
        e = estimate(spec)
        tg: float | None = round(e["train_gb"], 2)
        rg: float | None = round(e["rollout_weights_gb"], 2)
    except (ValueError, ZeroDivisionError):
        tg = rg = None
    return Verdict(overrides, not errs, errs, warns, tg, rg, world_size(spec))


def plan(overrides: list[str]) -> list[Verdict]:
    """Every point of the sweep with its verdict."""
    return list(iter_plan(overrides))


def iter_plan(overrides: list[str], rank: bool = False) -> Iterator[Verdict]:
    """`plan` one verdict at a time, as each point is checked (`rank`: with step estimates)."""

    planner = Planner()
    return (planner.verdict(list(p), rank) for p in iter_items(guard_overrides(overrides)))


def swept_keys(overrides: list[str]) -> list[str]:
    return [o.key_or_group for o in _parse(overrides) if o.is_sweep_override()]
