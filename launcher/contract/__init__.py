"""The consistency contract: `check(composed)` runs every rule and returns the violations."""
from __future__ import annotations

from topl.launcher.contract import consistency, memory_fit, resources, stack  # noqa: F401  (register rules)
from topl.launcher.contract.core import ERROR, RULES, WARNING, Rule, Violation


def check(composed) -> list[Violation]:
    """Run every rule over a composed job; errors first."""
    spec = composed.to_object()
    out = []
    for r in RULES:
        msg = r.check(spec)
        if msg:
            keys = {k: {"value": composed.value(k), "source": composed.source(k)} for k in r.keys}
            out.append(Violation(r.id, r.severity, msg, keys, r.fix))
    return sorted(out, key=lambda v: (v.severity != ERROR, v.rule))


def errors(violations: list[Violation]) -> list[Violation]:
    return [v for v in violations if v.severity == ERROR]


__all__ = ["check", "errors", "RULES", "Rule", "Violation", "ERROR", "WARNING"]
