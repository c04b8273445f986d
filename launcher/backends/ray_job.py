"""The ray_job backend: submit the rendered verl command through the Ray Job Submission API."""
from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from topl.launcher.errors import ToplError


def ray_client(address: str | None):
    """A Job Submission client, or one readable ToplError (exit 2): no address, no Ray, no head."""
    if not address:
        raise ToplError("backend=ray_job and no Ray head named: topl never guesses a cluster",
                        where="cluster.ray_address",
                        fix="add cluster.ray_address=http://HEAD:8265 (the head's dashboard), "
                            "or cluster.backend=local")
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise ToplError("backend=ray_job needs Ray, which is not installed here",
                        where="cluster.backend=ray_job",
                        fix="pip install 'ray[default]' (or topl's `ray` extra)") from None
    try:
        return JobSubmissionClient(address)
    except Exception as e:  # noqa: BLE001 - Ray raises several types for an unreachable head
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ToplError(f"cannot reach the Ray cluster at {address}: {reason}",
                        where="cluster.ray_address",
                        fix="start the head (`ray start --head`), or fix cluster.ray_address "
                            "(the dashboard address, port 8265 by default)") from None


def run_ray_job(invocation, run_dir: Path, address: str, follow: bool = False, working_dir: str | None = None,
                python: str = "python3") -> int:
    """Submit through the Ray Job Submission API; the env vars travel in runtime_env to every worker."""
    client = ray_client(address)
    from ray.job_submission import JobStatus

    runtime_env = {"env_vars": dict(invocation.env)}
    if working_dir:
        runtime_env["working_dir"] = working_dir
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
