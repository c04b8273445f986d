"""`topl watch`'s boundary to Ray: a run's Ray job through the Job Submission API."""

from __future__ import annotations

from pathlib import Path

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError, install_hint
from topl.launcher.run import backends, watch_io
from topl.launcher.run.backends.ray_client import bounded


class RayJob:
    """The run's Ray job through the Job Submission API, every call bounded by cluster.ray_timeout_s
    (ray@2.60.0:python/ray/dashboard/modules/job/sdk.py:JobSubmissionClient: get_job_logs returns
    the whole log so far, get_job_info a JobDetails with status, message, driver_exit_code)."""

    def __init__(self, address: str, job_id: str, timeout: float):
        self.address, self.job_id, self.timeout, self._client = address, job_id, timeout, None

    def _call(self, method: str, what: str):
        """client.method(job_id), connecting first (a finished run needs no head)."""

        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise ToplError(
                f"this run is Ray job {self.job_id}; following it needs Ray, not installed here",
                fix=f"pip install 'ray[default]' (or topl's ray extra: {install_hint('ray')})",
            ) from None

        where = f"the Ray head at {self.address} ({what}, job {self.job_id})"
        if self._client is None:
            self._client = bounded(lambda: JobSubmissionClient(self.address), where, self.timeout)
        return bounded(lambda: getattr(self._client, method)(self.job_id), where, self.timeout)

    def logs(self) -> str:
        return self._call("get_job_logs", "logs")

    def info(self):
        return self._call("get_job_info", "status")

    def stop(self) -> None:
        self._call("stop_job", "stop")

    def poll(self) -> tuple[str, dict | None]:
        """(`ray job ID: STATUS`, status.json's fields for its end, or None while it runs)."""
        info = self.info()
        status = getattr(info.status, "value", str(info.status))
        shown = f"ray job {self.job_id}: {status}"
        if status not in RAY_ENDS:
            return shown, None
        code = info.driver_exit_code
        return shown, {
            "state": RAY_ENDS[status],
            "exit_code": code if code is not None else int(status != "SUCCEEDED"),
            "ray_status": status,
            "ray_message": redact.text(info.message or "")[:2000],  # it quotes the last lines
            "recorded_by": "topl watch",
        }


def ray_job(run_dir: Path) -> RayJob | None:
    """The run's Ray job (None when the run is not one)."""

    job_id = backends.get("ray_job").handle(run_dir)  # a regular file, small, or none
    if job_id is None:
        return None
    import yaml

    try:
        spec = yaml.safe_load(watch_io.read_text(run_dir / "spec.yaml") or "{}")
        cluster = spec["cluster"]
        address, timeout = str(cluster["ray_address"]), float(cluster.get("ray_timeout_s") or 30)
    except (yaml.YAMLError, RecursionError, KeyError, TypeError, ValueError, AttributeError):
        raise ToplError(
            "the run names a Ray job but its spec.yaml gives no usable cluster.ray_address",
            where=str(run_dir / "spec.yaml"),
            fix="follow the job with `ray job logs` on its head",
        ) from None
    return RayJob(address, job_id, timeout)


# Ray's terminal job states -> status.json's (ray@2.60.0:python/ray/dashboard/modules/job/common.py:
# JobStatus.is_terminal); STOPPED is `ray job stop` (or topl's stop_job)
RAY_ENDS = {"SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "failed"}
