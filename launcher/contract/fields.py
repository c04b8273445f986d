"""TOP-SPEC-001: every field within the range / options declared next to it (spec.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import RULES, rule
from topl.launcher.spec.constraints import fields, problems
from topl.launcher.spec.job import JobSpec
from topl.launcher.spec.view import WHOLE, unwrap

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec


@rule(
    "TOP-SPEC-001",
    ERROR,
    "every field within the range / options declared next to it",
    tuple(k for k, _ in fields(JobSpec)),
    "use a value the field allows (`topl rules --json` and the README list every constraint)",
)
def field_constraints(s: JobSpec) -> Outcome:
    """Sizes >= 1, probabilities in range, names from a fixed set: Megatron, vLLM and verl reject
    anything else at start-up or at the first step, after the cluster has been allocated."""
    probs = problems(unwrap(s, WHOLE))
    if probs:
        return "; ".join(p.message for p in probs)


FIELD_RULE = next(r for r in RULES if r.id == "TOP-SPEC-001")
field_problems = problems
