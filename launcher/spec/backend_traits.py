"""Backend names and traits as data: what the spec, the contract and the doctor know of a backend
without importing its code (launcher/run/backends/ holds that, one module per name)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from topl.launcher.base.errors import ToplError


class HasCluster(Protocol):
    """A job spec, as far as backends go (spec/job.py imports this module for NAMES)."""

    @property
    def cluster(self) -> Any: ...


@dataclass(frozen=True)
class Traits:
    name: str  # the cluster.backend value, and the module's name in launcher/run/backends/
    remote: bool  # runs verl (a rendered command, the doctor first), not the reference engines
    here: bool  # verl's processes start on this machine, with cluster.python
    nodes: bool  # verl's processes run on a cluster's nodes, out of this machine's sight
    addressed: bool = False  # needs a running Ray cluster's address (cluster.ray_address)
    allocates: bool = False  # asks Slurm for an allocation of its own (cluster.slurm)


TRAITS = {
    t.name: t
    for t in (
        Traits("local", remote=False, here=True, nodes=False),
        Traits("subprocess", remote=True, here=True, nodes=False),
        Traits("ray_job", remote=True, here=False, nodes=True, addressed=True),
        # Ray is started inside the allocation: no address to name
        Traits("slurm", remote=True, here=False, nodes=True, allocates=True),
    )
}
NAMES = tuple(TRAITS)  # cluster.backend's allowed values


def traits(name: str) -> Traits:
    """The traits of backend `name` (one of NAMES; the spec's constraint refuses any other first)."""
    if name not in TRAITS:
        raise ToplError(
            f"cluster.backend={name}: no such backend",
            where="cluster.backend",
            fix=f"set cluster.backend to one of {', '.join(NAMES)}",
        )
    return TRAITS[name]


def of(job: HasCluster) -> Traits:
    """The traits of the job's backend (cluster.backend). A Slurm allocation that runs topl's
    reference engines (cluster.slurm.run=embedded) runs no verl: not `remote`."""
    t = traits(job.cluster.backend)
    if t.allocates and job.cluster.slurm.run == "embedded":
        return replace(t, remote=False)
    return t
