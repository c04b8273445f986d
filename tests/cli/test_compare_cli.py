"""`topl compare`: JSON, CSV and the table for people; plan --rank's prediction from each run's own
spec.yaml beside the measured step; a sweep's compare.json / compare.png; bad input is one message
(JSON with --json)."""

import csv
import io
import json
import stat
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from topl.launcher.cli import compare as cli_compare
from topl.launcher.cli import main
from topl.launcher.compose.hydra import compose_job
from topl.launcher.plan.cost import step_cost


@pytest.fixture(scope="module")
def a2_spec() -> tuple[str, float]:
    """The embedded default on A2's chip figures: spec.yaml as rundir.write writes it, and its
    predicted step."""
    composed = compose_job(["cluster.soc=A2", "rollout.n=4"])
    return OmegaConf.to_yaml(composed.cfg, resolve=True), step_cost(composed.to_object())["step_s"]


def a_run(path: Path, spec: str | None, times=(0.2, 0.4, 0.3), state="succeeded") -> Path:
    path.mkdir(parents=True)
    (path / "status.json").write_text(json.dumps({"state": state, "exit_code": 0}))
    if spec is not None:
        (path / "spec.yaml").write_text(spec)
    lines = [
        {"step": i, "data": {"critic/rewards/mean": 0.1 * i, "timing_s/step": t}}
        for i, t in enumerate(times, 1)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def run_json(capsys, *args) -> tuple[int, dict]:
    rc = main(["compare", *args, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_prediction_beside_the_measured_step(tmp_path, capsys, a2_spec):
    spec, predicted = a2_spec
    a_run(tmp_path / "a", spec)
    rc, doc = run_json(capsys, str(tmp_path / "a"))
    (row,) = doc["runs"]
    assert rc == 0 and row["step_s_median"] == 0.3
    assert row["predicted_step_s"] == pytest.approx(predicted)
    assert row["measured_over_predicted"] == pytest.approx(0.3 / predicted)


def test_no_prediction_is_said_and_an_edited_spec_is_never_resolved(tmp_path, capsys, a2_spec):
    spec, _ = a2_spec
    a_run(tmp_path / "local", spec.replace("soc: A2", "soc: null"))
    a_run(tmp_path / "edited", spec.replace("soc: A2", "soc: ${oc.env:HOME}"))
    a_run(tmp_path / "none", None)
    a_run(tmp_path / "old", spec.replace("train:", "training:"))  # another version's spec
    _, doc = run_json(capsys, str(tmp_path / "*"))
    notes = {Path(r["run_dir"]).name: " ".join(r["notes"]) for r in doc["runs"]}
    assert "cluster.soc=None has no chip figures" in notes["local"]
    # read as data: the interpolation stays text, never resolved from this process's environment
    assert "soc=${oc.env:HOME} has no chip figures" in notes["edited"]
    assert "spec.yaml missing" in notes["none"]
    assert "not this topl's job spec" in notes["old"]
    assert all(r["predicted_step_s"] is None for r in doc["runs"])


def test_csv_and_table(tmp_path, capsys, a2_spec):
    a_run(tmp_path / "a", a2_spec[0])
    a_run(tmp_path / "b", None, times=(1.0,), state="running")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["state"], r["steps"], r["step_s_median"]) for r in rows] == [
        ("succeeded", "3", "0.3"),
        ("running", "1", "1.0"),
    ]
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--sort", "steps"]) == 0
    out = capsys.readouterr().out
    assert out.index("running") < out.index("succeeded") and "meas/pred" in out


def test_bad_input_is_one_message(tmp_path, capsys):
    rc, doc = run_json(capsys, str(tmp_path))
    assert rc == 2 and "not a topl run or sweep directory" in doc["error"]["message"]
    assert main(["compare"]) == 2
    assert "needs at least one PATH" in capsys.readouterr().err
    a_run(tmp_path / "a", None)
    rc, doc = run_json(capsys, str(tmp_path / "a"), "--sort", "nope")
    assert rc == 2 and "no such column" in doc["error"]["message"]
    for bad in (tmp_path / "no" / "c.png", tmp_path / "c.nope"):
        rc, doc = run_json(capsys, str(tmp_path / "a"), "--plot", str(bad))
        assert rc == 2 and "cannot write the plot" in doc["error"]["message"]


def test_a_sweep_writes_its_comparison(tmp_path, capsys, a2_spec):
    for i in range(3):
        a_run(tmp_path / str(i), a2_spec[0], times=(0.1 * (i + 1),))
    verdicts = [{"overrides": [f"rollout.n={2**i}"], "valid": True, "rules": []} for i in range(3)]
    (tmp_path / "sweep_report.json").write_text(json.dumps({"verdicts": verdicts}))
    cli_compare.write_sweep(tmp_path)
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert [r["swept"] for r in doc["runs"]] == [{"rollout.n": str(2**i)} for i in range(3)]
    for name in ("compare.json", "compare.png"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    assert "comparison:" in capsys.readouterr().out
