"""Launch backends: local (reference engines), subprocess (verl here), ray_job (Ray Job API).

Each backend is one module here that defines `BACKEND`, an object with the `Backend` protocol's
attributes; `NAMES` lists them and is `cluster.backend`'s allowed values (launcher/spec/job.py). A new
backend is one module, its name in `NAMES`, a cluster preset, docs and tests. Nothing here imports
a backend's module until it is asked for (spec.py reads `NAMES` at import)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec

# cluster.backend's allowed values, each the name of its module in this package
NAMES = ("local", "subprocess", "ray_job")


class Backend(Protocol):
    """What the run layer (launcher/run/launch.py), the contract and the doctor ask of a backend."""

    name: str  # the cluster.backend value
    remote: bool  # runs verl (a rendered command, the doctor first), not the reference engines
    here: bool  # verl's processes start on this machine, with cluster.python
    nodes: bool  # verl's processes run on a cluster's nodes, out of this machine's sight

    def preflight(self, spec: JobSpec) -> None:
        """What the backend needs is here, or one ToplError before a run directory is written."""

    def doctor(self, spec: JobSpec) -> list[dict[str, Any]]:
        """[{node, findings}] checked where the job will run."""

    def start(self, spec: JobSpec, inv: Invocation, run_dir: Path, follow: bool) -> int:
        """Start the job; its exit code (negative N: killed by signal N; 0 for a detached job
        that was handed over)."""

    def detached(self, follow: bool) -> bool:
        """The job runs on after `start` returns (status `submitted`, not `succeeded`)."""

    def handle(self, run_dir: Path) -> str | None:
        """The job's id where it runs, written by `start` into the run directory; None when
        the job is this process's child or the loop itself."""


def get(name: str) -> Backend:
    """The backend `name` (one of NAMES; the spec's constraint refuses any other first)."""
    if name not in NAMES:
        from topl.launcher.base.errors import ToplError

        raise ToplError(
            f"cluster.backend={name}: no such backend",
            where="cluster.backend",
            fix=f"set cluster.backend to one of {', '.join(NAMES)}",
        )
    backend: Backend = importlib.import_module(f"{__name__}.{name}").BACKEND
    return backend


def of(spec: JobSpec) -> Backend:
    """The spec's backend (cluster.backend)."""
    return get(spec.cluster.backend)
