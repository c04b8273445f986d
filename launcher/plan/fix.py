"""`topl check --fix`: from a rejected spec to the nearest accepted one.

Candidates come from the rules that reject the spec: the keys each violated rule read (other
values of a bool or a choice field, neighbouring sizes of a parallel degree or batch size) and the
`key=value` settings its fix text names. Every candidate set is judged by the contract itself
(`evaluate`, the same rules `check` runs), on specs built the way `plan` builds sweep points, in a
bounded beam search: one change at a time, keeping the sets that leave the fewest errors. The
smallest set that leaves no error wins: fewest keys the user typed on the command line, then
fewest keys, then the least change to each value. The winner is composed through Hydra and
checked again in full, so the verdict printed is `check`'s own.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field
from typing import Any
from typing import cast as typed_as

from topl.launcher.base.errors import ERROR, WARNING, ToplError
from topl.launcher.base.tree import copy_on_write, parent_of
from topl.launcher.compose.hydra import compose_job
from topl.launcher.compose.sources import GROUPS
from topl.launcher.contract import evaluate
from topl.launcher.contract.core import RULES
from topl.launcher.plan.interp import collect, resolve, stale
from topl.launcher.plan.sweep import Item, Planner, expand_items
from topl.launcher.plan.values import SIZES, VO, neighbours, replayable
from topl.launcher.plan.values import typed_value as _field_typed
from topl.launcher.spec.job import JobSpec
from topl.launcher.spec.view import Reads, View

DEPTH = 8  # keys a fix may change
# After the first accepted set, look for a cheaper one for as many sets again (at least this many):
# on the strict recipes on stock stacks the cheapest came within that (at latest: 1199, then 1348).
AGAIN_MIN = 200
# a candidate set's rank, smaller first: (user keys touched, keys, log2 distance, warnings)
Cost = tuple[int, int, float, int]
# What a fix never changes: the model being trained, the alignment being asked for (turning it
# down "fixes" every strict rule and defeats the point), the declared stack and the cluster's
# hardware, and the settings that choose what runs (docs/security.md).
PROTECTED = (
    "model.",
    "alignment.",
    "cluster.versions.",
    "cluster.device",  # also cluster.devices_per_node, device_memory_gb: prefixes
    "cluster.max_devices_per_node",
    "cluster.external_modules",
    "cluster.python",
    "cluster.env",
    "cluster.backend",
    "algorithm.",
    # the experiment itself: what is sampled and how much is learned from it
    "train.max_prompt_length",
    "train.max_response_length",
    "train.train_batch_size",
    "train.steps",
    "rollout.n",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.top_k",
)
PROTECTED_GROUPS = {"model", "alignment", "stack", "cluster", "algorithm", "recipe"}
_SETTING = re.compile(r"(?<![\w.$/-])\+?([a-z][a-z0-9_]*(?:\.[A-Za-z0-9_]+)*)=([^\s,;)`'\"]+)")


@dataclass
class Change:
    key: str
    value: Any
    old: Any = None
    user: bool = False  # the user set this key on the command line
    clears: list[str] = field(default_factory=list)  # error rules this change clears

    @property
    def override(self) -> str:
        plus = "+" if self.key.startswith(VO) else ""  # a new entry of the recipe's dict
        return f"{plus}{self.key}={_text(self.value)}"


@dataclass
class Fix:
    changes: list[Change]  # empty when the spec is already accepted, None-like when not found
    found: bool
    evaluated: int  # candidate sets judged by the contract
    blocking: dict[str, str] = field(default_factory=dict)  # rule id -> message, when not found

    def to_dict(self) -> dict[str, Any]:
        return {
            "found": self.found,
            "overrides": [c.override for c in self.changes],
            "changes": [
                {"key": c.key, "from": c.old, "to": c.value, "user_set": c.user, "clears": c.clears}
                for c in self.changes
            ],
            "evaluated": self.evaluated,
            "blocking": self.blocking,
        }


def _text(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def typed_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip("'\"")


class Search:
    """The beam search over override sets, on top of `plan`'s fast point builder."""

    def __init__(self, overrides: list[str], warnings: bool = False, budget: int = 3000):
        points = expand_items(overrides)
        if len(points) != 1:
            raise ToplError(
                "--fix takes one spec, not a sweep",
                where=" ".join(overrides),
                fix="drop the comma lists / ranges, or use `topl plan` to find the valid points",
            )
        self.base: list[Item] = points[0]
        self.user = {k for _, k, _ in self.base if k != "recipe"}
        self.warnings, self.budget = warnings, budget
        self.planner = Planner()
        base = compose_job([t for t, _, _ in self.base])  # once: the base may not be replayable
        self.spec0 = base.to_object()
        self.interp = collect(base.cfg)
        self.evaluated = 0
        self._memo: dict[tuple[Any, ...], tuple[frozenset[str], frozenset[str], Any]] = {}

    def judge(self, changes: tuple[Change, ...]) -> tuple[frozenset[str], frozenset[str], Any]:
        """(errors, warnings, spec) for the base spec with `changes` applied."""
        key = tuple(sorted((c.key, repr(c.value)) for c in changes))
        if key not in self._memo:
            self.evaluated += 1
            try:
                spec = self._build(changes)
                got = evaluate(spec)
            except (ToplError, ValueError, TypeError, KeyError, AttributeError):
                self._memo[key] = (frozenset({"(does not compose)"}), frozenset(), None)
                return self._memo[key]
            errs = frozenset(r.id for r, sev, _ in got if sev == ERROR)
            warns = frozenset(r.id for r, sev, _ in got if sev == WARNING)
            self._memo[key] = (errs, warns, spec)
        return self._memo[key]

    def _build(self, changes: tuple[Change, ...]) -> JobSpec:
        """The base spec with `changes` set, typed as Hydra would; through Hydra for group
        choices and values the fast path cannot type exactly (as `plan` does)."""
        vo = {c.key[len(VO) :]: c.value for c in changes if c.key.startswith(VO)}
        items = [(c.override, c.key, c.value) for c in changes if not c.key.startswith(VO)]
        again = stale(self.interp, [c.key for c in changes])
        if any(k in GROUPS or not replayable(t, k, v) for t, k, v in items) or not all(
            i.replay for i in again
        ):  # through Hydra where setting the values on the spec is not exact (as `plan` does)
            spec = self.planner.spec(self.base + items)[0]
            return copy_on_write(spec, [("verl_overrides", {**spec.verl_overrides, **vo})])
        sets = [(k, _field_typed(k, v)) for _, k, v in items]
        if vo:
            sets.append(("verl_overrides", {**self.spec0.verl_overrides, **vo}))
        spec = copy_on_write(self.spec0, sets)
        for i in again:  # ${a.b} references follow the values just set, each after what it reads
            spec = copy_on_write(spec, [(i.key, _field_typed(i.key, resolve(i, spec)))])
        return spec

    def targets(self, errs: frozenset[str], warns: frozenset[str]) -> frozenset[str]:
        return errs | warns if self.warnings else errs

    def candidates(
        self, spec: JobSpec, bad: frozenset[str], taken: set[str], allow_user: bool
    ) -> list[tuple[Change, ...]]:
        """Moves (one change, or a train/rollout pair that must stay equal) suggested by the rules
        in `bad`: the fields they read, the settings their fix text names."""
        out: dict[tuple[Any, ...], tuple[Change, ...]] = {}
        for r in RULES:
            if r.id not in bad:
                continue
            for k in _reads(r, spec):
                for v in neighbours(spec, k):
                    side, _, leaf = k.partition(".")
                    twin = {"train": "rollout", "rollout": "train"}.get(side)
                    move = [Change(k, v)]
                    if twin and leaf in SIZES and _has(spec, f"{twin}.{leaf}"):
                        out.setdefault(((k, repr(v)),), (Change(k, v),))
                        move.append(Change(f"{twin}.{leaf}", v))
                    out.setdefault(tuple((c.key, repr(c.value)) for c in move), tuple(move))
            for k, v in _SETTING.findall(f"{r.fix} {r.title}"):
                out.setdefault(((k, repr(typed_value(v))),), (Change(k, typed_value(v)),))
        return [m for m in out.values() if all(self._usable(c, spec, taken, allow_user) for c in m)]

    def _stuck(
        self, spec: JobSpec, bad: frozenset[str], frozen: frozenset[str] | set[str] = frozenset()
    ) -> list[str]:
        """The rules in `bad` whose every read key is protected (or in `frozen`): a rule's
        verdict depends only on what it reads, so none of them can change."""
        out = []
        for r in RULES:
            if r.id in bad:
                reads = _reads(r, spec)
                if reads and all(_protected(k) or k in frozen for k in reads):
                    out.append(r.id)
        return out

    def _usable(self, c: Change, spec: JobSpec, taken: set[str], allow_user: bool) -> bool:
        if c.key in taken or (c.key in self.user and not allow_user):
            return False
        if _protected(c.key):
            return False
        if c.key in GROUPS:
            c.old = None
        elif not _has(spec, c.key):
            return False  # not a spec key (a verl key named in a fix text)
        else:
            c.old = _current(spec, c.key)
        c.user = c.key in self.user
        return not (c.old == c.value and type(c.old) is type(c.value))

    def run(self) -> Fix:
        errs, warns, spec = self.judge(())
        if not self.targets(errs, warns):
            return Fix([], True, self.evaluated)
        stuck = self._stuck(spec, self.targets(errs, warns))
        if stuck:  # a rule reads only what a fix never changes: no search can clear it
            return Fix([], False, self.evaluated, {r: _message(r, spec) for r in stuck})
        for allow_user in (False, True):
            if not allow_user and self._stuck(spec, self.targets(errs, warns), self.user):
                continue  # an error only a key you typed can clear: search with those at once
            # without your keys: half the budget, so that one of yours (train.pp=3 on 16
            # devices) is still tried when nothing else can clear its rule
            limit = self.budget if allow_user else self.budget // 2
            fix = self._beam(errs, warns, spec, allow_user, limit)
            if fix.found or self.evaluated >= self.budget:
                return fix
        return fix

    def _beam(
        self,
        errs: frozenset[str],
        warns: frozenset[str],
        spec: JobSpec,
        allow_user: bool,
        limit: int,
    ) -> Fix:
        """Best-first: always extend the set that leaves the fewest errors (then the cheapest);
        a move may add one error on the way (rollout.pp=1 frees the pipeline but needs a larger
        rollout.tp). After the first accepted set, only cheaper sets are explored."""
        start = len(self.targets(errs, warns))
        heap: list[
            tuple[int, Cost, int, tuple[Change, ...], frozenset[str], frozenset[str], JobSpec]
        ]
        heap = [(start, _cost((), warns), 0, (), errs, warns, spec)]
        seen, tick, best, closest = set(), 0, None, heap[0]
        stop = limit  # lowered when the first accepted set is found
        while heap and self.evaluated < stop:
            n, cost, _, changes, e, w, s = heapq.heappop(heap)
            if best is not None and cost[:2] >= _cost(best, self.judge(best)[1])[:2]:
                continue
            if len(changes) >= DEPTH:
                continue
            taken = {c.key for c in changes}
            for move in self.candidates(s, self.targets(e, w), taken, allow_user):
                new = changes + move
                sig = frozenset((c.key, repr(c.value)) for c in new)
                if sig in seen or self.evaluated >= stop:
                    continue
                seen.add(sig)
                e2, w2, s2 = self.judge(new)
                if s2 is None:
                    continue
                left = len(self.targets(e2, w2))
                c2 = _cost(new, w2)
                if not left:
                    if best is None:
                        stop = min(limit, self.evaluated + max(self.evaluated, AGAIN_MIN))
                    if best is None or c2 < _cost(best, self.judge(best)[1]):
                        best = new
                elif left <= n + 1:
                    tick += 1
                    item = (left, c2, tick, new, e2, w2, s2)
                    heapq.heappush(heap, item)
                    closest = min(closest, item, key=lambda t: (t[0], t[1]))
        if best is not None:
            return Fix(self._explain(list(best), errs), True, self.evaluated)
        blocking = self._blocking(closest[3], closest[6] or spec, closest[4], closest[5])
        return Fix(
            [], False, self.evaluated, {r: _message(r, closest[6] or spec) for r in blocking}
        )

    def _blocking(
        self, changes: tuple[Change, ...], spec: JobSpec, e: frozenset[str], w: frozenset[str]
    ) -> frozenset[str]:
        """The rules left at the closest set that no one further candidate clears: a rule that a
        candidate clears on its own (rollout.block_size=128 for TOP-ATTN-004) is not what blocks.
        When every rule is cleared alone but never together, all of them block. Keys you typed
        count as candidates here: changing one is a fix the search may not have reached."""
        rules = self.targets(e, w)
        taken = {c.key for c in changes}
        left = set(rules)
        for move in self.candidates(spec, rules, taken, True):
            if not left:
                break
            e2, w2, _ = self.judge(changes + move)
            left -= rules - self.targets(e2, w2)
        return frozenset(left) or rules

    def _explain(self, changes: list[Change], errs: frozenset[str]) -> list[Change]:
        """Which of the original errors each change clears on its own."""
        for c in changes:
            alone = self.judge((c,))[0]
            c.clears = sorted(errs - alone)
        return sorted(changes, key=lambda c: c.key)


