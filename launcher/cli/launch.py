"""`topl launch`: a Hydra app. Validate, write the run directory, start the backend.

`main` parses topl's flags, composes and checks the spec once (a single run), and hands Hydra a
task bound to a :class:`~topl.launcher.run.launch.LaunchContext`; under `-m` the sweeper validates
every point and each job builds its spec from the config Hydra composed for it.
"""

from __future__ import annotations

import signal
import sys

from omegaconf import DictConfig

from topl.launcher.base.console import print_violations
from topl.launcher.base.errors import ToplError
from topl.launcher.cli.argv import parse
from topl.launcher.cli.compare import write_sweep
from topl.launcher.cli.output import print_table
from topl.launcher.contract import check, errors
from topl.launcher.contract.dryrun.deep import deep
from topl.launcher.run import rundir
from topl.launcher.run.launch import LaunchContext, preflight, run_job
from topl.launcher.run.lifecycle import Interrupted, interrupt_sweep, signals_interrupt
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import register_configs

UNSAFE_FLAG = "--unsafe-hydra-overrides"  # = overrides_guard.UNSAFE_FLAG
TOPL_FLAGS = ("--dry-run", "--follow", "--skip-doctor", "--skip-deep", "--watch", UNSAFE_FLAG)
# Flags that make Hydra load another primary config (or unpickle one): configs topl cannot check.
UNSAFE_HYDRA_FLAGS = (
    "--config-dir",
    "-cd",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--experimental-rerun",
)
HYDRA_FLAGS_WITH_VALUE = (
    "--cfg",
    "-c",
    "--info",
    "-i",
    "--package",
    "-p",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
)
INFORMATIONAL = ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help")
# Every flag Hydra's app parser knows (hydra-core@1.3.8:hydra/_internal/utils.py:get_args_parser);
# anything else is refused before a run directory exists (`--dryrun` used to leave an empty one).
HYDRA_APP_FLAGS = (
    *("--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package"),
    *("-p", "--run", "-r", "--multirun", "-m", "--shell-completion", "-sc", "--config-path"),
    *("-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info"),
    "-i",
)


