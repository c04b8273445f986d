"""The slurm backend: one allocation of cluster.nodes nodes through `sbatch`; inside it topl's doctor
on every node, Ray started on the allocation's nodes and the rendered verl command on that Ray
(or topl's reference engines: cluster.slurm.run=embedded). The run directory holds the script
(slurm.sbatch), the job id (slurm_job_id), Slurm's log (slurm-ID.out), the job's console
(verl.log), its exit code (slurm_exit) and status.json; `topl watch` follows it through Slurm.

Without --follow the job is handed to Slurm (`submitted`); with it topl streams verl.log until
Slurm says the job ended, and Ctrl-C / SIGTERM cancels it with scancel."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.run.backends import slurm_client
from topl.launcher.run.backends.slurm_script import SCRIPT, script
from topl.launcher.run.lifecycle import Interrupted
from topl.launcher.spec.backend_traits import TRAITS

if TYPE_CHECKING:
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec

POLL_S = 1.0  # how often a followed job's state and log are read


def submit(spec: JobSpec, inv: Invocation, run_dir: Path) -> str:
    """Write the script into the run directory and submit it; the job id (written there too)."""
    from topl.launcher.run import rundir  # lazy: OmegaConf only when this runs

    run_dir = run_dir.resolve()  # the job's nodes see the same absolute path
    path = run_dir / SCRIPT
    rundir.write_file(path, script(spec, inv, run_dir))
    job_id = slurm_client.submit(path, {**os.environ, **inv.env})
    rundir.write_file(run_dir / slurm_client.JOB_ID_FILE, job_id + "\n")
    print(f"topl: submitted Slurm job {job_id} ({spec.cluster.nodes} node(s), {SCRIPT})")
    return job_id


def follow_job(job_id: str, run_dir: Path, poll: float = POLL_S) -> int:
    """Stream the job's log (Slurm's: the script's steps, Ray's start, the job's console) until
    Slurm says the job ended; its exit code. Interrupted (Ctrl-C, SIGTERM, a broken console):
    scancel first, then raise."""
    log, pos, noted = run_dir / f"slurm-{job_id}.out", 0, None
    try:
        while True:
            st = slurm_client.state(job_id, run_dir)
            pos = _stream(log, pos)
            if st.slurm != noted:
                noted = st.slurm
                print(
                    f"topl: Slurm job {job_id}: {st.slurm}"
                    + (f" ({st.reason})" if st.reason else "")
                )
            if st.ended:
                _stream(log, pos)
                break
            time.sleep(poll)
    except BaseException:
        try:
            slurm_client.cancel(job_id)
            print(f"topl: cancelled Slurm job {job_id} (scancel)", file=sys.stderr)
        except ToplError as e:  # the controller is gone too: say what may still run
            print(
                f"topl: could not cancel Slurm job {job_id} ({e.message}); run `scancel "
                f"{job_id}` where Slurm answers",
                file=sys.stderr,
            )
        raise
    if st.status == "interrupted":  # scancel by someone else: the run was stopped, as by SIGTERM
        raise Interrupted(signal.SIGTERM)
    return st.exit_code if st.exit_code is not None else int(st.status != "succeeded")


def _stream(log: Path, pos: int) -> int:
    try:
        with log.open("rb") as f:
            f.seek(pos)
            chunk = f.read()
    except OSError:
        return pos
    text = chunk.decode("utf-8", errors="replace")
    end = text.rfind("\n") + 1  # whole lines only: a secret split across two reads stays whole
    sys.stdout.write(redact.text(text[:end]))
    sys.stdout.flush()
    return pos + len(text[:end].encode("utf-8", errors="replace"))


class SlurmBackend:
    """The job in a Slurm allocation; Ray (for verl) started inside it by the sbatch script."""

    traits = TRAITS["slurm"]

    def preflight(self, spec: JobSpec) -> None:
        """sbatch is here and the controller answers, before a run directory is written."""
        slurm_client.slurm("sinfo", "-h", "-o", "%P")

    def doctor(self, spec: JobSpec) -> list[dict[str, Any]]:
        """The nodes exist only once the allocation does: the sbatch script runs the doctor on
        every node first (doctor/NODE.json) and stops the job on an error finding."""
        where = "every node of the allocation, by the sbatch script (doctor/NODE.json)"
        return [{"node": where, "findings": []}] if spec.cluster.slurm.doctor else []

    def start(self, spec: JobSpec, inv: Invocation, run_dir: Path, follow: bool) -> int:
        job_id = submit(spec, inv, run_dir)
        return follow_job(job_id, run_dir.resolve()) if follow else 0

    def detached(self, follow: bool) -> bool:
        return not follow  # submitted: the job runs on after topl exits

    def handle(self, run_dir: Path) -> str | None:
        return slurm_client.job_id_of(run_dir)

    def driver_dir(self, spec: JobSpec, launched_in: str) -> str | None:
        """sbatch's working directory, where the script (and verl's command on the first node)
        runs: the directory sbatch was called in, or a --chdir directive's, relative to it
        (slurm-wlm@22.05.8:doc/man/man1/sbatch.1: DESCRIPTION, "-D, --chdir")."""
        if spec.cluster.slurm.run == "embedded":
            return None  # the reference engines write no checkpoints
        chdir = [d.split("=", 1)[1] for d in spec.cluster.slurm.sbatch if d.startswith("--chdir=")]
        return str(Path(launched_in) / chdir[-1]) if chdir else launched_in


BACKEND = SlurmBackend()
