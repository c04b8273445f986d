"""The consistency contract: small pure rules over the job spec, each with a stable id."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from topl.launcher.base.errors import INFO
from topl.launcher.facts import why as fact_why

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

# What a rule's check returns: a message, (severity, message), or None when the spec passes.
Outcome = Optional[Union[str, tuple[str, str]]]
Check = Callable[["JobSpec"], Outcome]


@dataclass
class Rule:
    id: str  # stable id, e.g. TOP-ATTN-001
    severity: str  # error | warning
    title: str  # one line: what must hold
    keys: tuple[str, ...]  # the spec keys the rule reads
    fix: str  # how to make the rule pass
    check: Check  # spec -> message | (severity, message) when violated, else None
    why: str = ""  # the numerics behind it (the function's docstring)

    def run(self, spec: JobSpec) -> Optional[tuple[str, str]]:
        """(severity, message) when violated. A check may return (severity, message) to change
        the severity for this spec (an error that the seed's evidence turns into a warning)."""
        got = self.check(spec)
        if not got:
            return None
        return got if isinstance(got, tuple) else (self.severity, got)


@dataclass
class Violation:
    rule: str
    severity: str
    message: str
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> {value, source}
    fix: str = ""

    def render(self) -> str:
        if self.severity == INFO:  # the stack's measurement outranks it: one line (--json: keys)
            return f"INFO {self.rule}: {self.message}"
        lines = [f"{self.severity.upper()} {self.rule}: {self.message}"]
        model = {k: v for k, v in self.keys.items() if k.startswith("model.")}
        summed = len(model) >= SUMMED
        for k, v in self.keys.items():
            if not (summed and k in model):
                lines.append(f"    {k} = {v['value']!r}  ({v['source']})")
        if summed:  # a memory estimate reads the whole model: its keys on a line per source
            for source in dict.fromkeys(v["source"] for v in model.values()):
                same = [
                    f"{k[6:]}={v['value']!r}" for k, v in model.items() if v["source"] == source
                ]
                keys = f"{{{', '.join(same)}}}" if len(same) > 1 else same[0].replace("=", " = ")
                lines.append(f"    model.{keys}  ({source})")
        lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "keys": self.keys,
            "fix": self.fix,
        }


# From this many model.* keys read, a violation prints them on a line per source (TOP-MEM-003 read
# 9 of them, 20 lines in all); `--json` keeps every key.
SUMMED = 4
RULES: list[Rule] = []


def rule(
    id: str, severity: str, title: str, keys: tuple[str, ...], fix: str, facts: tuple[str, ...] = ()
) -> Callable[[Check], Check]:
    """Register `check(spec) -> message | (severity, message) | None` as a contract rule; `facts`
    are the stack facts it follows, whose versions and citations join its "why"."""

    def deco(fn: Check) -> Check:
        if any(r.id == id for r in RULES):
            raise ValueError(f"duplicate rule id {id}")
        why = inspect.getdoc(fn) or ""
        if facts:
            why += "\nSources: " + " · ".join(fact_why(f) for f in facts)
        RULES.append(Rule(id, severity, title, keys, fix, fn, why))
        return fn

    return deco
