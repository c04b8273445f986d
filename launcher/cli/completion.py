"""`topl --completion bash|zsh`: a shell script completing topl's commands, each command's flags
(read from its --help text), config groups (`model=`) and their options, and recipe names.

Options and recipes are listed by the shell when TAB is pressed, from the conf/ group folders and
the recipe folders (the shipped one, then $TOPL_RECIPE_PATH): a recipe added later completes too,
and nothing of a recipe is read but its file name (no topl, no Python, no recipe code runs).
zsh runs the bash function through its bashcompinit."""

from __future__ import annotations

import re
import shlex

from topl.launcher.base.errors import ToplError
from topl.launcher.cli.help import HELP, OVERRIDES, text
from topl.launcher.compose.recipes import recipes_dir
from topl.launcher.compose.sources import conf_dir

SHELLS = ("bash", "zsh")
FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")  # in a usage line
LISTED = re.compile(r"\s+(--?[a-zA-Z][\w-]*)(?:, (--?[a-zA-Z][\w-]*))?")  # a flag list's line

# Written for bash and for zsh's bashcompinit, which runs `_topl` under `emulate sh` (arrays from
# 0, words split): so no `read -a` (zsh's is `read -A`), no `${!name}`, and `${v:0:$n}` (zsh takes
# `${v:0:n}` as a modifier). zsh@5.9:Completion/bashcompinit:compgen
BASH = r"""
_topl_split() {  # the array named $1 <- the words of $2, split at $IFS (no globbing)
    if [[ -n ${ZSH_VERSION:-} ]]; then read -rA "$1" <<< "$2"; else read -ra "$1" <<< "$2"; fi
}

_topl_names() {  # the .yaml file names (no suffix) in the folders given
    local d f
    for d in "$@"; do
        for f in "$d"/*.yaml; do
            [[ -f $f ]] || continue
            f=${f##*/}
            printf '%s\n' "${f%.yaml}"
        done
    done
}

_topl_options() {  # a config group's options; recipe: the recipe names
    if [[ $1 == recipe ]]; then
        local IFS=: dirs
        _topl_split dirs "${TOPL_RECIPE_PATH:-}"
        _topl_names "$_topl_recipes" "${dirs[@]/#\~/$HOME}"
    else
        _topl_names "$_topl_conf/$1"
    fi
}

_topl() {
    local line=${COMP_LINE:0:$COMP_POINT} cur words cmd flags replies=()
    cur=${line##*[[:space:]]}
    _topl_split words "$line"
    [[ $line == *[[:space:]] ]] && words+=("")
    if (( ${#words[@]} <= 2 )); then
        replies=($(compgen -W "$_topl_commands --help --version --completion" -- "$cur"))
    else
        cmd=${words[1]//-/_}
        if [[ $cur == -* && $cmd =~ ^[a-z_]+$ ]]; then
            eval "flags=\${_topl_flags_$cmd:-}"  # $cmd is [a-z_]+: a variable's name
            replies=($(compgen -W "$flags --help" -- "$cur"))
        elif [[ ${words[1]} == --completion ]]; then
            replies=($(compgen -W "bash zsh" -- "$cur"))
        elif [[ ${words[1]} == recipes && (${words[2]} == show || ${words[2]} == diff) && ${#words[@]} -ge 4 ]]; then
            replies=($(compgen -W "$(_topl_options recipe)" -- "$cur"))
        elif [[ $cur == *=* ]]; then
            local group=${cur%%=*}
            group=${group#+}
            if [[ " $_topl_groups recipe " == *" $group "* ]]; then
                replies=($(compgen -P "${cur%%=*}=" -W "$(_topl_options "$group")" -- "${cur#*=}"))
            fi
        elif [[ " $_topl_hydra " == *" ${words[1]} "* ]]; then
            replies=($(compgen -S = -W "$_topl_groups recipe" -- "$cur"))
            [[ ${#replies[@]} -gt 0 ]] && compopt -o nospace 2>/dev/null
        fi
    fi
    # bash splits words at `=` (COMP_WORDBREAKS): it replaces only what follows the last one
    if [[ ${COMP_WORDBREAKS:-} == *=* && $cur == *=* ]]; then
        replies=("${replies[@]#*=}")
    fi
    if [[ -n ${ZSH_VERSION:-} ]]; then  # registered -o nospace: a reply's own space ends it
        local r spaced=()
        for r in "${replies[@]}"; do
            if [[ $r == *= ]]; then spaced+=("$r"); else spaced+=("$r "); fi
        done
        replies=("${spaced[@]}")
    fi
    COMPREPLY=("${replies[@]}")
}
"""
# zsh has no `compopt`: registered -o nospace, a match ending in a space gets that space as its
# suffix (zsh@5.9:Completion/bashcompinit:_bash_complete), so `model=` alone is left open
REGISTER = {"bash": "complete -F _topl topl", "zsh": "complete -o nospace -F _topl topl"}


def flags_of(cmd: str) -> list[str]:
    """A command's flags, as its --help text names them (usage line and flag list)."""
    usage, _, flags, _ = HELP[cmd]
    listed = [m for line in flags.splitlines() if (m := LISTED.match(line))]
    found = FLAG.findall(usage) + [f for m in listed for f in m.groups() if f]
    return sorted(set(found) - {"-h", "--help"})


def script(shell: str, commands: tuple[str, ...]) -> str:
    if shell not in SHELLS:
        raise ToplError(
            f"--completion {shell or '(nothing)'}: no such shell",
            where="topl --completion",
            fix='topl --completion bash (or zsh); then: eval "$(topl --completion bash)"',
        )
    groups = sorted(p.name for p in conf_dir().iterdir() if p.is_dir() and p.name[0] != "_")
    hydra = [c for c in commands if c in HELP and OVERRIDES in text(c)]
    head = [
        f'# topl\'s {shell} completion: eval "$(topl --completion {shell})" in your ~/.{shell}rc',
        f"_topl_conf={shlex.quote(str(conf_dir()))}",
        f"_topl_recipes={shlex.quote(str(recipes_dir()))}",
        f"_topl_commands={shlex.quote(' '.join(commands))}",
        f"_topl_groups={shlex.quote(' '.join(groups))}",
        f"_topl_hydra={shlex.quote(' '.join(hydra))}",  # commands that take overrides
        *(f"_topl_flags_{c}={shlex.quote(' '.join(flags_of(c)))}" for c in commands if c in HELP),
    ]
    if shell == "zsh":
        head.insert(1, "autoload -U +X bashcompinit && bashcompinit")
    return "\n".join(head) + "\n" + BASH.lstrip("\n") + REGISTER[shell] + "\n"
