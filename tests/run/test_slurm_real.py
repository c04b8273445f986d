"""cluster.backend=slurm on a real one-node Slurm (tests/run/slurm_cluster.py: munged, slurmctld,
slurmd; .ci/run installs Debian's slurm-wlm and munge). There is no verl cluster here: the end to
end job runs topl's embedded default (cluster.slurm.run=embedded: the reference engines on the
allocation's node, after topl's doctor there), and the verl path runs the real sbatch script —
Ray's head started inside the allocation, the wait for its nodes, the rendered verl command with
RAY_ADDRESS — with cluster.python a wrapper that answers verl's entrypoint by joining that Ray and
reporting what it found (everything else goes to this interpreter)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import slurm_cluster
from helpers import run_topl, run_topl_inproc
from test_resume_remote import fake_verl, reported, watched

pytestmark = pytest.mark.slow

BASE = ["cluster.backend=slurm", "cluster.slurm.partition=debug", "cluster.slurm.time_min=5"]
EMB = [*BASE, "cluster.slurm.run=embedded", f"cluster.python={sys.executable}"]
STUB = """#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "verl.trainer.main_ppo" ]; then
  exec {py} -c 'import json, os, sys, ray
ray.init(logging_level="ERROR")  # as verl does: no address, RAY_ADDRESS names the cluster
alive = sum(n["Alive"] for n in ray.nodes())
print("VERL-STUB " + json.dumps({{"nodes": alive, "ray_address": os.environ["RAY_ADDRESS"],
      "argv": sys.argv[1:]}}), flush=True)' "${{@:3}}"
