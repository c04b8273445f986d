"""Launch backends: local (reference engines), subprocess (verl here), ray_job (Ray Job API),
slurm (an allocation that starts Ray on its nodes).

Each backend is one module here that defines `BACKEND`, an object with the `Backend` protocol's
attributes; its name and traits are data in launcher/spec/backend_traits.py, which the spec, the
contract and the doctor read without importing any backend. A new backend is one module, its
traits there, a cluster preset, docs and tests."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from topl.launcher.spec.backend_traits import Traits, traits

if TYPE_CHECKING:
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec


class Backend(Protocol):
    """What the run layer (launcher/run/launch.py) asks of a backend; its traits are data."""

    traits: Traits  # name, remote, here, nodes (launcher/spec/backend_traits.py)

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

    def driver_dir(self, spec: JobSpec, launched_in: str) -> str | None:
        """The directory verl's driver starts in (its relative paths, the checkpoints among
        them, are under it) for a job topl started from `launched_in`; None where topl cannot
        know it (a cluster's) or no verl runs."""


def get(name: str) -> Backend:
    """The backend `name` (one of NAMES; the spec's constraint refuses any other first)."""
    traits(name)  # an unknown name: the readable error
    backend: Backend = importlib.import_module(f"{__name__}.{name}").BACKEND
    return backend


def of(spec: JobSpec) -> Backend:
    """The spec's backend (cluster.backend)."""
    return get(spec.cluster.backend)
