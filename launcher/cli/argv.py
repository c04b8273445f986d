"""The one flag parser of every command: topl's own flags come out of the argument list; what is
left (in order) goes to Hydra as overrides (and, for `topl launch`, Hydra's own flags). A flag no
one knows is refused here, with the nearest known one, before anything is composed or written."""

from __future__ import annotations

import difflib
from types import SimpleNamespace

from topl.launcher.base.errors import ToplError

# Flags that name something else a user may mean; the fix says what to write instead.
INSTEAD = {
    "--ray": "launch takes its Ray head as cluster.ray_address=http://HEAD:8265",
}


# check / render / plan: errors only (`quiet(flags)` reads either spelling).
QUIET = ("-q", "--quiet")


def quiet(flags: SimpleNamespace) -> bool:
    return bool(getattr(flags, "q", False) or getattr(flags, "quiet", False))


# Passed on to composition in every command (launcher/compose/untrusted.py reads it among the overrides).
EVERYWHERE = ("--unsafe-hydra-overrides",)


def _name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def is_flag(arg: str) -> bool:
    """`-x` / `--xyz` (a Hydra override never starts with `-`: key=v, +key=v, ~key)."""
    return arg.startswith("-") and len(arg) > 1


def unknown_flag(flag: str, own, passthrough=()) -> ToplError:
    """One readable refusal: the flag, the nearest known one, the command's own flags."""
    head = flag.split("=", 1)[0]
    near = difflib.get_close_matches(head, sorted({*own, *passthrough}), n=1, cutoff=0.6)
    fix = INSTEAD.get(head) or (f"did you mean {near[0]}?" if near else "drop it")
    listed = " ".join(sorted(set(own))) or "none"
    also = " and the others --help lists" if passthrough else ""
    return ToplError(
        f"unknown flag {head}",
        where="command line",
        fix=f"{fix}\n         (flags: {listed}{also}; overrides are key=value)",
    )


def parse(
    args: list[str], flags=(), options=None, optional=(), passthrough=()
) -> tuple[SimpleNamespace, list[str]]:
    """(topl's flags by name, the other arguments).

    flags: `--json` alone -> True. options: `--prompts N` -> "N" (default from the dict).
    optional: `--ray [ADDRESS]` -> ADDRESS, "" when given alone, None when absent; a following
    `key=value` is an override, never the flag's value. passthrough: other flags this command
    hands on (Hydra's, for launch); any other flag is refused (`-h`/`--help` are handled before).
    """
    options = dict(options or {})
    got = {_name(f): False for f in flags}
    got.update({_name(o): d for o, d in options.items()})
    got.update({_name(o): None for o in optional})
    rest = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in flags:
            got[_name(a)] = True
        elif a in options or a in optional:
            nxt = args[i + 1] if i + 1 < len(args) else None
            takes = nxt is not None and not nxt.startswith("-")
            if a in optional:
                takes = takes and "=" not in nxt
            if takes:
                got[_name(a)] = nxt
                i += 1
            elif a in optional:
                got[_name(a)] = ""
            else:
                raise ToplError(f"{a} needs a value", where=" ".join(args))
        elif is_flag(a) and a.split("=", 1)[0] not in (*passthrough, *EVERYWHERE):
            raise unknown_flag(a, (*flags, *options, *optional), passthrough)
        else:
            rest.append(a)
        i += 1
    return SimpleNamespace(**got), rest
