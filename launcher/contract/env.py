"""Env set through `cluster.env` against the determinism settings the contract checked."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.facts.verl_tables import ENV_OWNERS
from topl.launcher.render.env import derived_env, env_value
from topl.launcher.spec.job import is_strict
from topl.launcher.spec.view import WHOLE, unwrap

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _overrides(s: JobSpec) -> list[tuple[str, str, str | None]]:
    """(name, value from cluster.env, value the spec's fields give) where the two differ."""
    # computed at the first owned name only: without one the rule reads no more than the view
    # records (plan's trace then reuses its answer: launcher/plan/trace.py)
    derived: dict[str, str] | None = None
    out = []
    for name, value in s.cluster.env.items():
        if name not in ENV_OWNERS:
            continue
        if derived is None:  # computed, not read: only the owners below count as reads
            derived = derived_env(unwrap(s, WHOLE))
        if env_value(value) != derived.get(name):
            for field in ENV_OWNERS[name]:  # read the owning fields: their sources get reported
                part = s
                for p in field.split("."):
                    part = getattr(part, p)
            out.append((name, env_value(value), derived.get(name)))
    return out


def _say(items: list[tuple[str, str, str | None]]) -> str:
    return "; ".join(
        f"cluster.env.{n}={v!r} overrides {n}={'unset' if d is None else repr(d)} "
        f"that {' + '.join(ENV_OWNERS[n])} decide"
        for n, v, d in items
    )


@rule(
    "TOP-ENV-001",
    ERROR,
    "no determinism variable overridden through cluster.env in strict mode",
    ("alignment.mode", "cluster.env", *sorted({f for fs in ENV_OWNERS.values() for f in fs})),
    "remove the variable from cluster.env and set the field that decides it "
    "(collective=..., alignment=..., cluster.external_modules)",
)
def strict_env(s: JobSpec) -> Outcome:
    """Workers get cluster.env last, so it silently replaces the determinism settings the contract
    just checked (HCCL_DETERMINISTIC, VLLM_BATCH_INVARIANT, the NZ switch, ...)."""
    if is_strict(s):
        bad = _overrides(s)
        if bad:
            return _say(bad)


@rule(
    "TOP-ENV-002",
    WARNING,
    "determinism variables come from the spec, not cluster.env",
    ("alignment.mode", "cluster.env", *sorted({f for fs in ENV_OWNERS.values() for f in fs})),
    "set the field that decides the variable instead of cluster.env",
)
def env_owner(s: JobSpec) -> Outcome:
    """Outside strict mode it is allowed, but the contract and `topl render` describe the field's
    value while the workers run with the variable's."""
    if not is_strict(s):
        bad = _overrides(s)
        if bad:
            return _say(bad)


@rule(
    "TOP-ENV-003",
    ERROR,
    "cluster.env names are environment variable names",
    ("cluster.env",),
    "use names of letters, digits and _ (not starting with a digit)",
)
def env_names(s: JobSpec) -> Outcome:
    """A name with '=', a space or a dot cannot reach a process environment (Ray rejects it,
    a shell splits it)."""
    bad = [k for k in s.cluster.env if not _NAME.match(str(k))]
    if bad:
        return f"invalid variable name(s): {', '.join(map(repr, bad))}"
