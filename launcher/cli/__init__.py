"""`topl` command line: launch, check, render, rules, recipes, probe.

Everything after the subcommand that is not a topl flag is a Hydra override; `topl launch` is a
real `@hydra.main` app, so `-m`, `--cfg job`, `--info` and the `.hydra/` folder work as in Hydra.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from topl.launcher.base import children, redact
from topl.launcher.base.errors import (
    LOCAL_EXTRA,
    ToplError,
    local_extra_error,
)
from topl.launcher.run import lifecycle

USAGE = """usage: topl COMMAND [OVERRIDES...] [FLAGS]

commands:
  launch    validate, write a run directory, start the backend (Hydra app: -m, --cfg job, --info)
            flags: --dry-run (write the run dir, start nothing), --follow (ray_job: stream logs),
                   --skip-doctor (remote backends run `topl doctor` first; this skips it, loudly),
                   --watch (follow logdiff/reward live; strict: stop on the first logdiff != 0),
                   --unsafe-hydra-overrides (allow hydra.callbacks/logging/... overrides: runs code)
                   --resume RUN_DIR (an interrupted or failed run again, its identity kept)
  check     validate only; exit 0 when no error, 2 when rejected        (--json)
  render    print the verl command the spec becomes                   (--json)
  rules     print the consistency contract's rule catalog   (--json, --markdown, --constraints, --doctor)
  recipes   list recipes; `recipes show NAME`; `recipes diff A B`     (--json)
            `recipes import SCRIPT.sh`: a bash launch script -> a recipe + report by line
  plan      expand a sweep (a=1,2 b=range(1,5)), validate every point, launch nothing (--json, --all, --rank)
  doctor    check the installed stack here, or on every Ray node (--ray [ADDRESS]) (--json)
  probe     run the reference rollout and training engines, compare log-probs (--json, --dump DIR)
  watch     follow RUN_DIR: logdiff/reward per step, guard records; strict: stop on logdiff != 0
            (--no-stop, --strict, --once, --json, --interval S)
  compare   runs or sweeps side by side: verdict, steps, logdiff, reward, step time vs plan --rank's
            (--json, --csv, --sort KEY [--desc], --plot OUT.png)
  runs      the runs under RUN_ROOT (default ./runs), newest first: state, steps, logdiff (--json)
  diagnose  compare two boundary dumps: first divergence, operator path vs framework (--json, --plots DIR)

  COMMAND --help    flags, override grammar and examples of one command;  topl --version
  topl --completion bash|zsh   shell completion: eval "$(topl --completion bash)" in ~/.bashrc

examples:
  topl launch                                   # the embedded default: true on-policy GRPO here
  topl check recipe=qwen3_30b_a3b_grpo_a3_strict rollout.tp=2
  topl render recipe=qwen3_30b_a3b_grpo_a3_strict --json
"""


def check_sweeper_discoverable() -> None:
    """conf/config.yaml selects the `topl` sweeper, which Hydra finds by listing the
    `hydra_plugins` namespace on disk (hydra-core@1.3.8:hydra/core/plugins.py:Plugins._scan_all_plugins,
    pkgutil over hydra_plugins.__path__). A default `pip install -e .` maps it through an import
    hook pkgutil cannot list: say how to fix that instead of Hydra's "Could not find"."""
    import pkgutil

    try:
        import hydra_plugins
    except ImportError:
        found = False
    else:
        found = any(m.name == "topl_sweeper" for m in pkgutil.iter_modules(hydra_plugins.__path__))
    if not found:
        raise ToplError(
            "Hydra cannot discover topl's sweeper plugin (hydra_plugins.topl_sweeper): "
            "an editable install in setuptools' default mode hides it from plugin "
            "discovery",
            where="the topl installation",
            fix="pip install -e . --config-settings editable_mode=strict "
            "(or a regular `pip install .`)",
        )


