"""`topl --completion bash|zsh`: the bash script, sourced in a real bash, completes commands,
flags, config groups, their options and recipe names (COMP_LINE / COMP_WORDS as bash sets them);
the zsh script completes them in a real interactive `zsh -f` (compinit), TAB typed on a terminal."""

import os
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

from topl.launcher.cli import main
from topl.launcher.compose.sources import conf_dir

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

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


@needs_bash
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
    assert "bashcompinit" in out and "complete -o nospace -F _topl topl" in out
    assert main(["--completion", "fish"]) == 2
    assert "no such shell" in capsys.readouterr().err


# zsh's own completion run by TAB: a compadd that records what zsh's matching keeps, then adds it;
# TAB bound to a widget that completes, records the line it left, then clears it
ZSH_SETUP = r"""
bindkey -e
unsetopt auto_list auto_menu beep
autoload -U compinit && compinit -u -D
eval "$("$TOPL_PY" -m topl.launcher.cli --completion zsh)"
compadd() {
    local -a hits
    builtin compadd -O hits "$@"
    (( $#hits )) && print -rl -- "match "${^hits} >> "$PROBE_OUT"
    builtin compadd "$@"
}
_probe() {
    zle complete-word
    print -r -- "line $BUFFER" >> "$PROBE_OUT"
    print -r -- "@@" >> "$PROBE_OUT"
    BUFFER=
}
zle -N _probe
bindkey '^I' _probe
print -r -- "@@" >> "$PROBE_OUT"
"""


def zsh_complete(tmp_path, *lines: str, recipe_path: str = "") -> list[tuple[list[str], str]]:
    """Each line typed then TAB in an interactive zsh: (the matches, the line after it)."""
    out, setup = tmp_path / "probe.out", tmp_path / "setup.zsh"
    setup.write_text(ZSH_SETUP)
    out.write_text("")
    zsh = shutil.which("zsh")
    env = {"PATH": f"{os.path.dirname(zsh)}:/usr/bin:/bin", "TERM": "xterm", "HOME": str(tmp_path)}
    env |= {"TOPL_PY": sys.executable, "PROBE_OUT": str(out), "TOPL_RECIPE_PATH": recipe_path}
    master, slave = pty.openpty()
    shell = subprocess.Popen(
        [zsh, "-f", "-i"], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path
    )
    os.close(slave)
    seen = b""  # what the terminal shows, for the failure message
    deadline = time.monotonic() + 30

    def wait(done: int) -> None:  # until `done` steps have written their end mark
        nonlocal seen
        while out.read_text().count("@@\n") < done:
            assert time.monotonic() < deadline, seen.decode(errors="replace")[-2000:]
            if select.select([master], [], [], 0.05)[0]:
                seen += os.read(master, 65536)

    try:
        os.write(master, f"source {setup}\n".encode())
        wait(1)
        for k, line in enumerate(lines):
            os.write(master, line.encode() + b"\t")
            wait(k + 2)
        os.write(master, b"exit\n")
        shell.wait(10)
    finally:
        shell.kill()
        os.close(master)
    steps = out.read_text().split("@@\n")[1:-1]
    return [
        (
            [t[6:] for t in step.splitlines() if t.startswith("match ")],
            next(t[5:] for t in step.splitlines() if t.startswith("line ")),
        )
        for step in steps
    ]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_completes_commands_flags_groups_options_and_recipes(tmp_path):
    """bashcompinit runs `_topl` under `emulate sh`: before, `${COMP_LINE:0:COMP_POINT}` stopped
    it ("unrecognized modifier"), and `read -a` / `${!name}` are bash's only."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "zz_my_recipe.yaml").write_text("# @package _global_\n")
    got = zsh_complete(
        tmp_path,
        "topl che",
        "topl check --f",
        "topl check mo",
        "topl check model=qwen3_3",
        "topl launch recipe=zz_",
        "topl recipes show qwen3_4b_grpo_a3_st",
        "topl --completion ",
        recipe_path=str(mine),
    )
    assert got[0] == (["check"], "topl check ")
    assert got[1] == (["--fix", "--force"], "topl check --f")
    assert got[2] == (["model="], "topl check model=")  # left open for the option
    assert got[3] == (["model=qwen3_30b_a3b"], "topl check model=qwen3_30b_a3b ")
    assert got[4][1] == "topl launch recipe=zz_my_recipe "  # TOPL_RECIPE_PATH
    assert got[5][1] == "topl recipes show qwen3_4b_grpo_a3_strict "
    assert got[6][0] == ["bash", "zsh"]
