"""The doctor's last checks, about the job's own processes: topl's guard where verl runs, the
environment they see, each Ray node (they run after launcher/doctor/stack_checks.py's, in this order)."""

from __future__ import annotations

import sys

from topl.launcher import __version__
from topl.launcher.base.errors import WARNING
from topl.launcher.doctor.installed import import_error
from topl.launcher.doctor.registry import check
from topl.launcher.doctor.stack_checks import ALWAYS
from topl.launcher.render.env import GUARD_MODULE, env_vars, without_guard


def _guarded(c) -> bool:
    """Strict runs name topl's guard in VERL_USE_EXTERNAL_MODULES, and verl imports every module
    named there in the driver and every Ray worker, an exception stopping the process
    (verl@0.9.1:verl/__init__.py -> verl/utils/import_utils.py:import_external_libs)."""

    return GUARD_MODULE in env_vars(c.spec).get("VERL_USE_EXTERNAL_MODULES", "").split(",")


def _guard_fix(where: str) -> str:
    return (
        f"install topl {__version__} into the Python that runs verl ({where}): `pip install` "
        "this checkout or its wheel; a strict run always loads the guard (it refuses a worker "
        "that lacks a determinism switch): only alignment=mitigated|off runs without it"
    )


@check(
    "TOP-DOC-GUARD-002",
    "topl's guard imports on every Ray node",
    "the guard is loaded (strict) and backend=ray_job, checked from the launching machine",
    "`topl doctor --ray ADDRESS` checks each node; install topl on every node",
    lambda c: not c.node and c.backend.nodes and _guarded(c),
)
def guard_remote(c):

    c.add(
        False,
        "not checked from here (every verl process on every node imports it)",
        "topl installed on every node",
        what=f"topl's guard ({GUARD_MODULE}) imports on every Ray node",
        fix="`topl doctor --ray ADDRESS` checks each node; " + _guard_fix("on every node"),
        sev=WARNING,
    )


@check(
    "TOP-DOC-GUARD-001",
    "topl's guard imports with the Python that runs verl",
    "the guard is loaded (strict) and backend=subprocess, or on a Ray node (--ray)",
    "install topl into the Python that runs verl",
    lambda c: (c.node or c.backend.here) and _guarded(c),
)
def guard_here(c):

    python = sys.executable if c.node else c.spec.cluster.python  # a Ray worker runs this Python
    env = {k: v for k, v in without_guard(dict(c.env)).items() if k != "TOPL_GUARD_DIR"}
    err = import_error(GUARD_MODULE, python, env)
    c.add(
        err is None,
        err or "yes",
        "yes (verl imports it in every process of a strict run)",
        what=f"topl's guard ({GUARD_MODULE}) imports with {python}",
        fix=_guard_fix(f"{python} on every node" if c.node else python),
    )


@check(
    "TOP-DOC-ENV-001",
    "every env var the job needs, as its processes see it (one finding per variable)",
    ALWAYS,
    "forward the variable to every worker (runtime_env env_vars)",
)
def env(c):

    for k, want in env_vars(c.spec).items():
        seen = c.env.get(k)
        fix = f"forward {k}={want} to every worker (runtime_env env_vars)"
        c.add(
            seen == want,
            seen or "unset",
            want,
            what=f"env {k} as the job's processes see it",
            fix=fix,
        )


@check(
    "TOP-DOC-NODE-001",
    "topl's checks run on this Ray node",
    "--ray: on a node where topl cannot be imported (reported by the per-node doctor job, "
    "launcher/run/backends/ray_doctor.py:node_entry, instead of that node's checks)",
    "install topl on that node into the Python its Ray workers run",
    lambda c: False,
)
def node_reachable(c):  # never runs here: a node that runs this has topl
    pass
