"""`topl watch RUN_DIR`: follow a job's logdiff, reward and guard records to its end; under
alignment=strict stop it on the first step whose max logdiff is not exactly 0 and say why in
status.json. Flags: --no-stop (only show), --strict (stop even if the spec is not strict),
--once (read what is there and exit), --json (a summary object instead of the table),
--interval S, --stop (stop the run's job now: a Ray job through Ray, a Slurm job by scancel, a
local one through its topl; then wait for its end to be recorded).

Exit codes: 0 the run succeeded (--once: or has not ended, with nothing wrong so far); 1 watch
stopped it (strict), or it failed or was interrupted; 2 bad input (not a run directory, a Ray head
that does not answer); 3 a dry run (`topl launch --dry-run`): nothing was started."""

from __future__ import annotations

import io
import math
import sys
import time
from pathlib import Path

from topl.launcher.base.errors import ToplError
from topl.launcher.cli import runs
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json
from topl.launcher.run import watch, watch_io, watch_ray, watch_slurm, watch_status
from topl.launcher.run.watch_io import clean

DRY_RUN = 3  # the exit code for a dry run's directory: nothing to follow, and not a success


def main(args: list[str]) -> int:

    flags, rest = parse(
        args,
        flags=("--no-stop", "--strict", "--once", "--json", "--stop"),
        options={"--interval": "1.0"},
    )
    interval = _interval(flags.interval)
    if not rest:  # which run? the list, and how to pick one
        return _pick(flags.json)
    run_dir = _run_dir(rest)
    status = watch_io.read_status(run_dir)
    if status.get("state") == "dry_run":
        return _dry_run(run_dir, flags.json)
    if flags.stop:
        return _stop(run_dir, status, flags.json)
    strict = (flags.strict or watch_status.is_strict_run(run_dir)) and not flags.no_stop
    w = watch.Watcher(
        run_dir, strict, ray=watch_ray.ray_job(run_dir), slurm=watch_slurm.slurm_job(run_dir)
    )
    stopped = {}

    def on_stop(reason: str) -> None:
        now = watch_io.read_status(run_dir)
        if watch_status.ended(now):  # reading a finished run never changes its record
            stopped["how"] = how = f"the run already ended ({clean(now.get('state'))})"
            print(f"topl watch: {how}: nothing stopped, status.json left as it is", file=sys.stderr)
            return
        stopped["how"] = how = watch_status.stop_job(run_dir, now, w.ray)
        sent = how.startswith(("SIGTERM", "ray job"))  # else no topl will record its own stop
        watch.mark(run_dir, reason, how, wait_s=30.0 if sent else 0.0)
        print(clean(f"topl watch: {how}; status.json marked failed"), file=sys.stderr)

    out = io.StringIO() if flags.json else sys.stdout
    done = (lambda: w.ended() or True) if flags.once else None
    watch.follow(w, out=out, interval=interval, on_stop=on_stop, done=done, quiet=flags.json)
    png = watch.plot(w.steps, run_dir / "watch.png") if w.steps else None
    end = watch_io.read_status(run_dir)
    state = end.get("state")
    if flags.json:
        print_json(
            {
                "run_dir": str(run_dir),
                "strict": strict,
                "steps": len(w.steps),
                "stopped": w.reason is not None,
                "reason": w.reason,
                "stop": stopped.get("how"),
                "last": w.steps[-1][1] if w.steps else None,
                "guards": list(w.guards.values()),
                "plot": str(png) if png else None,
                "state": state,
                "status": end,
            },
            indent=None,
        )
    else:
        if png:
            print(f"plot: {png}")
        print(clean(f"topl watch: run {_describe(end)} (run dir {run_dir})"))
    return 1 if w.reason or state in ("failed", "interrupted") else 0


def _stop(run_dir: Path, status: dict, as_json: bool, wait_s: float = 60.0) -> int:
    """`--stop`: stop the run's job, then wait (bounded) until its end is recorded."""
    if _ended(status):
        how = "nothing stopped: the run has ended"
    else:
        w = watch.Watcher(
            run_dir, False, ray=watch_ray.ray_job(run_dir), slurm=watch_slurm.slurm_job(run_dir)
        )
        how = watch_status.stop_job(run_dir, status, w.ray)
        deadline = time.monotonic() + wait_s
        while not w.ended() and time.monotonic() < deadline:
            time.sleep(0.5)
    end = watch_io.read_status(run_dir)
    if as_json:
        print_json({"run_dir": str(run_dir), "stop": how, "state": end.get("state")}, indent=None)
    else:
        print(clean(f"topl watch: {how}; run {_describe(end)} (run dir {run_dir})"))
    return 0 if _ended(end) else 1


def _ended(st: dict) -> bool:
    return st.get("state") not in (None, "running", "submitted")


def _interval(text: str) -> float:
    """--interval S: seconds between polls, a finite number in [0, 3600]."""
    try:
        s = float(text)
    except ValueError:
        s = math.nan
    if not 0 <= s <= 3600:  # nan and inf fail too
        raise ToplError(
            f"--interval {clean(text)!s:.40}: seconds between polls, a number in [0, 3600]",
            where="command line",
            fix="e.g. --interval 2",
        )
    return s


def _pick(as_json: bool) -> int:
    """`topl watch` alone: the runs under the default run root (`topl runs`), and how to pick."""
    root = runs.default_root()
    rows = runs.listing(root)
    runs.show(root, rows, as_json)
    if not as_json:
        example = rows[0]["run_dir"] if rows else "RUN_DIR"
        print(f"pick one: topl watch {example}  (the newest first; topl runs lists them)")
    return 0 if rows else 2


def _run_dir(rest: list[str]) -> Path:
    fix = "`topl runs` lists the run directories (newest first); topl watch RUN_DIR"
    if len(rest) != 1 or not Path(rest[0]).is_dir():
        raise ToplError(
            f"topl watch needs one run directory, got {rest!r}", where="command line", fix=fix
        )
    run_dir = Path(rest[0])
    if not (run_dir / "topl.json").is_file() and not (run_dir / "status.json").is_file():
        points = sorted(p.name for p in run_dir.iterdir() if (p / "topl.json").is_file())
        raise ToplError(
            f"{run_dir} is not a topl run directory (no topl.json, no status.json)",
            where="command line",
            fix=f"watch one of its runs: {', '.join(str(run_dir / p) for p in points[:4])}"
            if points
            else fix,
        )
    return run_dir


def _dry_run(run_dir: Path, as_json: bool) -> int:
    why = "a dry run (topl launch --dry-run): nothing was started, there is nothing to follow"
    if as_json:
        print_json(
            {"run_dir": str(run_dir), "state": "dry_run", "steps": 0, "why": why}, indent=None
        )
    else:
        print(
            f"topl watch: {run_dir} is {why}; its command is in {run_dir / 'command.sh'} "
            "(launch without --dry-run to start it)",
            file=sys.stderr,
        )
    return DRY_RUN


def _describe(st: dict) -> str:
    """`succeeded`, `failed: exit code 3 (...)`, `still running` as a person reads it."""
    state = st.get("state")
    state = None if state is None else str(state)  # a status.json edited by hand: any JSON
    if state in (None, "running", "submitted"):
        return f"not ended yet ({state or 'no status.json yet'})"
    keys = ("attempt", "exit_code", "signal", "ray_status")  # attempt: a resumed run's
    extra = [f"{k} {st[k]}" for k in keys if st.get(k) is not None]
    why = st.get("reason") or st.get("error") or st.get("ray_message")
    return state + (f": {', '.join(extra)}" if extra else "") + (f" ({why})" if why else "")
