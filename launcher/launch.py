"""`topl launch`: a Hydra app. Validate, write the run directory, start the backend."""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from topl.launcher.errors import ToplError

UNSAFE_FLAG = "--unsafe-hydra-overrides"  # = untrusted.UNSAFE_FLAG
TOPL_FLAGS = ("--dry-run", "--follow", "--skip-doctor", UNSAFE_FLAG)
UNSAFE_HYDRA_FLAGS = ("--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn",
                      "--experimental-rerun")
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
    """Runs once per job (once per sweep point under -m); input errors are printed, exit code 2."""
    try:
        _job(cfg)
    except ToplError as e:
        print(e.render(), file=sys.stderr)
        _state["rc"] = max(_state.get("rc", 0), e.exit_code)


def _job(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from topl.launcher import lifecycle, rundir
    from topl.launcher.compose import Composed, _sources, loader_for
    from topl.launcher.contract import check, errors
    from topl.launcher.render import render
    from topl.launcher.spec import JobSpec

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    rundir.seal(run_dir)  # Hydra's own .hydra/ files: secrets out, owner-only
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
    rc = lifecycle.run_recorded(run_dir, lambda: _start(spec, inv, run_dir), backend=spec.cluster.backend)
    _state["rc"] = max(_state.get("rc", 0), rc)


def _start(spec, inv, run_dir: Path) -> int:
    """Start the backend; its return code (negative: the job died of that signal)."""
    from topl.launcher import backends

    backend = spec.cluster.backend
    if backend != "local" and not _doctor_ok(spec, run_dir):
        raise ToplError("the doctor found errors; nothing started", where=str(run_dir / "doctor.json"),
                        fix="fix the findings above, or --skip-doctor (loudly)")
    if backend == "local":
        from topl.kernels.local_job import run_local

        return run_local(spec, run_dir)
    if backend == "subprocess":
        return backends.run_subprocess(inv, run_dir, spec.cluster.python)
    return backends.run_ray_job(inv, run_dir, spec.cluster.ray_address, "--follow" in _state["flags"],
                                python=spec.cluster.python, timeout=spec.cluster.ray_timeout_s)


def _doctor_ok(spec, run_dir: Path) -> bool:
    """Remote backends: check the stack where the job will run before starting it."""
    import json

    from topl.launcher import doctor_cli, lifecycle, rundir

    if "--skip-doctor" in _state.get("flags", ()):
        print("topl: WARNING: --skip-doctor: the target stack was NOT checked; a missing batch_invariant_ops or "
              "an unpatched verl will only show up as logdiff != 0 or a crash hours in", file=sys.stderr)
        return True
    address = spec.cluster.ray_address if spec.cluster.backend == "ray_job" else None
    nodes = lifecycle.with_deadline(lambda: doctor_cli.run(spec, address), spec.cluster.ray_timeout_s + 600,
                                    f"topl doctor on {address or 'this machine'}",
                                    fix="check that the Ray head answers (`ray status`), or --skip-doctor")
    rundir.write_file(run_dir / "doctor.json", json.dumps(nodes, indent=1))
    bad = [(n["node"], f) for n in nodes for f in n["findings"] if f["severity"] == "error"]
    for node, f in bad:
        print(f"ERROR {f['id']} on {node}: {f['what']}: found {f['found']}, needed {f['needed']}\n  fix: {f['fix']}",
              file=sys.stderr)
    if bad:
        print("topl: the doctor found errors; nothing started (--skip-doctor to override, loudly)", file=sys.stderr)
    return not bad


def main(args: list[str]) -> int:
    from topl.launcher.compose import split_recipe
    from topl.launcher.lifecycle import signals_interrupt

    flags, hydra_flags, overrides = _split(args)
    _refuse_unsafe_flags(hydra_flags, UNSAFE_FLAG in flags)
    with signals_interrupt():  # SIGTERM, like Ctrl-C, unwinds: temp files go, the run is marked
        prepared = split_recipe(overrides + ([UNSAFE_FLAG] if UNSAFE_FLAG in flags else []))
        try:
            return _main(flags, hydra_flags, overrides, prepared)
        finally:
            if prepared[1] is not None:
                prepared[1].cleanup()


def _refuse_unsafe_flags(hydra_flags: list[str], unsafe: bool) -> None:
    """Flags that make Hydra load another primary config or unpickle one can run code."""
    bad = [f for f in hydra_flags if f.split("=")[0] in UNSAFE_HYDRA_FLAGS]
    if bad and not unsafe:
        raise ToplError(f"{' '.join(bad)} makes Hydra load configs (or a pickle) topl cannot check",
                        where="command line", fix=f"drop it; if you trust its files, add {UNSAFE_FLAG}")


def _main(flags: set[str], hydra_flags: list[str], overrides: list[str], prepared) -> int:
    import hydra

    from topl.launcher import rundir
    from topl.launcher.compose import compose_job, conf_dir, output_dirs
    from topl.launcher.contract import check, errors
    from topl.launcher.spec import register_configs

    hydra_overrides, root = prepared
    made = None
    informational = any(f in ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help") for f in hydra_flags)
    multirun = any(f in ("-m", "--multirun") for f in hydra_flags)
    if not informational and not multirun:
        # compose once up front: bad input is a readable error and exit 2, before Hydra makes a run dir
        vs = check(compose_job(overrides, prepared=prepared))
        if errors(vs):
            for v in vs:
                print(v.render(), file=sys.stderr)
            print("topl: rejected before launch; nothing started", file=sys.stderr)
            return 2
    if not informational:
        # The run (or sweep) dir is made here, atomically and exclusively, before Hydra writes into it.
        run_dir, sweep_dir = output_dirs(hydra_overrides)
        made = rundir.create(sweep_dir if multirun else run_dir)
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        hydra_overrides = [o for o in hydra_overrides if not o.lstrip("+").startswith(key + "=")]
        hydra_overrides.append(f"{key}={_quote(str(made))}")
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
    finally:
        sys.argv = saved
        if made is not None and made.is_dir():
            rundir.seal(made)  # whatever Hydra or the sweeper wrote: owner-only, secrets out
    return _state.get("rc", 0)


def _quote(path: str) -> str:
    """A path as a quoted value in Hydra's override grammar (no interpolation)."""
    return "'" + path.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${") + "'"
