"""`topl launch`: run directory, subprocess backend (a real child), Ray job backend (a real head)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_topl, run_topl_inproc

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job

FAKE_VERL = """
import json, os, sys, time
print("fake verl argv", json.dumps(sys.argv[1:]))
print("HCCL_DETERMINISTIC=" + os.environ.get("HCCL_DETERMINISTIC", "-"))
print("secret", os.environ.get("MY_API_KEY", "-"))
if os.environ.get("FAKE_SLEEP"):
    open(os.environ["FAKE_PIDFILE"], "w").write(str(os.getpid()))
    time.sleep(120)
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def fake_entry(tmp_path):
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text(FAKE_VERL)
    return pkg


def sub_args(fake_entry, *extra):
    """A subprocess-backend launch of the fake entrypoint. --skip-doctor: the doctor's `import
    verl` child (~5.5 s) is not what these tests are about; a launch that runs the doctor first
    (and refuses on its errors) is test_doctor.py's and test_secrets.py's."""
    return [
        "--skip-doctor",
        "cluster.backend=subprocess",
        "algorithm.entrypoint=fake_verl",
        f"cluster.python={sys.executable}",
        "collective=hccl_strict",
        f"+cluster.env.PYTHONPATH={fake_entry}",
        *extra,
    ]


def only_run_dir(root: Path) -> Path:
    dirs = [d for d in (root / "runs").iterdir() if d.is_dir() and d.name != "multirun"]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_dry_run_writes_a_complete_run_dir(tmp_path):
    r = run_topl("launch", "--dry-run", cwd=tmp_path, env={"MY_API_KEY": "s3cret"})
    assert r.returncode == 0, r.stderr
    d = only_run_dir(tmp_path)
    meta = json.loads((d / "topl.json").read_text())
    assert (
        meta["topl_version"]
        and meta["packages"]["torch"]
        and meta["choices"]["model"] == "tiny_dense"
    )
    env = json.loads((d / "env.json").read_text())
    assert env["launching_process"]["MY_API_KEY"] == "<redacted>"
    assert "verl.trainer.main_ppo" in (d / "command.sh").read_text()
    assert (d / ".hydra" / "config.yaml").exists() and (d / "spec.yaml").exists()
    assert (
        json.loads((d / "sources.json").read_text())["model.name"] == "conf/model/tiny_dense.yaml"
    )


def test_run_dir_is_never_reused(tmp_path):
    fixed = f"hydra.run.dir={tmp_path}/fixed"
    assert run_topl("launch", "--dry-run", fixed, cwd=tmp_path).returncode == 0
    r = run_topl("launch", "--dry-run", fixed, cwd=tmp_path)
    assert r.returncode != 0 and "refusing to overwrite" in r.stderr


def test_rejected_spec_starts_nothing(tmp_path):
    r = run_topl("launch", "alignment.batch_invariant=false", cwd=tmp_path)
    assert r.returncode == 2 and "TOP-ALN-001" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_subprocess_backend_streams_logs_env_and_exit_code(tmp_path, fake_entry):
    r = run_topl("launch", *sub_args(fake_entry), cwd=tmp_path, env={"FAKE_RC": "3"})
    assert r.returncode == 3, r.stderr
    assert "fake verl argv" in r.stdout and "HCCL_DETERMINISTIC=strict" in r.stdout
    log = (only_run_dir(tmp_path) / "verl.log").read_text()
    assert "HCCL_DETERMINISTIC=strict" in log and "--config-name=ppo_trainer" in log


