"""`topl render [OVERRIDES] [--json] [-q|--quiet]`: print the verl command the spec becomes; a
rejected spec exits 2 (with `--json`: `{"ok": false, "violations": [...]}` on stdout, as `check
--json`; with `-q` only its errors on stderr)."""

from __future__ import annotations

import sys

from topl.launcher.base.console import print_violations
from topl.launcher.cli.argv import QUIET, parse, quiet
from topl.launcher.cli.check import installed_verl
from topl.launcher.cli.output import print_json
from topl.launcher.compose.cache import compose_cached
from topl.launcher.compose.env_refs import unset_note, without_secrets
from topl.launcher.compose.meaning import settings
from topl.launcher.contract import check, errors
from topl.launcher.render.invocation import render


def main(args: list[str]) -> int:

    flags, overrides = parse(args, flags=("--json", *QUIET))
    # Hydra only when an input changed; a secret is printed as `${NAME:?...}`, never its value
    composed, unset = without_secrets(lambda: compose_cached(overrides))
    vs = check(composed)
    if errors(vs):
        vs += installed_verl(composed.to_object())  # what `check` adds: the same answer
        if flags.json:  # the same shape as `check --json`: stdout stays JSON for machines
            out = {"ok": False, "violations": [v.to_dict() for v in vs]}
            print_json(out | {"command_line_only": settings(composed)})
        print_violations(errors(vs) if quiet(flags) else vs)
        print("topl render: the spec is rejected; fix the errors above", file=sys.stderr)
        return 2
    spec = composed.to_object()
    inv = render(spec)
    if flags.json:
        print_json(inv.to_dict(spec.cluster.python))
    else:
        print(inv.command(spec.cluster.python))
        if unset and not quiet(flags):
            print(unset_note(unset), file=sys.stderr)
    return 0
