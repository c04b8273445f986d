"""`topl watch` / `topl launch --watch`: logdiff per step, a strict stop on the first non-zero
logdiff, the reason in status.json."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_topl

from topl.launcher import watch

# a test job that logs through verl's own file logger (VERL_FILE_LOGGER_PATH is set by the
# subprocess backend); its third step goes off-policy, then it would run on for minutes
FAKE_VERL = """
import time
from verl.utils.tracking import FileLogger
log = FileLogger("p", "e")
for step in range(1, 100):
    diff = 0.0 if step < 3 else 1.5e-3
    log.log({"training/rollout_probs_diff_max": diff, "training/rollout_probs_diff_mean": diff / 10,
             "training/rollout_probs_diff_valid": 1, "critic/rewards/mean": 0.1 * step}, step)
    print(f"step:{step} - training/rollout_probs_diff_max:{diff}", flush=True)
    time.sleep(0.3 if step < 3 else 60)
"""


def test_verdict_is_exact_zero_and_needs_the_metric():
    assert watch.verdict({watch.DIFF_MAX: 0.0}) is None
    assert "not exactly 0" in watch.verdict({watch.DIFF_MAX: 1e-12})
    assert "not exactly 0" in watch.verdict({watch.DIFF_MAX: float("nan")})
    assert "missing" in watch.verdict({watch.REWARD: 1.0})


def test_console_lines_parse_like_verls_local_logger():
    assert watch.parse_console("step:7 - training/rollout_probs_diff_max:0.0 - a/b:nan") == (
        7,
        {watch.DIFF_MAX: 0.0, "a/b": pytest.approx(float("nan"), nan_ok=True)},
    )
    assert watch.parse_console("(TaskRunner pid=1) step:2 - critic/rewards/mean:0.5") == (
        2,
        {watch.REWARD: 0.5},
    )
    assert watch.parse_console("Creating file logger at x") is None


def _run_dir(root: Path, timeout=120) -> Path:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        dirs = (
            [d for d in (root / "runs").glob("*") if (d / "status.json").is_file()]
            if (root / "runs").is_dir()
            else []
        )
        if dirs:
            return dirs[0]
        time.sleep(0.2)
    raise AssertionError("no run dir")


def test_watch_stops_a_job_on_the_first_nonzero_logdiff_from_verls_file_logger(tmp_path):
    pytest.importorskip("verl")
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text(FAKE_VERL)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1"}
    launch = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "topl.launcher.cli",
            "launch",
            "--skip-doctor",
            "cluster.backend=subprocess",
            "algorithm.entrypoint=fake_verl",
            f"cluster.python={sys.executable}",
            "collective=hccl_strict",
            f"+cluster.env.PYTHONPATH={pkg}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        run_dir = _run_dir(tmp_path)
        w = subprocess.run(
            [sys.executable, "-m", "topl.launcher.cli", "watch", str(run_dir), "--interval", "0.2"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        launch_out, _ = launch.communicate(timeout=60)  # the job was stopped: topl returns at once
    finally:
        launch.kill()
    assert w.returncode == 1, w.stdout + w.stderr
    assert "STOP step 3: training/rollout_probs_diff_max = 0.0015" in w.stdout
    rows = [ln.split()[0] for ln in w.stdout.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert rows == ["1", "2", "3"]  # live per step, nothing after the stop
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["stopped_by"] == "topl watch"
    assert status["reason"].startswith("step 3:")
    assert launch.returncode != 0, launch_out
    # the guard ran inside the job's `import verl` and the watch showed its record
    recs = [json.loads(p.read_text()) for p in (run_dir / "guard").glob("*.json")]
    assert (
        len(recs) == 1
        and recs[0]["missing"] == []
        and recs[0]["env"]["VLLM_BATCH_INVARIANT"] == "1"
    )
    assert "guard driver" in w.stdout and (run_dir / "watch.png").is_file()


def test_launch_watch_shows_the_divergence_live_on_the_local_backend(tmp_path):
    r = run_topl("launch", "--watch", "alignment=off", "train.steps=3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [
        ln.split()
        for ln in r.stdout.splitlines()
        if ln.split() and ln.split()[0].isdigit() and len(ln.split()) == 5
    ]
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert all(float(row[1]) > 0 for row in rows)  # alignment=off: logdiff != 0, shown, not stopped
    run_dir = next((tmp_path / "runs").glob("*"))
    assert json.loads((run_dir / "status.json").read_text())["state"] == "succeeded"
    assert (run_dir / "watch.png").is_file()


def test_watch_once_json_on_a_finished_local_run(tmp_path):
    assert run_topl("launch", "train.steps=2", cwd=tmp_path).returncode == 0
    run_dir = next((tmp_path / "runs").glob("*"))
    r = run_topl("watch", str(run_dir), "--once", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["steps"] == 2 and out["strict"] and not out["stopped"]
    assert run_topl("watch", str(tmp_path / "nope")).returncode == 2
