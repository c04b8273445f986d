"""`topl runs` and `topl watch` alone: the runs under a run root, newest first, read by compare's
reader; a run whose topl is gone while its status says running is shown so and never rewritten."""

import json
import socket
import subprocess
import sys
from pathlib import Path

from topl.launcher.cli import main


def a_run(path: Path, created: str, state: str = "succeeded", diffs=(0.0, 0.0), **status) -> Path:
    path.mkdir(parents=True)
    (path / "topl.json").write_text(json.dumps({"topl_version": "x", "created": created}))
    (path / "status.json").write_text(json.dumps({"state": state, "backend": "local", **status}))
    lines = [{"step": i, "data": {"topl/max_abs_logprob_diff": d}} for i, d in enumerate(diffs, 1)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def runs_under(root: Path) -> Path:
    a_run(root / "20261201-old", "2026-12-01T10:00:00+0000", diffs=(0.0, 0.25, 0.5))
    gone = {"pid": dead_pid(), "host": socket.gethostname()}  # an old status: pid and host only
    a_run(root / "20261203-killed", "2026-12-03T09:00:00+0000", state="running", **gone)
    a_run(root / "multirun" / "20261202-sweep" / "0", "2026-12-02T10:00:00+0000", diffs=(0.0,))
    (root / "not-a-run").mkdir()
    return root


def test_runs_lists_newest_first_and_never_rewrites_a_record(tmp_path, capsys):
    root = runs_under(tmp_path / "runs")
    killed = root / "20261203-killed" / "status.json"
    before = killed.read_bytes()
    assert main(["runs", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    got = [
        (r["name"], r["state"], r["topl_gone"], r["steps"], r["logdiff_max"]) for r in doc["runs"]
    ]
    assert got == [
        ("20261203-killed", "running", True, 2, 0.0),
        ("multirun/20261202-sweep/0", "succeeded", False, 1, 0.0),
        ("20261201-old", "succeeded", False, 3, 0.5),
    ]
    assert {r["backend"] for r in doc["runs"]} == {"local"}
    assert doc["runs"][0]["started"] == "2026-12-03T09:00:00+0000"
    assert killed.read_bytes() == before  # reading never changes a record
    assert main(["runs", str(root)]) == 0
    out = capsys.readouterr().out
    assert "running (topl gone" in out and "20261201-old" in out and "0.5" in out


def test_runs_default_root_and_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["runs"]) == 0
    assert "no runs under runs" in capsys.readouterr().err
    assert main(["runs", str(tmp_path / "nowhere"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_watch_alone_lists_the_runs_and_says_how_to_pick(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs_under(tmp_path / "runs")
    assert main(["watch"]) == 0
    out = capsys.readouterr().out
    assert "20261201-old" in out and "multirun/20261202-sweep/0" in out
    assert "pick one: topl watch runs/20261203-killed" in out
    assert main(["watch", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 3


def test_watch_on_a_missing_directory_points_at_topl_runs(tmp_path, capsys):
    assert main(["watch", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "`topl runs` lists the run directories" in err and "outputs/DATE" not in err
