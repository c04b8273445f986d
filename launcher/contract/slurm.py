"""What a Slurm allocation needs before anything is submitted (backend=slurm): a partition, a time
limit, an allocation that holds what the job uses, and extra directives that stay directives."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import world_size

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

# cluster.device -> the generic resource name that counts its devices on a Slurm node
GRES_OF = {"cuda": "gpu", "npu": "npu"}
# sbatch options an extra directive may set (slurm-wlm 22.05 sbatch(1)); the ones topl writes from
# typed fields (nodes, partition, account, qos, time, gres, cpus-per-task, ntasks-per-node, job-name,
# output, error, chdir) and the ones that would change what runs or where it writes (wrap, export,
# chdir, output, error, open-mode) are not among them.
EXTRA_DIRECTIVES = (
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "constraint",
    "exclusive",
    "reservation",
    "nodelist",
    "exclude",
    "switches",
    "licenses",
    "comment",
    "mail-type",
    "mail-user",
    "nice",
    "priority",
    "signal",
    "requeue",
    "no-requeue",
    "hint",
    "wckey",
    "cluster-constraint",
    "core-spec",
    "thread-spec",
    "gpu-bind",
    "gpu-freq",
)
_DIRECTIVE = re.compile(r"^--([a-z][a-z-]*)(?:=([\x21-\x7e]+))?$")  # no space, no newline
_NAMED = re.compile(r"^[A-Za-z0-9_.,+-]+$")  # a partition, account or qos name (or a list)


def on_slurm(s: JobSpec) -> bool:
    return backend_traits.of(s).allocates


@rule(
    "TOP-SLURM-001",
    ERROR,
    "a Slurm allocation names its partition",
    ("cluster.backend", "cluster.slurm.partition"),
    "set cluster.slurm.partition=NAME (`sinfo -s` lists them)",
)
def partition(s: JobSpec) -> Outcome:
    """A job without --partition lands in the cluster's default partition, which is rarely the
    one with the accelerators the layout was checked against: topl never guesses one."""
    if on_slurm(s) and not s.cluster.slurm.partition:
        return "backend=slurm without cluster.slurm.partition"


@rule(
    "TOP-SLURM-002",
    ERROR,
    "a Slurm allocation has a time limit",
    ("cluster.backend", "cluster.slurm.time_min"),
    "set cluster.slurm.time_min=MINUTES (at most the partition's MaxTime: `sinfo -o '%P %l'`)",
)
def time_limit(s: JobSpec) -> Outcome:
    """Without --time a job gets the partition's DefaultTime, or is refused at submission where
    the partition requires a limit (and held forever where MaxTime is below its default):
    decided here, before the queue, not after hours of waiting."""
    if on_slurm(s) and s.cluster.slurm.time_min is None:
        return "backend=slurm without cluster.slurm.time_min"


@rule(
    "TOP-SLURM-003",
    ERROR,
    "the Slurm allocation holds what the job uses, no more",
    (
        "cluster.backend",
        "cluster.slurm.run",
        "cluster.slurm.gres",
        "cluster.nodes",
        "cluster.devices_per_node",
        "cluster.device",
    ),
    "embedded runs: cluster.nodes=1 cluster.devices_per_node=1 cluster.slurm.gres=null; "
    "verl runs: cluster.slurm.gres=gpu on cuda, npu on npu, null on cpu",
)
def allocation(s: JobSpec) -> Outcome:
    """The allocation is nodes x devices_per_node, the world the layout was checked against
    (TOP-RES-001/004/005). topl's reference engines (slurm.run=embedded) run one CPU process on
    the first node: any other node or device would sit idle, held from other users. A verl run
    uses every device of every node, counted by the generic resource of its device kind; devices
    of another kind (or any, for a CPU run) are never used."""
    if not on_slurm(s):
        return None
    c = s.cluster
    if c.slurm.run == "embedded":
        if c.nodes > 1 or c.devices_per_node > 1 or c.slurm.gres:
            gres = f" --gres={c.slurm.gres}:{c.devices_per_node}" if c.slurm.gres else ""
            return (
                f"slurm.run=embedded uses one CPU process on one node, but the allocation is "
                f"{c.nodes} node(s) x {c.devices_per_node} device(s){gres}: "
                f"{world_size(s) - 1} device(s) more than the job uses"
            )
        return None
    want = GRES_OF.get(c.device)
    if c.slurm.gres and c.slurm.gres != want:
        return (
            f"cluster.device={c.device} but the allocation asks for "
            f"--gres={c.slurm.gres}:{c.devices_per_node}: {world_size(s)} device(s) the job never uses"
        )


@rule(
    "TOP-SLURM-004",
    ERROR,
    "extra sbatch directives are options Slurm knows, none that topl writes itself; names are names",
    (
        "cluster.backend",
        "cluster.slurm.sbatch",
        "cluster.slurm.partition",
        "cluster.slurm.account",
        "cluster.slurm.qos",
    ),
    f"keep only `--NAME` or `--NAME=VALUE` with NAME one of {', '.join(EXTRA_DIRECTIVES)}; "
    "set nodes, partition, account, qos, time and gres through their cluster fields (names of "
    "letters, digits and ._,+-)",
)
def directives(s: JobSpec) -> Outcome:
    """Each entry becomes one `#SBATCH` line of the run's slurm.sbatch: a newline would start a
    line of its own (a command), and --wrap / --export / --output would change what runs or
    where its log goes; a directive a field sets would be given twice."""
    if not on_slurm(s):
        return None
    bad = []
    for d in s.cluster.slurm.sbatch:
        m = _DIRECTIVE.match(str(d))
        if not m or m.group(1) not in EXTRA_DIRECTIVES:
            bad.append(repr(d)[:80])
    sl = s.cluster.slurm
    names = {"partition": sl.partition, "account": sl.account, "qos": sl.qos}
    bad += [f"{k}={v!r}"[:80] for k, v in names.items() if v and not _NAMED.match(str(v))]
    if bad:
        return f"cluster.slurm: {', '.join(bad)} not allowed"
