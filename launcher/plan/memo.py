"""Per-sweep reuse for `topl plan` and the sweeper: a point's spec shares every section it does
not change with its base, and each rule runs once per distinct value of the keys it reads.

Within one base (one set of group choices) only the swept keys and the base's interpolated keys
can differ between points. A rule whose declared keys (the catalog's, which
tests/contract/test_contract_soundness.py proves cover every read) miss all of them has one answer for the
whole base; one that reads some of them has one answer per distinct value of those. A rule that
reads the spec outside the recording view (`unwrap`: it computes something from the whole spec)
is traced instead (launcher/plan/trace.py): one answer per distinct value of the swept keys its
runs read. Only the swept keys and the interpolations that refer to them vary (interp.stale), and
a point whose every answer is kept makes no spec at all (plan._Point). tests/plan/test_speed.py and
tests/plan/test_plan_trace.py compare every verdict with a full `evaluate`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from topl.launcher.base.errors import ERROR, INFO
from topl.launcher.base.tree import overlap
from topl.launcher.contract.core import RULES
from topl.launcher.contract.fields import FIELD_RULE
from topl.launcher.contract.memory_fit import MODEL_SIZE_KEYS, ROLLOUT_FIT_KEYS
from topl.launcher.plan.trace import Traced
from topl.launcher.render.command import command
from topl.launcher.spec import view
from topl.launcher.spec.constraints import fields as constrained_fields
from topl.launcher.spec.constraints import problems, violated
from topl.launcher.spec.job import JobSpec, world_size
from topl.launcher.spec.memory import estimate

if TYPE_CHECKING:
    from topl.launcher.contract.core import Rule
    from topl.launcher.plan.patch import Template

T = TypeVar("T")
Spec = Callable[[], JobSpec]  # a point's spec, made on first use (plan._Point)

CACHE_MAX = 8192  # distinct inputs kept per rule group: past it, rules run (memory stays bounded)
# what memory_estimate.estimate reads: TOP-MEM-001's inputs (train_bytes) and rollout_fit's
_ESTIMATE_KEYS = (
    *next(r.keys for r in RULES if r.id == "TOP-MEM-001"),
    *ROLLOUT_FIT_KEYS,
    *MODEL_SIZE_KEYS,
)
_CONSTRAINTS = {k: f.metadata for k, f in constrained_fields(JobSpec)}


def _reads_whole_spec(rule: Rule, spec: JobSpec) -> bool:
    """True when the rule reads the spec outside the recording view: its module calls
    `view.unwrap` (on some path, perhaps not the base's), or its run on `spec` did (directly or
    through a helper such as the command map, each declaring what it reads there). Its answer
    then depends on keys the catalog does not list. Unknown (it raised) counts as true."""
    module = sys.modules.get(rule.check.__module__)
    if module is None or vars(module).get("unwrap") is view.unwrap:
        return True
    reads = view.Reads()
    try:
        rule.check(cast(JobSpec, view.View(spec, reads)))
    except Exception:  # noqa: BLE001 - a rule that fails on the base is not memoised
        return True
    return bool(reads.declared)


_OPAQUE: dict[str, bool] = {}  # rule id -> reads the whole spec (probed once per process)


def opaque(rule: Rule, spec: JobSpec) -> bool:
    if rule.id not in _OPAQUE:
        _OPAQUE[rule.id] = _reads_whole_spec(rule, spec)
    return _OPAQUE[rule.id]


def _touches(declared: Iterable[str], varying: str) -> bool:
    return any(overlap(varying, d) for d in declared)


def _relevant(declared: Iterable[str], varying: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v for v in varying if _touches(declared, v))


def _hashable(v: Any) -> tuple[type, Any]:
    """A memo key part: the type as well (1, 1.0 and True are equal as dict keys)."""
    return (type(v), v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))


class BaseMemo:
    """The reusable answers for one base spec and one set of varying keys."""

    def __init__(self, base: JobSpec, varying: tuple[str, ...]):
        self.varying = varying
        vset = set(varying)
        # field constraints: the fixed fields are checked once, the varying ones per point
        fixed_bad = [p for p in problems(base) if p.key not in vset]
        self.fields_bad = bool(fixed_bad)
        self.constrained = [(k, _CONSTRAINTS[k]) for k in varying if k in _CONSTRAINTS]
        self.violations: dict[tuple[str, Any], bool] = {}
        # rules grouped by the varying keys they read: one lookup per group and point
        groups: dict[tuple[str, ...], list[tuple[int, Any]]] = {}
        self.traced: list[tuple[int, Rule, Traced]] = []  # read the command: traced per run
        for i, r in enumerate(r for r in RULES if r is not FIELD_RULE):
            if opaque(r, base):
                self.traced.append((i, r, Traced(r, varying, CACHE_MAX)))
                continue
            groups.setdefault(_relevant(r.keys, varying), []).append((i, r))
        # a group keyed on every varying key answers each point once: nothing to keep (memory
        # stays flat in the number of points)
        self.groups: list[tuple[tuple[str, ...], list[tuple[int, Any]], dict[Any, Any] | None]] = [
            (k, rules, {} if k != varying else None) for k, rules in groups.items()
        ]
        # the traced rules' answers, grouped by the swept keys each rule's traces read: per
        # group, by the values of those keys (a key one rule reads keeps no other rule's apart)
        self.parts: tuple[tuple[tuple[str, ...], frozenset[int]], ...] | None = None
        self.joint: dict[tuple[str, ...], dict[tuple[Any, ...], list[tuple[int, str, str]]]] = {}
        self.estimate_keys = _relevant(_ESTIMATE_KEYS, varying)
        self.estimates: dict[tuple[Any, ...], tuple[float | None, float | None]] = {}
        reads = view.Reads()  # what world_size reads, through the recording view
        self.world: int | None = world_size(cast(JobSpec, view.View(base, reads)))
        if _relevant(reads, varying):
            self.world = None

    def verdict(
        self, make: Spec, values: dict[str, Any], template: Template | None = None
    ) -> tuple[list[str], list[str]]:
        """(error rule ids, warning rule ids) in `evaluate`'s order. `make()`: the point's spec,
        made where a rule runs; `values`: its value of each varying key; `template`: the base's
        command, of which the point's is a patch (plan._Point remembers it), else None."""
        hv = {k: _hashable(v) for k, v in values.items()}
        if self.fields_bad or any(
            self._violated(k, meta, values, hv) for k, meta in self.constrained
        ):
            return [FIELD_RULE.id], []
        broken: list[tuple[int, str, str]] = []
        for keys, rules, cache in self.groups:
            memo = tuple([hv[k] for k in keys]) if cache is not None else None
            got = cache.get(memo) if cache is not None else None
            if got is None:  # (rule index, rule id, severity) of the rules this input breaks
                s = make()
                got = [(i, r.id, res[0]) for i, r in rules if (res := r.run(s))]
                if cache is not None and len(cache) < CACHE_MAX:
                    cache[memo] = got
            broken += got
        broken += self._traced(make, hv, template)
        errs: list[str] = []
        warns: list[str] = []
        for _, rid, severity in sorted(broken):
            if severity == INFO:  # the stack's own measurement: not a warning
                continue
            bucket = errs if severity == ERROR else warns
            if rid not in bucket:
                bucket.append(rid)
        return errs, warns

    def _violated(self, k: str, meta: Any, values: dict[str, Any], hv: dict[str, Any]) -> bool:
        """constraints.violated, once per key and distinct value."""
        got = self.violations.get((k, hv[k]))
        if got is None:
            got = violated(values[k], meta)
            if len(self.violations) < CACHE_MAX:
                self.violations[(k, hv[k])] = got
        return got

    def _traced(
        self, make: Spec, hv: dict[str, Any], template: Template | None
    ) -> list[tuple[int, str, str]]:
        """What the traced rules break. Each traced answer is a function of the swept values its
        traces read (sweep_trace), so the answers of the rules whose traces read the same keys
        are a function of those: one lookup per such group and point, kept while no trace is
        added and no rule turns to `every` (both change the groups; the kept answers are dropped
        then). A point makes no spec while every group has its values (issue 46: a rule reading
        one more swept key no longer makes every point run every traced rule)."""
        if template is None:  # built whole: every traced rule runs (Traced.answer)
            return self._run_traced(make, hv, None)
        if self.parts is not None:
            out: list[tuple[int, str, str]] = []
            for keys, _ in self.parts:
                got = self.joint[keys].get(tuple([hv[k] for k in keys]))
                if got is None:
                    break
                out += got
            else:
                return out
        got = self._run_traced(make, hv, template)
        now = self._parts()
        if now != self.parts:
            self.parts = now
            self.joint = {keys: {} for keys, _ in now or ()}
        for keys, members in self.parts or ():
            cache = self.joint[keys]
            if len(cache) < CACHE_MAX:
                cache[tuple([hv[k] for k in keys])] = [x for x in got if x[0] in members]
        return got

    def _parts(self) -> tuple[tuple[tuple[str, ...], frozenset[int]], ...] | None:
        """(the swept keys a rule's traces read, the rules that read exactly those), per group;
        None while a rule runs untraced (for every point, or past its cap) or has no trace yet."""
        groups: dict[tuple[str, ...], set[int]] = {}
        for i, _, t in self.traced:
            if t.every or t.full or not t.traces:
                return None
            read = {k for keys in t.traces for k in keys}
            groups.setdefault(tuple(k for k in self.varying if k in read), set()).add(i)
        return tuple((keys, frozenset(members)) for keys, members in groups.items())

    def _run_traced(
        self, make: Spec, hv: dict[str, Any], template: Template | None
    ) -> list[tuple[int, str, str]]:
        s = make()
        cmd = command(s) if template is not None else None  # patched: remembered by make()
        point: dict[Any, Any] = {None: hv}
        out = []
        for i, r, t in self.traced:
            if res := t.answer(s, cmd, template, point):
                out.append((i, r.id, res[0]))
        return out

    def estimate(self, make: Spec, values: dict[str, Any]) -> tuple[float | None, float | None]:

        memo = tuple(_hashable(values[k]) for k in self.estimate_keys)  # few keys
        if memo not in self.estimates:
            try:
                e = estimate(make())
                self.estimates[memo] = (round(e["train_gb"], 2), round(e["rollout_weights_gb"], 2))
            except (ValueError, ZeroDivisionError):
                self.estimates[memo] = (None, None)
        return self.estimates[memo]

    def devices(self, make: Spec) -> int:
        """spec.world_size of the point: the base's where no varying key is one it reads."""
        return self.world if self.world is not None else world_size(make())
