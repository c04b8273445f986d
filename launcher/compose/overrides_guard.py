"""The command line's overrides: data for topl's keys, never code, and Hydra's own machinery
(callbacks, logging, search path, output_subdir, env_set, launcher) only when the user opts in
with UNSAFE_FLAG; run and sweep directories that stay where they are put. What a recipe may say:
untrusted.py (whose code keys this shares).
"""

from __future__ import annotations

import re

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.untrusted import CODE_KEYS
from topl.launcher.compose.untrusted_options import SELECTABLE

UNSAFE_FLAG = "--unsafe-hydra-overrides"
# hydra.* keys the command line may set without UNSAFE_FLAG: where runs go, sweeper settings.
CLI_HYDRA = (
    "hydra.run.dir",
    "hydra.sweep.dir",
    "hydra.sweep.subdir",
    "hydra.sweeper.params.",
    "hydra.sweeper.max_batch_size",
    "hydra.sweeper.on_invalid",
    "hydra.job.chdir",
    "hydra.job.name",  # a label in output paths and logs (a string, never code)
    "hydra.verbose",
    "hydra.launcher.n_jobs",  # joblib's worker count (an int)
)
# Hydra launcher plugins the command line may pick by name: both run topl's jobs on this machine,
# in-process (basic) or in local worker processes (joblib); others submit elsewhere (slurm, ray).
CLI_LAUNCHERS = ("basic", "joblib")


def guard_overrides(overrides: list[str]) -> list[str]:
    """Refuse overrides that name code, and those of Hydra's machinery unless UNSAFE_FLAG is given.

    Returns the overrides without the flag."""
    unsafe = UNSAFE_FLAG in overrides
    overrides = [o for o in overrides if o != UNSAFE_FLAG]
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~").split("@", 1)[0].strip()
        if CODE_KEYS & set(key.split(".")):
            raise ToplError(
                f"`{o}` names code to run; topl's configs are data",
                where=f"command line `{o}`",
                fix="remove it (topl never instantiates code from a config)",
            )
        if unsafe:
            continue
        if key == "hydra/launcher" and o.split("=", 1)[-1].strip() in CLI_LAUNCHERS:
            continue
        inner = key.removeprefix("hydra.sweeper.params.")
        if inner != key and (inner == "hydra" or inner.startswith(("hydra.", "hydra/"))):
            # a sweep parameter is an override too: Hydra applies it to its own config per job
            guard_overrides([f"{inner}={o.split('=', 1)[-1]}"])
            continue
        if key in LABELS:
            _check_label(o, key, o.split("=", 1)[-1].strip().strip("'\""))
        if inner.lstrip("+~") in SELECTABLE and ("/" in o.split("=", 1)[-1] or ".." in o):
            raise ToplError(
                f"`{o}`: a group's option is a file of topl's conf/, named, never a path "
                "(`../` would make Hydra load any YAML, whose `hydra:` section runs code)",
                where=f"command line `{o}`",
                fix=f"use an option `topl launch --info defaults` lists for {inner.lstrip('+~')}; "
                "a file of your own goes in a recipe (recipe=PATH)",
            )
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            if any(key == a or (a.endswith(".") and key.startswith(a)) for a in CLI_HYDRA):
                continue
            if key == "hydra/launcher" and "slurm" in o.split("=", 1)[-1]:
                raise ToplError(
                    f"`{o}`: topl sweeps on Slurm through its own backend, not Hydra's launcher",
                    where=f"command line `{o}`",
                    fix="drop it and add cluster.backend=slurm cluster.slurm.partition=NAME "
                    "cluster.slurm.time_min=MINUTES: each valid point becomes one Slurm job, "
                    "an invalid one never reaches the queue (docs/slurm.md)",
                )
            raise ToplError(
                f"`{o}` configures Hydra itself (callbacks, logging, search path, output, "
                "environment or launcher settings can run code or write outside the run dir)",
                where=f"command line `{o}`",
                fix=f"drop it; if you trust it, add {UNSAFE_FLAG} (allowed without it: "
                f"{', '.join(a.rstrip('.') for a in CLI_HYDRA)}, "
                f"hydra/launcher={'|'.join(CLI_LAUNCHERS)})",
            )
    return overrides


# Hydra settings that name a folder or file *inside* a run directory: labels, never paths.
# hydra.sweep.subdir is a job's folder under the sweep dir (an absolute one replaces it, `..`
# leaves it); hydra.job.name is the job's log file name (hydra/conf/hydra/job_logging/default.yaml:
# ${hydra.runtime.output_dir}/${hydra.job.name}.log).
LABELS = ("hydra.sweep.subdir", "hydra.job.name")
_LABEL = re.compile(r"^(?:[A-Za-z0-9_=,+-]|\.(?!\.)|\$\{hydra\.job\.(?:num|id)\})+$")


def _check_label(override: str, key: str, value: str) -> None:
    if _LABEL.match(value) and value not in (".",) and not value.startswith("."):
        return
    raise ToplError(
        f"`{override}`: {key} is a label inside the run directory, not a path",
        where=f"command line `{override}`",
        fix="use letters, digits, _ - = , + (and ${hydra.job.num} / ${hydra.job.id}); to "
        "put runs elsewhere set hydra.sweep.dir / hydra.run.dir",
    )


def check_run_path(path: str, where: str) -> None:
    """A run or sweep directory as Hydra resolves it: no `..` (a recipe's `experiment`, part of
    the default run dir name, could otherwise climb out of run_root)."""
    from pathlib import PurePath

    if "\0" in path:
        raise ToplError(
            "the run directory's name holds a NUL character",
            where=where,
            fix="give experiment / run_root / hydra.run.dir / hydra.sweep.dir as plain text",
        )
    if ".." in PurePath(path).parts:
        raise ToplError(
            f"the run directory {path} climbs out of its folder (`..`)",
            where=where,
            fix="give experiment / run_root / hydra.run.dir / hydra.sweep.dir without `..` "
            "(an absolute path if you mean another folder)",
        )
