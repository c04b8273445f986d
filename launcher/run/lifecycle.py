"""A launched run's life: signals stop the job, every exit path leaves a truthful status file.

`run_recorded(run_dir, start)` marks the run `running`, calls `start()` (a backend) with SIGINT and
SIGTERM turned into `Interrupted`, and then marks it `succeeded`, `failed` (exit code or signal) or
`interrupted` (`submitted` when the backend only handed the job to Ray); the exit code it returns is
non-zero for every failure (128 + N for signal N, as a shell reports it). `with_deadline` bounds a
call that may never answer (a silent Ray head).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from topl.launcher.base import children
from topl.launcher.base.errors import ToplError
from topl.launcher.run.watch_io import identity, prove, read_status


class Interrupted(BaseException):
    """SIGINT / SIGTERM reached topl while a job ran (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.at = time.time()  # when it reached topl: what ends after this, the stop ended


def _raise(signum, _frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_interrupt():
    """Within the block SIGINT and SIGTERM raise Interrupted (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def exit_code(returncode: int) -> int:
    """A child's return code as a shell reports it: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def status_of(returncode: int) -> dict:
    if returncode == 0:
        return {"state": "succeeded", "exit_code": 0}
    if returncode < 0:
        return {
            "state": "failed",
            "signal": signal.Signals(-returncode).name,
            "exit_code": exit_code(returncode),
        }
    return {"state": "failed", "exit_code": returncode}


def run_recorded(
    run_dir: Path,
    start: Callable[[], int],
    detached: bool = False,
    reraise: bool = False,
    **details,
) -> int:
    """Run a backend under signal handling; status.json is right on every way out.

    `start` returns the job's return code (negative: killed by that signal); it stops its job
    itself when Interrupted passes through it. `detached`: a 0 only means the job was handed over
    (a Ray job without --follow): the run is `submitted`, not `succeeded`. `reraise`: an
    interrupt, once recorded, goes on up (a sweep stops as a whole, not one point)."""
    # imported here: `topl rules` imports this module and must not pay for omegaconf
    from topl.launcher.run import rundir  # lazy: OmegaConf only when this runs

    state: dict = {"state": "failed", "error": "topl stopped unexpectedly"}
    try:
        with signals_interrupt():
            # a dead pid on this host with the state still running: topl was killed (`topl watch`)
            # with what proves it is this topl later (boot, start time, executable: watch_io)

            rundir.set_status(run_dir, "running", **identity(), **details)
            rc = start()
        state = {**({"state": "submitted"} if detached and rc == 0 else status_of(rc)), **details}
        return exit_code(rc)
    except (Interrupted, KeyboardInterrupt) as e:
        children.kill_all()  # the doctor's interpreter, still running in a deadline thread
        signum = getattr(e, "signum", signal.SIGINT)
        state = {
            "state": "interrupted",
            "signal": signal.Signals(signum).name,
            "exit_code": 128 + signum,
            **details,
        }
        print(
            f"\ntopl: {signal.Signals(signum).name}: the job was stopped (run dir {run_dir})",
            file=sys.stderr,
        )
        if reraise:
            raise
        return 128 + signum
    except ToplError as e:
        state = {"state": "failed", "error": e.message, **details}
        raise
    except Exception as e:
        full = rundir.no_room(e, f"the run directory {run_dir}") if isinstance(e, OSError) else None
        state = {"state": "failed", "error": f"{type(e).__name__}: {e}", **details}
        if full is not None:  # a full disk is one message (exit 2), not a traceback
            raise full from None
        raise
    finally:
        s = state.pop("state")
        try:
            rundir.set_status(run_dir, s, **state)
            rundir.seal(run_dir)
        except OSError as e:  # the disk took the job's output but not its end: said, not raised
            print(
                f"topl: the run ended ({s}) but its status.json cannot be written "
                f"({e.strerror or e}); `topl watch {run_dir}` reads it as a stopped topl",
                file=sys.stderr,
            )


def with_deadline(fn: Callable, seconds: float, what: str, fix: str):
    """fn() in a daemon thread; a ToplError when it has not answered within `seconds`.

    Used for calls whose library has no timeout of its own; the stuck thread dies with the process."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True, name=f"topl-deadline:{what}")
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise ToplError(f"{what}: no answer within {seconds:g} s", fix=fix)
    if "error" in box:
        raise box["error"]
    return box["value"]


def interrupt_sweep(
    sweep_dir: Path, signum: int, wait_s: float = 30.0, since: float | None = None
) -> list[str]:
    """After SIGINT / SIGTERM stopped `topl launch -m`: every point's status.json says how it
    ended. A point still `running` in another process that provably is its topl (a joblib
    worker) gets SIGTERM and `wait_s` to stop its job and record it; a point whose topl is gone,
    or that never wrote a status, is marked `interrupted` here. So is a point recorded `failed`
    after the stop began (`since`, the signal's time): its job died of the stop, whichever
    signal reached it first (the worker's SIGTERM, or joblib's SIGKILL to a worker's descendants:
    joblib@1.6.0:joblib/externals/loky/backend/utils.py:kill_process_tree), its own code kept
    under `job`. Points never started have no directory. Returns the points
    marked here."""
    from topl.launcher.run import rundir  # lazy: OmegaConf only when this runs

    points = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit())

    def running_elsewhere(p: Path) -> dict | None:
        st = read_status(p)
        mine = st.get("pid") == os.getpid()
        ok = st.get("state") == "running" and not mine and prove(st)[0] == "same"
        return st if ok else None

    for p in points:
        if (st := running_elsewhere(p)) is not None:
            try:
                os.kill(st["pid"], signal.SIGTERM)  # its topl stops its job group and records it
            except OSError:
                pass
    deadline = time.monotonic() + wait_s
    while any(running_elsewhere(p) for p in points) and time.monotonic() < deadline:
        time.sleep(0.2)
    marked = []
    for p in points:
        st = read_status(p)
        late = st.get("state") == "failed" and since is not None and _written_since(p, since)
        if st.get("state") in (None, "running") or late:
            job = {k: st[k] for k in ("exit_code", "signal") if k in st} if late else None
            rundir.set_status(
                p,
                "interrupted",
                signal=signal.Signals(signum).name,
                exit_code=128 + signum,
                started=bool(st),
                recorded_by="topl launch -m (the sweep was stopped)",
                **({"job": job} if job is not None else {}),
            )
            marked.append(p.name)
    return marked


def _written_since(point: Path, since: float) -> bool:
    try:
        # file times come from the kernel's coarse clock, a tick behind time.time()
        return (point / "status.json").stat().st_mtime >= since - 0.05
    except OSError:
        return False
