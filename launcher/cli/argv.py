"""The one flag parser of every command: topl's own flags come out of the argument list; what is
left (in order) goes to Hydra as overrides (and, for `topl launch`, Hydra's own flags)."""

from __future__ import annotations

from types import SimpleNamespace

from topl.launcher.errors import ToplError


def _name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def parse(
    args: list[str], flags=(), options=None, optional=()
) -> tuple[SimpleNamespace, list[str]]:
    """(topl's flags by name, the other arguments).

    flags: `--json` alone -> True. options: `--prompts N` -> "N" (default from the dict).
    optional: `--ray [ADDRESS]` -> ADDRESS, "" when given alone, None when absent; a following
    `key=value` is an override, never the flag's value.
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
        else:
            rest.append(a)
        i += 1
    return SimpleNamespace(**got), rest