fi
exec {py} "$@"
"""


@pytest.fixture(scope="module")
def cluster():
    try:
        c = slurm_cluster.start()
    except slurm_cluster.Unavailable as e:
        if os.environ.get("TOPL_SLURM_REQUIRED") == "1":  # .ci/run installed Slurm: it must run
            pytest.fail(f"the test Slurm did not start: {e}")
        pytest.skip(f"no Slurm here: {e}")
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def empty_queue(cluster):
    yield
    cluster.run("scancel", "--user=root")  # a test's leftovers never hold the next one's node


def _launch(cluster, tmp_path, *args):
    r = run_topl("launch", *args, cwd=tmp_path, env=cluster.env)
    m = re.search(r"run directory (\S+)", r.stdout)
    return r, (tmp_path / m.group(1) if m else None)


def _jobs(cluster) -> set[str]:
    return set(cluster.run("squeue", "-h", "--states=all", "-o", "%i").split())


def _wait_running(cluster, job_id: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while cluster.run("squeue", "-h", "-j", job_id, "-o", "%T").strip() != "RUNNING":
        assert time.monotonic() < deadline, f"job {job_id} never ran"
        time.sleep(0.3)


def test_embedded_default_runs_in_an_allocation_and_watch_follows_it_to_the_end(cluster, tmp_path):
    r, run = _launch(cluster, tmp_path, *EMB, "train.steps=1", "local.plot=false")
    assert r.returncode == 0, r.stderr
    assert "submitted Slurm job" in r.stdout and "topl watch" in r.stdout
    w = run_topl("watch", str(run), "--json", "--interval", "0.5", env=cluster.env)
    assert w.returncode == 0, w.stderr
    out = json.loads(w.stdout)
    assert (out["state"], out["steps"]) == ("succeeded", 1)
    assert out["last"]["topl/max_abs_logprob_diff"] == 0.0  # the embedded default's metrics
    st = out["status"]
    assert (st["exit_code"], st["slurm_state"], st["backend"]) == (0, "COMPLETED", "slurm")
    assert (run / "slurm_exit").read_text().strip() == "0"
    job = (run / "slurm_job_id").read_text().strip()
    assert (run / f"slurm-{job}.out").is_file() and (run / "slurm.sbatch").is_file()
    (report,) = [json.loads(p.read_text()) for p in (run / "doctor").glob("*.json")]
    assert report["findings"] and all(f["severity"] != "error" for f in report["findings"])


def test_verl_command_runs_on_ray_started_inside_the_allocation(cluster, tmp_path):
    stub = tmp_path / "python"
    stub.write_text(STUB.format(py=sys.executable))
    stub.chmod(0o755)
    args = [*BASE, "cluster.device=cpu", "train.steps=1", f"cluster.python={stub}"]
    r, run = _launch(
        cluster, tmp_path, *args, "cluster.slurm.doctor=false", "--follow", "--skip-doctor"
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    assert "Ray ready at" in r.stdout  # every node of the allocation joined the head
    line = next(x for x in (run / "verl.log").read_text().splitlines() if "VERL-STUB" in x)
    got = json.loads(line.split("VERL-STUB ", 1)[1])
    assert got["nodes"] == 1 and re.match(r"^[\d.]+:\d+$", got["ray_address"])
    assert "--config-name=ppo_trainer" in got["argv"] and "trainer.nnodes=1" in got["argv"]
    assert json.loads((run / "status.json").read_text())["state"] == "succeeded"


def test_watch_stop_and_ctrl_c_cancel_the_job_which_ends_interrupted(cluster, tmp_path):
    r, run = _launch(cluster, tmp_path, *EMB, "train.steps=500", "cluster.slurm.doctor=false")
    assert r.returncode == 0, r.stderr
    job = (run / "slurm_job_id").read_text().strip()
    _wait_running(cluster, job)
    s = run_topl("watch", str(run), "--stop", "--json", env=cluster.env)
    assert s.returncode == 0, s.stderr
    assert json.loads(s.stdout)["state"] == "interrupted"
    st = json.loads((run / "status.json").read_text())
    assert st["slurm_state"] == "CANCELLED" and "scancel" in json.loads(s.stdout)["stop"]
    # Ctrl-C on a followed launch: topl cancels its job before it exits
    env = {**cluster.env, "PYTHONSAFEPATH": "1"}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "topl.launcher.cli",
            "launch",
            *EMB,
            "train.steps=500",
            "cluster.slurm.doctor=false",
            "--follow",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    for line in p.stdout:
        seen.append(line)
        if ": RUNNING" in line:
            p.send_signal(signal.SIGINT)
            break
    rest, _ = p.communicate(timeout=60)
    text = "".join(seen) + rest
    assert p.returncode == 128 + signal.SIGINT and "cancelled Slurm job" in text, text[-2000:]
    run2 = tmp_path / re.search(r"run directory (\S+)", text).group(1)
    job2 = (run2 / "slurm_job_id").read_text().strip()
    assert json.loads((run2 / "status.json").read_text())["state"] == "interrupted"
    # Slurm's side: cancelled, or already gone; COMPLETING (its epilog) may come first
    deadline, st = time.monotonic() + 30, "?"
    while time.monotonic() < deadline:
        st = cluster.run("squeue", "-h", "-j", job2, "-o", "%T").strip()
        if st in ("CANCELLED", ""):
            break
        time.sleep(0.5)
    assert st in ("CANCELLED", ""), st


def test_sweep_submits_each_valid_point_as_one_job_and_never_queues_the_invalid(cluster, tmp_path):
    before = _jobs(cluster)
    r = run_topl(
        "launch",
        "-m",
        *EMB,
        "train.steps=1",
        "cluster.slurm.doctor=false",
        "cluster.slurm.time_min=1,2,3,0",
        cwd=tmp_path,
        env=cluster.env,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    new = _jobs(cluster) - before
    (sweep,) = tmp_path.glob("runs/multirun/*")
    ids = {p.parent.name: p.read_text().strip() for p in sweep.glob("*/slurm_job_id")}
    assert len(new) == 3 and set(ids.values()) == new  # one Slurm job per valid point
    report = json.loads((sweep / "sweep_report.json").read_text())
    dropped = [v for v in report["verdicts"] if not v["valid"]]
    assert [v["rules"] for v in dropped] == [["TOP-SPEC-001"]]  # time_min=0, never queued
    # scontrol, not squeue: a 1-step job may have left the queue already (MinJobAge keeps it here)
    shown = [cluster.run("scontrol", "show", "job", "-o", j) for j in new]
    limits = {m.group(1) for s in shown if (m := re.search(r"\bTimeLimit=(\S+)", s))}
    assert limits == {"00:01:00", "00:02:00", "00:03:00"}  # each job carries its own point's limit


def test_contract_refuses_an_impossible_allocation_before_the_queue(cluster, tmp_path):
    before = _jobs(cluster)
    too_big = [*EMB, "cluster.nodes=2", "cluster.devices_per_node=4"]  # 7 devices never used
    no_time = [*EMB, "cluster.slurm.time_min=null"]  # the partition would refuse or hold it
    for bad, rule in ((too_big, "TOP-SLURM-003"), (no_time, "TOP-SLURM-002")):
        c = run_topl_inproc("check", *bad, "--json", env=cluster.env)
        got = json.loads(c.stdout)
        assert c.returncode == 2 and not got["ok"], c.stdout[-2000:]
        assert [v["rule"] for v in got["violations"] if v["severity"] == "error"] == [rule]
        r = run_topl_inproc("launch", *bad, f"run_root={tmp_path}", env=cluster.env)
        assert r.returncode == 2 and rule in r.stderr and not any(tmp_path.iterdir())
    assert _jobs(cluster) == before


def test_an_interrupted_verl_job_resumes_from_another_directory_and_finds_its_checkpoints(
    cluster, tmp_path
):
    """`topl launch --resume` on Slurm (tests/run/test_resume_remote.py's stand-in trainer; the
    Ray test there has a first attempt save and crash): a job stopped by `topl watch --stop`
    (scancel) is submitted again from its run dir, and runs where sbatch is called now, so
    verl's relative checkpoint dir is pinned to where the first attempt ran; watch follows the
    new job, the attempt before is kept whole."""
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir(), second_dir.mkdir()
    args = [*BASE, "cluster.device=cpu", "train.steps=1", f"cluster.python={sys.executable}"]
    args += ["cluster.slurm.doctor=false", "--skip-doctor", *fake_verl(tmp_path)]
    r = run_topl_inproc("launch", *args, cwd=first_dir, env=cluster.env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    (run,) = (first_dir / "runs").iterdir()
    job = (run / "slurm_job_id").read_text().strip()
    _wait_running(cluster, job)
    s = run_topl_inproc("watch", str(run), "--stop", "--json", env=cluster.env)
    assert json.loads(s.stdout)["state"] == "interrupted", s.stdout + s.stderr
    # what the first attempt's verl saved, in its driver's directory (sbatch's: first_dir)
    argv = dict(a.split("=", 1) for a in (run / "command.sh").read_text().split() if "=" in a)
    name = (argv["trainer.project_name"], argv["trainer.experiment_name"])
    (first_dir / "checkpoints" / name[0] / name[1] / "global_step_2").mkdir(parents=True)

    resume = ("launch", "--resume", str(run), "--skip-doctor")
    r = run_topl_inproc(*resume, cwd=second_dir, env=cluster.env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert json.loads((run / "status.json").read_text())["attempt"] == 2
    rc, out = watched(run, cluster.env)
    assert (rc, out["state"], out["status"]["slurm_state"]) == (0, "succeeded", "COMPLETED"), out
    assert (out["steps"], out["last"]["critic/rewards/mean"]) == (2, 0.4)  # steps 3 and 4
    assert out["status"]["attempt"] == 2
    now = reported((run / "verl.log").read_text())
    assert now == {"cwd": str(second_dir), "resume": True, "found": ["global_step_2"]}
    before = run / "attempts" / "1"
    assert (before / "slurm_job_id").read_text().strip() == job
    assert (before / f"slurm-{job}.out").is_file() and (before / "slurm.sbatch").is_file()
    assert json.loads((before / "status.json").read_text())["slurm_state"] == "CANCELLED"
    assert (run / "slurm_job_id").read_text().strip() != job
