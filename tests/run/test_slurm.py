"""The slurm backend without a Slurm: the sbatch script topl writes, and Slurm's commands as fakes on
PATH (what they are asked, what their answers become). tests/run/test_slurm_real.py runs the same
backend on a real one-node Slurm."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import run_topl_inproc

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job
from topl.launcher.render.invocation import render
from topl.launcher.run import rundir, watch
from topl.launcher.run.backends import slurm, slurm_client
from topl.launcher.run.backends.slurm_script import script
from topl.launcher.run.watch_slurm import SlurmJob
from topl.launcher.spec import backend_traits

BASE = ["cluster.backend=slurm", "cluster.slurm.partition=debug", "cluster.slurm.time_min=5"]
EMBEDDED = [*BASE, "cluster.slurm.run=embedded", "train.steps=1"]
VERL = ["recipe=qwen3_30b_a3b_grpo_a3_strict", "cluster=slurm_a3", "cluster.nodes=2", *BASE[1:]]

FAKES = {
    # each fake answers from a file in $FAKE_SLURM (absent: exit 1, as Slurm for an unknown job)
    "sbatch": 'echo "$@" > "$FAKE_SLURM/sbatch.args"; env > "$FAKE_SLURM/sbatch.env"; echo 42',
    "squeue": 'cat "$FAKE_SLURM/squeue" 2>/dev/null || exit 1',
    "scontrol": 'cat "$FAKE_SLURM/scontrol" 2>/dev/null || exit 1',
    "sacct": 'cat "$FAKE_SLURM/sacct" 2>/dev/null || { echo "Slurm accounting storage is '
    'disabled" >&2; exit 1; }',
    "scancel": 'echo "$@" >> "$FAKE_SLURM/scancel.log"; rm -f "$FAKE_SLURM/squeue"; '
    'echo "JobId=$1 JobState=CANCELLED Reason=None ExitCode=0:15" > "$FAKE_SLURM/scontrol"',
    "sinfo": "echo debug",
}


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """Slurm's commands as small scripts first on PATH; their state is files in the folder."""
    bin_, state = tmp_path / "fakebin", tmp_path / "fakestate"
    bin_.mkdir(), state.mkdir()
    for name, body in FAKES.items():
        (bin_ / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(state))
    return state


def _spec(overrides, environ=None):
    spec = compose_job(overrides).to_object()
    return spec, render(spec, {"HOME": "/home/u", **(environ or {})})


def test_verl_script_allocates_starts_ray_on_every_node_and_runs_the_command_there(tmp_path):
    spec, inv = _spec(
        [*VERL, "cluster.slurm.account=proj", "cluster.slurm.qos=high", "+cluster.env.HF_TOKEN=x1"]
    )
    text = script(spec, inv, tmp_path)
    head = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert head == [
        "#SBATCH --job-name=topl-qwen3_30b_a3b_grpo_a3_strict",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --partition=debug",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --time=5",
        "#SBATCH --gres=npu:16",
        f"#SBATCH --output={tmp_path}/slurm-%j.out",
    ]
    assert "ray-start --head" in text and 'ray-start --worker "$RAY_ADDRESS"' in text
    assert 'ray-ready "$RAY_ADDRESS" "$SLURM_JOB_NUM_NODES" 300' in text
    assert "-m verl.trainer.main_ppo" in text and "trainer.nnodes=2" in text
    assert "HF_TOKEN" in text and "x1" not in text  # a secret by name only: sbatch's env has it
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_embedded_script_runs_the_reference_engines_without_ray(tmp_path):
    spec, inv = _spec(
        [*EMBEDDED, "cluster.slurm.doctor=false", "cluster.slurm.sbatch=['--mem=1G']"]
    )
    text = script(spec, inv, tmp_path)
    assert "#SBATCH --mem=1G" in text and "slurm_node embedded" in text
    assert "ray" not in text.lower().replace("array", "") and "doctor" not in text
    assert not backend_traits.of(spec).remote  # the contract treats it as the local engines


def test_a_value_that_would_start_a_script_line_is_refused_by_the_contract_and_the_script(
    tmp_path,
):
    from topl.launcher.contract import check

    bad = [*EMBEDDED, "cluster.slurm.partition='debug\nrm -rf ~'"]
    assert "TOP-SLURM-004" in {v.rule for v in check(compose_job(bad))}
    spec, inv = _spec(EMBEDDED)
    spec.cluster.slurm.sbatch = ["--mem=1G\ntouch /tmp/pwned"]  # past the contract: still refused
    with pytest.raises(ToplError, match="one sbatch option per line"):
        script(spec, inv, tmp_path)


def test_a_run_dir_an_sbatch_line_cannot_carry_is_refused(tmp_path):
    spec, inv = _spec(EMBEDDED)
    with pytest.raises(ToplError, match="run_root"):
        script(spec, inv, tmp_path / "with space")


