"""`topl check [OVERRIDES] [--json]`: validate only; exit 0 when no error, 2 when rejected."""

from __future__ import annotations

import sys

from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_violations


def main(args: list[str]) -> int:
    from topl.launcher.compose import compose_job
    from topl.launcher.contract import check, errors

    flags, overrides = parse(args, flags=("--json",))
    composed = compose_job(overrides)
    vs = check(composed) + installed_verl(composed.to_object())
    ok = not errors(vs)
    if flags.json:
        print_json({"ok": ok, "violations": [v.to_dict() for v in vs]})
    else:
        print_violations(vs, sys.stdout)
        n_err = len(errors(vs))
        print(f"{'OK' if ok else 'REJECTED'}: {n_err} error(s), {len(vs) - n_err} warning(s)")
    return 0 if ok else 2


def installed_verl(spec) -> list:
    """A warning when this Python's verl (package metadata; never imported) is not the version the
    spec's stack declares: the job would run the wrong verl if it runs here (`topl doctor` checks
    where it really runs). The reference engines (backend=local) use no verl."""
    from topl.launcher.contract.core import Violation
    from topl.launcher.doctor import install_hint, verl_mismatch

    got = spec.cluster.backend != "local" and verl_mismatch(spec)
    if not got:
        return []
    have, want = got
    v = spec.cluster.versions
    return [
        Violation(
            "TOP-DOC-VERL-002",
            "warning",
            f"verl {have} is installed here, stack={v.profile} declares verl {want}",
            {
                "cluster.versions.verl": {"value": want, "source": f"stack={v.profile}"},
                "installed verl": {"value": have, "source": "this Python's package metadata"},
            },
            install_hint(v),
        )
    ]
