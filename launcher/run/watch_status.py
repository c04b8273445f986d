"""`topl watch`'s view of a run's state: status.json read and written, whether topl is still there,
the run's end (recorded here when topl could not: a Ray job nobody follows, a topl killed with
SIGKILL), and stopping the job (launcher/run/watch.py follows the run's steps)."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

from topl.launcher.base.errors import ToplError
from topl.launcher.run import watch_io
from topl.launcher.run.backends import slurm_client
from topl.launcher.run.watch_ray import RayJob, ray_job


def update(run_dir: Path, state: str, **details) -> None:
    from topl.launcher.run import rundir  # lazy: OmegaConf only when this runs

    st = read_status(run_dir)
    st.pop("state", None), st.pop("updated", None)
    rundir.set_status(run_dir, state, **{**st, **details})


def topl_gone(st: dict) -> bool:
    """A `running` status whose topl process (on this host) no longer exists."""
    verdict, _ = watch_io.prove(st)
    if verdict != "unknown":
        return verdict == "gone"
    pid = watch_io.valid_pid(st.get("pid"))  # an old status without identity: pid and host
    if pid is None or st.get("host") != socket.gethostname():
        return False  # another machine's topl (or an old status without host): cannot tell
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def stop_job(run_dir: Path, status: dict, ray: RayJob | None = None) -> str:
    """Stop the job: the Ray job by the API, the Slurm job by scancel, else topl's process (it
    stops the job's group)."""
    ray = ray or ray_job(run_dir)
    if ray is not None:
        ray.stop()
        return f"ray job {ray.job_id} stopped"
    slurm = slurm_client.job_id_of(run_dir)
    if slurm is not None:
        slurm_client.cancel(slurm)
        return f"slurm job {slurm} cancelled (scancel)"
    verdict, why = watch_io.prove(status)  # never a process topl cannot prove is its own
    if verdict == "gone":
        return f"topl already gone ({why}): nothing stopped"
    if verdict != "same":
        return f"not stopped: {why}; topl cannot prove the process is the run's topl"
    pid = status["pid"]
    try:
        os.kill(pid, signal.SIGTERM)  # topl turns SIGTERM into a stop of the whole job group
    except ProcessLookupError:
        return f"topl (pid {pid}) already gone"
    return f"SIGTERM to topl (pid {pid})"


def mark(run_dir: Path, reason: str, how: str, wait_s: float = 30.0) -> None:
    """Let topl record the stop first, then say why in status.json (the run failed)."""
    deadline = time.monotonic() + wait_s
    while read_status(run_dir).get("state") == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    update(run_dir, "failed", stopped_by="topl watch", reason=reason, stop=how)


def read_status(run_dir: Path) -> dict:
    try:
        st = json.loads(watch_io.read_text(run_dir / "status.json", watch_io.STATUS_CAP) or "{}")
    except (ValueError, RecursionError):
        return {}
    return st if isinstance(st, dict) else {}


def _spec_get(run_dir: Path, dotted: str):
    import yaml

    node = yaml.safe_load(watch_io.read_text(run_dir / "spec.yaml") or "{}")
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def is_strict_run(run_dir: Path) -> bool:
    try:
        return _spec_get(run_dir, "alignment.mode") == "strict"
    except (yaml_error(), RecursionError):
        raise ToplError(
            "spec.yaml in the run directory is not readable YAML",
            where=str(run_dir / "spec.yaml"),
            fix="watch with --strict (or --no-stop) to say how to judge the run",
        ) from None


def yaml_error():
    import yaml

    return yaml.YAMLError
