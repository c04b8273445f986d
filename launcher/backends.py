"""Launch backends: local (reference engines), subprocess (verl here), ray_job (Ray Job API)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from topl.launcher import redact
from topl.launcher.errors import ToplError
from topl.launcher.lifecycle import with_deadline


def child_env(invocation, run_dir: Path) -> dict[str, str]:
    env = {**os.environ, **invocation.env}
    env.setdefault("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    return env


def run_subprocess(invocation, run_dir: Path, python: str = "python3") -> int:
    """Run the verl entrypoint; stream output (redacted) to the console and run_dir/verl.log.

    Returns its return code (negative N: killed by signal N). The child gets its own process group:
    when topl is interrupted (SIGINT / SIGTERM) the whole group (Ray, vLLM) is stopped."""
    cmd = [python, *invocation.argv]
    fd = os.open(run_dir / "verl.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as log:
        # SIGINT/SIGTERM wait (blocked) until `proc` is known, so an interrupt always finds the child
        # to stop; the child starts with them unblocked, in its own session (setsid before exec).
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        try:
            proc = subprocess.Popen(cmd, env=child_env(invocation, run_dir), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
                                    preexec_fn=lambda: _child_setup(stop))
        except BaseException:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
            raise
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)  # a pending interrupt lands in this `try`
            for line in proc.stdout:
                line = redact.text(line)
                sys.stdout.write(line)
                log.write(line)
            return proc.wait()
        except BaseException:  # Interrupted, KeyboardInterrupt, a broken console: stop the job first
            _stop_group(proc)
            raise


def _child_setup(stop: set) -> None:
    """In the child before exec: signals unblocked; on Linux, SIGTERM when topl dies (even SIGKILL)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (linux/prctl.h) = 1


def _stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def run_ray_job(invocation, run_dir: Path, address: str, follow: bool = False, working_dir: str | None = None,
                python: str = "python3", timeout: float = 30.0) -> int:
    """Submit through the Ray Job Submission API; the env vars travel in runtime_env to every worker.

    Every call to the head is bounded by `timeout` (Ray's client has none: a head that accepts
    connections and never answers would hang topl); interrupting topl stops the Ray job."""
    try:
        from ray.job_submission import JobStatus, JobSubmissionClient
    except ImportError:
        raise ToplError("backend=ray_job needs Ray", fix="pip install 'ray[default]'") from None
    import shlex

    def call(fn, what):
        try:
            return with_deadline(fn, timeout, f"the Ray head at {address} ({what})",
                                 fix="check cluster.ray_address (the dashboard, http://HEAD:8265) and that "
                                     "the head is up (`ray status`); cluster.ray_timeout_s sets the wait")
        except ToplError:
            raise
        except Exception as e:  # noqa: BLE001 - Ray raises several types for an unreachable head
            raise ToplError(f"the Ray head at {address} ({what}): {type(e).__name__}: {str(e)[:300]}",
                            where="cluster.ray_address",
                            fix="start the head (`ray start --head`) or fix cluster.ray_address") from None

    runtime_env = {"env_vars": dict(invocation.env)}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    client = call(lambda: JobSubmissionClient(address), "connect")
    entry = " ".join(shlex.quote(a) for a in [python, *invocation.argv])
    job_id = call(lambda: client.submit_job(entrypoint=entry, runtime_env=runtime_env,
                                            metadata={"run_dir": str(run_dir)}), "submit")
    (run_dir / "ray_job_id").write_text(job_id + "\n")
    print(f"topl: submitted Ray job {job_id} to {address}")
    if not follow:
        return 0
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    seen = 0
    fd = os.open(run_dir / "verl.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as log:
        try:
            while True:
                status = call(lambda: client.get_job_status(job_id), "status")
                logs = call(lambda: client.get_job_logs(job_id), "logs")
                text = redact.text(logs[seen:])
                sys.stdout.write(text)
                log.write(text)
                seen = len(logs)
                if status in terminal:
                    break
                time.sleep(1.0)
        except BaseException:  # interrupted (or the head stopped answering): stop the job
            with contextlib.suppress(Exception):
                call(lambda: client.stop_job(job_id), "stop")
                print(f"topl: asked Ray to stop job {job_id}", file=sys.stderr)
            raise
    print(f"topl: Ray job {job_id} {status.value}")
    return 0 if status == JobStatus.SUCCEEDED else 1
