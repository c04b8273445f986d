"""topl's run identity reaches the trackers verl logs to (launcher/run/identity.py): the experiment
named after the run unless the user named it, the trackers' own variables where the user set
none, through verl's real config, and into a real MLflow store written by verl's own Tracking."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import compose_verl
from omegaconf import OmegaConf

from topl.launcher.compose.hydra import compose_job
from topl.launcher.render.invocation import render
from topl.launcher.run import identity, rundir

BASE = ["cluster.backend=subprocess"]


def stamped(overrides, run_dir="/runs/multirun/20261203-1/2", point=("rollout.n=4",)):
    composed = compose_job([*BASE, *overrides])
    ident = identity.of(
        composed, Path(run_dir), rundir.spec_text(composed), None if point is None else list(point)
    )
    return identity.stamp(composed.to_object(), composed, ident), ident


def test_the_experiment_is_named_after_the_run_unless_the_user_named_it(monkeypatch):
    for k in identity.TRACKER_VARS:
        monkeypatch.delenv(k, raising=False)
    spec, ident = stamped([])
    assert spec.experiment == "tiny_dense_grpo_strict-20261203-1-2"
    env = spec.cluster.env
    assert env["WANDB_RUN_GROUP"] == "tiny_dense_grpo_strict-20261203-1"
    assert env["WANDB_TAGS"].split(",")[:2] == ["topl", "stack=release"]
    assert env["WANDB_NOTES"] == "topl run /runs/multirun/20261203-1/2; point: rollout.n=4"
    context = json.loads(env["MLFLOW_RUN_CONTEXT"])
    assert context["topl.spec_sha256"] == ident["spec_sha256"] and len(ident["spec_sha256"]) == 64
    assert context["topl.point"] == "rollout.n=4" and context["topl.stack"] == "release"
    # a single run's directory already carries the experiment: that is the name
    single, _ = stamped([], run_dir="/runs/20261203-1-tiny_dense_grpo_strict", point=None)
    assert single.experiment == "20261203-1-tiny_dense_grpo_strict"
    assert "WANDB_RUN_GROUP" not in single.cluster.env
    assert stamped(["experiment=mine"])[0].experiment == "mine"
    named = stamped(["+verl_overrides.trainer.experiment_name=theirs"])[0]
    assert named.experiment == "tiny_dense_grpo_strict"


def test_what_the_user_set_is_kept_and_secrets_never_reach_it(monkeypatch):
    monkeypatch.setenv("WANDB_TAGS", "mine")
    spec, _ = stamped(
        ["+cluster.env.MLFLOW_RUN_CONTEXT='{}'"], point=["x=sk-abcdefghijklmnopqrstuvwx"]
    )
    assert "WANDB_TAGS" not in spec.cluster.env  # the launching environment's stays in force
    assert spec.cluster.env["MLFLOW_RUN_CONTEXT"] == "{}"
    assert "sk-abcdefghijklmnopqrstuvwx" not in spec.cluster.env["WANDB_NOTES"]


def test_the_identity_reaches_verls_real_config(monkeypatch):
    """Through verl 0.9.1's own Hydra compose of the rendered command: the experiment name, and the
    variables in the runtime_env every Ray worker gets (and that verl logs as params)."""
    for k in identity.TRACKER_VARS:
        monkeypatch.delenv(k, raising=False)
    spec, ident = stamped([])
    cfg = compose_verl(render(spec))
    assert cfg.trainer.experiment_name == spec.experiment
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert json.loads(env.MLFLOW_RUN_CONTEXT)["topl.run_dir"] == ident["run_dir"]
    assert env.WANDB_TAGS == spec.cluster.env["WANDB_TAGS"]


CHILD = """
import json, sys
from verl.utils.tracking import Tracking
a = json.load(open(sys.argv[1]))
t = Tracking(a["project"], a["experiment"], default_backend=["mlflow"], config=a["config"])
t.log({"critic/rewards/mean": 0.5}, step=1)
t.finish()
"""


def test_a_real_mlflow_store_written_by_verls_tracking_shows_the_run(tmp_path, monkeypatch):
    """verl's own Tracking (mlflow backend) in a child process with the rendered env: the run's
    tags hold topl's identity, its name the experiment, its params verl's config."""
    for k in identity.TRACKER_VARS:
        monkeypatch.delenv(k, raising=False)
    spec, ident = stamped([])
    inv = render(spec)
    cfg = OmegaConf.to_container(compose_verl(inv), resolve=True)  # as RayPPOTrainer.fit passes it
    args = {"project": spec.project, "experiment": spec.experiment, "config": cfg}
    (tmp_path / "args.json").write_text(json.dumps(args, default=str))
    (tmp_path / "child.py").write_text(CHILD)
    store = tmp_path / "mlruns"
    # a file store, so the test reads it as files (MLflow 3 asks for the opt-in)
    env = {**os.environ, **inv.env, "MLFLOW_TRACKING_URI": store.as_uri(), "PYTHONSAFEPATH": "1"}
    env["MLFLOW_ALLOW_FILE_STORE"] = "true"
    out = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path / "args.json")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = [p.parent for p in store.glob("*/*/meta.yaml") if (p.parent / "tags").is_dir()]
    tags = {p.name: p.read_text() for p in (run / "tags").iterdir()}
    assert tags["mlflow.runName"] == spec.experiment
    assert tags["topl.run_dir"] == ident["run_dir"]
    assert tags["topl.spec_sha256"] == ident["spec_sha256"]
    assert tags["topl.stack"] == "release" and tags["topl.point"] == "rollout.n=4"
    params = run / "params"  # flattened with "/" (verl@0.9.1:verl/utils/tracking.py)
    assert (params / "trainer" / "experiment_name").read_text() == spec.experiment
    tags_param = params / "ray_kwargs/ray_init/runtime_env/env_vars/WANDB_TAGS"
    assert tags_param.read_text() == spec.cluster.env["WANDB_TAGS"]
    assert (run / "metrics" / "critic" / "rewards" / "mean").is_file()
    assert pytest.approx(0.5) == float((run / "metrics/critic/rewards/mean").read_text().split()[1])
