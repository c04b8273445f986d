"""`topl compare`'s reading of runs (launcher/run/compare.py) on synthetic run and sweep directories:
every point a row (dropped, running, failed ones too), what is missing said in the row, never a
traceback, and the plot one line per run."""

import json
import os
from pathlib import Path

import pytest

from topl.launcher import __version__
from topl.launcher.base.errors import ToplError
from topl.launcher.run import compare, compare_plot
from topl.launcher.run.watch import DIFF_MAX, LOGP_MAX, REWARD


def step(n: int, diff: float = 0.0, reward: float = 0.1, t: float = 0.5, tokens: int = 100):
    data = {LOGP_MAX: diff, REWARD: reward, "timing_s/step": t, "topl/tokens": tokens}
    return json.dumps({"step": n, "data": data})


def run_dir(
    path: Path, state="succeeded", lines=(), overrides=("train.steps=3",), **status
) -> Path:
    path.mkdir(parents=True)
    (path / "topl.json").write_text(json.dumps({"topl_version": __version__, "overrides": []}))
    (path / ".hydra").mkdir()
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (path / "status.json").write_text(json.dumps({"state": state, **status}))
    if lines:
        (path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return path


def sweep(tmp_path: Path) -> Path:
    """Three points of `rollout.n=2,4,8 alignment=strict`-like: 0 ran, 1 is running (its last line
    half written), 2 was dropped by the contract; a 4th ran and went off-policy at step 2."""
    s = tmp_path / "sweep"
    verdicts = [
        {"overrides": ["rollout.n=2", "alignment=strict"], "valid": True, "rules": []},
        {"overrides": ["rollout.n=4", "alignment=strict"], "valid": True, "rules": []},
        {"overrides": ["rollout.n=8", "alignment=strict"], "valid": False, "rules": ["TOP-X-1"]},
        {"overrides": ["rollout.n=2", "alignment=off"], "valid": True, "rules": []},
    ]
    run_dir(
        s / "0",
        lines=[step(1, reward=0.1, t=0.4), step(2, t=0.6), step(3, reward=0.3)],
        overrides=verdicts[0]["overrides"],
        exit_code=0,
    )
    run_dir(
        s / "1",
        state="running",
        lines=[step(1, t=1.0), step(2, t=2.0)],
        overrides=verdicts[1]["overrides"],
    )
    with (s / "1" / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "da')  # the job is writing it now
    run_dir(
        s / "3",
        state="failed",
        lines=[step(1, t=0.3), step(2, diff=1e-3, t=0.3), step(3, t=0.3)],
        overrides=verdicts[3]["overrides"],
        exit_code=1,
    )
    (s / "sweep_report.json").write_text(json.dumps({"verdicts": verdicts, "points": 4}))
    return s


def test_a_sweep_gives_one_row_per_point_with_its_fields(tmp_path):
    rows = compare.collect([str(sweep(tmp_path))])
    assert [r.point for r in rows] == [0, 1, 2, 3]
    assert [r.swept for r in rows] == [
        {"rollout.n": "2", "alignment": "strict"},
        {"rollout.n": "4", "alignment": "strict"},
        {"rollout.n": "8", "alignment": "strict"},
        {"rollout.n": "2", "alignment": "off"},
    ]
    done, running, dropped, off = rows
    assert (done.state, done.exit_code, done.steps, done.last_step) == ("succeeded", 0, 3, 3)
    assert (done.reward_first, done.reward_last) == (0.1, 0.3)
    assert done.step_s_median == 0.5 and done.tokens_per_s_median == pytest.approx(200.0)
    assert (done.logdiff_max, done.first_nonzero_step, done.logdiff_metric) == (0.0, None, LOGP_MAX)
    assert done.metrics_source == "metrics.jsonl" and not done.notes
    # a run still going: its latest complete step
    assert (running.state, running.steps, running.last_step) == ("running", 2, 2)
    assert (dropped.verdict, dropped.rules, dropped.state) == (
        "dropped",
        ["TOP-X-1"],
        "not started",
    )
    assert (off.state, off.exit_code, off.logdiff_max, off.first_nonzero_step) == (
        "failed",
        1,
        1e-3,
        2,
    )
    assert off.label == "rollout.n=2 alignment=off"


def test_a_folder_named_with_a_non_ascii_digit_is_no_point(tmp_path):
    s = sweep(tmp_path)
    (s / "²").mkdir()  # `isdigit` took it, int() raised (issue 48)
    assert [r.point for r in compare.collect([str(s)])] == [0, 1, 2, 3]


def test_missing_and_bad_files_are_said_in_the_row_never_raised(tmp_path):
    r = tmp_path / "r"
    r.mkdir()
    (r / "spec.yaml").write_text("a: [")
    (r / "status.json").write_text("{not json")
    os.mkfifo(r / "metrics.jsonl")  # a FIFO is never opened (it would block)
    (r / "verl.log").write_bytes(b"\x00\xff garbage\nstep:1 - " + DIFF_MAX.encode() + b":0.5\n")
    (row,) = compare.collect([str(r)])
    assert row.state is None and row.steps == 1 and row.metrics_source == "verl.log"
    assert (row.logdiff_metric, row.logdiff_max, row.first_nonzero_step) == (DIFF_MAX, 0.5, 1)
    assert any("status.json" in n for n in row.notes)
    assert any("topl.json" in n for n in row.notes)


def test_foreign_lines_and_repeated_steps(tmp_path):
    r = run_dir(
        tmp_path / "r",
        lines=[
            "",
            "[1, 2]",
            '{"step": "x"}',
            step(1, reward=0.1),
            step(2, reward=0.2),
            step(2, reward=0.25),
        ],
    )
    (row,) = compare.collect([str(r)])
    assert (row.steps, row.reward_last) == (2, 0.25)  # a step logged twice: the last record


def test_another_topl_version_and_no_steps_are_notes(tmp_path):
    r = run_dir(tmp_path / "r")
    (r / "topl.json").write_text(json.dumps({"topl_version": "0.0.1"}))
    (r / "ray_job_id").write_text("raysubmit_1\n")
    (row,) = compare.collect([str(r)])
    assert any("topl 0.0.1" in n for n in row.notes)
    assert any("no steps" in n and "Ray job" in n for n in row.notes)


def test_a_path_that_is_no_run_is_one_message_and_a_glob_skips_them(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ToplError, match="not a topl run or sweep directory"):
        compare.collect([str(tmp_path / "empty")])
    with pytest.raises(ToplError, match="does not exist"):
        compare.collect([str(tmp_path / "nope")])
    with pytest.raises(ToplError, match="matches no run"):
        compare.collect([str(tmp_path / "e*")])
    run_dir(tmp_path / "run_a")
    assert len(compare.collect([str(tmp_path / "*")])) == 1


def test_sort_by_a_column_or_a_swept_key_and_unknown_keys_refused(tmp_path):
    rows = compare.collect([str(sweep(tmp_path))])
    assert [r.point for r in compare.sort(rows, "step_s_median")] == [3, 0, 1, 2]
    assert [r.point for r in compare.sort(rows, "step_s_median", desc=True)] == [1, 0, 3, 2]
    assert [r.point for r in compare.sort(rows, "rollout.n")][-1] == 2
    with pytest.raises(ToplError, match="no such column"):
        compare.sort(rows, "speed")


def test_the_plot_has_one_line_per_run_with_steps(tmp_path, monkeypatch):
    import matplotlib.axes

    lines = []
    real = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "plot",
        lambda self, *a, **k: lines.append(k.get("label")) or real(self, *a, **k),
    )
    rows = compare.collect([str(sweep(tmp_path))])
    out = compare_plot.plot(rows, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ran = [
        "rollout.n=2 alignment=strict",
        "rollout.n=4 alignment=strict",
        "rollout.n=2 alignment=off",
    ]
    assert lines == [x for x in ran for _ in (1, 2)]  # reward and max |Δ log p|, each run
