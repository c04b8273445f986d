"""`topl watch` reads a run whole and changes nothing it does not own: every metric line however
large the file (streamed, never cut at a chunk), no write through a link planted in the run
directory, a finished run's record never rewritten, no endless wait on a directory whose launch
died before status.json, and bad numbers or flags as one message (issue 48 / 49)."""

import json
import os
import threading

import pytest

from topl.launcher.cli import main as topl
from topl.launcher.run import rundir, watch, watch_io, watch_lines, watch_status
from topl.launcher.run.watch import DIFF_MAX


def _run_dir(tmp_path, status: dict | None):
    d = tmp_path / "run"
    d.mkdir()
    (d / "topl.json").write_text("{}")
    if status is not None:
        (d / "status.json").write_text(json.dumps(status))
    return d


def _metrics(d, steps: int, bad_from: int, pad: int) -> None:
    with (d / "metrics.jsonl").open("w") as f:
        for s in range(1, steps + 1):
            data = {DIFF_MAX: 0.0 if s < bad_from else 1e-3, "pad": "x" * pad}
            f.write(json.dumps({"step": s, "data": data}) + "\n")


def test_a_strict_watch_reads_every_metric_line_of_a_file_larger_than_a_chunk(tmp_path, capsys):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    _metrics(d, 1000, 900, pad=watch_io.CHUNK_CAP // 800)  # step 900 lies past the first chunk
    assert (d / "metrics.jsonl").stat().st_size > watch_io.CHUNK_CAP
    rc = topl(["watch", str(d), "--once", "--strict", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 1000 and out["reason"].startswith("step 900:"), out["reason"]
    assert rc == 1


def test_a_strict_watch_of_a_finished_run_never_rewrites_its_status(tmp_path, capsys):
    before = {"state": "succeeded", "exit_code": 0, "updated": "then"}
    d = _run_dir(tmp_path, before)
    _metrics(d, 5, 3, pad=0)
    assert topl(["watch", str(d), "--strict"]) == 1  # the verdict: it went off-policy at step 3
    err = capsys.readouterr().err
    assert "already ended" in err and "status.json marked" not in err
    assert json.loads((d / "status.json").read_text()) == before  # the record is as it was
    assert topl(["watch", str(d)]) == 0  # a later plain watch still reads "succeeded"


def test_watch_writes_no_file_through_a_planted_link(tmp_path):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    _metrics(d, 3, 99, pad=0)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, d / "watch.png")
    os.symlink(victim, d / f".status.{os.getpid()}.tmp")  # the temp name set_status once used
    assert topl(["watch", str(d), "--once"]) == 0
    rundir.set_status(d, "succeeded", exit_code=0)
    assert victim.read_text() == "precious"
    assert not (d / "watch.png").is_symlink()  # the link itself replaced by watch's own file
    assert [p.name for p in d.iterdir() if p.name.startswith(".status.")] == [
        f".status.{os.getpid()}.tmp"
    ]  # the planted link left alone, no temp file left behind


def test_watch_on_a_run_dir_without_status_json_ends_with_one_message(
    tmp_path, monkeypatch, capsys
):
    d = _run_dir(tmp_path, None)
    monkeypatch.setattr(watch_status, "NO_STATUS_WAIT_S", 0.5)
    box = []
    t = threading.Thread(target=lambda: box.append(topl(["watch", str(d), "--interval", "0.1"])))
    t.daemon = True
    t.start()
    t.join(30)
    assert box == [2], "watch waited on a launch that never wrote status.json"
    err = capsys.readouterr().err
    assert "status.json" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "metrics, console",
    [
        ('{"step": 1, "data": {"%s": Infinity}}\n' % DIFF_MAX, ""),
        ('{"step": 1, "data": {"%s": %s}}\n' % (DIFF_MAX, "9" * 400), ""),
        ('{"step": 1, "data": {"%s": {"a": 1}}}\n' % DIFF_MAX, ""),
        ('{"step": %s, "data": {}}\n' % ("9" * 5000), ""),
        ("", "step:%s - %s:0.0\n" % ("9" * 5000, DIFF_MAX)),
    ],
)
def test_bad_numbers_in_metrics_are_no_traceback(tmp_path, capsys, metrics, console):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    if metrics:
        (d / "metrics.jsonl").write_text(metrics)
    (d / "verl.log").write_text(console)
    rc = topl(["watch", str(d), "--once", "--strict"])
    assert rc in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_non_finite_metrics_are_strict_json_in_every_json_output(tmp_path, capsys):
    """watch --json and compare --json / compare.json wrote Infinity and NaN (issue 48)."""

    def strict(text):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    (d / "metrics.jsonl").write_text(
        '{"step": 1, "data": {"%s": Infinity, "critic/rewards/mean": NaN}}\n' % DIFF_MAX
    )
    topl(["watch", str(d), "--once", "--json"])
    assert strict(capsys.readouterr().out)["last"][DIFF_MAX] == "inf"
    topl(["compare", str(d), "--json"])
    assert strict(capsys.readouterr().out)["runs"][0]["logdiff_max"] == "inf"


def _line(step, v):
    return json.dumps({"step": step, "data": {DIFF_MAX: v, "critic/rewards/mean": 0.1}})


@pytest.mark.parametrize(
    "text",
    [
        "\n".join([_line(1, 0), _line(2, 0), _line(3, 1e-3)]),  # ended: its last line is whole
        "\n".join([_line(1, 0), _line(2, 0), _line(3, 0), _line(3, 1e-3)]) + "\n",  # resumed
        "\n".join([_line(1, 0), _line(2, 0), _line(3, 1e-3), _line(3, 0)]) + "\n",
    ],
)
def test_an_ended_runs_off_policy_step_is_never_lost(tmp_path, capsys, text):
    """A last line without its newline and a repeated step's off-policy record were dropped:
    "run succeeded", exit 0 (probes of issue 48)."""
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    (d / "metrics.jsonl").write_text(text)
    assert topl(["watch", str(d), "--once", "--strict", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["reason"].startswith("step 3")
    assert topl(["compare", str(d), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["runs"][0]
    assert (row["first_nonzero_step"], row["logdiff_max"]) == (3, 1e-3)


@pytest.mark.parametrize("how", ["rewritten shorter", "replaced by another file"])
def test_a_metrics_file_rewritten_under_the_watch_is_read_from_its_start(tmp_path, how):
    """A restarted job rewriting metrics.jsonl shorter was read from the old offset: its
    off-policy step was never seen (issue 48 probe)."""
    d = _run_dir(tmp_path, {"state": "running"})
    m = d / "metrics.jsonl"
    m.write_text("".join(_line(s, 0) + "\n" for s in range(1, 6)))
    w = watch.Watcher(d, strict=True)
    assert len([k for k, _ in w.poll() if k == "step"]) == 5
    if how == "rewritten shorter":
        m.write_text(_line(6, 1e-3) + "\n")
    else:
        new = d / "new"
        new.write_text("".join(_line(s, 0) + "\n" for s in range(1, 9)) + _line(6, 1e-3) + "\n")
        os.replace(new, m)
    w.poll()
    assert w.reason and w.reason.startswith("step 6"), w.reason


def test_a_running_runs_partial_last_line_waits(tmp_path):
    d = _run_dir(tmp_path, {"state": "running"})
    (d / "metrics.jsonl").write_text(_line(1, 0) + "\n" + _line(2, 1e-3)[:-5])
    w = watch.Watcher(d, strict=True)
    assert [item[0] for kind, item in w.poll() if kind == "step"] == [1]  # step 2 not yet whole


def test_a_bad_interval_is_one_message(tmp_path, capsys):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    for bad in ("abc", "-1", "nan", "inf", "1e9"):
        assert topl(["watch", str(d), "--interval", bad]) == 2
        assert "--interval" in capsys.readouterr().err


def test_the_tail_streams_in_bounded_chunks(tmp_path):
    p = tmp_path / "m"
    p.write_text("a\n" * (watch_io.CHUNK_CAP // 2 + 10))  # two chunks and a bit
    t = watch_lines.Tail(p)
    sizes = [len(batch) for batch in t.batches()]
    assert len(sizes) >= 2 and sum(sizes) == watch_io.CHUNK_CAP // 2 + 10


def test_launch_watch_rows_go_above_a_progress_bar_on_a_terminal(tmp_path, capsys):
    """On a terminal the local backend's bar (rich's Live) owns the screen and prints whatever
    reaches sys.stdout above itself; a row written past it would land inside the bar's line."""
    import io
    import time

    from rich.console import Console
    from rich.progress import Progress

    d = _run_dir(tmp_path, {"state": "running"})
    screen = io.StringIO()

    def run() -> int:
        with Progress(console=Console(file=screen, force_terminal=True, width=80)) as bar:
            task = bar.add_task("", total=3)
            for s in range(1, 4):
                with (d / "metrics.jsonl").open("a") as f:
                    f.write(json.dumps({"step": s, "data": {DIFF_MAX: 0.0}}) + "\n")
                bar.update(task, advance=1)
                deadline = time.monotonic() + 10
                while watch.row(s, {DIFF_MAX: 0.0}) not in screen.getvalue() and (
                    time.monotonic() < deadline
                ):
                    time.sleep(0.05)
        return 0

    assert watch.launched(d, False, run, interval=0.05) == 0
    shown = screen.getvalue()
    assert all(watch.row(s, {DIFF_MAX: 0.0}) in shown for s in (1, 2, 3)), shown  # via the bar
    assert not any(line.lstrip().startswith("1 ") for line in capsys.readouterr().out.splitlines())


def test_watch_reads_a_read_only_run_dir_without_a_traceback(tmp_path, capsys, monkeypatch):
    """Someone else's run, or an archived one: watch shows it and says what it could not record."""
    import errno

    d = _run_dir(tmp_path, {"state": "running", "pid": 2**22, "host": os.uname().nodename})
    _metrics(d, 3, 2, pad=0)  # strict: step 2 off-policy, watch would stop and record it

    def read_only(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(watch_io, "replace_file", read_only)  # every write watch makes
    for args in (["--strict", "--once"], ["--once"]):
        rc = topl(["watch", str(d), *args])
        out = capsys.readouterr()
        assert rc in (0, 1) and "Traceback" not in out.err, out.err
        assert "could not record" in out.out + out.err, out


@pytest.mark.parametrize(
    "invocation, env",
    [
        (None, {"VLLM_BATCH_INVARIANT": "0"}),  # no manifest to check the record against
        ({"VLLM_BATCH_INVARIANT": ["1", "TOP-ALN-001"]}, {}),  # the variable not set at all
    ],
)
def test_a_strict_guard_record_that_says_ok_is_checked_not_trusted(
    tmp_path, capsys, invocation, env
):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    if invocation is not None:
        manifest = json.dumps({"env": invocation, "modules": {}, "strict": True})
        (d / "invocation.json").write_text(json.dumps({"env": {"TOPL_GUARD": manifest}}))
    (d / "guard").mkdir()
    rec = {"role": "driver", "host": "h", "pid": 1, "strict": True, "missing": [], "env": env}
    (d / "guard" / "h-1.json").write_text(json.dumps(rec))
    topl(["watch", str(d), "--once"])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("guard"))
    assert not line.endswith(": ok"), line
