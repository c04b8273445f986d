"""`topl launch`: a Hydra app. Validate, write the run directory, start the backend."""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from topl.launcher.errors import ToplError

TOPL_FLAGS = ("--dry-run", "--follow", "--skip-doctor")
HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--info", "-i", "--package", "-p", "--config-name", "-cn",
                          "--config-dir", "-cd", "--experimental-rerun")
_state: dict = {}


def _split(args: list[str]) -> tuple[set[str], list[str], list[str]]:
    """topl flags, Hydra flags (with their values), and overrides."""
    topl, hydra_flags, overrides = set(), [], []
    i = 0
    while i < len(args):
        a = args[i]
        if a in TOPL_FLAGS:
            topl.add(a)
        elif a.startswith("-"):
            hydra_flags.append(a)
            if a in HYDRA_FLAGS_WITH_VALUE and i + 1 < len(args) and not args[i + 1].startswith("-") and "=" not in args[i + 1]:
                hydra_flags.append(args[i + 1])
                i += 1
        else:
            overrides.append(a)
        i += 1
    return topl, hydra_flags, overrides


def _task(cfg: DictConfig) -> None:
    """Runs once per job (once per sweep point under -m)."""
    from hydra.core.hydra_config import HydraConfig

    from topl.launcher import rundir
    from topl.launcher.compose import Composed, _sources, loader_for
    from topl.launcher.contract import check, errors
    from topl.launcher.render import render
    from topl.launcher.spec import JobSpec

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    task_overrides = list(hc.overrides.task)
    root = _state.get("root")
    sources = _sources(loader_for(root), task_overrides, root)
    cfg = OmegaConf.merge(OmegaConf.structured(JobSpec), cfg)
    choices = {k: v for k, v in hc.runtime.choices.items() if v is not None and "hydra/" not in k}
    composed = Composed(cfg, sources, _state.get("user_overrides", task_overrides), choices,
                        str(root.source) if root else None)
    violations = check(composed)
    for v in violations:
        print(v.render(), file=sys.stderr)
    spec = composed.to_object()
    if errors(violations):
        _state["rc"] = 2
        print(f"topl: rejected before launch; nothing started (run dir {run_dir})", file=sys.stderr)
        return
    inv = render(spec)
    rundir.write(run_dir, composed, inv, violations)
    print(f"topl: run directory {run_dir}")
    if "--dry-run" in _state.get("flags", ()):
        print(inv.command(spec.cluster.python))
        _state["rc"] = 0
        return
    backend = spec.cluster.backend
    if backend != "local":
        if not _doctor_ok(spec, run_dir):
            _state["rc"] = 2
            return
    if backend == "local":
        from topl.launcher.backends.local import run_local

        try:
            rc = run_local(spec, run_dir)
        except ToplError as e:  # raised inside Hydra's app, whose handler would bury it in a hint
            print(e.render(), file=sys.stderr)
            rc = 2
    elif backend == "subprocess":
        from topl.launcher.backends.subprocess import run_subprocess

        rc = run_subprocess(inv, run_dir, spec.cluster.python)
    else:
        from topl.launcher.backends.ray_job import run_ray_job

        rc = run_ray_job(inv, run_dir, spec.cluster.ray_address, "--follow" in _state["flags"],
                         python=spec.cluster.python)
    _state["rc"] = max(_state.get("rc", 0), rc)


def _doctor_ok(spec, run_dir: Path) -> bool:
    """Remote backends: check the stack where the job will run before starting it."""
    import json

    from topl.launcher.cli import doctor as doctor_cli

    if "--skip-doctor" in _state.get("flags", ()):
        print("topl: WARNING: --skip-doctor: the target stack was NOT checked; a missing batch_invariant_ops or "
              "an unpatched verl will only show up as logdiff != 0 or a crash hours in", file=sys.stderr)
        return True
    nodes = doctor_cli.run(spec, spec.cluster.ray_address if spec.cluster.backend == "ray_job" else None)
    (run_dir / "doctor.json").write_text(json.dumps(nodes, indent=1))
    bad = [(n["node"], f) for n in nodes for f in n["findings"] if f["severity"] == "error"]
    for node, f in bad:
        print(f"ERROR {f['id']} on {node}: {f['what']}: found {f['found']}, needed {f['needed']}\n  fix: {f['fix']}",
              file=sys.stderr)
    if bad:
        print("topl: the doctor found errors; nothing started (--skip-doctor to override, loudly)", file=sys.stderr)
    return not bad


def main(args: list[str]) -> int:
    import hydra

    from topl.launcher.compose import compose_job, conf_dir, split_recipe
    from topl.launcher.contract import check, errors
    from topl.launcher.spec import register_configs

    flags, hydra_flags, overrides = _split(args)
    informational = any(f in ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help") for f in hydra_flags)
    multirun = any(f in ("-m", "--multirun") for f in hydra_flags)
    if not informational and not multirun:
        # compose once up front: bad input is a readable error and exit 2, before Hydra makes a run dir
        vs = check(compose_job(overrides))
        if errors(vs):
            for v in vs:
                print(v.render(), file=sys.stderr)
            print("topl: rejected before launch; nothing started", file=sys.stderr)
            return 2
    hydra_overrides, root = split_recipe(overrides)
    _state.update(root=root, user_overrides=overrides, flags=flags, rc=0)
    register_configs()
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base=None)(_task)
    saved = sys.argv
    sys.argv = ["topl", *hydra_flags, *hydra_overrides]
    try:
        app()
    except SystemExit as e:
        if e.code not in (0, None):
            return 2 if informational or multirun else int(e.code) if isinstance(e.code, int) else 1
    except ToplError:
        raise
    finally:
        sys.argv = saved
    return _state.get("rc", 0)
