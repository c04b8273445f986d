"""Children topl starts for a moment (the doctor's `cluster.python -c "import verl"`), each in its
own process group, and killed with everything they started when topl stops: a SIGTERM to
`topl launch` while the doctor waits on one (in a deadline thread) must not leave it behind."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading

_live: set[subprocess.Popen[str]] = set()
_lock = threading.Lock()


def run(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(cmd, capture_output=True, text=True, input=input) in a new process group that
    `kill_all` (and a timeout) takes down whole; raises TimeoutExpired / OSError as subprocess.run
    does."""
    p = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    with _lock:
        _live.add(p)
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(p)
        p.communicate()
        raise
    finally:
        with _lock:
            _live.discard(p)
        _kill(p)  # what it left running in its group (a daemon it spawned) goes with it
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def _kill(p: subprocess.Popen[str]) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all() -> None:
    """Kill every child (and its group) still running: topl is stopping."""
    with _lock:
        live = list(_live)
    for p in live:
        _kill(p)


atexit.register(kill_all)
