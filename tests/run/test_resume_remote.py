"""`topl launch --resume` on a remote backend, end to end on a real (loopback) Ray head: a job
that crashed after saving a checkpoint is submitted again from the run's own config, in the same
run directory, with verl's trainer.resume_mode=auto; the attempt before is kept, and `topl watch`
and `topl runs` report the new attempt. The Slurm side is tests/run/test_slurm_real.py's (it
shares that module's one-node Slurm).

The job is a stand-in for verl's trainer that does what its resume does with these keys
(verl@0.9.1:verl/trainer/ppo/ray_trainer.py:RayPPOTrainer._load_checkpoint: resume_mode=auto
loads the latest global_step_N under trainer.default_local_dir, relative to the driver's working
directory, else trains from scratch)."""

import json
import sys
import time

import pytest
from helpers import run_topl_inproc
from test_watch import FakeJobs, fake_ray  # noqa: F401  -- the fake head's fixture

# The stand-in trainer: the first attempt logs steps 1-2, saves global_step_2 and crashes; an
# attempt told resume_mode=auto that finds it logs steps 3-4 and succeeds. It reports what it saw.
FAKE_VERL = """
import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
ckpt = args.get("trainer.default_local_dir") or os.path.join(
    "checkpoints", args["trainer.project_name"], args["trainer.experiment_name"])
auto = args.get("trainer.resume_mode") == "auto"
found = sorted(os.listdir(ckpt)) if auto and os.path.isdir(ckpt) else []
print("FAKE-VERL " + json.dumps({"cwd": os.getcwd(), "resume": auto, "found": found}), flush=True)
first = 1 + (int(found[-1].rsplit("_", 1)[1]) if found else 0)
for step in (first, first + 1):
    print(f"step:{step} - training/rollout_probs_diff_max:0.0 - critic/rewards/mean:{step / 10}",
          flush=True)
if not found:
    os.makedirs(os.path.join(ckpt, "global_step_2"))
    sys.exit("crashed after saving global_step_2")
"""


def fake_verl(tmp_path):
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text(FAKE_VERL)
    return ["algorithm.entrypoint=fake_verl", f"+cluster.env.PYTHONPATH={pkg}"]


def reported(log: str) -> dict:
    line = next(x for x in log.splitlines() if "FAKE-VERL " in x)
    return json.loads(line.split("FAKE-VERL ", 1)[1])


def watched(run, env=None) -> tuple[int, dict]:
    w = run_topl_inproc("watch", str(run), "--json", "--interval", "0.3", env=env)
    return w.returncode, json.loads(w.stdout)


def test_a_crashed_ray_job_resumes_in_its_run_dir_and_watch_follows_the_new_attempt(
    tmp_path, ray_head
):
    from ray.job_submission import JobSubmissionClient

    args = ["cluster.backend=ray_job", f"cluster.ray_address={ray_head}", "alignment=off"]
    args += [f"cluster.python={sys.executable}", "--skip-doctor", *fake_verl(tmp_path)]
    r = run_topl_inproc("launch", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (tmp_path / "runs").iterdir()
    first = (run / "ray_job_id").read_text().strip()
    client = JobSubmissionClient(ray_head)
    deadline = time.monotonic() + 120
    while not client.get_job_status(first).is_terminal():  # nobody watches it: it ends unseen
        assert time.monotonic() < deadline, "the first job never ended"
        time.sleep(0.3)
    assert json.loads((run / "status.json").read_text())["state"] == "submitted"
    command = (run / "command.sh").read_text()

    r = run_topl_inproc("launch", "--resume", str(run), "--skip-doctor", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    second = (run / "ray_job_id").read_text().strip()
    assert second != first and "trainer.resume_mode=auto" in (run / "command.sh").read_text()
    st = json.loads((run / "status.json").read_text())
    assert (st["state"], st["attempt"], st["backend"]) == ("submitted", 2, "ray_job")
    before = run / "attempts" / "1"  # the attempt before, whole
    assert (before / "ray_job_id").read_text().strip() == first
    assert (before / "command.sh").read_text() == command
    # --resume asked Ray how the first job ended and recorded it, as `topl watch` would have
    was = json.loads((before / "status.json").read_text())
    assert (was["state"], was["ray_status"], was["exit_code"]) == ("failed", "FAILED", 1)

    rc, out = watched(run)
    assert (rc, out["state"], out["status"]["attempt"]) == (0, "succeeded", 2), out
    # the new job's steps, from its checkpoint on (step 3, 4), read from Ray
    assert (out["steps"], out["last"]["critic/rewards/mean"]) == (2, 0.4)
    assert "trainer.resume_mode=auto" in client.get_job_info(second).entrypoint
    was, now = reported(client.get_job_logs(first)), reported(client.get_job_logs(second))
    # verl's relative checkpoint dir is the driver's: every job of one head starts in the same
    # directory (the head's), so the resumed job finds what the first one saved
    assert now == {"cwd": was["cwd"], "resume": True, "found": ["global_step_2"]}
    runs = json.loads(run_topl_inproc("runs", str(tmp_path / "runs"), "--json").stdout)
    assert [(x["state"], x["attempt"]) for x in runs["runs"]] == [("succeeded", 2)]


@pytest.mark.usefixtures("fake_ray")
def test_a_submitted_job_is_asked_how_it_ended_before_it_is_resumed(tmp_path, monkeypatch):
    """On the fake head (tests/run/test_watch.py:FakeJobs, the Job API's signatures): a job
    handed to Ray that nobody watched is asked for its state when --resume comes; still running,
    refused (a second job would write the same checkpoints); ended, its end is recorded in the
    attempt kept and the run resumed."""
    run = tmp_path / "run"
    args = ["cluster.backend=ray_job", "cluster.ray_address=http://head.invalid:8265"]
    r = run_topl_inproc("launch", *args, "alignment=off", "--skip-doctor", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    r = run_topl_inproc("launch", "--resume", str(run), "--skip-doctor")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "its job is still running (ray job raysubmit_fake1: RUNNING)" in r.stderr
    assert not (run / "attempts").exists() and "resume_mode" not in (run / "command.sh").read_text()
    for key, value in (("CHUNKS", []), ("END", "FAILED"), ("EXIT", 1)):  # the job has crashed
        monkeypatch.setattr(FakeJobs, key, value)
    r = run_topl_inproc("launch", "--resume", str(run), "--skip-doctor")
    assert r.returncode == 0, r.stderr
    was = json.loads((run / "attempts" / "1" / "status.json").read_text())
    assert (was["state"], was["ray_status"], was["recorded_by"]) == (
        "failed",
        "FAILED",
        "topl watch",
    )
    st = json.loads((run / "status.json").read_text())
    assert (st["state"], st["attempt"]) == ("submitted", 2)
    assert "trainer.resume_mode=auto" in (run / "command.sh").read_text()