def test_submit_writes_script_and_job_id_and_hands_secrets_by_environment(tmp_path, fake_slurm):
    spec, inv = _spec([*EMBEDDED, "+cluster.env.WANDB_API_KEY=k-secret-1234"])
    assert slurm.submit(spec, inv, tmp_path) == "42"
    assert (tmp_path / "slurm_job_id").read_text() == "42\n"
    assert (fake_slurm / "sbatch.args").read_text().split() == [
        "--parsable",
        str(tmp_path / "slurm.sbatch"),
    ]
    assert "WANDB_API_KEY=k-secret-1234" in (fake_slurm / "sbatch.env").read_text()
    assert "k-secret-1234" not in (tmp_path / "slurm.sbatch").read_text()


@pytest.mark.parametrize(
    "files, want",
    [
        ({"squeue": "PENDING|Resources"}, ("PENDING", False, None, "Resources")),
        ({"squeue": "RUNNING|None"}, ("RUNNING", False, None, "")),
        (
            {"squeue": "COMPLETED|None", "scontrol": "JobId=42 JobState=COMPLETED ExitCode=0:0"},
            ("COMPLETED", True, 0, ""),
        ),
        (
            {"scontrol": "JobId=42 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0"},
            ("FAILED", True, 3, "NonZeroExitCode"),
        ),
        ({"scontrol": "JobId=42 JobState=CANCELLED ExitCode=0:15"}, ("CANCELLED", True, 143, "")),
        ({"sacct": "TIMEOUT|0:0"}, ("TIMEOUT", True, 0, "")),  # the controller forgot: accounting
        ({"slurm_exit": "7"}, ("UNKNOWN", True, 7, "")),  # neither: the script's own exit file
        (  # an exit file that is not ASCII digits is no exit code ("²".isdigit() is True)
            {"slurm_exit": "²"},
            ("UNKNOWN", True, None, "Slurm no longer knows the job and it left no exit code"),
        ),
    ],
)
def test_state_asks_the_controller_then_accounting_then_the_exit_file(
    tmp_path, fake_slurm, files, want
):
    for name, text in files.items():
        (tmp_path if name == "slurm_exit" else fake_slurm).joinpath(name).write_text(text + "\n")
    st = slurm_client.state("42", tmp_path)
    assert (st.slurm, st.ended, st.exit_code, st.reason) == want
    if st.ended:
        assert st.status == {"COMPLETED": "succeeded", "CANCELLED": "interrupted"}.get(
            st.slurm, "failed"
        )


def test_follow_cancels_the_job_when_topl_is_interrupted(tmp_path, fake_slurm, monkeypatch):
    (fake_slurm / "squeue").write_text("RUNNING|None\n")

    def ctrl_c(_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(slurm.time, "sleep", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        slurm.follow_job("42", tmp_path)
    assert (fake_slurm / "scancel.log").read_text().split() == ["42"]


def _submitted_run(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "topl.json").write_text("{}")
    (run / "slurm_job_id").write_text("42\n")
    (run / "spec.yaml").write_text("alignment: {mode: strict}\ncluster: {backend: slurm}\n")
    rundir.set_status(run, "submitted", backend="slurm")
    return run


def test_watch_records_the_end_slurm_reports(tmp_path, fake_slurm):
    run = _submitted_run(tmp_path)
    (fake_slurm / "squeue").write_text("RUNNING|None\n")
    w = watch.Watcher(run, strict=True, slurm=SlurmJob("42", run))
    assert not w.ended() and w.poll() == [("note", "slurm job 42: RUNNING")]
    (fake_slurm / "squeue").unlink()
    (fake_slurm / "scontrol").write_text("JobId=42 JobState=FAILED ExitCode=2:0\n")
    assert w.ended()
    st = json.loads((run / "status.json").read_text())
    assert (st["state"], st["exit_code"], st["slurm_state"]) == ("failed", 2, "FAILED")


def test_watch_stop_cancels_the_slurm_job_and_records_interrupted(tmp_path, fake_slurm):
    run = _submitted_run(tmp_path)
    (fake_slurm / "squeue").write_text("RUNNING|None\n")
    r = run_topl_inproc("watch", str(run), "--stop", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "interrupted"
    assert (fake_slurm / "scancel.log").read_text().split() == ["42"]


def test_preflight_without_slurm_says_where_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    spec, _ = _spec(EMBEDDED)
    with pytest.raises(ToplError, match="login node"):
        slurm.BACKEND.preflight(spec)


@pytest.mark.parametrize(
    "bad, rule",
    [
        (["cluster.nodes=2", "cluster.devices_per_node=4"], "TOP-SLURM-003"),  # 7 idle devices
        (["cluster.slurm.time_min=null"], "TOP-SLURM-002"),
        (["cluster.slurm.partition=null"], "TOP-SLURM-001"),
    ],
)
def test_check_refuses_a_bad_allocation_with_its_rule(bad, rule):
    r = run_topl_inproc("check", *EMBEDDED, *bad, "--json")
    got = json.loads(r.stdout)
    assert r.returncode == 2 and [v["rule"] for v in got["violations"]] == [rule], r.stdout
