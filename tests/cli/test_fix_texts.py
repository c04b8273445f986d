"""Fixes that lead somewhere (issue 49, item 9): each fix text below is applied, and leads to an
accepted spec, a working command or an install that provides what was missing."""

from pathlib import Path

import pytest
import tomllib
from helpers import run_topl_inproc as run
from paths import ROOT

from topl.launcher.base.errors import ToplError, install_hint, local_extra_error
from topl.launcher.compose import did_you_mean
from topl.launcher.run.backends.ray_client import check_reachable

EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_an_install_hint_names_this_checkout_not_an_index_topl_is_not_on():
    """The test venv installs topl from this checkout (pip records it in direct_url.json): the
    hint is a pip command over that folder and an extra pyproject defines."""
    hint = install_hint("local")
    assert "topl[" not in hint, hint
    assert hint == f"pip install '{Path(ROOT).resolve()}[local]'", hint
    assert "local" in EXTRAS
    assert install_hint("local") in local_extra_error("probe", "torch").fix


def test_a_sweep_given_to_check_names_plan_which_checks_every_point(tmp_path):
    bad = run("check", "train.tp=2,4")
    assert bad.returncode == 2 and "--multirun" not in bad.stderr, bad.stderr
    assert "train.tp=2,4 is a sweep" in bad.stderr
    assert "`topl plan train.tp=2,4`" in bad.stderr, bad.stderr
    applied = run("plan", "train.tp=2,4", "--json")  # the fix as printed
    assert applied.returncode in (0, 2) and '"points"' in applied.stdout, applied.stderr
    rng = run("render", "train.tp=range(1,3)")
    assert rng.returncode == 2 and "`topl plan train.tp=range(1,3)`" in rng.stderr, rng.stderr


def test_a_missing_joblib_launcher_names_the_extra_that_brings_it():
    """Hydra reports the option missing (MissingConfigException's fields); the fix names the
    plugin and the `local` extra, which lists it (installing the extra gives the option)."""

    class Missing(Exception):
        missing_cfg_file, options = "hydra/launcher/joblib", ["basic"]

    e = did_you_mean.option_error(Missing(), ["hydra/launcher=joblib"])
    assert isinstance(e, ToplError) and "hydra-joblib-launcher" in e.fix, e.fix
    assert install_hint("local") in e.fix
    assert any(d.startswith("hydra-joblib-launcher") for d in EXTRAS["local"])


def test_no_ray_head_suggests_what_works_without_one_never_the_local_backend(tmp_path):
    with pytest.raises(ToplError) as e:
        check_reachable(None, 1.0)
    fix = e.value.fix
    assert "cluster.backend=local" not in fix  # refused for every real model (TOP-RES-009)
    assert "cluster.ray_address=http://HEAD:8265" in fix and "--dry-run" in fix, fix
    recipe = "recipe=qwen3_30b_a3b_grpo_a3_strict"
    dry = run("launch", recipe, f"run_root={tmp_path}", "--dry-run", "--skip-deep")
    assert dry.returncode == 0, dry.stderr  # the suggested dry run: the run dir, no head
    assert any(tmp_path.iterdir())
    slurm = "cluster=slurm_a3 cluster.slurm.partition=NAME cluster.slurm.time_min=MINUTES"
    assert slurm in " ".join(fix.split()), fix
    checked = run("check", recipe, *slurm.replace("NAME", "a3").replace("MINUTES", "60").split())
    assert checked.returncode == 0, checked.stdout + checked.stderr
