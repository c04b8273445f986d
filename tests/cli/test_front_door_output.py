"""What a new user reads: tables at terminal widths and in pipes (ids never cut), piped lines,
a sweep's dry run, plan blocks and the watch columns (the front door itself:
tests/cli/test_front_door.py)."""

import json

import pytest
from helpers import STRICT_A3, run_topl, run_topl_inproc

ANSI = __import__("re").compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("width", ["80", "120"])
def test_tables_wrap_and_never_cut_ids(width, verl_imports_here):
    from topl.launcher.contract.core import RULES

    # in this process: the widths and the tables are the subject (rich reads both variables per call)
    as_terminal = {"FORCE_COLOR": "1", "COLUMNS": width}
    out = ANSI.sub("", run_topl_inproc("rules", env=as_terminal).stdout)
    assert "…" not in out and all(r.id in out for r in RULES)
    assert max(map(len, out.splitlines())) <= int(width)
    out = ANSI.sub(
        "",
        run_topl_inproc(
            "plan", *STRICT_A3, "train.pp=2,4,8", "train.tp=1,2", env=as_terminal
        ).stdout,
    )
    assert "…" not in out and out.count("TOP-MEM-001") == 2 and out.count("TOP-TP-001") == 3
    assert max(map(len, out.splitlines())) <= int(width)
    r = run_topl_inproc("doctor", *STRICT_A3, env=as_terminal)
    out = ANSI.sub("", r.stdout)
    assert (
        "…" not in out
        and "TOP-DOC-ACC-001" in out
        and max(map(len, out.splitlines())) <= int(width)
    )


def test_piped_tables_are_plain():
    out = run_topl("rules", env={"COLUMNS": "80"}).stdout  # stdout is a pipe here
    assert "\x1b[" not in out and "│" not in out and "┃" not in out
    assert not any(l != l.rstrip() for l in out.splitlines())
    lines = out.splitlines()
    assert lines[1].split() == ["rule", "severity", "what", "must", "hold", "fix"]
    # one rule a row: its first line starts with the id, wrapped cells continue in their column
    from topl.launcher.cli.rules import catalog

    starts = [l.split()[0] for l in lines[2:] if l.startswith("TOP-")]
    assert starts == [r.id for r, _ in catalog()]
    assert all(l.startswith(("TOP-", " ")) for l in lines[2:-1])


SWEEP = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "rollout.prefix_caching=false",
    "train.pp=4,8",
    "rollout.tp=1,2",
    "--dry-run",
]


def test_sweep_dry_run_is_one_line_per_point_and_a_table_numbered_as_run_dirs(tmp_path):
    r = run_topl("launch", "-m", *SWEEP, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    sweep = next((tmp_path / "runs" / "multirun").iterdir())
    report = json.loads((sweep / "sweep_report.json").read_text())["verdicts"]
    valid = [i for i, v in enumerate(report) if v["valid"]]
    assert valid == [0, 2]  # rollout.tp=2 breaks TOP-TP-001: points 1 and 3 are dropped
    # run directories carry the report's point numbers (they used to be renumbered 0, 1)
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir() and p.name.isdigit()) == ["0", "2"]
    out = r.stdout + r.stderr
    assert "python3 -m verl" not in out  # no command dumps: they are in each command.sh
    assert len(out.splitlines()) <= 30  # it used to be 321 lines for these 4 points
    for i in valid:
        assert f"topl: point {i}: " in r.stdout and str(sweep / str(i)) in r.stdout
    table = r.stdout.split("topl launch -m:")[1].splitlines()
    assert table[1].split()[:3] == ["#", "train.pp", "rollout.tp"]
    body = [ln for ln in table[2:] if "points," not in ln]  # the summary line closes the table
    rows = [ln.split() for ln in body if ln[:1].isdigit()]  # wrapped cells continue indented
    assert [r[3] for r in rows] == ["valid", "dropped", "valid", "dropped"]
    assert [r[-1] for r in rows] == ["0/", "-", "2/", "-"]  # relative to the sweep folder above


def test_piped_lines_stay_within_200_characters(tmp_path, verl_imports_here):
    for args in (
        ["rules"],
        ["doctor", *STRICT_A3],
        ["check", "recipe=qwen3_30b_a3b_grpo_a3_strict"],
    ):
        r = run_topl_inproc(*args, cwd=tmp_path, env={"COLUMNS": "80"})  # a pipe: not the terminal
        lines = (r.stdout + r.stderr).splitlines()
        assert lines and max(map(len, lines)) <= 200, (args, max(map(len, lines)))


def test_plan_blocks_at_80_columns_name_every_swept_key():
    as_terminal = {"FORCE_COLOR": "1", "COLUMNS": "80"}
    r = run_topl_inproc(
        "plan", *STRICT_A3, "train.pp=2,4,8", "train.tp=1,2", "rollout.tp=1,2", env=as_terminal
    )
    out = ANSI.sub("", r.stdout)
    assert "train.pp: 4" in out and "train.tp: 2" in out and "rollout.tp: 1" in out


def test_watch_columns_are_named_for_what_they_hold():
    from topl.launcher.run import watch

    # an alignment=off step: topl's log-prob difference and verl's probability difference differ
    data = {watch.LOGP_MAX: 4.54e-02, watch.DIFF_MAX: 0.00398, watch.DIFF_MEAN: 1e-4}
    head, row = watch.HEADER.split(), watch.row(7, data).split()
    assert head[:4] == ["step", "max|Δlogp|", "max|Δp|", "mean|Δp|"]
    assert row[:3] == ["7", "0.0454", "0.00398"]
