"""Which command of a script is a python launch, and what it launches: `python [options] -m MODULE
args` / `python FILE args`, `torchrun [options] ...` and `ray job submit [options] -- python ...`,
each split into its entrypoint, its arguments and its runner's own options. Reads words the shell
reading (resolve.py) already expanded; nothing runs."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from topl.launcher.importer.expand import Item

_PYTHON = re.compile(r"python[0-9.]*")
# torchrun's options that take no value (every other option is `--opt value` or `--opt=value`)
_TORCHRUN_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path"}


@dataclass
class Launch:
    """The python command the script runs."""

    entrypoint: str  # `-m` module, or the script file
    args: list[Item]  # every argument after the module, resolved
    env: dict[str, Item]  # exported variables plus the command's `NAME=value` prefix
    line: int
    runner: str = "python"  # python | torchrun | ray job submit
    runner_args: list[Item] = field(default_factory=list)  # the runner's own options


def python_launch(argv: list[Item], line: int) -> Launch | tuple[int, str] | None:
    """The launch `argv` (written on `line`) makes, with an empty env for the shell reading to fill
    (it knows the exports); (line, why) for a python command that launches no program; None for a
    command that runs no python."""
    runner, runner_args, py = "python", [], None
    base = [os.path.basename(it.text) for it in argv]
    if base[:3] == ["ray", "job", "submit"] and any(it.text == "--" for it in argv):
        k = next(k for k, it in enumerate(argv) if it.text == "--")
        runner, runner_args, argv, base = "ray job submit", argv[3:k], argv[k + 1 :], base[k + 1 :]
        line = argv[0].line if argv else line  # the launch is where its python is written
    if base[:1] == ["torchrun"]:  # torchrun [options] -m module args | torchrun file args
        k = 1
        while k < len(argv) and argv[k].text.startswith("-") and argv[k].text != "-m":
            t = argv[k].text
            k += 1 if "=" in t or t in _TORCHRUN_FLAGS else 2
        runner, runner_args, py = "torchrun", argv[1:k], 0
        argv = [argv[0], *argv[k:]]
    else:
        py = next((k for k, b in enumerate(base) if _PYTHON.fullmatch(b)), None)
    if py is None:
        return None
    flags = argv[py + 1 :]
    while flags and flags[0].text.startswith("-") and flags[0].text not in ("-m", "-c"):
        flags = flags[1:]  # interpreter options (-u, -X ...)
    if flags and flags[0].text == "-c":  # inline code: not a launch of a program
        return line, "`python -c ...` skipped (inline code, not a launch)"
    if flags and flags[0].text == "-m" and len(flags) > 1:
        entry, args = flags[1].text, flags[2:]
    else:
        entry, args = (flags[0].text, flags[1:]) if flags else ("", [])
    return Launch(entry, args, {}, line, runner, runner_args)
