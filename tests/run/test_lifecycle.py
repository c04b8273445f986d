"""Run lifecycle: status file on every exit path, signal deaths non-zero, bounded waits."""

import json
import os
import signal
import socket
import time

import pytest

from topl.launcher.base.errors import ToplError
from topl.launcher.run import lifecycle


def status(d):
    return json.loads((d / "status.json").read_text())


@pytest.mark.parametrize(
    "rc,state,code",
    [(0, "succeeded", 0), (3, "failed", 3), (-9, "failed", 137), (-15, "failed", 143)],
)
def test_status_and_exit_code_follow_the_job(tmp_path, rc, state, code):
    seen = []
    assert (
        lifecycle.run_recorded(tmp_path, lambda: seen.append(status(tmp_path)["state"]) or rc)
        == code
    )
    assert seen == ["running"]
    s = status(tmp_path)
    assert (s["state"], s["exit_code"]) == (state, code)
    assert s.get("signal") == (signal.Signals(-rc).name if rc < 0 else None)
    assert oct(tmp_path.joinpath("status.json").stat().st_mode & 0o777) == oct(0o600)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_topl_interrupts_the_backend_and_marks_the_run(tmp_path, sig):
    stopped = []

    def backend():
        try:
            os.kill(os.getpid(), sig)
            time.sleep(5)
            return 0
        except lifecycle.Interrupted:
            stopped.append(True)  # a backend stops its job here
            raise

    assert lifecycle.run_recorded(tmp_path, backend) == 128 + sig
    assert stopped and status(tmp_path)["state"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers restored


def test_a_crash_is_marked_failed_and_propagates(tmp_path):
    with pytest.raises(ZeroDivisionError):
        lifecycle.run_recorded(tmp_path, lambda: 1 / 0)
    assert (
        status(tmp_path)["state"] == "failed" and "ZeroDivisionError" in status(tmp_path)["error"]
    )


def test_with_deadline_gives_one_clear_error_for_a_silent_endpoint():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)  # accepts connections, never answers
    port = server.getsockname()[1]

    def call():
        import urllib.request

        return urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version").read()

    start = time.monotonic()
    with pytest.raises(ToplError, match="no answer within 1 s"):
        lifecycle.with_deadline(call, 1.0, "Ray at 127.0.0.1", fix="check the address")
    assert time.monotonic() - start < 5
    server.close()
    assert lifecycle.with_deadline(lambda: 7, 1.0, "x", fix="") == 7
    with pytest.raises(KeyError):
        lifecycle.with_deadline(lambda: {}["k"], 1.0, "x", fix="")


def test_a_handed_over_job_is_submitted_not_succeeded(tmp_path):
    """A Ray job without --follow: 0 means Ray took it, not that it ran; a failure still fails."""
    seen = []
    assert lifecycle.run_recorded(tmp_path, lambda: seen.append(status(tmp_path)) or 0, True) == 0
    assert seen[0]["host"] == socket.gethostname() and seen[0]["pid"] == os.getpid()
    assert status(tmp_path)["state"] == "submitted"
    assert lifecycle.run_recorded(tmp_path, lambda: 1, detached=True) == 1
    assert status(tmp_path)["state"] == "failed"


def test_a_point_killed_by_the_sweep_stop_is_interrupted_whichever_signal_came_first(tmp_path):
    """joblib killing a worker's job (SIGKILL) before the worker's SIGTERM handler ran left the
    point `failed` (the flaky test_sweep_signals[joblib]); a failure from before the stop stays."""
    from topl.launcher.run import rundir

    for i in (0, 1):
        (tmp_path / str(i)).mkdir()
    rundir.set_status(tmp_path / "0", "failed", signal="SIGKILL", exit_code=137)  # its own end
    time.sleep(0.2)
    stop = lifecycle.Interrupted(signal.SIGTERM)
    time.sleep(0.1)
    rundir.set_status(tmp_path / "1", "failed", signal="SIGKILL", exit_code=137)  # by the stop
    assert lifecycle.interrupt_sweep(tmp_path, signal.SIGTERM, wait_s=0, since=stop.at) == ["1"]
    one = json.loads((tmp_path / "1" / "status.json").read_text())
    assert (one["state"], one["signal"], one["job"]) == (
        "interrupted",
        "SIGTERM",
        {"exit_code": 137, "signal": "SIGKILL"},
    )
    assert json.loads((tmp_path / "0" / "status.json").read_text())["state"] == "failed"
