"""`topl check [OVERRIDES] [--json]`: validate only; exit 0 when no error, 2 when rejected."""

from __future__ import annotations

import sys

from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_violations


def main(args: list[str]) -> int:
    from topl.launcher.compose import compose_job
    from topl.launcher.contract import check, errors

    flags, overrides = parse(args, flags=("--json",))
    from topl.launcher.meaning import settings

    composed = compose_job(overrides)
    vs = check(composed)
    ok = not errors(vs)
    chosen = settings(composed)  # what runs, and who chose it (never a recipe: untrusted.py)
    if flags.json:
        print_json({"ok": ok, "violations": [v.to_dict() for v in vs], "command_line_only": chosen})
    else:
        print_violations(vs, sys.stdout)
        for s in chosen:
            print(f"note: {s['key']}={s['value']} chooses what runs; set by {s['source']}")
        n_err = len(errors(vs))
        print(f"{'OK' if ok else 'REJECTED'}: {n_err} error(s), {len(vs) - n_err} warning(s)")
    return 0 if ok else 2
