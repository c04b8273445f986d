"""The sbatch script of a backend=slurm run, as text: the allocation's directives from the typed
cluster fields, then inside the allocation topl's doctor on every node, Ray's head on the first
node and a worker on each other, a wait until every node has joined, and the job on that Ray.

The shape follows verl's own Ray-on-Slurm example (verl@3f388066192c:examples/slurm/
ray_on_slurm.slurm: node list from `scontrol show hostnames`, `ray start --head --block` by srun on
the first node, `ray start --address HEAD:PORT --block` on the others, the job on the head); where
it sleeps 10 s and picks port 6379, topl waits for every node (slurm_node.py ray-ready) and takes
free ports on each node (slurm_node.py ray-start), so two jobs sharing a node do not collide."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from topl.launcher.base.errors import ToplError
from topl.launcher.run.backends.slurm_client import EXIT_FILE

if TYPE_CHECKING:
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec

NODE = "topl.launcher.run.backends.slurm_node"  # the in-allocation entry (`python -m NODE ...`)
SCRIPT = "slurm.sbatch"  # in the run directory
LOG = "verl.log"  # the job's console, in the run directory (`topl watch` tails it)
_PLAIN = re.compile(r"^[A-Za-z0-9_./@+:=,-]+$")  # a path an #SBATCH line carries as it is
_DIRECTIVE = re.compile(r"^--[a-z][a-z-]*(=[\x21-\x7e]+)?$")  # one option, no space, no newline
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # an environment variable's name
# exit codes of the script's own steps (the job's own code otherwise)
DOCTOR_FAILED, RAY_NOT_READY = 3, 4


def directives(spec: JobSpec, run_dir: Path) -> list[str]:
    """The #SBATCH lines: one task per node, each typed field, the extra ones as given."""
    c, sl = spec.cluster, spec.cluster.slurm
    if not _PLAIN.match(str(run_dir)):
        raise ToplError(
            f"run directory {run_dir}: an #SBATCH --output line cannot carry this path",
            where="run_root",
            fix="use a run_root of letters, digits and ./_-@+:=, (no spaces)",
        )
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"topl-{spec.experiment}")[:64]
    out = [f"--job-name={name}", f"--nodes={c.nodes}", "--ntasks-per-node=1"]
    out += [f"--partition={sl.partition}"] if sl.partition else []
    out += [f"--account={sl.account}"] if sl.account else []
    out += [f"--qos={sl.qos}"] if sl.qos else []
    out += [f"--time={sl.time_min}"] if sl.time_min else []
    out += [f"--gres={sl.gres}:{c.devices_per_node}"] if sl.gres else []
    out += [f"--cpus-per-task={sl.cpus_per_node}"] if sl.cpus_per_node else []
    out += [f"--output={run_dir}/slurm-%j.out"]
    bad = [d for d in [*out, *sl.sbatch] if not _DIRECTIVE.match(d)]
    if bad:  # the contract (TOP-SLURM-004) refuses these first; a line never starts a command
        raise ToplError(
            f"{', '.join(repr(d)[:80] for d in bad)}: not one sbatch option per line",
            where="cluster.slurm",
            fix="names of letters, digits and ._-: no spaces, quotes or newlines",
        )
    return [*out, *sl.sbatch]


def script(spec: JobSpec, inv: Invocation, run_dir: Path) -> str:
    """The whole sbatch script (secrets by name only: sbatch hands their values to the job)."""
    sl, q = spec.cluster.slurm, shlex.quote
    hidden = set(inv.secrets)
    if any(not _NAME.match(k) for k in inv.env):
        raise ToplError(
            f"cluster.env names {', '.join(repr(k) for k in inv.env if not _NAME.match(k))}",
            where="cluster.env",
            fix="environment variable names are letters, digits and _",
        )
    exports = [f"export {k}={q(v)}" for k, v in inv.env.items() if k not in hidden]
    lines = [
        "#!/usr/bin/env bash",
        f"# Written by topl for {run_dir}: `sbatch {SCRIPT}` submits it again (docs/slurm.md).",
        *(f"#SBATCH {d}" for d in directives(spec, run_dir)),
        "set -uo pipefail",
        f"RUN_DIR={q(str(run_dir))}",
        f"PY={q(spec.cluster.python)}",
        'finish() { echo "$1" > "$RUN_DIR/.exit.tmp" && mv "$RUN_DIR/.exit.tmp" '
        f'"$RUN_DIR/{EXIT_FILE}"; exit "$1"; }}',
        "# the rendered env; secrets are not written here: "
        + (", ".join(sorted(hidden)) + " come" if hidden else "none is set; any would come")
        + " from sbatch's environment (--export=ALL)",
        *exports,
        ': "${VERL_FILE_LOGGER_PATH:=$RUN_DIR/metrics.jsonl}" "${TOPL_GUARD_DIR:=$RUN_DIR/guard}"',
        "export VERL_FILE_LOGGER_PATH TOPL_GUARD_DIR",
        'mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        "head_node=${nodes[0]}",
        'echo "topl: job $SLURM_JOB_ID on ${nodes[*]}"',
    ]
    if sl.doctor:
        lines += [
            "# topl's doctor on every node (one report each in doctor/), before anything starts",
            'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 '
            f'"$PY" -m {NODE} doctor "$RUN_DIR" || finish {DOCTOR_FAILED}',
        ]
    if sl.run == "embedded":
        payload = f'"$PY" -m {NODE} embedded "$RUN_DIR"'
    else:
        lines += ray_lines(spec)
        payload = " ".join(q(a) for a in [spec.cluster.python, *inv.argv])
    return (
        "\n".join(
            [
                *lines,
                "# the job, on the first node (where this script runs), its console in the run dir",
                f'PYTHONUNBUFFERED=1 {payload} 2>&1 | tee -a "$RUN_DIR/{LOG}"',
                "finish ${PIPESTATUS[0]}",
            ]
        )
        + "\n"
    )


def ray_lines(spec: JobSpec) -> list[str]:
    """Ray's head on the first node, a worker on each other, a bounded wait for all of them."""
    sl = spec.cluster.slurm
    port = str(sl.ray_port) if sl.ray_port else f'$("$PY" -m {NODE} free-port)'
    return [
        "# Ray inside the allocation: the head here, a worker on every other node. One auth token",
        "# per job, by environment only (Ray 2.60 enables token auth by default: ray@2.60.0:python/",
        "# ray/_private/authentication/authentication_token_setup.py:enable_token_auth_by_default)",
        f'ray_auth=$("$PY" -m {NODE} token) || finish {RAY_NOT_READY}',
        "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=${ray_auth}",
        "head_ip=$(hostname --ip-address | awk '{print $1}')",
        f"port={port}",
        'export RAY_ADDRESS="$head_ip:$port"  # verl\'s ray.init() joins this cluster',
        'srun --overlap --nodes=1 --ntasks=1 -w "$head_node" '
        f'"$PY" -m {NODE} ray-start --head "$head_ip" "$port" &',
        'for node in "${nodes[@]:1}"; do',
        '  srun --overlap --nodes=1 --ntasks=1 -w "$node" '
        f'"$PY" -m {NODE} ray-start --worker "$RAY_ADDRESS" &',
        "done",
        f'"$PY" -m {NODE} ray-ready "$RAY_ADDRESS" "$SLURM_JOB_NUM_NODES" {sl.ray_ready_s:g} '
        f"|| finish {RAY_NOT_READY}",
    ]
