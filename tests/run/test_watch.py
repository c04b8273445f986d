"""`topl watch` / `topl launch --watch`: logdiff per step, a strict stop on the first non-zero
logdiff, the reason in status.json."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_topl

from topl.launcher.run import watch, watch_lines

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
    assert watch_lines.parse_console("step:7 - training/rollout_probs_diff_max:0.0 - a/b:nan") == (
        7,
        {watch.DIFF_MAX: 0.0, "a/b": pytest.approx(float("nan"), nan_ok=True)},
    )
    assert watch_lines.parse_console("(TaskRunner pid=1) step:2 - critic/rewards/mean:0.5") == (
        2,
        {watch.REWARD: 0.5},
    )
    assert watch_lines.parse_console("Creating file logger at x") is None


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
    if importlib.util.find_spec("verl") is None:  # found, not imported here (~5 s): the job does
        pytest.skip("verl is not installed")
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
        if ln.split() and ln.split()[0].isdigit() and len(ln.split()) == 6
    ]
    assert [row[0] for row in rows] == ["1", "2", "3"]
    assert all(float(row[1]) > 0 for row in rows)  # alignment=off: logdiff != 0, shown, not stopped
    # max|Δlogp| (the launch's progress line) next to verl's probability difference max|Δp|
    assert "max|Δlogp|" in r.stdout and "max|Δp|" in r.stdout and "logdiff max" not in r.stdout
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


# --- a Ray job followed through the Job API -------------------------------------------------------
# The Job Submission client is replaced at its import location by a fake with the real client's
# method signatures (checked below) that returns Ray's own types: the job advances one chunk of log
# per status query, cut mid-line on purpose, as a live job's log is when it is read.

RAY_LOG = [
    "Creating file logger\nstep:1 - training/rollout_probs_diff_max:0.0 - critic/rew",
    "ards/mean:0.1\nstep:2 - training/rollout_probs_diff_max:0.0 - critic/rewards/mean:0.2\n",
    "some verl chatter\n",
    "step:3 - training/rollout_probs_diff_max:0.0 - critic/rewards/mean:0.3\n",
]


class FakeJobs:
    """Stands in for ray.job_submission.JobSubmissionClient (one job; tests set its script)."""

    CHUNKS, END, EXIT, MESSAGE = RAY_LOG, "SUCCEEDED", 0, None
    instances: list = []

    def __init__(self, address=None, *args, **kwargs):
        self.address, self.tick, self.stopped = address, 0, False
        FakeJobs.instances.append(self)

    def submit_job(self, *, entrypoint, runtime_env=None, metadata=None, **kw):
        return "raysubmit_fake1"

    def get_job_info(self, job_id):
        from ray.job_submission import JobDetails, JobStatus, JobType

        assert job_id == "raysubmit_fake1"
        self.tick += 1  # the job moves on while topl watches
        over = self.stopped or self.tick > len(self.CHUNKS)
        status = ("STOPPED" if self.stopped else self.END) if over else "RUNNING"
        return JobDetails(
            type=JobType.SUBMISSION,
            status=JobStatus(status),
            entrypoint="python3 -m verl.trainer.main_ppo",
            message=self.MESSAGE if over else None,
            driver_exit_code=self.EXIT if over and not self.stopped else None,
        )

    def get_job_status(self, job_id):
        return self.get_job_info(job_id).status

    def get_job_logs(self, job_id):
        assert job_id == "raysubmit_fake1"
        return "".join(self.CHUNKS[: self.tick])

    def stop_job(self, job_id):
        self.stopped = True
        return True


def test_the_fake_has_the_real_clients_signatures():
    ray_sdk = pytest.importorskip("ray.job_submission")
    import inspect

    for name in ("get_job_info", "get_job_status", "get_job_logs", "stop_job"):
        real = list(inspect.signature(getattr(ray_sdk.JobSubmissionClient, name)).parameters)
        assert list(inspect.signature(getattr(FakeJobs, name)).parameters) == real, name
    assert "entrypoint" in inspect.signature(ray_sdk.JobSubmissionClient.submit_job).parameters


@pytest.fixture
def fake_ray(monkeypatch):
    ray_sdk = pytest.importorskip("ray.job_submission")
    FakeJobs.instances = []
    monkeypatch.setattr(ray_sdk, "JobSubmissionClient", FakeJobs)
    return FakeJobs


def _launch_ray(tmp_path, *extra) -> Path:
    """A real `topl launch` (in this process) onto the fake head, without --follow."""
    from topl.launcher.cli import main

    run_dir = tmp_path / "run"
    rc = main(
        [
            "launch",
            "cluster.backend=ray_job",
            "cluster.ray_address=http://head.invalid:8265",
            "--skip-doctor",
            f"hydra.run.dir={run_dir}",
            *extra,
        ]
    )
    assert rc == 0
    return run_dir


def _watch(run_dir, *flags):
    from topl.launcher.cli import main

    return main(["watch", str(run_dir), "--interval", "0.01", *flags])


def test_a_submitted_ray_job_is_followed_to_its_end_through_the_job_api(
    tmp_path, fake_ray, capsys, monkeypatch
):
    run_dir = _launch_ray(tmp_path, "alignment=off")
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "submitted"  # handed to Ray: not "succeeded" before it ran
    assert not (run_dir / "verl.log").exists()
    assert f"topl watch {run_dir}" in capsys.readouterr().out  # launch says how to follow it
    assert _watch(run_dir) == 0
    out = capsys.readouterr().out
    assert out.index("ray job raysubmit_fake1: RUNNING") < out.index("SUCCEEDED")  # states shown
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0].isdigit()]
    # every step, each once, the one cut across two reads included, read while the job ran
    assert [(r[0], r[4]) for r in rows] == [("1", "0.1"), ("2", "0.2"), ("3", "0.3")]
    assert "run succeeded: exit_code 0, ray_status SUCCEEDED" in out
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["ray_status"], status["exit_code"]) == (
        "succeeded",
        "SUCCEEDED",
        0,
    )
    assert status["recorded_by"] == "topl watch" and status["backend"] == "ray_job"

    def head_gone(self, *a, **k):
        raise ConnectionError("no head")

    monkeypatch.setattr(FakeJobs, "__init__", head_gone)  # an ended run needs no head
    assert _watch(run_dir, "--once") == 0 and "run succeeded" in capsys.readouterr().out


def test_launch_watch_on_a_ray_job_follows_it(tmp_path, fake_ray, capfd):
    run_dir = _launch_ray(tmp_path, "alignment=off", "--watch")
    out = capfd.readouterr().out  # the watcher thread writes to the process's stdout
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [r[0] for r in rows] == ["1", "2", "3"]  # --watch implied --follow: the log was read
    assert json.loads((run_dir / "status.json").read_text())["state"] == "succeeded"


def test_a_failed_ray_job_is_reported_and_recorded_failed(tmp_path, fake_ray, capsys, monkeypatch):
    run_dir = _launch_ray(tmp_path, "alignment=off")
    monkeypatch.setattr(FakeJobs, "END", "FAILED")
    monkeypatch.setattr(FakeJobs, "EXIT", 3)
    secret = "hf_" + "abcdefghijklmnopqrstuvwxyz0123"  # Ray's message quotes the job's last lines
    monkeypatch.setattr(FakeJobs, "MESSAGE", f"Job entrypoint failed with exit code 3: {secret}")
    capsys.readouterr()
    assert _watch(run_dir, "--json") == 1
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "failed" and out["steps"] == 3 and not out["stopped"]
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["ray_status"], status["exit_code"]) == ("failed", "FAILED", 3)
    assert "exit code 3" in status["ray_message"] and secret not in status["ray_message"]


def test_a_strict_watch_stops_a_ray_job_through_the_api(tmp_path, fake_ray, capsys, monkeypatch):
    run_dir = _launch_ray(tmp_path, "collective=hccl_strict")
    off = [*RAY_LOG[:2], "step:3 - training/rollout_probs_diff_max:0.002\n", "step:4 - x:1\n"]
    monkeypatch.setattr(FakeJobs, "CHUNKS", off)
    capsys.readouterr()
    assert _watch(run_dir) == 1
    out = capsys.readouterr().out
    assert "STOP step 3: training/rollout_probs_diff_max = 0.002" in out
    assert [ln.split()[0] for ln in out.splitlines() if ln[:5].strip().isdigit()] == ["1", "2", "3"]
    assert any(c.stopped for c in FakeJobs.instances)  # Ray was asked to stop the job
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed" and status["stopped_by"] == "topl watch"
    assert status["stop"] == "ray job raysubmit_fake1 stopped"


RAY_JOB = """
import time
for step in (1, 2, 3):
    print(f"step:{step} - training/rollout_probs_diff_max:0.0 - critic/rewards/mean:{step / 10}",
          flush=True)
    time.sleep(1.0)