# One module per command, imported when run: `topl rules` must not pay for torch or Hydra.
COMMANDS = (
    "launch",
    "check",
    "render",
    "rules",
    "recipes",
    "probe",
    "plan",
    "doctor",
    "diagnose",
    "watch",
    "compare",
    "runs",
)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `topl ... | head`: the reader left; not an error, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush too
        return 0


def _unknown_command(cmd: str, rest: list[str]) -> int:
    """The nearest command by spelling; JSON when asked for."""
    from topl.launcher.compose.did_you_mean import (
        nearest,
    )  # lazy: the entry point imports only what the command asked for uses

    near = " or ".join(f"`topl {c}`" for c in nearest(cmd, COMMANDS))
    e = ToplError(
        f"unknown command {cmd!r}",
        where=f"topl {cmd}",
        fix=(f"did you mean {near}? " if near else "")
        + f"commands: {', '.join(COMMANDS)} (`topl --help`)",
    )
    if "--json" in rest:
        from topl.launcher.cli.output import (
            print_json,
        )  # lazy: the entry point imports only what the command asked for uses

        print_json({"ok": False, "error": e.to_dict()})
    else:
        print(e.render() + ("" if near else f"\n\n{USAGE}"), file=sys.stderr)
    return 2


def _working_directory() -> None:
    """Hydra reads the working directory into every compose (hydra.runtime.cwd) and relative
    paths resolve against it: a deleted one is bad input, said once, not a traceback."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise ToplError(
            "the working directory no longer exists (deleted or moved after this shell entered it)",
            where=f"$PWD={os.environ.get('PWD', '?')}",
            fix='cd to an existing directory (e.g. `cd "$PWD"` if it was re-created) and run again',
        ) from None


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    redact.install()  # everything printed from here on has secrets removed
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version", "version"):
        from topl.launcher.cli.help import (
            version,
        )  # lazy: the entry point imports only what the command asked for uses

        print(version())
        return 0
    if argv[0] == "--completion":
        from topl.launcher.cli.completion import (
            script,
        )  # lazy: the entry point imports only what the command asked for uses

        try:
            print(script(argv[1] if len(argv) > 1 else "", COMMANDS), end="")
        except ToplError as e:
            print(e.render(), file=sys.stderr)
            return 2
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        return _unknown_command(cmd, rest)
    if "-h" in rest or "--help" in rest:
        from topl.launcher.cli.help import (
            text,
        )  # lazy: the entry point imports only what the command asked for uses

        print(text(cmd))
        if cmd != "launch":
            return 0
        print("Hydra's help for this app follows (config groups, the composed config):\n")
    try:
        if cmd != "rules":  # the one command that reads nothing relative to it
            _working_directory()
        if cmd not in ("rules", "diagnose", "compare", "runs"):
            check_sweeper_discoverable()
        with lifecycle.signals_interrupt():  # SIGTERM unwinds like Ctrl-C: children go with us
            return importlib.import_module(f"topl.launcher.cli.{cmd}").main(rest)
    except ToplError as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if "--json" in rest:  # machines get JSON for bad input too
            from topl.launcher.cli.output import (
                print_json,
            )  # lazy: the entry point imports only what the command asked for uses

            print_json({"ok": False, "error": e.to_dict()})
        else:
            print(e.render(), file=sys.stderr)
        return e.exit_code
    except ModuleNotFoundError as e:
        if e.name not in LOCAL_EXTRA or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(local_extra_error(f"topl {cmd}", e.name).render(), file=sys.stderr)
        return 2
    except RecursionError:  # an override or file nested thousands deep (a parser recursed)
        print(
            "error: the input nests too deeply to read\n  fix: write plain values (recipes and "
            "overrides are a few levels deep)",
            file=sys.stderr,
        )
        return 2
    except (KeyboardInterrupt, lifecycle.Interrupted) as e:  # before a job started: nothing to stop
        children.kill_all()  # the doctor's interpreter (and its children), waited on in a thread
        signum = getattr(e, "signum", signal.SIGINT)
        print(f"\ntopl: {signal.Signals(signum).name}: stopped", file=sys.stderr)
        return 128 + signum