@pytest.mark.parametrize("python", ["/nonexistent/python3", "", "not_executable"])
def test_a_python_that_cannot_run_is_one_message(tmp_path, fake_entry, python):
    """It was Popen's traceback under --skip-doctor (issue 48); '' passed the doctor as ours."""
    if python == "not_executable":
        (tmp_path / python).write_text("#!/bin/sh\n")  # mode 0644: not runnable, even by root
        python = str(tmp_path / python)
    args = [*sub_args(fake_entry), f"cluster.python={python}", "--skip-deep"]
    r = run_topl_inproc("launch", *args, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "cannot be run here" in r.stderr and "where: cluster.python" in r.stderr
    assert not (tmp_path / "runs").exists()  # refused before a run directory


def test_a_python_gone_after_the_check_is_one_message(tmp_path):
    from topl.launcher.render.invocation import render
    from topl.launcher.run.backends.subprocess import run_subprocess

    inv = render(compose_job([]).to_object())
    with pytest.raises(ToplError, match="cannot be run here: No such file"):
        run_subprocess(inv, tmp_path, str(tmp_path / "gone" / "python3"))


def test_ctrl_c_stops_the_child_process_group(tmp_path, fake_entry):
    """Deterministic: topl installs its SIGINT/SIGTERM handlers before the child exists (the child's
    pid file therefore proves they are in place), the child is in its own session from exec, and a
    signal arriving while Popen returns is held until topl knows the child. The wait has no fixed
    time budget that a slow first import could exceed: it ends when topl exits or the child runs."""
    pidfile = tmp_path / "child.pid"
    p = subprocess.Popen(
        [sys.executable, "-m", "topl.launcher.cli", "launch", *sub_args(fake_entry)],
        cwd=tmp_path,
        env={**os.environ, "FAKE_SLEEP": "1", "FAKE_PIDFILE": str(pidfile)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while not (pidfile.exists() and pidfile.read_text()):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    child = int(pidfile.read_text())
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert (
        json.loads((only_run_dir(tmp_path) / "status.json").read_text())["state"] == "interrupted"
    )
    with pytest.raises(
        ProcessLookupError
    ):  # topl reaped it after stopping its group: gone, not a zombie
        os.kill(child, 0)


def test_ray_job_backend_runs_for_real(tmp_path, fake_entry, ray_head):
    r = run_topl(
        "launch",
        "cluster.backend=ray_job",
        f"cluster.ray_address={ray_head}",
        "--follow",
        "algorithm.entrypoint=fake_verl",
        "collective=hccl_strict",
        f"cluster.python={sys.executable}",
        f"+cluster.env.PYTHONPATH={fake_entry}",
        cwd=tmp_path,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted Ray job" in r.stdout
    assert (
        "HCCL_DETERMINISTIC=strict" in r.stdout
    )  # the env var reached the job through runtime_env
    d = only_run_dir(tmp_path)
    assert (d / "ray_job_id").read_text().strip()


def test_ray_submit_waits_for_a_starting_job_agent():
    """A head started seconds ago answers 'No available agent' (HTTP 500) until its job agent is
    up: the submit is retried within cluster.ray_timeout_s; any other error is raised at once."""
    from topl.launcher.run.backends.ray_client import submit_retrying

    class Client:
        def __init__(self, errors):
            self.errors, self.calls = list(errors), 0

        def submit_job(self, **job):
            self.calls += 1
            if self.errors:
                raise RuntimeError(self.errors.pop(0))
            return "raysubmit_1"

    busy = "Request failed with status code 500: No available agent to submit job, please try again later.."
    c = Client([busy, busy])
    assert submit_retrying(c, 10.0, entrypoint="x") == "raysubmit_1" and c.calls == 3
    c = Client(["Request failed with status code 400: bad runtime_env."])
    with pytest.raises(RuntimeError, match="400"):
        submit_retrying(c, 10.0, entrypoint="x")
    assert c.calls == 1
    with pytest.raises(RuntimeError, match="No available agent"):
        submit_retrying(Client([busy] * 100), 0.0, entrypoint="x")


def test_ray_follow_streams_the_log_and_redacts_whole_lines(tmp_path, capsys, monkeypatch):
    """--follow reads Ray's websocket tail (never the whole log each second); a secret cut across
    two chunks is still redacted; when the tail breaks, the rest comes from get_job_logs once."""
    from topl.launcher.base import redact
    from topl.launcher.run.backends.ray_job import LineWriter, LogStream

    monkeypatch.setattr(redact, "_current", redact.Redactor(["s3cr3t-value"]))
    log = "step:1 ok\nkey is s3cr3t-value here\nstep:2 ok\n"
    chunks = ["step:1 ok\nkey is s3cr", "3t-value here\nst", "ep:2 ok\n"]

    class Client:
        def __init__(self, fail_after=None):
            self.fail_after, self.whole_reads = fail_after, 0

        async def tail_job_logs(self, job_id):
            for i, c in enumerate(chunks):
                if i == self.fail_after:
                    raise RuntimeError("WebSocket connection closed unexpectedly")
                yield c

        def get_job_logs(self, job_id):
            self.whole_reads += 1
            return log

    for fail_after, reads in ((None, 0), (1, 1)):
        client = Client(fail_after)
        stream = LogStream(client, "raysubmit_1")
        assert stream.done.wait(10)
        with open(tmp_path / f"verl{fail_after}.log", "w") as f:
            out = LineWriter(f)
            for piece in (
                stream.take(lambda c=client: c.get_job_logs("x")),
                "tail without newline",
            ):
                out.write(piece)
            out.close()
        text = (tmp_path / f"verl{fail_after}.log").read_text()
        assert text == log.replace("s3cr3t-value", redact.REDACTED) + "tail without newline"
        assert client.whole_reads == reads
    assert "s3cr3t-value" not in capsys.readouterr().out


def test_ray_follow_writes_metrics_jsonl_from_verls_console_lines(tmp_path):
    """A Ray job's metrics.jsonl: each `step:N - k:v` line of the streamed log becomes the record
    verl's file logger writes, every digit kept (verl prints repr); other lines are not steps."""
    from topl.launcher.run import compare, watch
    from topl.launcher.run.backends.ray_job import LineWriter, MetricsFile

    metrics = MetricsFile(tmp_path / "metrics.jsonl")
    with open(tmp_path / "verl.log", "w") as f:
        out = LineWriter(f, metrics)
        out.write("(TaskRunner pid=7) step:1 - training/rollout_probs_diff_max:0.0 - critic/rew")
        out.write("ards/mean:0.123456789012 - timing_s/step:2.5\nCreating file logger at x\n")
        out.write("step:2 - training/rollout_probs_diff_max:1.2345678901234e-07\n")
        out.close()
    metrics.close()
    steps, source = compare.read_steps(tmp_path)
    assert source == "metrics.jsonl"
    assert steps == [
        (1, {watch.DIFF_MAX: 0.0, watch.REWARD: 0.123456789012, "timing_s/step": 2.5}),
        (2, {watch.DIFF_MAX: 1.2345678901234e-07}),
    ]
