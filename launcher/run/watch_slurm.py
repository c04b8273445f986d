"""`topl watch`'s boundary to Slurm: a run's Slurm job through squeue / scontrol / sacct and the
exit file its script writes (launcher/run/backends/slurm_client.py), stopped by scancel."""

from __future__ import annotations

from pathlib import Path

from topl.launcher.run.backends import slurm_client
from topl.launcher.run.watch_io import clean


class SlurmJob:
    """The run's Slurm job; its console is verl.log in the run directory (a shared filesystem)."""

    def __init__(self, job_id: str, run_dir: Path):
        self.job_id, self.run_dir = job_id, run_dir

    def poll(self) -> tuple[str, dict | None]:
        """(`slurm job ID: STATE (reason)`, status.json's fields for its end, or None while it
        runs); CANCELLED and PREEMPTED end `interrupted`."""
        st = slurm_client.state(self.job_id, self.run_dir)
        shown = f"slurm job {self.job_id}: {st.slurm}" + (f" ({st.reason})" if st.reason else "")
        if not st.ended:
            return shown, None
        code = st.exit_code if st.exit_code is not None else int(st.status != "succeeded")
        end = {"state": st.status, "exit_code": code, "slurm_state": st.slurm}
        reason = {"slurm_reason": clean(st.reason)[:500]} if st.reason else {}
        return shown, {**end, **reason, "recorded_by": "topl watch"}

    def stop(self) -> None:
        slurm_client.cancel(self.job_id)


def slurm_job(run_dir: Path) -> SlurmJob | None:
    """The run's Slurm job (None when the run is not one)."""
    job_id = slurm_client.job_id_of(run_dir)
    return None if job_id is None else SlurmJob(job_id, run_dir)
