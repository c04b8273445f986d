"""The ray_job backend: submit the rendered verl command through the Ray Job Submission API."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from topl.launcher.base import redact
from topl.launcher.run import watch_io
from topl.launcher.run.backends.ray_client import Head, check_reachable
from topl.launcher.run.backends.ray_doctor import on_ray
from topl.launcher.run.watch_lines import parse_console
from topl.launcher.spec.backend_traits import TRAITS

if TYPE_CHECKING:
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec


def job_env(invocation) -> dict[str, str]:
    """The job's runtime_env env_vars: the whole rendered env, secrets included (they are on no
    command line; Ray hands them to the driver and every worker of the job).

    RAY_OVERRIDE_JOB_RUNTIME_ENV=1: verl's ray.init(runtime_env=...) repeats the non-secret vars
    (the command's ray_kwargs), and Ray refuses a driver runtime_env that names a job env var
    again unless this is set (ray@2.60.0:python/ray/_private/worker.py:init ->
    python/ray/runtime_env/runtime_env.py:_merge_runtime_env returns None on a shared key)."""
    return {**invocation.env, "RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"}


class LogStream:
    """A job's log as the driver writes it: Ray's websocket tail (from the log's start;
    ray@2.60.0:python/ray/dashboard/modules/job/sdk.py:JobSubmissionClient.tail_job_logs,
    dashboard/modules/job/utils.py:file_tail_iterator) in a thread, so a days-long run's log is
    not fetched whole every second. If the tail fails, `take` falls back to get_job_logs and
    returns what it has not yet returned."""

    def __init__(self, client, job_id: str):
        import queue  # here, not at the top: `topl check` imports this module for `remote`
        import threading

        self.chunks: queue.Queue[str] = queue.Queue()
        self.done, self.error, self.given = threading.Event(), None, 0
        threading.Thread(target=self._run, args=(client, job_id), daemon=True).start()

    def _run(self, client, job_id: str) -> None:
        async def tail():
            async for chunk in client.tail_job_logs(job_id):
                self.chunks.put(chunk)

        import asyncio

        try:
            asyncio.run(tail())
        except Exception as e:  # noqa: BLE001 - any failure: fall back to whole-log reads
            self.error = e
        finally:
            self.done.set()

    def take(self, whole_log, final: bool = False) -> str:
        """What arrived since the last call; `final` (the job ended): the whole log's rest if the
        tail has not closed by now."""
        parts = []
        while not self.chunks.empty():
            parts.append(self.chunks.get_nowait())
        text = "".join(parts)
        if (self.error is not None and self.done.is_set()) or (final and not self.done.is_set()):
            text = whole_log()[self.given :]  # the tail broke: read what it did not deliver
        self.given += len(text)
        return text


class MetricsFile:
    """The run directory's metrics.jsonl for a Ray job, made from verl's console lines in its log.

    verl's file logger writes on the cluster, where the driver runs (VERL_FILE_LOGGER_PATH unset:
    `./{project_name}/{experiment_name}.jsonl` under the job's working directory,
    verl@0.9.1:verl/utils/tracking.py:FileLogger.__init__), out of topl's reach. The console
    logger, also in trainer.logger, prints every number of the same step
    (`step:N - key:value - ...` with pprint.pformat's repr, no rounding:
    verl@0.9.1:verl/utils/logger/aggregate_logger.py:concat_dict_to_str), so each step line
    becomes the record FileLogger.log would have written (`{"step": N, "data": {...}}`); only
    numeric values reach either."""

    def __init__(self, path: Path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.f = os.fdopen(fd, "w")

    def add(self, text: str) -> None:
        for line in text.splitlines():
            if (got := parse_console(line)) is not None:
                self.f.write(json.dumps({"step": got[0], "data": got[1]}) + "\n")
        self.f.flush()  # `topl watch` / `topl compare` read it while the job runs

    def close(self) -> None:
        self.f.close()


class LineWriter:
    """Redact whole lines only: a secret split across two chunks must not slip through."""

    def __init__(self, log, metrics: MetricsFile | None = None):
        self.log, self.pending, self.metrics = log, "", metrics
        self.lines = redact.Lines()  # a private key printed over many lines (and chunks) goes whole

    def _emit(self, text: str) -> None:
        text = "".join(self.lines(line) for line in text.splitlines(keepends=True))
        sys.stdout.write(text)
        self.log.write(text)
        if self.metrics is not None:
            self.metrics.add(text)

    def write(self, text: str) -> None:
        lines, sep, self.pending = (self.pending + text).rpartition("\n")
        if sep:
            self._emit(lines + sep)

    def close(self) -> None:
        if self.pending:
            self._emit(self.pending)
        self.pending = ""


def run_ray_job(
    invocation,
    run_dir: Path,
    address: str,
    follow: bool = False,
    working_dir: str | None = None,
    python: str = "python3",
    timeout: float = 30.0,
) -> int:
    """Submit through the Ray Job Submission API; the env vars travel in runtime_env to every worker.

    Every call to the head is bounded by `timeout` (see Head). Interrupting topl stops the Ray
    job."""
    import shlex

    head = Head(address, timeout)  # first: without Ray, one message
    from ray.job_submission import JobStatus

    runtime_env = {"env_vars": job_env(invocation)}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    entry = " ".join(shlex.quote(a) for a in [python, *invocation.argv])
    job_id = head.submit(
        entrypoint=entry, runtime_env=runtime_env, metadata={"run_dir": str(run_dir)}
    )
    from topl.launcher.run import rundir  # lazy: OmegaConf only when this runs

    rundir.write_file(run_dir / JOB_ID_FILE, job_id + "\n")
    print(f"topl: submitted Ray job {job_id} to {address}")
    if not follow:
        return 0
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    stream = LogStream(head.client, job_id)
    fd = os.open(run_dir / "verl.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    metrics = MetricsFile(run_dir / "metrics.jsonl")
    with os.fdopen(fd, "w") as log:
        out = LineWriter(log, metrics)
        try:
            while True:
                status = head.status(job_id)
                if status in terminal:
                    stream.done.wait(10.0)  # Ray closes the tail once the job has ended
                out.write(stream.take(lambda: head.logs(job_id), final=status in terminal))
                if status in terminal:
                    break
                time.sleep(1.0)
            out.close()
        except BaseException:  # interrupted (or the head stopped answering): stop the job
            head.stop(job_id)
            raise
        finally:
            metrics.close()
    print(f"topl: Ray job {job_id} {status.value}")
    return 0 if status == JobStatus.SUCCEEDED else 1


JOB_ID_FILE = "ray_job_id"  # in the run directory: the Ray job's id (`topl watch` reads it)


class RayJobBackend:
    """verl's driver as a Ray job on a running cluster (cluster.ray_address, the dashboard)."""

    traits = TRAITS["ray_job"]

    def preflight(self, spec: JobSpec) -> None:
        check_reachable(spec.cluster.ray_address, spec.cluster.ray_timeout_s)

    def doctor(self, spec: JobSpec) -> list[dict]:

        return on_ray(spec.cluster.ray_address, spec)

    def start(self, spec: JobSpec, inv: Invocation, run_dir: Path, follow: bool) -> int:
        return run_ray_job(
            inv,
            run_dir,
            spec.cluster.ray_address,
            follow,
            python=spec.cluster.python,
            timeout=spec.cluster.ray_timeout_s,
        )

    def detached(self, follow: bool) -> bool:
        return not follow  # submitted: the job runs on after topl exits

    def handle(self, run_dir: Path) -> str | None:

        text = watch_io.read_text(run_dir / JOB_ID_FILE, 4096)  # small, regular, or none
        return None if text is None else text.strip()

    def driver_dir(self, spec: JobSpec, launched_in: str) -> str | None:
        """The head's: the entrypoint starts in the job supervisor's directory (no cwd given,
        ray@2.60.0:python/ray/dashboard/modules/job/job_supervisor.py:JobSupervisor.
        _exec_entrypoint; no working_dir in the job's runtime_env), where that head's `ray start`
        ran: the same for every job of one head, unknown here."""
        return None


BACKEND = RayJobBackend()
