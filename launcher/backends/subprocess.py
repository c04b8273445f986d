"""The subprocess backend: run the rendered verl command on this machine."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


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
