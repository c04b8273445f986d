"""`topl launch --resume RUN_DIR`: start an interrupted or failed run again, in its own run
directory, from its own composed config (.hydra/config.yaml, written by Hydra at launch; the recipe
files it came from may have changed since), with its identity kept (launcher/run/identity.py: the
same experiment name, spec hash and tracker tags) and verl told to resume from its checkpoints.

verl resumes by itself when trainer.resume_mode=auto (verl@0.9.1:verl/trainer/config/
ppo_trainer.yaml:trainer.resume_mode, the default; verl@0.8.0 the same key and default): its
trainer loads the latest `global_step_N` under trainer.default_local_dir
(verl@0.9.1:verl/trainer/ppo/ray_trainer.py:RayPPOTrainer._load_checkpoint, find_latest_ckpt_path;
the V1 trainer: verl/trainer/ppo/v1/trainer_base.py:_load_checkpoint; verl@0.8.0:
verl/trainer/ppo/ray_trainer.py:RayPPOTrainer._load_checkpoint), "Training from scratch" when
there is none. topl renders neither key: the resumed command sets resume_mode=auto explicitly (a
recipe's `disable` would start over) and, where the driver started in the directory topl was
launched in (subprocess: topl's child; slurm: sbatch's working directory), default_local_dir to
where the first attempt saved them (checkpoint_dir), so a resume from another directory finds
them. A Ray job's driver starts in its head's directory, the same for every job of that head:
verl's relative default stays. Where no verl runs (the local backend, a Slurm allocation running
the reference engines) there are no checkpoints: refused.

The files of the attempt before (verl.log, metrics.jsonl, which verl's file logger truncates, the
command, the guard's and the doctor's records, a job id, Slurm's log) move to RUN_DIR/attempts/N/
first, with a copy of its status.json: nothing is overwritten, and `topl watch` / `topl compare`
read the new attempt; status.json records `attempt`. A job handed to Ray or Slurm that nobody
watched is asked how it ended first (settle): a crashed detached job is resumed without a
`topl watch` before, and one still running is refused."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from topl.launcher.base.errors import ToplError
from topl.launcher.base.redact import REDACTED
from topl.launcher.base.tree import flatten
from topl.launcher.compose.composed import Composed
from topl.launcher.contract import check, errors
from topl.launcher.render.invocation import render
from topl.launcher.run import (
    backends,
    identity,
    lifecycle,
    rundir,
    watch,
    watch_io,
    watch_ray,
    watch_slurm,
    watch_status,
)
from topl.launcher.run.backends import ray_job, slurm_client, slurm_script
from topl.launcher.run.launch import LaunchContext, start
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import JobSpec, is_strict

RESUMABLE = ("failed", "interrupted")
RESUME_KEY = "trainer.resume_mode"  # verl's (module docstring); `auto`: the latest checkpoint
CKPT_KEY = "trainer.default_local_dir"  # where verl saves and finds them (checkpoint_dir)
# what one attempt writes into the run directory (backends/, launch.py:doctor_ok)
ATTEMPT_FILES = (
    *("verl.log", "metrics.jsonl", "command.sh", "invocation.json", "env.json", "doctor.json"),
    *("guard", "watch.png", ray_job.JOB_ID_FILE, slurm_client.JOB_ID_FILE, slurm_client.EXIT_FILE),
    *(slurm_script.SCRIPT, "doctor"),  # doctor/NODE.json: each node's report in an allocation
)


def settle(run_dir: Path) -> str | None:
    """A job handed to Ray or Slurm (`submitted`, or its topl gone) whose end nobody recorded
    (no `topl watch` ran): its state asked now and its end recorded, as `topl watch` does; a
    detached job that crashed is what is most often resumed. The job's state as shown while it
    still runs, else None."""
    if watch_io.read_status(run_dir).get("state") not in ("submitted", "running"):
        return None
    ray, slurm = watch_ray.ray_job(run_dir), watch_slurm.slurm_job(run_dir)
    if ray is None and slurm is None:
        return None
    w = watch.Watcher(run_dir, False, ray=ray, slurm=slurm)
    return None if w.ended() else w.job_state


def refuse_state(run_dir: Path) -> None:
    """Only a run that ended without succeeding (or whose topl is gone, its job with it) is
    resumed."""
    running = settle(run_dir)
    if running is not None:  # a second job would write the same checkpoints
        raise ToplError(
            f"{run_dir} is not resumed: its job is still running ({running})",
            where=f"--resume {run_dir}",
            fix=f"stop it first (topl watch {run_dir} --stop), then --resume",
        )
    st = watch_io.read_status(run_dir)
    state = st.get("state")
    if state in RESUMABLE or (state == "running" and watch_status.topl_gone(st)):
        return
    why = {
        "succeeded": "it succeeded: there is nothing to resume",
        "dry_run": "it is a dry run: nothing was started, there is nothing to resume",
        "running": "it is still running (its topl is alive)",
        "submitted": "it was submitted and may still be running",
        None: "it has no readable status.json: not a run `topl launch` started",
    }.get(state, f"its state is {watch_io.clean(state)!s:.40}")
    fix = {
        "succeeded": "launch a new run (topl launch ...)",
        "dry_run": "launch it without --dry-run (topl launch with the same overrides)",
        "running": f"stop it first (topl watch {run_dir} --stop), then --resume",
        "submitted": f"stop it first (topl watch {run_dir} --stop), then --resume",
    }.get(state, "resume a run that failed or was interrupted (topl runs lists them)")
    raise ToplError(f"{run_dir} is not resumed: {why}", where=f"--resume {run_dir}", fix=fix)


def _yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(watch_io.read_text(path, 64 << 20) or "null")
    except (yaml.YAMLError, RecursionError):
        return None


def load(run_dir: Path) -> Composed:
    """The run's own composed config, typed again by this topl's JobSpec (refused when it no
    longer fits: a key removed, a type changed)."""
    data, topl = _yaml(run_dir / ".hydra" / "config.yaml"), _yaml(run_dir / "topl.json")
    sources = _yaml(run_dir / "sources.json")
    if not isinstance(data, dict) or not isinstance(topl, dict):
        raise ToplError(
            f"{run_dir} lacks its composed config (.hydra/config.yaml) or topl.json",
            where=f"--resume {run_dir}",
            fix="resume a run directory `topl launch` wrote (topl runs lists them)",
        )
    secret = next((k for k, v in flatten(data).items() if REDACTED in str(v)), None)
    if secret is not None:
        raise ToplError(
            f"{run_dir}'s config held a secret at {secret}, redacted when written (secrets never "
            "land in files): it cannot be re-run from its run directory",
            where=str(run_dir / ".hydra" / "config.yaml"),
            fix="launch a new run, the secret read from the environment (${oc.env:NAME})",
        )
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(JobSpec), data)
        OmegaConf.set_struct(cfg, True)
        OmegaConf.to_object(cfg)  # every interpolation and type, now
    except (OmegaConfBaseException, ValueError) as e:
        key = getattr(e, "full_key", None)
        what = str(e).splitlines()[0]
        raise no_longer_valid(run_dir, f"{key}: {what}" if key else what) from None
    return Composed(
        cfg,  # type: ignore[arg-type]
        sources if isinstance(sources, dict) else {},
        [str(o) for o in topl.get("overrides") or []],
        dict(topl.get("choices") or {}),
        topl.get("recipe"),
    )


def no_longer_valid(run_dir: Path, what: str) -> ToplError:
    return ToplError(
        f"{run_dir}'s config no longer validates with this topl: {what}",
        where=str(run_dir / ".hydra" / "config.yaml"),
        fix="launch a new run with a recipe this topl accepts (topl check ... --fix)",
    )


def point_of(run_dir: Path) -> list[str] | None:
    """A sweep point's overrides (its identity names the point), None for a single run."""
    if not (run_dir.parent / "multirun.yaml").is_file():
        return None
    ov = _yaml(run_dir / ".hydra" / "overrides.yaml")
    return [str(o) for o in ov] if isinstance(ov, list) else []


