"""The doctor's report: every registered check that applies, run in registry order (the stack's
checks, then the job's), for this machine or for one node of a cluster (run/backends/ray_doctor.py
runs `run_checks` there); and the catalog that `topl doctor --list` and docs/reference.md print."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from topl.launcher.base.console import no_progress
from topl.launcher.doctor import job_checks, stack_checks
from topl.launcher.doctor.registry import CHECKS, Check, Ctx, Finding, worker_env

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

REGISTERED = (stack_checks, job_checks)  # importing them registers their checks, in this order


def run_checks(
    spec,
    env: dict[str, str] | None = None,
    node: bool = False,
    detail: Callable[[str], None] = no_progress,
) -> list[Finding]:
    """Every check that applies to this spec, in registry order; `env` is the environment the
    job's processes get (default: a Ray worker's, see `worker_env`); `node`: running inside a Ray
    task on a node of the cluster; `detail(what)` before each check (a terminal's status line)."""
    ctx = Ctx(spec, worker_env(spec) if env is None else dict(env), node)
    for c in CHECKS:
        if c.applies(ctx):
            ctx.current = c
            detail(c.what)
            c.run(ctx)
    return ctx.out


def nodes_here(spec: JobSpec, detail: Callable[[str], None] = no_progress) -> list[dict]:
    """The doctor's report for this machine: [{node, findings}] (one node)."""
    findings = [f.to_dict() for f in run_checks(spec, detail=detail)]
    return [{"node": f"{socket.gethostname()} (local)", "findings": findings}]


def catalog() -> list[Check]:
    return sorted(CHECKS, key=lambda c: c.id)


def checks_markdown() -> str:
    lines = ["| check | what | when | fix |", "|---|---|---|---|"]
    for c in catalog():
        lines.append(f"| `{c.id}` | {c.what} | {c.when} | {c.fix} |")
    return "\n".join(lines)
