"""SIGTERM to `topl launch` (or `topl doctor`) while the doctor runs `cluster.python` leaves
nothing behind: the interpreter the doctor started and what that interpreter started are gone
when topl exits."""

import os
import signal
import subprocess
import sys
import time

import pytest

# A `cluster.python` that starts a child of its own, writes both pids, and waits.
SLOW_PYTHON = """#!/bin/sh
sleep 300 &
echo "$$ $!" > {pids}
wait
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("command", [["launch", "cluster.backend=subprocess"], ["doctor"]])
def test_sigterm_during_the_doctor_leaves_no_interpreter_behind(tmp_path, command):
    pids = tmp_path / "pids"
    slow = tmp_path / "slow_python"
    slow.write_text(SLOW_PYTHON.format(pids=pids))
    slow.chmod(0o755)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    topl = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "topl.launcher.cli",
            *command,
            f"cluster.python={slow}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline and topl.poll() is None, topl.communicate()[0]
            time.sleep(0.1)
        shell, child = map(int, pids.read_text().split())
        topl.send_signal(signal.SIGTERM)
        out, _ = topl.communicate(timeout=60)
    finally:
        topl.kill()
    assert topl.returncode == 143, out
    time.sleep(0.5)
    left = [p for p in (shell, child) if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert left == [], out


def test_an_empty_python_is_not_this_interpreter():
    """cluster.python='' passed the doctor (it ran ours) while a launch cannot run it (issue 48)."""
    from topl.launcher.doctor.installed import import_error

    assert import_error("sys") is None
    assert import_error("sys", python="").startswith("cannot run")
