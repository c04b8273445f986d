"""One launch: the context a `topl launch` carries to every job, and what one job does
(check, write the run directory, run the doctor for remote backends, start the backend)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from topl.launcher.cli.output import print_violations
from topl.launcher.errors import ToplError


@dataclass
class LaunchContext:
    """What one `topl launch` carries from its command line to every job Hydra runs."""

    dry_run: bool = False  # write the run directory, start nothing
    follow: bool = False  # ray_job: stream the job's logs until it ends
    skip_doctor: bool = False  # remote backends: do not check the target stack first
    root: object = None  # the recipe's temporary Hydra search-path root (recipes.RecipeRoot)
    user_overrides: list[str] = field(default_factory=list)  # as the user typed them
    prepared: tuple | None = None  # single run: (Composed, violations), made once up front
    rc: int = 0  # the worst exit code of the jobs run so far
    preflown: bool = False  # single run: preflight already passed before Hydra started
    watch: bool = False  # follow logdiff/reward live; strict: stop on the first logdiff != 0
    multirun: bool = False  # -m: one line per point here, the sweep's table after (cli/launch.py)


def run_job(ctx: LaunchContext, cfg: DictConfig) -> None:
    """One job (once per sweep point under -m); an input error is printed and counts as exit 2."""
    try:
        _run_job(ctx, cfg)
    except ToplError as e:  # inside Hydra's task a raised error would become Hydra's traceback
        print(e.render(), file=sys.stderr)
        ctx.rc = max(ctx.rc, e.exit_code)


def _run_job(ctx: LaunchContext, cfg: DictConfig) -> None:
    """Check, write the run dir, start the backend with a status file that is right on every exit."""
    from hydra.core.hydra_config import HydraConfig

    from topl.launcher import lifecycle, rundir
    from topl.launcher.compose import from_hydra_job
    from topl.launcher.contract import check, errors
    from topl.launcher.render import render

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
        print_violations(violations)
    spec = composed.to_object()
    if errors(violations):  # a sweep point (a single run is checked before its dir exists)
        ctx.rc = 2
        ids = sorted({v.rule for v in errors(violations)})
        rundir.set_status(run_dir, "failed", error=f"rejected by {', '.join(ids)}", started=False)
        print(f"topl: rejected before launch; nothing started (run dir {run_dir})", file=sys.stderr)
        return
    inv = render(spec)
    if not ctx.dry_run and not ctx.preflown:  # a sweep point: Hydra made its dir; nothing written
        try:
            preflight(spec)
        except ToplError as e:
            ctx.rc = 2
            rundir.set_status(run_dir, "failed", error=e.message, started=False)
            print(e.render(), file=sys.stderr)
            return
    rundir.write(run_dir, composed, inv, violations)
    if ctx.multirun and ctx.dry_run:  # one line per point: the command is in its command.sh
        rundir.set_status(run_dir, "dry_run", started=False, backend=spec.cluster.backend)
        print(f"topl: point {hc.job.num}: {' '.join(hc.overrides.task)} -> {run_dir} (dry run)")
        return
    print(f"topl: run directory {run_dir}")
    if ctx.dry_run:
        # nothing started, and status.json says so: a run dir without one is a launch that died
        rundir.set_status(run_dir, "dry_run", started=False, backend=spec.cluster.backend)
        print(inv.command(spec.cluster.python))
        return

    def recorded() -> int:
        return lifecycle.run_recorded(
            run_dir,
            lambda: start(ctx, spec, inv, run_dir),
            detached=spec.cluster.backend == "ray_job" and not ctx.follow,
            backend=spec.cluster.backend,
        )

    if ctx.watch:
        from topl.launcher import watch
        from topl.launcher.spec import is_strict

        rc = watch.launched(run_dir, is_strict(spec), recorded)
    else:
        rc = recorded()
    if rc == 0 and spec.cluster.backend == "ray_job" and not ctx.follow:
        print(f"topl: follow it to its end with: topl watch {run_dir}")
    ctx.rc = max(ctx.rc, rc)


def start(ctx: LaunchContext, spec, inv, run_dir: Path) -> int:
    """Start the backend; its return code (negative N: the job died of signal N)."""
    backend = spec.cluster.backend
    if backend == "ray_job":
        from topl.launcher.backends.ray_job import check_reachable

        check_reachable(spec.cluster.ray_address, spec.cluster.ray_timeout_s)
    if backend != "local" and not doctor_ok(ctx, spec, run_dir):
        raise ToplError(
            "the doctor found errors; nothing started",
            where=str(run_dir / "doctor.json"),
            fix="fix the findings above, or --skip-doctor (loudly)",
        )
    if backend == "local":
        from topl.launcher.backends.local import run_local

        try:
            return run_local(spec, run_dir)
        except ToplError as e:  # raised inside Hydra's app, whose handler would bury it in a hint
            print(e.render(), file=sys.stderr)
            return 2
    if backend == "subprocess":
        from topl.launcher.backends.subprocess import run_subprocess

        return run_subprocess(inv, run_dir, spec.cluster.python)
    from topl.launcher.backends.ray_job import run_ray_job

    return run_ray_job(
        inv,
        run_dir,
        spec.cluster.ray_address,
        ctx.follow,
        python=spec.cluster.python,
        timeout=spec.cluster.ray_timeout_s,
    )


def preflight(spec) -> None:
    """What the backend needs is here (local: torch; ray_job: an address, Ray, a reachable head),
    or one message (exit 2) before a run directory is written."""
    if spec.cluster.backend == "local":
        import importlib.util

        from topl.launcher.cli import LOCAL_EXTRA, local_extra_error

        for module in LOCAL_EXTRA:
            if importlib.util.find_spec(module) is None:
                raise local_extra_error("the local backend (cluster.backend=local)", module)
    if spec.cluster.backend == "ray_job":
        from topl.launcher.backends.ray_job import check_reachable

        check_reachable(spec.cluster.ray_address, spec.cluster.ray_timeout_s)


def doctor_ok(ctx: LaunchContext, spec, run_dir: Path) -> bool:
    """Remote backends: check the stack where the job will run before starting it."""
    from topl.launcher import lifecycle, rundir
    from topl.launcher.cli import doctor

    if ctx.skip_doctor:
        print(
            "topl: WARNING: --skip-doctor: the target stack was NOT checked; a missing "
            "batch_invariant_ops or an unpatched verl will only show up as logdiff != 0 or a "
            "crash hours in",
            file=sys.stderr,
        )
        return True
    address = spec.cluster.ray_address if spec.cluster.backend == "ray_job" else None
    # the doctor job itself may take minutes on a cluster; a head that stops answering must not hang us
    nodes = lifecycle.with_deadline(
        lambda: doctor.run(spec, address),
        spec.cluster.ray_timeout_s + 600,
        f"topl doctor on {address or 'this machine'}",
        fix="check that the Ray head answers (`ray status`), or --skip-doctor",
    )
    rundir.write_file(run_dir / "doctor.json", json.dumps(nodes, indent=1))
    bad = [(n["node"], f) for n in nodes for f in n["findings"] if f["severity"] == "error"]
    for node, f in bad:
        print(
            f"ERROR {f['id']} on {node}: {f['what']}: found {f['found']}, needed {f['needed']}\n"
            f"  fix: {f['fix']}",
            file=sys.stderr,
        )
    return not bad
