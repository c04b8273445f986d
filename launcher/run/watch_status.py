"""`topl watch`'s view of a run's state: status.json read and written, whether topl is still there,
the run's end (recorded here when topl could not: a Ray job nobody follows, a topl killed with
SIGKILL), and stopping the job (launcher/run/watch.py follows the run's steps)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

from topl.launcher.base.errors import ToplError
from topl.launcher.run import watch_io
from topl.launcher.run.backends import slurm_client
from topl.launcher.run.watch_ray import RayJob, ray_job


def update(run_dir: Path, state: str, **details) -> str | None:
    """Record an end topl could not in status.json; None, or why it could not be recorded (a
    read-only or full run dir: watch reads runs it may not write, and says so)."""
    from topl.launcher.run import rundir  # lazy: OmegaConf only when this runs

    st = watch_io.read_status(run_dir)
    st.pop("state", None), st.pop("updated", None)
    try:
        rundir.set_status(run_dir, state, **{**st, **details})
    except OSError as e:
        return f"could not record `{state}` in {run_dir / 'status.json'}: {e.strerror or e}"
    return None


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
    while watch_io.read_status(run_dir).get("state") == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    if why := update(run_dir, "failed", stopped_by="topl watch", reason=reason, stop=how):
        print(f"topl watch: {why}", file=sys.stderr)


# How long a run directory may go without a status.json: topl writes it right after the run's
# files, before it starts anything, so a longer absence is a launch that died (or not a run).
NO_STATUS_WAIT_S = 20.0


def no_status(run_dir: Path, waited_s: float) -> None:
    """A ToplError once a run directory has had no readable status.json for NO_STATUS_WAIT_S."""
    if waited_s < NO_STATUS_WAIT_S:
        return
    raise ToplError(
        f"{run_dir} has no readable status.json after {waited_s:.0f} s: its launch ended before "
        "it started the job (or status.json is not a regular file); there is nothing to follow",
        where=str(run_dir / "status.json"),
        fix=f"`topl watch {run_dir} --once` shows what it holds; launch again for a new run",
    )


def ended(st: dict) -> bool:
    """Whether a status records the run's end (a record `topl watch` never rewrites)."""
    return st.get("state") in ("dry_run", "succeeded", "failed", "interrupted")  # = rundir.ENDS


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
