"""Launch backends: local (reference engines), subprocess (verl here), ray_job (Ray Job API)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from topl.launcher.errors import ToplError


def child_env(invocation, run_dir: Path) -> dict[str, str]:
    env = {**os.environ, **invocation.env}
    env.setdefault("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    return env


def run_subprocess(invocation, run_dir: Path, python: str = "python3") -> int:
    """Run the verl entrypoint; stream output to the console and run_dir/verl.log; return its exit code.

    The child gets its own process group so Ctrl-C stops it and everything it spawned (Ray, vLLM).
    """
    cmd = [python, *invocation.argv]
    log = (run_dir / "verl.log").open("w")
    proc = subprocess.Popen(cmd, env=child_env(invocation, run_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        return proc.wait()
    except KeyboardInterrupt:
        print("\ntopl: interrupted, stopping the job's process group", file=sys.stderr)
        _stop_group(proc)
        return 130
    finally:
        log.close()


def _stop_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run_ray_job(invocation, run_dir: Path, address: str, follow: bool = False, working_dir: str | None = None,
                python: str = "python3") -> int:
    """Submit through the Ray Job Submission API; the env vars travel in runtime_env to every worker."""
    try:
        from ray.job_submission import JobStatus, JobSubmissionClient
    except ImportError:
        raise ToplError("backend=ray_job needs Ray", fix="pip install 'ray[default]'") from None
    import shlex

    runtime_env = {"env_vars": dict(invocation.env)}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    try:
        client = JobSubmissionClient(address)
    except Exception as e:  # noqa: BLE001 - Ray raises several types for an unreachable head
        raise ToplError(f"cannot reach the Ray cluster at {address}: {e}", where="cluster.ray_address",
                        fix="start the head (`ray start --head`) or fix cluster.ray_address") from None
    entry = " ".join(shlex.quote(a) for a in [python, *invocation.argv])
    job_id = client.submit_job(entrypoint=entry, runtime_env=runtime_env, metadata={"run_dir": str(run_dir)})
    (run_dir / "ray_job_id").write_text(job_id + "\n")
    print(f"topl: submitted Ray job {job_id} to {address}")
    if not follow:
        return 0
    terminal = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    seen = 0
    with (run_dir / "verl.log").open("w") as log:
        while True:
            status = client.get_job_status(job_id)
            logs = client.get_job_logs(job_id)
            sys.stdout.write(logs[seen:])
            log.write(logs[seen:])
            seen = len(logs)
            if status in terminal:
                break
            time.sleep(1.0)
    print(f"topl: Ray job {job_id} {status.value}")
    return 0 if status == JobStatus.SUCCEEDED else 1
