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


def run_job(ctx: LaunchContext, cfg: DictConfig) -> None:
    """One job (once per sweep point under -m): check, write the run dir, start the backend."""
    from hydra.core.hydra_config import HydraConfig

    from topl.launcher import rundir
    from topl.launcher.compose import from_hydra_job
    from topl.launcher.contract import check, errors
    from topl.launcher.render import render

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if ctx.prepared is not None:
        composed, violations = ctx.prepared
    else:
        task_overrides = list(hc.overrides.task)
        composed = from_hydra_job(cfg, task_overrides, dict(hc.runtime.choices), ctx.root,
                                  ctx.user_overrides or task_overrides)
        violations = check(composed)
    print_violations(violations)
    spec = composed.to_object()
    if errors(violations):
        ctx.rc = 2
        print(f"topl: rejected before launch; nothing started (run dir {run_dir})", file=sys.stderr)
        return
    inv = render(spec)
    if not ctx.dry_run and not ctx.preflown:  # a sweep point: Hydra made its dir; nothing written
        try:
            preflight(spec)
        except ToplError as e:
            ctx.rc = 2
            print(e.render(), file=sys.stderr)
            return
    rundir.write(run_dir, composed, inv, violations)
    print(f"topl: run directory {run_dir}")
    if ctx.dry_run:
        print(inv.command(spec.cluster.python))
        return
    backend = spec.cluster.backend
    if backend != "local" and not doctor_ok(ctx, spec, run_dir):
        ctx.rc = 2
        return
    if backend == "local":
        from topl.launcher.backends.local import run_local

        rc = run_local(spec, run_dir)
    elif backend == "subprocess":
        from topl.launcher.backends.subprocess import run_subprocess

        rc = run_subprocess(inv, run_dir, spec.cluster.python)
    else:
        from topl.launcher.backends.ray_job import run_ray_job

        rc = run_ray_job(inv, run_dir, spec.cluster.ray_address, ctx.follow, python=spec.cluster.python)
    ctx.rc = max(ctx.rc, rc)


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
        from topl.launcher.backends.ray_job import ray_client

        ray_client(spec.cluster.ray_address)


def doctor_ok(ctx: LaunchContext, spec, run_dir: Path) -> bool:
    """Remote backends: check the stack where the job will run before starting it."""
    from topl.launcher.cli import doctor

    if ctx.skip_doctor:
        print("topl: WARNING: --skip-doctor: the target stack was NOT checked; a missing "
              "batch_invariant_ops or an unpatched verl will only show up as logdiff != 0 or a "
              "crash hours in", file=sys.stderr)
        return True
    address = spec.cluster.ray_address if spec.cluster.backend == "ray_job" else None
    nodes = doctor.run(spec, address)
    (run_dir / "doctor.json").write_text(json.dumps(nodes, indent=1))
    bad = [(n["node"], f) for n in nodes for f in n["findings"] if f["severity"] == "error"]
    for node, f in bad:
        print(f"ERROR {f['id']} on {node}: {f['what']}: found {f['found']}, needed {f['needed']}\n"
              f"  fix: {f['fix']}", file=sys.stderr)
    if bad:
        print("topl: the doctor found errors; nothing started (--skip-doctor to override, loudly)",
              file=sys.stderr)
    return not bad