"""


def test_watch_follows_a_real_ray_job_to_its_end(tmp_path, ray_head):
    """The same path on a real (loopback) Ray head: submitted without --follow, then watched."""
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + 120
    while True:  # the head answers before its job agent does ("No available agent", HTTP 500)
        try:
            JobSubmissionClient(ray_head).submit_job(entrypoint="true")
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                pytest.skip("the local Ray head's job agent did not come up")
            time.sleep(1)
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text(RAY_JOB)
    r = run_topl(
        "launch",
        "cluster.backend=ray_job",
        f"cluster.ray_address={ray_head}",
        "--skip-doctor",
        "alignment=off",
        "algorithm.entrypoint=fake_verl",
        f"cluster.python={sys.executable}",
        f"+cluster.env.PYTHONPATH={pkg}",
        cwd=tmp_path,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = next((tmp_path / "runs").glob("*"))
    assert json.loads((run_dir / "status.json").read_text())["state"] == "submitted"
    w = run_topl("watch", str(run_dir), "--interval", "0.3", timeout=240)
    assert w.returncode == 0, w.stdout + w.stderr
    rows = [ln.split() for ln in w.stdout.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [(row[0], row[4]) for row in rows] == [("1", "0.1"), ("2", "0.2"), ("3", "0.3")]
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["ray_status"], status["exit_code"]) == (
        "succeeded",
        "SUCCEEDED",
        0,
    )


def test_watching_a_ray_job_without_ray_is_one_message(tmp_path, fake_ray, capsys, monkeypatch):
    run_dir = _launch_ray(tmp_path, "alignment=off")
    monkeypatch.setitem(sys.modules, "ray.job_submission", None)  # `import` raises ImportError
    capsys.readouterr()
    assert _watch(run_dir) == 2
    err = capsys.readouterr().err
    assert "needs Ray" in err and "raysubmit_fake1" in err and "Traceback" not in err