def resumed_spec(composed: Composed, run_dir: Path) -> JobSpec:
    """The spec verl gets: the run's identity as at launch (the spec hash of its spec.yaml), and
    verl's resume_mode=auto."""
    spec = composed.to_object()
    if not backend_traits.of(spec).remote:
        where = f"cluster.backend={spec.cluster.backend}"
        if backend_traits.traits(spec.cluster.backend).allocates:
            where += f", cluster.slurm.run={spec.cluster.slurm.run}"
        raise ToplError(
            f"{run_dir} ran topl's reference engines (no verl), which write no checkpoints: "
            "there is nothing to resume from",
            where=where,
            fix="launch it again (topl launch with the same overrides); it starts from step 1",
        )
    text = watch_io.read_text(run_dir / "spec.yaml", 64 << 20) or ""
    ident = identity.of(composed, run_dir, text, point_of(run_dir))
    spec = identity.stamp(spec, composed, ident)
    verl = {k: v for k, v in spec.verl_overrides.items() if k.lstrip("+") != RESUME_KEY}
    verl[RESUME_KEY] = "auto"
    pinned = checkpoint_dir(spec, run_dir)
    if pinned is not None:
        verl[CKPT_KEY] = pinned
    return dataclasses.replace(spec, verl_overrides=verl)


