"""SIGTERM to `topl launch -m` stops the whole sweep: the running point's job stops, no further
point starts, and every point directory's status.json says how it ended (never `running`), with
Hydra's basic launcher (points in topl's process) and joblib's (points in worker processes)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

LAUNCHERS = {
    "basic": [],
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_sigterm_stops_the_whole_sweep_and_marks_every_point(tmp_path, launcher):
    if (
        launcher == "joblib"
        and importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None
    ):
        pytest.skip("hydra-joblib-launcher not installed")
    started = tmp_path / "started"
    fake = tmp_path / "python"  # the job: says it started, then runs for a minute
    fake.write_text(f"#!/bin/sh\necho $$ >> {started}\nexec sleep 60\n")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    args = [*LAUNCHERS[launcher], "cluster.backend=subprocess", f"cluster.python={fake}"]
    topl = subprocess.Popen(
        [sys.executable, "-m", "topl.launcher.cli", "launch", "-m", *args, "model=tiny_dense"]
        + ["train.steps=1,2,3", "--skip-doctor"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    want = 2 if launcher == "joblib" else 1
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and topl.poll() is None:
            if started.exists() and len(started.read_text().split()) >= want:
                break
            time.sleep(0.2)
        assert topl.poll() is None, topl.communicate()
        topl.send_signal(signal.SIGTERM)
        out, err = topl.communicate(timeout=60)
    finally:  # a sweep that went on (the bug) is stopped for good
        if topl.poll() is None:
            topl.kill()
            topl.wait()
    assert topl.returncode == 128 + signal.SIGTERM, err
    assert "the sweep was stopped" in err and "Traceback" not in err
    jobs = [int(p) for p in started.read_text().split()]
    assert len(jobs) == want  # no further point started
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()
    points = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert len(points) >= want
    for p in points:
        st = json.loads((p / "status.json").read_text())
        assert st["state"] == "interrupted" and st["signal"] == "SIGTERM", (p.name, st)
    time.sleep(1)
    for pid in jobs:  # the jobs went with their topl
        assert not os.path.exists(f"/proc/{pid}") or "sleep" not in _cmdline(pid)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""
