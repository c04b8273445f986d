"""One launch: the context a `topl launch` carries to every job, and what one job does
(check, write the run directory, run the doctor for remote backends, start the backend).

This is the run layer below the command line: it imports nothing from launcher/cli/ and prints
nothing itself. What a person should see is handed to `LaunchContext.say(event, **data)`, which
the CLI (launcher/cli/launch.py:say) prints; the events are listed in EVENTS."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from omegaconf import DictConfig

from topl.launcher.base.errors import ToplError
from topl.launcher.contract import check, errors
from topl.launcher.render.invocation import render
from topl.launcher.run import backends, identity, lifecycle, rundir, watch
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_strict

if TYPE_CHECKING:
    from topl.launcher.compose.composed import Composed
    from topl.launcher.compose.recipes import RecipeRoot
    from topl.launcher.contract.core import Violation
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec

# What a job reports, with its data (the CLI prints each; nothing here prints):
EVENTS = {
    "violations": "violations",  # the contract's findings for a single run (warnings)
    "error": "error",  # a ToplError that ended this job (exit 2)
    "rejected": "run_dir",  # a sweep point the contract rejected
    "point": "num, overrides, run_dir",  # a sweep point written (dry run)
    "run_dir": "run_dir",  # the run directory is written
    "command": "text",  # the dry run's command
    "doctor_skipped": "",  # --skip-doctor
    "doctor_error": "node, finding",  # one doctor error on one node
    "follow_hint": "run_dir",  # a detached job: how to follow it
    "resumed": "run_dir, before",  # --resume: the attempt before set aside in `before`
    "phase": "text",  # a remote launch's pre-check that may take a while, as it starts
}


def _silent(event: str, **data: object) -> None:
    """The default reporter: nothing shown (the CLI gives its own)."""


@dataclass
class LaunchContext:
    """What one `topl launch` carries from its command line to every job Hydra runs."""

    dry_run: bool = False  # write the run directory, start nothing
    follow: bool = False  # ray_job: stream the job's logs until it ends
    skip_doctor: bool = False  # remote backends: do not check the target stack first
    root: RecipeRoot | None = (
        None  # the recipe's temporary Hydra search-path root (recipes.RecipeRoot)
    )
    user_overrides: list[str] = field(default_factory=list)  # as the user typed them
    prepared: tuple[Composed, list[Violation]] | None = (
        None  # single run: (Composed, violations), made once up front
    )
    rc: int = 0  # the worst exit code of the jobs run so far
    preflown: bool = False  # single run: preflight already passed before Hydra started
    watch: bool = False  # follow logdiff/reward live; strict: stop on the first logdiff != 0
    multirun: bool = False  # -m: one line per point here, the sweep's table after (cli/launch.py)
    say: Callable[..., None] = _silent  # say(event, **data): what to show (EVENTS)


def run_job(ctx: LaunchContext, cfg: DictConfig) -> None:
    """One job (once per sweep point under -m); an input error is printed and counts as exit 2."""
    try:
        _run_job(ctx, cfg)
    except ToplError as e:  # inside Hydra's task a raised error would become Hydra's traceback
        ctx.say("error", error=e)
        ctx.rc = max(ctx.rc, e.exit_code)


def _run_job(ctx: LaunchContext, cfg: DictConfig) -> None:
    """Check, write the run dir, start the backend with a status file that is right on every exit."""
    from hydra.core.hydra_config import HydraConfig

    from topl.launcher.compose.hydra import from_hydra_job  # lazy: Hydra only when this runs

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    rundir.seal(run_dir)  # Hydra's own .hydra/ files: secrets out, owner-only
    if ctx.prepared is not None:
        composed, violations = ctx.prepared
    else:
        task_overrides = list(hc.overrides.task)
        composed = from_hydra_job(
            cfg,
            task_overrides,
            dict(hc.runtime.choices),
            ctx.root,
            ctx.user_overrides or task_overrides,
        )
        violations = check(composed)
    if not ctx.multirun:  # a sweep's warnings are in its table and sweep_report.json
        ctx.say("violations", violations=violations)
    spec = composed.to_object()
    backend = backends.of(spec)
    if errors(violations):  # a sweep point (a single run is checked before its dir exists)
        ctx.rc = 2
        ids = sorted({v.rule for v in errors(violations)})
        rundir.set_status(run_dir, "failed", error=f"rejected by {', '.join(ids)}", started=False)
        ctx.say("rejected", run_dir=run_dir)
        return
    point = list(hc.overrides.task) if ctx.multirun else None
    ident = identity.of(composed, run_dir, rundir.spec_text(composed), point)
    spec = identity.stamp(spec, composed, ident)  # the trackers verl logs to know the run
    inv = render(spec)
    if not ctx.dry_run and not ctx.preflown:  # a sweep point: Hydra made its dir; nothing written
        try:
            backend.preflight(spec)
        except ToplError as e:
            ctx.rc = 2
            rundir.set_status(run_dir, "failed", error=e.message, started=False)
            ctx.say("error", error=e)
            return
    rundir.write(run_dir, composed, inv, violations)
    if ctx.multirun and ctx.dry_run:  # one line per point: the command is in its command.sh
        rundir.set_status(run_dir, "dry_run", started=False, backend=backend.traits.name)
        ctx.say("point", num=hc.job.num, overrides=list(hc.overrides.task), run_dir=run_dir)
        return
    ctx.say("run_dir", run_dir=run_dir)
    if ctx.dry_run:
        # nothing started, and status.json says so: a run dir without one is a launch that died
        rundir.set_status(run_dir, "dry_run", started=False, backend=backend.traits.name)
        ctx.say("command", text=inv.command(spec.cluster.python))
        return

    def recorded() -> int:
        return lifecycle.run_recorded(
            run_dir,
            lambda: start(ctx, spec, inv, run_dir),
            detached=backend.detached(ctx.follow),
            reraise=ctx.multirun,  # a signal stops the whole sweep, not only this point
            backend=backend.traits.name,
        )

    if ctx.watch:
        rc = watch.launched(run_dir, is_strict(spec), recorded)
    else:
        rc = recorded()
    if rc == 0 and backend.detached(ctx.follow):
        ctx.say("follow_hint", run_dir=run_dir)
    ctx.rc = max(ctx.rc, rc)


def start(ctx: LaunchContext, spec: JobSpec, inv: Invocation, run_dir: Path) -> int:
    """Start the backend; its return code (negative N: the job died of signal N)."""
    backend = backends.of(spec)
    backend.preflight(spec)  # again: a Ray head may have gone since the up-front check
    if backend_traits.of(spec).remote and not doctor_ok(ctx, spec, run_dir):
        raise ToplError(
            "the doctor found errors; nothing started",
            where=str(run_dir / "doctor.json"),
            fix="fix the findings above, or --skip-doctor (loudly)",
        )
    return backend.start(spec, inv, run_dir, ctx.follow)


def preflight(spec: JobSpec, say: Callable[..., None] = _silent) -> None:
    """What the backend needs is here (local: torch; ray_job: an address, Ray, a reachable head),
    or one message (exit 2) before a run directory is written."""
    backend = backends.of(spec)
    if backend.traits.addressed and spec.cluster.ray_address:
        say(
            "phase",
            text=f"reaching the Ray head at {spec.cluster.ray_address} "
            f"(up to {spec.cluster.ray_timeout_s:g} s)",
        )
    backend.preflight(spec)


def doctor_ok(ctx: LaunchContext, spec: JobSpec, run_dir: Path) -> bool:
    """Remote backends: check the stack where the job will run before starting it; the nodes'
    report goes to run_dir/doctor.json, each error to `ctx.say`."""

    if ctx.skip_doctor:
        ctx.say("doctor_skipped")
        return True
    backend = backends.of(spec)
    where = spec.cluster.ray_address if backend.traits.addressed else None
    limit = spec.cluster.ray_timeout_s + 600
    ctx.say(
        "phase",
        text=f"checking the target stack: topl doctor on {where or 'this machine'} "
        f"(up to {limit:g} s; --skip-doctor skips it, loudly)",
    )
    # the doctor job itself may take minutes on a cluster; a head that stops answering must not hang us
    nodes = lifecycle.with_deadline(
        lambda: backend.doctor(spec),
        limit,
        f"topl doctor on {where or 'this machine'}",
        fix="check that the Ray head answers (`ray status`), or --skip-doctor",
    )
    rundir.write_file(run_dir / "doctor.json", json.dumps(nodes, indent=1))
    bad = [(n["node"], f) for n in nodes for f in n["findings"] if f["severity"] == "error"]
    for node, f in bad:
        ctx.say("doctor_error", node=node, finding=f)
    return not bad