def checkpoint_dir(spec: JobSpec, run_dir: Path) -> str | None:
    """Where the first attempt's verl saved its checkpoints, absolute: verl's default
    `checkpoints/${trainer.project_name}/${trainer.experiment_name}` (verl@0.9.1:verl/trainer/
    config/ppo_trainer.yaml:trainer.default_local_dir; verl@0.8.0 the same), joined to the
    driver's working directory (RayPPOTrainer._load_checkpoint: os.getcwd()), which the backend
    derives from where topl was launched (topl.json's cwd; Backend.driver_dir). None where topl
    cannot know it: the driver's directory is the cluster's, a run written before topl recorded
    cwd, or these keys set in verl_overrides."""
    topl = _yaml(run_dir / "topl.json")
    cwd = topl.get("cwd") if isinstance(topl, dict) else None
    names = ("trainer.project_name", "trainer.experiment_name", CKPT_KEY)
    driver = backends.of(spec).driver_dir(spec, cwd) if isinstance(cwd, str) else None
    if driver is None or any(k.lstrip("+") in names for k in flatten(spec.verl_overrides)):
        return None
    return str(Path(driver) / "checkpoints" / spec.project / spec.experiment)


def set_aside(run_dir: Path) -> Path:
    """The attempt before's files into RUN_DIR/attempts/N/ (N = 1, 2, ...)."""
    attempts = run_dir / "attempts"
    attempts.mkdir(mode=0o700, exist_ok=True)
    n = 1 + sum(1 for p in attempts.iterdir() if p.name.isdigit())
    dest = attempts / str(n)
    try:
        dest.mkdir(mode=0o700)  # exclusive: two resumes of one run never share an attempt
    except FileExistsError:
        raise ToplError(
            f"another --resume of {run_dir} is under way ({dest} appeared meanwhile)",
            where=f"--resume {run_dir}",
            fix=f"follow that one: topl watch {run_dir}",
        ) from None
    names = [*ATTEMPT_FILES, *(p.name for p in run_dir.glob("slurm-*.out"))]
    for name in names:
        if (run_dir / name).exists():
            shutil.move(str(run_dir / name), str(dest / name))
    if (run_dir / "status.json").is_file():  # how it ended; the new attempt rewrites the original
        shutil.copyfile(run_dir / "status.json", dest / "status.json")
    return dest


def run(ctx: LaunchContext, run_dir: Path) -> int:
    """Resume: check the run's own config against today's contract, set the attempt before aside,
    write the new command, start the backend with status.json moving to running and to its end."""
    refuse_state(run_dir)
    composed = load(run_dir)
    violations = check(composed)
    if errors(violations):
        ctx.say("violations", violations=violations)
        ids = ", ".join(sorted({v.rule for v in errors(violations)}))
        raise no_longer_valid(run_dir, f"the contract rejects it ({ids}, above)")
    ctx.say("violations", violations=violations)
    spec = resumed_spec(composed, run_dir)
    backend = backends.of(spec)
    backend.preflight(spec)
    inv = render(spec)
    before = set_aside(run_dir)
    rundir.write_command(run_dir, inv, spec.cluster.python)
    ctx.say("resumed", run_dir=run_dir, before=before)
    attempt = int(before.name) + 1

    def recorded() -> int:
        return lifecycle.run_recorded(
            run_dir,
            lambda: start(ctx, spec, inv, run_dir),
            detached=backend.detached(ctx.follow),
            backend=backend.traits.name,
            attempt=attempt,
        )

    rc = watch.launched(run_dir, is_strict(spec), recorded) if ctx.watch else recorded()
    if rc == 0 and backend.detached(ctx.follow):
        ctx.say("follow_hint", run_dir=run_dir)
    return rc
