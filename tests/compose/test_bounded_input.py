"""Bad input is one message, never a traceback or a hang: a malformed guard manifest, deeply nested
YAML or overrides, a FIFO among the recipes, output folders that cannot be written."""

import errno
import json
import os

import pytest
from helpers import run_topl

from topl.launcher import guard
from topl.launcher.cli import main as topl
from topl.launcher.run import rundir


@pytest.mark.parametrize(
    "raw",
    [
        "[1, 2]",
        '{"env": 5}',
        '{"env": {"X": "a"}}',
        '{"env": {"X": [1, 2]}}',
        '{"strict": "no"}',
        '{"modules": {"m": ["loaded"]}}',
        "not json",
        "[" * 5000 + "]" * 5000,
    ],
    ids=["list", "env_int", "env_str", "env_ints", "strict_str", "short_pair", "text", "deep"],
)
def test_a_malformed_guard_manifest_is_top_guard_001_not_an_exception(tmp_path, raw):
    with pytest.raises(guard.GuardError, match="TOP-GUARD-001"):
        guard.run({guard.MANIFEST_ENV: raw, guard.DIR_ENV: str(tmp_path)})
    (rec,) = [json.loads(p.read_text()) for p in tmp_path.iterdir()]
    assert rec["missing"][0]["rule"] == "TOP-GUARD-001"


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "text",
    ["a: " + "[" * 5000 + "]" * 5000, "a: " + "{b: " * 2000 + "1" + "}" * 2000],
    ids=["lists", "maps"],
)
def test_deeply_nested_recipe_is_one_message(here, capsys, text):
    (here / "r.yaml").write_text("# @package _global_\n" + text + "\n")
    assert topl(["check", f"recipe={here / 'r.yaml'}"]) == 2
    assert "nests deeper" in _one_error(capsys)


def test_deeply_nested_override_is_one_message(here, capsys):
    assert topl(["check", "project=" + "[" * 3000 + "]" * 3000]) == 2
    _one_error(capsys)


@pytest.mark.parametrize(
    "override", ["run_root=/proc/no-such-dir", "hydra.run.dir=/dev/null/x", "run_root=/dev/full"]
)
def test_output_folder_that_cannot_be_written_is_one_message(here, capsys, override):
    assert topl(["launch", "--dry-run", override]) == 2
    assert "cannot write the run directory" in _one_error(capsys)


def test_a_full_disk_is_one_message(here, capsys, monkeypatch):
    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rundir, "write_file", full)
    assert topl(["launch", "--dry-run"]) == 2
    assert "No space left" in _one_error(capsys)


def test_a_fifo_in_topl_recipe_path_does_not_hang_check(tmp_path):
    (tmp_path / "mine").mkdir()
    os.mkfifo(tmp_path / "mine" / "stuck.yaml")
    env = {"TOPL_RECIPE_PATH": str(tmp_path / "mine")}
    r = run_topl("check", "recipe=stuck", cwd=tmp_path, env=env, timeout=60)
    assert r.returncode == 2 and r.stderr.count("error:") == 1, r.stderr
    r = run_topl(
        "check", f"recipe={tmp_path / 'mine' / 'stuck.yaml'}", cwd=tmp_path, env=env, timeout=60
    )
    assert r.returncode == 2 and r.stderr.count("error:") == 1, r.stderr
    assert run_topl("recipes", cwd=tmp_path, env=env, timeout=60).returncode == 0