def split_hydra_flags(args: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra's own flags with their values, the overrides)."""
    hydra_flags, overrides = [], []
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            overrides.append(a)
        else:
            hydra_flags.append(a)
            nxt = args[i + 1] if i + 1 < len(args) else None
            if a in HYDRA_FLAGS_WITH_VALUE and nxt and not nxt.startswith("-") and "=" not in nxt:
                hydra_flags.append(nxt)
                i += 1
        i += 1
    return hydra_flags, overrides


def _quoted(value: str) -> str:
    """A string as one quoted value in Hydra's override grammar (no interpolation)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${") + "'"


def main(args: list[str]) -> int:
    from topl.launcher.compose.hydra import split_recipe  # lazy: Hydra only when this runs

    flags, rest = parse(
        args, flags=TOPL_FLAGS, options={"--resume": None}, passthrough=HYDRA_APP_FLAGS
    )
    if flags.resume is not None:
        return _resume(flags, rest)
    hydra_flags, overrides = split_hydra_flags(rest)
    bad = [f for f in hydra_flags if f.split("=")[0] in UNSAFE_HYDRA_FLAGS]
    if bad and not flags.unsafe_hydra_overrides:
        raise ToplError(
            f"{' '.join(bad)} makes Hydra load configs (or a pickle) topl cannot check",
            where="command line",
            fix=f"drop it; if you trust its files, add {UNSAFE_FLAG}",
        )
    with signals_interrupt():  # SIGTERM, like Ctrl-C, unwinds: temp files go, the run is marked
        # the recipe is read and validated once; Hydra and the up-front check compose from that copy
        prepared = split_recipe(overrides + ([UNSAFE_FLAG] if flags.unsafe_hydra_overrides else []))
        try:
            return _launch(flags, hydra_flags, overrides, prepared)
        finally:
            if prepared[1] is not None:
                prepared[1].cleanup()


def _launch(flags, hydra_flags: list[str], overrides: list[str], prepared) -> int:
    import hydra

    from topl.launcher.compose.hydra import (
        compose_job,
        output_dirs,
    )  # lazy: Hydra only when this runs
    from topl.launcher.compose.sources import conf_dir  # lazy: Hydra only when this runs

    informational = any(f in INFORMATIONAL for f in hydra_flags)
    multirun = any(f in ("-m", "--multirun") for f in hydra_flags)
    hydra_overrides, root = prepared
    ctx = LaunchContext(
        flags.dry_run,
        flags.follow or flags.watch,  # --watch on a Ray job reads the logs --follow streams
        flags.skip_doctor,
        user_overrides=overrides,
        root=root,
        watch=flags.watch,
        multirun=multirun,
        say=say,
    )
    if not informational and not multirun:
        # compose and check once, up front: bad input is a readable error and exit 2 before
        # Hydra makes a run dir; the job reuses this spec and these violations
        composed = compose_job(overrides, prepared=prepared)
        vs = check(composed)
        if not errors(vs) and not flags.dry_run:
            # no head, no Ray, no reach: one message, exit 2, no run dir; this first (a second
            # at most to learn the head is gone), verl's dry run (seconds) after
            preflight(composed.to_object(), say)
            ctx.preflown = True
            vs += _deep(composed, flags.skip_deep)
        if errors(vs):
            print_violations(vs)
            print("topl: rejected before launch; nothing started", file=sys.stderr)
            return 2
        ctx.prepared = (composed, vs)
    made = None
    if not informational:
        # the run (or sweep) dir is made here, atomically and exclusively, before Hydra writes into it
        run_dir, sweep_dir = output_dirs(hydra_overrides)
        made = rundir.create(sweep_dir if multirun else run_dir)
        try:
            rundir.room(made)  # Hydra writes .hydra/ first, and reports a full disk as a traceback
        except ToplError:
            made.rmdir()  # still empty: made just above
            raise
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        hydra_overrides = [o for o in hydra_overrides if not o.lstrip("+").startswith(key + "=")]
        hydra_overrides.append(f"{key}={_quoted(str(made))}")
    if multirun and root is not None:  # the sweeper validates the recipes as the user named them
        hydra_overrides.append(f"hydra.sweeper.recipe={_quoted(root.user_value)}")
    register_configs()

    def task(cfg: DictConfig) -> None:
        run_job(ctx, cfg)

    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base=None)(task)
    saved = sys.argv
    sys.argv = ["topl", *hydra_flags, *hydra_overrides]
    try:
        app()
    except (Interrupted, KeyboardInterrupt) as e:
        if multirun and made is not None:  # every started point's status says so, none starts
            signum = getattr(e, "signum", signal.SIGINT)
            marked = ", ".join(interrupt_sweep(made, signum, since=getattr(e, "at", None)))
            marked = marked or "none"
            print(
                f"topl: {signal.Signals(signum).name}: the sweep was stopped, no further point "
                f"starts (points marked interrupted here: {marked}; sweep dir {made})",
                file=sys.stderr,
            )
            return 128 + signum
        raise
    except SystemExit as e:
        if e.code not in (0, None):
            if informational or multirun:
                return 2
            return e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = saved
        if made is not None and made.is_dir():
            rundir.seal(made)  # whatever Hydra or the sweeper wrote: owner-only, secrets out
    if multirun and made is not None:
        sweep_table(made, overrides)
        if not flags.dry_run:  # every point has ended: the runs side by side, in the sweep dir
            write_sweep(made)
    elif made is not None and ctx.rc == 0 and not flags.dry_run:
        print(NEXT.format(run_dir=made), file=sys.stderr)
    return ctx.rc


def _resume(flags, rest: list[str]) -> int:
    """--resume RUN_DIR: the run's own config, in its own directory (launcher/run/resume.py)."""
    from pathlib import Path

    from topl.launcher.run import resume  # lazy: only --resume reads a run's config back

    if rest or flags.dry_run:
        raise ToplError(
            f"--resume re-runs the run's own config; it takes no {' '.join(rest) or '--dry-run'}",
            where="command line",
            fix=f"topl launch --resume {flags.resume} (or a new run: topl launch OVERRIDES)",
        )
    run_dir = Path(flags.resume)
    if not run_dir.is_dir():
        raise ToplError(
            f"--resume {run_dir}: no such run directory",
            where="command line",
            fix="topl runs lists the runs (their state, newest first)",
        )
    ctx = LaunchContext(
        follow=flags.follow or flags.watch,
        skip_doctor=flags.skip_doctor,
        watch=flags.watch,
        say=say,
    )
    with signals_interrupt():
        return resume.run(ctx, run_dir.absolute())


def _deep(composed, skip: bool) -> list:
    """Remote backends: the declared verl's own start-up checks (contract/dryrun) before anything
    is submitted, where that verl is installed here or its wheel cached (never fetched here:
    `topl check --deep` fetches it); `--skip-deep` skips them, loudly."""
    if not backend_traits.of(composed.to_object()).remote:
        return []
    if skip:
        print(
            "topl: WARNING: --skip-deep: verl's own start-up checks were NOT run; a layout verl "
            "refuses shows up minutes into the job",
            file=sys.stderr,
        )
        return []
    vs, note = deep(composed, fetch=False)
    if note:
        print(f"topl: {note}", file=sys.stderr)
    return vs


def say(event: str, **data) -> None:
    """Print what the run layer reports (launcher/run/launch.py:EVENTS)."""
    if event == "violations":
        print_violations(data["violations"])
    elif event == "error":
        print(data["error"].render(), file=sys.stderr)
    elif event == "rejected":
        print(
            f"topl: rejected before launch; nothing started (run dir {data['run_dir']})",
            file=sys.stderr,
        )
    elif event == "point":
        print(
            f"topl: point {data['num']}: {' '.join(data['overrides'])} -> {data['run_dir']} (dry run)"
        )
    elif event == "run_dir":
        print(f"topl: run directory {data['run_dir']}")
    elif event == "command":
        print(data["text"])
    elif event == "doctor_skipped":
        print(
            "topl: WARNING: --skip-doctor: the target stack was NOT checked; a missing "
            "batch_invariant_ops or an unpatched verl will only show up as logdiff != 0 or a "
            "crash hours in",
            file=sys.stderr,
        )
    elif event == "doctor_error":
        f = data["finding"]
        print(
            f"ERROR {f['id']} on {data['node']}: {f['what']}: found {f['found']}, needed "
            f"{f['needed']}\n  fix: {f['fix']}",
            file=sys.stderr,
        )
    elif event == "phase":  # a pre-check that may take a while: said as it starts
        print(f"topl: {data['text']}", file=sys.stderr, flush=True)
    elif event == "resumed":
        print(
            f"topl: resuming {data['run_dir']} (verl: trainer.resume_mode=auto; the attempt before "
            f"is in {data['before']})"
        )
    elif event == "follow_hint":
        print(f"topl: follow it to its end with: topl watch {data['run_dir']}")
    else:  # a new event the CLI does not know yet: shown, never dropped
        print(f"topl: {event}: {data}", file=sys.stderr)


NEXT = (
    "next: topl watch {run_dir} (its metrics) · topl probe alignment=off (what breaks logdiff 0)"
    " · topl recipes (the Ascend recipes)"
)


def sweep_table(sweep_dir, overrides: list[str]) -> None:
    """The sweep at a glance: one row per point, numbered as its run directory."""
    import json

    from topl.launcher.plan.sweep import swept_keys  # lazy: Hydra only when this runs

    try:
        report = json.loads((sweep_dir / "sweep_report.json").read_text())
    except (OSError, ValueError):
        return  # the sweeper stopped before its report (its message says why)
    keys = swept_keys(overrides)
    rows = []
    for i, v in enumerate(report["verdicts"]):
        point = dict(o.split("=", 1) for o in v["overrides"] if "=" in o)
        run = sweep_dir / str(i)
        rows.append(
            (
                str(i),
                *[point.get(k, "") for k in keys],
                "valid" if v["valid"] else "dropped",
                " ".join(v["rules"]) or "-",
                " ".join(v["warnings"]) or "-",
                f"{i}/" if run.is_dir() else "-",  # under the sweep folder the title names
            )
        )
    columns = ("#", *keys, "verdict", "errors", "warnings", "run dir")
    console = print_table(f"topl launch -m: {sweep_dir}", columns, rows)
    valid = sum(v["valid"] for v in report["verdicts"])
    console.print(f"{len(rows)} points, {valid} valid; details: topl check OVERRIDES of a point")
