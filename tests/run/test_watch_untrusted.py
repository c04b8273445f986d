"""`topl watch` reads run directories it did not write (old, copied, edited): it signals only a
process it can prove is the recorded topl, reads only regular files with caps, prints no
terminal escapes, and turns bad records into plain output, never a traceback."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers import run_topl

from topl.launcher.cli import main as topl
from topl.launcher.run import lifecycle, watch_io, watch_lines, watch_status


@pytest.fixture
def kills(monkeypatch):
    """Record os.kill calls from watch instead of sending them (safe even on a broken watch)."""
    sent, real = [], os.kill

    def fake_kill(pid, sig):
        if sig in (0, signal.SIGKILL) and pid > 0:  # probes, and the fixtures' own cleanup
            return real(pid, sig)
        sent.append((pid, sig))

    monkeypatch.setattr(os, "kill", fake_kill)  # watch_status.py signals through os.kill
    return sent


@pytest.fixture
def stranger():
    """An unrelated local process, alive for the test."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


def running(**fields) -> dict:
    return {"state": "running", "host": socket.gethostname(), **fields}


@pytest.mark.parametrize(
    "make",
    [
        lambda p: running(pid=p.pid),  # an old status: pid and host only
        lambda p: running(pid=p.pid, host="another-host"),  # recorded on another machine
        lambda p: {**watch_io.identity(p.pid), "state": "running", "pid_start": 1},  # pid reused
        lambda p: {**watch_io.identity(p.pid), "state": "running", "boot_id": "old-boot"},
        lambda p: running(pid=-p.pid),  # a negative pid is a process group
        lambda p: running(pid=0),
        lambda p: running(pid=-1),  # every process the user owns
        lambda p: running(pid=str(p.pid)),
    ],
)
def test_watch_signals_nothing_it_cannot_prove_is_its_topl(tmp_path, kills, stranger, make):
    how = watch_status.stop_job(tmp_path, make(stranger))
    assert kills == [] and stranger.poll() is None, how
    assert "nothing stopped" in how or "not stopped" in how


def test_watch_signals_the_recorded_topl(tmp_path, kills, stranger):
    status = {**watch_io.identity(stranger.pid), "state": "running"}
    assert watch_io.prove(status)[0] == "same"
    assert watch_status.stop_job(tmp_path, status) == f"SIGTERM to topl (pid {stranger.pid})"
    assert kills == [(stranger.pid, signal.SIGTERM)]


def test_launch_records_what_proves_its_topl(tmp_path):
    seen = {}
    lifecycle.run_recorded(tmp_path, lambda: seen.update(watch_io.read_status(tmp_path)) or 0)
    assert seen["pid"] == os.getpid() and seen["pid_start"] and seen["boot_id"]
    assert seen["exe"] == os.path.realpath(sys.executable) or seen["exe"]
    assert watch_io.prove(seen)[0] == "same"


def test_a_reused_pid_is_a_gone_topl_not_a_live_one(tmp_path, stranger):
    status = {**watch_io.identity(stranger.pid), "state": "running", "pid_start": 1}
    assert watch_status.topl_gone(status)


def _run_dir(tmp_path, status: dict):
    d = tmp_path / "run"
    d.mkdir()
    (d / "topl.json").write_text("{}")
    (d / "status.json").write_text(json.dumps(status))
    return d


ESC = "\x1b]0;owned\x07\x1b[2J"


def test_watch_prints_no_terminal_escapes_and_no_traceback_on_bad_records(tmp_path, capsys):
    d = _run_dir(tmp_path, {"state": "failed", "error": f"boom{ESC}", "exit_code": 3})
    (d / "guard").mkdir()
    (d / "guard" / "a.json").write_text(json.dumps({"role": ESC, "versions": "x", "missing": 5}))
    (d / "guard" / "b.json").write_text("[1, 2]")
    (d / "verl.log").write_text(f"TOPL-GUARD {json.dumps({'host': ESC, 'pid': 1})}\n" + "x" * 10)
    (d / "metrics.jsonl").write_text('{"step": 1, "data": {"a": 1}}\n[1]\n')
    assert topl(["watch", str(d), "--once"]) == 1
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err and "\x07" not in out.out + out.err
    assert "Traceback" not in out.err and "guard" in out.out


def test_a_guard_record_that_says_ok_with_a_wrong_determinism_variable_is_not_ok(tmp_path, capsys):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    manifest = {
        "env": {"VLLM_BATCH_INVARIANT": ["1", "TOP-ALN-001"]},
        "modules": {},
        "strict": True,
    }
    (d / "invocation.json").write_text(json.dumps({"env": {"TOPL_GUARD": json.dumps(manifest)}}))
    (d / "guard").mkdir()
    rec = {
        "role": "driver",
        "host": "h",
        "pid": 1,
        "missing": [],
        "env": {"VLLM_BATCH_INVARIANT": "0"},
    }
    (d / "guard" / "h-1.json").write_text(json.dumps(rec))
    topl(["watch", str(d), "--once"])
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("guard"))
    assert "TOP-ALN-001 env VLLM_BATCH_INVARIANT" in line and not line.endswith(": ok")


def test_watch_does_not_hang_on_fifos_and_reads_capped(tmp_path):
    d = _run_dir(tmp_path, {"state": "succeeded", "exit_code": 0})
    for name in ("verl.log", "metrics.jsonl", "spec.yaml", "ray_job_id", "invocation.json"):
        os.mkfifo(d / name)
    (d / "guard").mkdir()
    os.mkfifo(d / "guard" / "x.json")
    start = time.monotonic()
    r = run_topl("watch", str(d), "--once", cwd=tmp_path, timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - start < 30
    os.unlink(d / "verl.log")
    (d / "verl.log").write_text("y" * (watch_io.LINE_CAP * 3))  # one endless line
    lines = watch_lines.Tail(d / "verl.log").lines()
    assert lines and max(map(len, lines)) <= watch_io.LINE_CAP


def test_a_fifo_status_json_is_no_status(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    os.mkfifo(d / "status.json")
    box = []
    t = threading.Thread(target=lambda: box.append(watch_io.read_status(d)), daemon=True)
    t.start()
    t.join(10)  # a blocking read of the FIFO would wait for a writer forever
    assert box == [{}]
