"""`topl watch RUN_DIR`: follow a running job's logdiff, reward and guard records; under
alignment=strict stop it on the first step whose max logdiff is not exactly 0 and say why in
status.json. Flags: --no-stop (only show), --strict (stop even if the spec is not strict),
--once (read what is there and exit), --json (a summary object instead of the table),
--interval S."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from topl.launcher.cli.argv import parse
from topl.launcher.errors import ToplError


def main(args: list[str]) -> int:
    from topl.launcher import watch

    flags, rest = parse(
        args, flags=("--no-stop", "--strict", "--once", "--json"), options={"--interval": "1.0"}
    )
    if len(rest) != 1 or not Path(rest[0]).is_dir():
        raise ToplError(
            f"topl watch needs one run directory, got {rest!r}",
            where="command line",
            fix="topl watch outputs/DATE/TIME (the directory `topl launch` printed)",
        )
    run_dir = Path(rest[0])
    strict = (flags.strict or watch.is_strict_run(run_dir)) and not flags.no_stop
    logs = _ray_logs(run_dir)
    w = watch.Watcher(run_dir, strict, logs=logs)
    stopped = {}

    def on_stop(reason: str) -> None:
        stopped["how"] = how = watch.stop_job(run_dir, watch.read_status(run_dir))
        watch.mark(run_dir, reason, how)
        print(f"topl watch: {how}; status.json marked failed", file=sys.stderr)

    out = io.StringIO() if flags.json else sys.stdout
    done = (lambda: True) if flags.once else None
    watch.follow(
        w, out=out, interval=float(flags.interval), on_stop=on_stop, done=done, quiet=flags.json
    )
    png = watch.plot(w.steps, run_dir / "watch.png") if w.steps else None
    if flags.json:
        print(
            json.dumps(
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
                }
            )
        )
    elif png:
        print(f"plot: {png}")
    return 1 if w.reason else 0


def _ray_logs(run_dir: Path):
    """A Ray job's log text through the Job API (None when the run is not a Ray job)."""
    job = run_dir / "ray_job_id"
    if not job.is_file() or (run_dir / "verl.log").is_file():
        return None  # --follow already streams the log into verl.log
    from ray.job_submission import JobSubmissionClient

    from topl.launcher.watch import _spec_get

    client = JobSubmissionClient(_spec_get(run_dir, "cluster.ray_address"))
    job_id = job.read_text().strip()
    return lambda: client.get_job_logs(job_id)
