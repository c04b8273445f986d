"""Errors for people (review finding 9): the recipe file and defaults entry that name a missing
recipe; an empty recipe file or `recipe=` says what is wrong, not "Key 'recipe' not in 'JobSpec'";
a mistyped spec key, command or verl key names the nearest valid spelling. Never a traceback;
`--json` always JSON."""

import json

import pytest
from helpers import run_topl_inproc as run

from topl.launcher.compose.did_you_mean import nearest, spec_fields


def _err(r) -> str:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    return r.stderr


def _json_err(*args) -> dict:
    r = run(*args, "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] is False
    return d["error"]


def test_a_defaults_entry_naming_a_missing_recipe_names_the_file_and_entry(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("# @package _global_\ndefaults:\n  - qwen3_4b_grpo_a3_strictt\n  - _self_\n")
    err = _err(run("check", f"recipe={f}"))
    assert f"{f}: defaults entry `- qwen3_4b_grpo_a3_strictt`" in err
    assert "(command line)" not in err
    assert "did you mean qwen3_4b_grpo_a3_strict" in err


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_an_empty_recipe_file_says_it_is_empty(tmp_path, text):
    f = tmp_path / "empty.yaml"
    f.write_text(text)
    err = _err(run("check", f"recipe={f}"))
    assert f"recipe file {f} is empty" in err and "# @package _global_" in err
    assert "not in 'JobSpec'" not in err
    e = _json_err("check", f"recipe={f}")
    assert "is empty" in e["message"] and "@package _global_" in e["fix"]


def test_a_recipe_without_the_package_line_says_so(tmp_path):
    f = tmp_path / "nohead.yaml"
    f.write_text("train:\n  tp: 2\n")
    err = _err(run("check", f"recipe={f}"))
    assert "does not start with `# @package _global_`" in err and "not in 'JobSpec'" not in err


def test_an_included_recipe_needs_no_package_line(tmp_path, monkeypatch):
    """Hydra gives an included recipe its includer's package: such files keep working."""
    (tmp_path / "base_nohead.yaml").write_text("train:\n  tp: 2\n")
    (tmp_path / "child.yaml").write_text("# @package _global_\ndefaults:\n  - base_nohead\n")
    r = run(
        "render",
        f"recipe={tmp_path / 'child.yaml'}",
        "--json",
        env={"TOPL_RECIPE_PATH": str(tmp_path)},
    )
    assert "does not start" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("value", ["", "null"])
def test_recipe_with_no_value(value):
    err = _err(run("check", f"recipe={value}"))
    assert f"`recipe={value}` names no recipe" in err and "topl recipes" in err
    assert "not in 'JobSpec'" not in err and "+recipe=" not in err
    assert "names no recipe" in _json_err("check", f"recipe={value}")["message"]


def test_a_mistyped_spec_key_names_the_nearest_field():
    err = _err(run("check", "train.tpp=2"))
    assert "unknown key train.tpp" in err and "did you mean train.tp" in err
    assert "To append to your config use +" not in err  # new keys are refused anyway
    assert "did you mean train.tp" in _json_err("check", "+train.tpp=2")["fix"]
    assert "did you mean rollout.prefix_caching" in _err(run("check", "rollout.prefix_cachng=true"))


def test_a_mistyped_key_inside_a_recipe_names_the_recipe_and_field(tmp_path):
    f = tmp_path / "typo.yaml"
    f.write_text("# @package _global_\nrollout:\n  tpp: 2\n")
    err = _err(run("check", f"recipe={f}"))
    assert "unknown key rollout.tpp" in err and "did you mean rollout.tp" in err


def test_a_mistyped_command_names_the_nearest_command():
    err = _err(run("rendr"))
    assert "unknown command 'rendr'" in err and "did you mean `topl render`" in err
    e = _json_err("rendr")
    assert "`topl render`" in e["fix"]


def test_a_mistyped_verl_key_names_the_nearest_verl_key():
    key = "actor_rollout_ref.rollout.max_num_seq"
    r = run("check", "recipe=qwen3_4b_grpo_a3_strict", f"+verl_overrides.{key}=3", "--json")
    d = json.loads(r.stdout)
    msg = next(v["message"] for v in d["violations"] if v["rule"] == "TOP-VERL-001")
    assert "did you mean actor_rollout_ref.rollout.max_num_seqs?" in msg


def test_nearest_reads_the_real_candidates():
    assert nearest("tpp", spec_fields("train"))[0] == "tp"
    assert nearest("zzzz", spec_fields("train")) == []


def test_a_mistyped_top_level_key_in_a_recipe_names_the_nearest_field(tmp_path):
    f = tmp_path / "top.yaml"
    f.write_text("# @package _global_\ntrian:\n  tp: 2\n")
    err = _err(run("check", f"recipe={f}"))
    assert "unknown top-level key(s) trian" in err and "trian: did you mean train?" in err


def test_a_deleted_working_directory_is_said_not_a_traceback(tmp_path):
    import subprocess
    import sys

    gone = tmp_path / "gone"
    script = f'cd "{gone}" && rmdir "{gone}" && exec "$0" -m topl.launcher.cli "$@"'
    for tail in ([], ["--json"]):
        gone.mkdir()
        r = subprocess.run(
            ["sh", "-c", script, sys.executable, "check", *tail], capture_output=True, text=True
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout, r.stderr
        out = json.loads(r.stdout)["error"]["message"] if tail else r.stderr
        assert "the working directory no longer exists" in out
    gone.mkdir()
    r = subprocess.run(
        ["sh", "-c", script, sys.executable, "rules"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "TOP-" in r.stdout  # reads nothing relative to it: still runs
