"""One Ray client for topl: every call to a Ray head through the Job Submission API bounded by a
deadline and turned into one ToplError that names the head and the step. The ray_job backend,
the per-node doctor and `topl watch` talk to a head through this module only."""

from __future__ import annotations

import contextlib
import sys
import time

from topl.launcher.base.errors import ToplError, install_hint
from topl.launcher.run.lifecycle import with_deadline


def bounded(fn, what: str, timeout: float):
    """fn() bounded by `timeout`; any failure is one ToplError naming the head and the step."""
    try:
        return with_deadline(
            fn,
            timeout,
            what,
            fix="check cluster.ray_address (the dashboard, http://HEAD:8265) and that the "
            "head is up (`ray status`); cluster.ray_timeout_s sets the wait",
        )
    except ToplError:
        raise
    except Exception as e:  # noqa: BLE001 - Ray raises several types for an unreachable head
        raise ToplError(
            f"{what}: {type(e).__name__}: {str(e)[:300]}",
            where="cluster.ray_address",
            fix="start the head (`ray start --head`) or fix cluster.ray_address",
        ) from None


def check_reachable(address: str | None, timeout: float) -> None:
    """The head is named, Ray is here, and the head answers (a version handshake) within
    `timeout`: before the doctor or a submit, and before a run directory is written."""
    if not address:  # no silent target: shipped presets name no head
        raise ToplError(
            "backend=ray_job and no Ray head named: topl never guesses a cluster",
            where="cluster.ray_address",
            # not cluster.backend=local: the embedded loop takes only the tiny models (TOP-RES-009)
            fix="add cluster.ray_address=http://HEAD:8265 (the head's dashboard; `ray start "
            "--head` on a node starts one); `topl launch --dry-run` writes the run dir and its "
            "command without a head; on Slurm: cluster=slurm_a3 cluster.slurm.partition=NAME "
            "cluster.slurm.time_min=MINUTES",
        )
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise ToplError(
            "backend=ray_job needs Ray, which is not installed here",
            where="cluster.backend=ray_job",
            fix=f"pip install 'ray[default]' (or topl's ray extra: {install_hint('ray')})",
        ) from None

    bounded(lambda: JobSubmissionClient(address), f"the Ray head at {address} (connect)", timeout)


class Head:
    """One Ray head through the Job Submission API; every call to it is bounded by `timeout`: Ray's
    client sets none (ray@2.60.0:python/ray/dashboard/modules/dashboard_sdk.py:
    SubmissionClient._do_request calls requests.request without one), so a head that accepts
    connections and never answers would hang topl. The launch and the per-node doctor
    (ray_doctor.py) and `topl watch` (run/watch_ray.py) talk to the head through this."""

    def __init__(self, address: str, timeout: float):
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise ToplError("backend=ray_job needs Ray", fix=install_hint("ray")) from None
        self.address, self.timeout = address, timeout
        self.client = self.call(lambda: JobSubmissionClient(address), "connect")

    def call(self, fn, what: str):
        return bounded(fn, f"the Ray head at {self.address} ({what})", self.timeout)

    def submit(self, **job) -> str:
        """submit_job, retried while a just-started head has no job agent yet."""
        return self.call(lambda: submit_retrying(self.client, self.timeout, **job), "submit")

    def status(self, job_id: str):
        return self.call(lambda: self.client.get_job_status(job_id), "status")

    def logs(self, job_id: str) -> str:
        return self.call(lambda: self.client.get_job_logs(job_id), "logs")

    def stop(self, job_id: str) -> None:
        """Ask the head to stop the job; a head that does not answer is not an error here."""
        with contextlib.suppress(Exception):
            self.call(lambda: self.client.stop_job(job_id), "stop")
            print(f"topl: asked Ray to stop job {job_id}", file=sys.stderr)

    def wait(self, job_id: str, deadline: float, poll: float = 0.5):
        """The job's terminal status, or one ToplError (the job stopped) at `deadline`
        (time.monotonic())."""
        from ray.job_submission import JobStatus

        terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
        while (status := self.status(job_id)) not in terminal:
            if time.monotonic() > deadline:
                self.stop(job_id)
                raise ToplError(
                    f"Ray job {job_id} on {self.address} did not finish in time (still {status})",
                    where="cluster.ray_address",
                    fix="check the cluster (`ray status`, the dashboard's job page); "
                    "cluster.ray_timeout_s sets the wait",
                )
            time.sleep(poll)
        return status


def submit_retrying(client, timeout: float, **job) -> str:
    """submit_job, retried while a just-started head has no job agent yet: Ray answers HTTP 500
    "No available agent to submit job" for the first seconds after `ray start --head`
    (ray@2.60.0:python/ray/dashboard/modules/job/job_head.py:JobHead.submit_job, raised by
    python/ray/dashboard/modules/dashboard_sdk.py:SubmissionClient._raise_error as RuntimeError)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.submit_job(**job)
        except RuntimeError as e:
            if "No available agent" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)
