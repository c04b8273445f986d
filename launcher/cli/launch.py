"""`topl launch`: a Hydra app. Validate, write the run directory, start the backend.

`main` parses topl's flags, composes and checks the spec once (a single run), and hands Hydra a
task bound to a :class:`~topl.launcher.launch.LaunchContext`; under `-m` the sweeper validates
every point and each job builds its spec from the config Hydra composed for it.
"""
from __future__ import annotations

import sys

from omegaconf import DictConfig

from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_violations
from topl.launcher.errors import ToplError
from topl.launcher.launch import LaunchContext, preflight, run_job

TOPL_FLAGS = ("--dry-run", "--follow", "--skip-doctor")
HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--info", "-i", "--package", "-p", "--config-name", "-cn",
                          "--config-dir", "-cd", "--experimental-rerun")
INFORMATIONAL = ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help")


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
    """A string as one quoted value in Hydra's override grammar."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def main(args: list[str]) -> int:
    import hydra

    from topl.launcher.compose import compose_job, conf_dir, split_recipe
    from topl.launcher.contract import check, errors
    from topl.launcher.spec import register_configs

    flags, rest = parse(args, flags=TOPL_FLAGS)
    hydra_flags, overrides = split_hydra_flags(rest)
    informational = any(f in INFORMATIONAL for f in hydra_flags)
    multirun = any(f in ("-m", "--multirun") for f in hydra_flags)
    ctx = LaunchContext(flags.dry_run, flags.follow, flags.skip_doctor, user_overrides=overrides)
    if not informational and not multirun:
        # compose and check once, up front: bad input is a readable error and exit 2 before
        # Hydra makes a run dir; the job reuses this spec and these violations
        composed = compose_job(overrides)
        vs = check(composed)
        if errors(vs):
            print_violations(vs)
            print("topl: rejected before launch; nothing started", file=sys.stderr)
            return 2
        ctx.prepared = (composed, vs)
        if not flags.dry_run:  # no head, no Ray, no reach: one message, exit 2, no run dir
            preflight(composed.to_object())
            ctx.preflown = True
    hydra_overrides, ctx.root = split_recipe(overrides)
    recipe = next((o.partition("=")[2] for o in overrides if o.lstrip("+").startswith("recipe=")), None)
    if multirun and ctx.root is not None and recipe:
        hydra_overrides.append(f"hydra.sweeper.recipe={_quoted(recipe)}")
    register_configs()

    def task(cfg: DictConfig) -> None:
        run_job(ctx, cfg)

    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base=None)(task)
    saved = sys.argv
    sys.argv = ["topl", *hydra_flags, *hydra_overrides]
    try:
        app()
    except SystemExit as e:
        if e.code not in (0, None):
            if informational or multirun:
                return 2
            return e.code if isinstance(e.code, int) else 1
    except ToplError:
        raise
    finally:
        sys.argv = saved
    return ctx.rc
