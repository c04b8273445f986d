"""The consistency contract: `check(composed)` runs every rule and returns the violations.

Field constraints (declared next to each field, `launcher/spec/constraints.py`) come first: when a
field is out of range the other rules, which assume a well-formed spec, do not run. Each rule
reads the spec through a recording view, so a violation lists exactly the keys the rule read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract import (  # noqa: F401  (register rules)
    algorithm,
    consistency,
    engines,
    env,
    fields,
    memory_fit,
    resources,
    sampling,
    slurm,
    stack,
    verl_fields,
    verl_firststep,
    verl_keys,
    verl_layout,
    verl_names,
    verl_startup,
    verl_version,
)
from topl.launcher.contract.core import RULES, Rule, Violation
from topl.launcher.contract.fields import FIELD_RULE, field_problems
from topl.launcher.spec.view import Reads, View

if TYPE_CHECKING:
    from topl.launcher.compose.composed import Composed
    from topl.launcher.spec.job import JobSpec


# TOP-VERL-004: a verl_overrides / extra_overrides value of a type the declared verl does not take
TYPES_RULE = next(r for r in RULES if r.id == "TOP-VERL-004")


def _run(r: Rule, spec: JobSpec, plain: JobSpec) -> tuple[str, str] | None:
    """`r.run(spec)`; a rule that cannot compute with a value of the wrong type (a string where
    verl holds an int) waits for that value's fix: TYPES_RULE names it. Elsewhere an error stays
    an error (a bug, not bad input)."""
    try:
        return r.run(spec)
    except (TypeError, ValueError, ArithmeticError):
        if r is TYPES_RULE or not TYPES_RULE.run(plain):
            raise
        return None


def evaluate(spec: JobSpec) -> list[tuple[Rule, str, str]]:
    """(rule, severity, message) for every rule the spec breaks; fast (no provenance), for sweeps."""
    probs = field_problems(spec)
    if probs:
        return [(FIELD_RULE, ERROR, p.message) for p in probs]
    return [(r, *got) for r in RULES if r is not FIELD_RULE and (got := _run(r, spec, spec))]


def check(composed: Composed) -> list[Violation]:
    """Run every rule over a composed job; errors first. Keys come with values and sources."""
    spec = composed.to_object()
    probs = field_problems(spec)
    if probs:
        return [
            Violation(
                FIELD_RULE.id,
                ERROR,
                p.message,
                {p.key: {"value": p.value, "source": composed.source(p.key)}},
                f"{p.fix} (enforced by {p.src})",
            )
            for p in probs
        ]
    out = []
    for r in RULES:
        if r is FIELD_RULE:
            continue
        reads = Reads()
        got = _run(r, cast("JobSpec", View(spec, reads)), spec)  # the view reads as the spec
        if got:
            keys = {
                k: {"value": v, "source": composed.source(k)}
                for k, v in reads.items()
                if not any(o.startswith(k + ".") for o in reads)
            }  # entries, not their dict
            out.append(Violation(r.id, got[0], got[1], keys, r.fix))
    rank = {ERROR: 0, WARNING: 1}  # then info
    return sorted(out, key=lambda v: (rank.get(v.severity, 2), v.rule))


def errors(violations: list[Violation]) -> list[Violation]:
    return [v for v in violations if v.severity == ERROR]


__all__ = ["ERROR", "RULES", "WARNING", "Rule", "Violation", "check", "errors", "evaluate"]
