"""`topl --completion bash|zsh`: the bash script, sourced in a real bash, completes commands,
flags, config groups, their options and recipe names (COMP_LINE / COMP_WORDS as bash sets them)."""

import shutil
import subprocess
import sys

import pytest

from topl.launcher.cli import main
from topl.launcher.compose.sources import conf_dir

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

# bash splits `model=` into `model` `=` (COMP_WORDBREAKS); _topl reads COMP_LINE up to COMP_POINT
PROBE = """
eval "$("$TOPL_PY" -m topl.launcher.cli --completion bash)"
for line in "$@"; do
    COMP_LINE=$line; COMP_POINT=${#line}
    COMP_WORDS=($line); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    [[ $line == *" " ]] && COMP_WORDS+=("") && COMP_CWORD=${#COMP_WORDS[@]}-1
    _topl
    echo "${COMPREPLY[*]}"
done
"""


def complete(tmp_path, *lines: str, recipe_path: str = "") -> list[list[str]]:
    out = subprocess.run(
        ["bash", "-c", PROBE, "probe", *lines],
        capture_output=True,
        text=True,
        env={"TOPL_PY": sys.executable, "TOPL_RECIPE_PATH": recipe_path, "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        check=True,
    ).stdout
    return [s.split() for s in out.splitlines()]


def test_bash_completes_commands_flags_groups_options_and_recipes(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "zz_my_recipe.yaml").write_text("# @package _global_\n")
    models = sorted(p.stem for p in (conf_dir() / "model").glob("*.yaml"))
    got = complete(
        tmp_path,
        "topl che",
        "topl check model=",
        "topl check model=qwen3_3",
        "topl check mo",
        "topl check --f",
        "topl launch --res",
        "topl launch recipe=zz_",
        "topl recipes show qwen3_4b_grpo_a3_st",
        recipe_path=str(mine),
    )
    assert got[0] == ["check"]
    assert got[1] == models and "qwen3_4b" in models
    assert got[2] == ["qwen3_30b_a3b"]
    assert got[3] == ["model="]
    assert got[4] == ["--fix", "--force"]
    assert got[5] == ["--resume"]
    assert got[6] == ["zz_my_recipe"]  # TOPL_RECIPE_PATH, read when TAB is pressed
    assert got[7] == ["qwen3_4b_grpo_a3_strict"]


def test_zsh_and_bad_shell(capsys):
    assert main(["--completion", "zsh"]) == 0
    out = capsys.readouterr().out
    assert "bashcompinit" in out and "complete -F _topl topl" in out
    assert main(["--completion", "fish"]) == 2
    assert "no such shell" in capsys.readouterr().err
