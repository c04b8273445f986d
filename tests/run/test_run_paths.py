"""Every path topl writes stays under its run folder: sweep subdirs and job names are labels, and a
recipe's `experiment` (part of the run dir's name) cannot climb out with `..`."""

import os
import stat

import pytest
from helpers import run_topl

from topl.launcher.base.errors import ToplError
from topl.launcher.cli import main as topl
from topl.launcher.compose import overrides_guard


@pytest.mark.parametrize(
    "override",
    [
        "hydra.sweep.subdir=/etc",
        "hydra.sweep.subdir=../../x",
        "hydra.sweep.subdir=..",
        "hydra.job.name=../..",
        "hydra.job.name=/tmp/x",
        "+hydra.job.name=a/b",
        "hydra.sweeper.params.hydra.sweep.subdir=/tmp/a,/tmp/b",
    ],
)
def test_labels_are_not_paths(override):
    with pytest.raises(ToplError, match="label inside the run directory"):
        overrides_guard.guard_overrides([override])


def test_plain_labels_still_pass():
    ok = ["hydra.sweep.subdir=run_${hydra.job.num}", "hydra.job.name=topl", "hydra.job.name=a.b"]
    assert overrides_guard.guard_overrides(ok) == ok


def test_a_sweep_subdir_naming_an_existing_folder_is_not_touched(tmp_path):
    mine = tmp_path / "scripts"
    mine.mkdir()
    (mine / "run.sh").write_text("#!/bin/sh\n")
    (mine / "run.sh").chmod(0o755)
    r = run_topl(
        "launch",
        "-m",
        "--dry-run",
        f"hydra.sweep.subdir={mine}",
        "seed=1",
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert stat.S_IMODE((mine / "run.sh").stat().st_mode) == 0o755
    assert sorted(p.name for p in mine.iterdir()) == ["run.sh"]


def test_a_recipes_experiment_cannot_climb_out_of_run_root(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    recipe = tmp_path / "r.yaml"
    recipe.write_text("# @package _global_\nexperiment: ../../../escaped\n")
    os.chdir(tmp_path / "work")
    assert topl(["launch", "--dry-run", f"recipe={recipe}"]) == 2
    assert "climbs out" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not any(tmp_path.rglob("escaped"))