def _cost(changes: tuple[Change, ...], warns: frozenset[str]) -> Cost:
    """Fewest user keys touched, fewest keys, least change, fewest warnings."""
    dist = 0.0
    for c in changes:
        a, b = c.old, c.value
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
            dist += abs(math.log2(b / a)) if not isinstance(a, bool) else 1.0
        else:
            dist += 1.0
    return (sum(c.user for c in changes), len(changes), dist, len(warns))


def _reads(r: Any, spec: JobSpec) -> list[str]:
    """What rule `r` read on `spec` (the view records it), then the keys it declares: a rule
    reading the rendered command (actor dp from train.tp / pp) reads fields the view never sees."""
    reads = Reads()
    r.run(typed_as(JobSpec, View(spec, reads)))
    return list(dict.fromkeys([*reads, *r.keys]))


def _protected(key: str) -> bool:
    return key in PROTECTED_GROUPS or key.startswith(PROTECTED) or key in PROTECTED


def _has(spec: JobSpec, key: str) -> bool:
    try:
        _current(spec, key)
    except (AttributeError, KeyError, TypeError):
        return False
    return True


def _current(spec: JobSpec, key: str) -> Any:
    if key.startswith(VO):
        return spec.verl_overrides[key[len(VO) :]]
    obj, leaf = parent_of(spec, key)
    return obj[leaf] if isinstance(obj, dict) else getattr(obj, leaf)


def _message(rule_id: str, spec: JobSpec) -> str:
    for r in RULES:
        if r.id == rule_id:
            got = r.run(spec)
            return got[1] if got else r.title
    return rule_id


def find_fix(overrides: list[str], warnings: bool = False, budget: int = 3000) -> Fix:
    return Search(overrides, warnings, budget).run()
