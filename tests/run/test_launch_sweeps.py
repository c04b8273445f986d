"""`topl launch -m`: multi-recipe sweeps, multirun.yaml and job names as Hydra writes them, and
`--dry-run` that never starts a job, whatever the Hydra launcher."""

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from helpers import run_topl

RECIPES = "recipe=qwen3_4b_grpo_a2_strict,qwen3_4b_grpo_a3_off"


def _sweep_dir(root: Path) -> Path:
    (d,) = list((root / "runs" / "multirun").iterdir())
    return d


def test_multi_recipe_sweep_launches_each_recipe(tmp_path):
    r = run_topl("launch", "-m", RECIPES, "hydra.job.name=myjob", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    sweep = _sweep_dir(tmp_path)
    assert (sweep / "multirun.yaml").is_file()  # as Hydra's BasicSweeper writes it
    report = json.loads((sweep / "sweep_report.json").read_text())
    assert [v["overrides"] for v in report["verdicts"]] == [
        ["recipe=qwen3_4b_grpo_a2_strict"],
        ["recipe=qwen3_4b_grpo_a3_off"],
    ]
    socs, modes = [], []
    for i in (0, 1):
        spec = yaml.safe_load((sweep / str(i) / "spec.yaml").read_text())
        socs.append(spec["cluster"]["soc"])
        modes.append(spec["alignment"]["mode"])
        hydra = yaml.safe_load((sweep / str(i) / ".hydra" / "hydra.yaml").read_text())
        assert hydra["hydra"]["job"]["name"] == "myjob"  # the user's job name, not topl's
    assert socs == ["A2", "A3"] and modes == ["strict", "off"]
    sources = json.loads((sweep / "0" / "sources.json").read_text())
    assert "recipes/qwen3_4b_grpo_a2_strict.yaml" in json.dumps(sources)


def test_job_name_is_the_users_in_a_single_run(tmp_path):
    r = run_topl("launch", "hydra.job.name=myjob", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (run,) = [d for d in (tmp_path / "runs").iterdir() if d.name != "multirun"]
    hydra = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())
    assert hydra["hydra"]["job"]["name"] == "myjob"


@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is None,
    reason="hydra-joblib-launcher not installed",
)
def test_dry_run_starts_nothing_with_an_out_of_process_launcher(tmp_path):
    """Jobs run in joblib worker processes; --dry-run must reach them and start nothing."""
    marker = tmp_path / "started"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    r = run_topl(
        "launch",
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "cluster.backend=subprocess",
        f"cluster.python={fake}",
        "train.steps=1,2",
        "--dry-run",
        "--skip-doctor",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    sweep = _sweep_dir(tmp_path)
    assert {p.name for p in sweep.iterdir() if p.is_dir()} == {"0", "1"}
    assert all((sweep / i / "command.sh").is_file() for i in ("0", "1"))


def test_a_local_sweep_ends_with_its_comparison_and_compare_reads_it_back(tmp_path):
    """`topl launch -m` over 3 local points (1 step each): compare.json has one row per point with
    its steps, logdiff and step time beside the prediction; compare.png is a PNG; `topl compare
    --json` gives the same rows."""
    r = run_topl("launch", "-m", "train.steps=1", "rollout.n=2,4,8", "cluster.soc=A2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    sweep = _sweep_dir(tmp_path)
    written = json.loads((sweep / "compare.json").read_text())
    assert (sweep / "compare.png").read_bytes()[:4] == b"\x89PNG"
    c = run_topl("compare", str(sweep), "--json", cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    doc = json.loads(c.stdout)
    for runs in (written["runs"], doc["runs"]):
        assert [r["swept"] for r in runs] == [{"rollout.n": n} for n in ("2", "4", "8")]
        for row in runs:
            assert (row["state"], row["steps"], row["logdiff_max"]) == ("succeeded", 1, 0.0)
            assert row["step_s_median"] > 0 and row["predicted_step_s"] > 0
            assert row["measured_over_predicted"] == pytest.approx(
                row["step_s_median"] / row["predicted_step_s"]
            )
    # the predicted step grows with rollout.n (more sequences a step)
    assert sorted(doc["runs"], key=lambda r: r["predicted_step_s"]) == doc["runs"]
