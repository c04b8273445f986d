"""Runs are never lost or mislabelled: exclusive run dirs, status files, signals, bounded Ray waits.

Every test drives the real CLI in a child process and kills jobs or topl with real signals; it waits
for topl's own `status.json` to say `running` (written once topl's signal handlers are in place and
the job has started) before signalling, so no test depends on timing.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import run_topl

FAKE_VERL = """
import os, signal, sys, time
print("fake verl running", flush=True)
open(os.environ["FAKE_PIDFILE"], "w").write(str(os.getpid()))
if os.environ.get("FAKE_KILL_SELF"):
    os.kill(os.getpid(), int(os.environ["FAKE_KILL_SELF"]))
if os.environ.get("FAKE_SLEEP"):
    time.sleep(120)
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def fake(tmp_path):
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text(FAKE_VERL)
    (tmp_path / "tmp").mkdir()
    env = {
        **os.environ,
        "PYTHONSAFEPATH": "1",
        "FAKE_PIDFILE": str(tmp_path / "child.pid"),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    env.pop("HYDRA_FULL_ERROR", None)
    args = [
        "cluster.backend=subprocess",
        "algorithm.entrypoint=fake_verl",
        f"cluster.python={sys.executable}",
        "collective=hccl_strict",
        f"+cluster.env.PYTHONPATH={pkg}",
        "--skip-doctor",
    ]
    return env, args


def run_dirs(root: Path) -> list[Path]:
    return sorted(d for d in (root / "runs").iterdir() if d.is_dir() and d.name != "multirun")


def status(d: Path) -> dict:
    return json.loads((d / "status.json").read_text())


def start(tmp_path, env, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "topl.launcher.cli", "launch", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_running(
    p: subprocess.Popen, tmp_path: Path, pidfile: Path | None = None, limit: float = 300
) -> Path:
    """The run dir once topl marked it running (and the fake job wrote its pid, when given)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        dirs = run_dirs(tmp_path) if (tmp_path / "runs").exists() else []
        if (
            dirs
            and (dirs[0] / "status.json").exists()
            and status(dirs[0])["state"] == "running"
            and (pidfile is None or (pidfile.exists() and pidfile.read_text()))
        ):
            return dirs[0]
        time.sleep(0.05)
    raise AssertionError("the run never started")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize(
    "extra,rc,state",
    [
        ({}, 0, "succeeded"),
        ({"FAKE_RC": "3"}, 3, "failed"),
        ({"FAKE_KILL_SELF": "9"}, 137, "failed"),
    ],
)
def test_subprocess_exit_codes_and_status(tmp_path, fake, extra, rc, state):
    env, args = fake
    r = subprocess.run(
        [sys.executable, "-m", "topl.launcher.cli", "launch", *args],
        cwd=tmp_path,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == rc, (
        r.stderr
    )  # a job killed by SIGKILL (OOM killer) is a failure: 128 + 9
    s = status(run_dirs(tmp_path)[0])
    assert (s["state"], s["exit_code"]) == (state, rc)
    if extra.get("FAKE_KILL_SELF"):
        assert s["signal"] == "SIGKILL"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_topl_stops_the_job_group_and_marks_the_run(tmp_path, fake, sig):
    env, args = fake
    pidfile = tmp_path / "child.pid"
    p = start(tmp_path, {**env, "FAKE_SLEEP": "1"}, *args, "recipe=qwen3_4b_grpo_a2_off")
    d = wait_running(p, tmp_path, pidfile)
    child = int(pidfile.read_text())
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, err
    assert "Traceback" not in err
    s = status(d)
    assert (s["state"], s["signal"]) == ("interrupted", signal.Signals(sig).name)
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child)
    assert not list((tmp_path / "tmp").glob("topl-recipe-*"))  # temp recipe dirs cleaned up


def test_sigkill_to_topl_takes_the_job_down_too(tmp_path, fake):
    """SIGKILL cannot be handled: the job gets SIGTERM from the kernel when topl dies (Linux), and
    status.json keeps topl's pid, so a `running` run whose pid is gone reads as killed."""
    env, args = fake
    pidfile = tmp_path / "child.pid"
    p = start(tmp_path, {**env, "FAKE_SLEEP": "1"}, *args)
    d = wait_running(p, tmp_path, pidfile)
    child = int(pidfile.read_text())
    p.kill()
    p.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child) or open(f"/proc/{child}/stat").read().split()[2] == "Z"
    assert status(d)["state"] == "running" and gone(status(d)["pid"])
    # topl watch sees topl gone without an end, says so and records it (nothing waits forever)
    w = run_topl("watch", str(d), "--json", timeout=60)
    assert w.returncode == 1, w.stderr
    assert json.loads(w.stdout)["state"] == "failed"
    assert status(d)["state"] == "failed" and "SIGKILL" in status(d)["error"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_local_backend_interrupt_is_marked_without_traceback(tmp_path, sig):
    env = {**os.environ, "PYTHONSAFEPATH": "1", "OMP_NUM_THREADS": "1"}
    p = start(tmp_path, env, "train.steps=500")
    d = wait_running(p, tmp_path)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig and "Traceback" not in err, err
    assert status(d)["state"] == "interrupted"


def test_a_dry_run_says_so_in_status_and_watch(tmp_path):
    d = tmp_path / "dry"
    assert run_topl("launch", "--dry-run", f"hydra.run.dir={d}", cwd=tmp_path).returncode == 0
    s = status(d)
    assert (s["state"], s["started"], s["backend"]) == ("dry_run", False, "local")
    assert oct(d.joinpath("status.json").stat().st_mode & 0o777) == oct(0o600)
    w = run_topl("watch", str(d), timeout=60)
    assert w.returncode == 3 and "dry run" in w.stderr and "command.sh" in w.stderr, w.stderr
    w = run_topl("watch", str(d), "--json", timeout=60)
    assert w.returncode == 3 and json.loads(w.stdout)["state"] == "dry_run"


def test_run_dir_is_created_exclusively(tmp_path):
    fixed = tmp_path / "fixed"
    assert run_topl("launch", "--dry-run", f"hydra.run.dir={fixed}", cwd=tmp_path).returncode == 0
    before = (fixed / ".hydra" / "config.yaml").read_text()
    r = run_topl("launch", "--dry-run", f"hydra.run.dir={fixed}", "seed=9", cwd=tmp_path)
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr and "Traceback" not in r.stderr
    assert (
        fixed / ".hydra" / "config.yaml"
    ).read_text() == before  # the first run's record is intact


def test_parallel_launches_into_one_dir_one_wins(tmp_path):
    fixed = tmp_path / "same"
    results = [None] * 3

    def go(i):
        results[i] = run_topl(
            "launch", "--dry-run", f"hydra.run.dir={fixed}", f"seed={i}", cwd=tmp_path
        )

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.returncode for r in results) == [0, 2, 2], [r.stderr for r in results]
    winner = next(i for i, r in enumerate(results) if r.returncode == 0)
    assert f"seed: {winner}" in (fixed / "spec.yaml").read_text()


def test_two_sweeps_into_one_dir_the_second_is_refused(tmp_path):
    sweep = [f"hydra.sweep.dir={tmp_path / 'sw'}", "seed=1,2", "--dry-run"]
    assert run_topl("launch", "-m", *sweep, cwd=tmp_path).returncode == 0
    r = run_topl("launch", "-m", *sweep, cwd=tmp_path)
    assert r.returncode == 2 and "refusing to overwrite" in r.stderr
    assert sorted(p.name for p in (tmp_path / "sw").iterdir() if p.is_dir()) == ["0", "1"]
    assert [status(tmp_path / "sw" / n)["state"] for n in ("0", "1")] == ["dry_run", "dry_run"]
    w = run_topl("watch", str(tmp_path / "sw"), timeout=60)  # a sweep dir: watch names its runs
    assert w.returncode == 2 and "not a topl run directory" in w.stderr
    assert str(tmp_path / "sw" / "0") in w.stderr and "Traceback" not in w.stderr


def test_silent_ray_endpoint_gives_one_clear_error_within_the_timeout(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)  # accepts connections and never answers
    port = server.getsockname()[1]
    try:
        start_t = time.monotonic()
        r = run_topl(
            "launch",
            "cluster.backend=ray_job",
            f"cluster.ray_address=http://127.0.0.1:{port}",
            "cluster.ray_timeout_s=3",
            "--skip-doctor",
            cwd=tmp_path,
            timeout=120,
        )
        assert r.returncode == 2, r.stderr
        assert "no answer within 3 s" in r.stderr and "Traceback" not in r.stderr
        assert time.monotonic() - start_t < 60
        # checked before the run dir is made (front door): none is left; one made is marked failed
        runs = run_dirs(tmp_path) if (tmp_path / "runs").exists() else []
        assert all(status(d)["state"] == "failed" for d in runs)
    finally:
        server.close()


def test_sweep_points_that_cannot_start_are_marked_failed(tmp_path):
    """Under -m Hydra makes each point's dir; a point refused before starting says so."""
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    address = f"http://127.0.0.1:{port.getsockname()[1]}"
    port.close()  # nothing listens: connection refused
    sweep = tmp_path / "sw"
    r = run_topl(
        "launch",
        "-m",
        "seed=1,2",
        "cluster.backend=ray_job",
        f"cluster.ray_address={address}",
        "cluster.ray_timeout_s=5",
        "--skip-doctor",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    for point in ("0", "1"):
        s = status(sweep / point)
        assert (s["state"], s["started"]) == ("failed", False) and address in s["error"]
