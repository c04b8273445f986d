"""`topl check [OVERRIDES] [--json] [-q|--quiet] [--fix[=warnings]] [--deep]`: validate only;
exit 0 when no error, 2 when rejected; `-q` prints the errors only (nothing when accepted).
`--fix` also searches for the smallest override set that makes the spec accepted
(launcher/plan/fix.py) and prints it as a command line; `--fix=warnings` clears warnings too.
`--deep` also dry-runs the declared verl's own start-up checks (contract/dryrun)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topl.launcher.base.console import print_violations
from topl.launcher.base.errors import ERROR, INFO, WARNING, ToplError
from topl.launcher.cli.argv import QUIET, parse, quiet
from topl.launcher.cli.output import print_json
from topl.launcher.compose.cache import compose_cached
from topl.launcher.compose.env_refs import unset_note, without_secrets
from topl.launcher.compose.meaning import settings
from topl.launcher.contract import check, errors
from topl.launcher.contract.core import Violation
from topl.launcher.doctor.registry import install_hint, verl_mismatch
from topl.launcher.spec import backend_traits

if TYPE_CHECKING:
    from topl.launcher.contract.core import Violation
    from topl.launcher.plan.fix import Fix
    from topl.launcher.spec.job import JobSpec


def main(args: list[str]) -> int:

    fix_mode = None
    if "--fix=warnings" in args:
        fix_mode, args = "warnings", [a for a in args if a != "--fix=warnings"]
    flags, overrides = parse(
        args, flags=("--json", "--fix", "--deep", "--force", *QUIET), options={"-o": None}
    )
    fix_mode = fix_mode or ("errors" if flags.fix else None)
    if flags.o is not None and fix_mode is None:
        raise ToplError(
            "-o FILE.yaml writes --fix's result as a recipe; there is no --fix",
            where="command line",
            fix=f"topl check {shlex.join(overrides)} --fix -o {flags.o}",
        )
    # Hydra only when an input changed; an unset secret is not needed to check
    composed, unset = without_secrets(lambda: compose_cached(overrides))
    vs = check(composed) + installed_verl(composed.to_object())
    note = None
    if flags.deep:  # verl's own checks, whatever the rules said (both views of one command)
        from topl.launcher.contract.dryrun.deep import deep  # lazy: keeps plain check lean

        got, note = deep(composed)
        vs = sorted(vs + got, key=lambda v: (v.severity != "error", v.rule))
    ok = not errors(vs)
    chosen = settings(composed)  # what runs, and who chose it (never a recipe: untrusted.py)
    out = {"ok": ok, "violations": [v.to_dict() for v in vs], "command_line_only": chosen}
    if note:
        out["deep"] = note
    fix = after = None
    if fix_mode and (not ok or (fix_mode == "warnings" and vs)):
        from topl.launcher.compose.hydra import (
            compose_job,
        )  # lazy: Hydra and OmegaConf only when this runs
        from topl.launcher.plan.fix import find_fix  # lazy: Hydra and OmegaConf only when this runs

        fix = find_fix(overrides, warnings=fix_mode == "warnings")
        if fix.found:
            after = check(compose_job(overrides + [c.override for c in fix.changes]))
        out["fix"] = fix.to_dict() | {
            "command": _command(overrides, fix) if fix.found else None,
            "after": None
            if after is None
            else {"ok": not errors(after), "violations": [v.to_dict() for v in after]},
        }
    written = None
    if flags.o is not None:
        written = _write_recipe(Path(flags.o), overrides, fix, flags.force)
        out["recipe_file"] = written
    if flags.json:
        print_json(out)
    elif quiet(flags):
        print_violations(errors(vs), sys.stdout)
        if not ok:
            print(f"REJECTED: {len(errors(vs))} error(s)")
        if fix is not None:
            _print_fix(fix, after, overrides)
    else:
        print_violations(vs, sys.stdout)
        if note:
            print(note)
        for s in chosen:
            print(f"note: {s['key']}={s['value']} chooses what runs; set by {s['source']}")
        if unset:
            print(unset_note(unset))
        print(f"{'OK' if ok else 'REJECTED'}: {counts(vs)}")
        if fix is not None:
            _print_fix(fix, after, overrides)
    if written is not None and not flags.json:
        if written["verdict"].startswith("not written"):
            print(f"{written['path']}: {written['verdict']}")
        else:
            print(
                f"wrote {written['path']}: topl check recipe={written['path']}: {written['verdict']}"
            )
    return 0 if ok else 2


def _write_recipe(path: Path, overrides: list[str], fix: Fix | None, force: bool) -> dict[str, Any]:
    """-o: the recipe the fix makes (cli/fix_recipe.py), and `topl check recipe=PATH`'s verdict."""
    from topl.launcher.cli import fix_recipe  # lazy: Hydra's override parser only with -o
    from topl.launcher.cli.recipes import write_private  # lazy: the importer only with -o
    from topl.launcher.compose.hydra import compose_job  # lazy: Hydra only when this runs

    if fix is not None and not fix.found:  # the output says what blocks it
        return {"path": str(path), "ok": False, "verdict": "not written: no fix found"}
    changes = [c.override for c in fix.changes] if fix is not None else []
    command = shlex.join(["topl", "check", *overrides, "--fix", "-o", str(path)])
    write_private(path, fix_recipe.text(overrides, changes, command), force)
    vs = check(compose_job([f"recipe={path.absolute()}"]))
    verdict = f"{'OK' if not errors(vs) else 'REJECTED'}: {counts(vs)}"
    return {"path": str(path), "ok": not errors(vs), "verdict": verdict}


def counts(vs: list[Violation]) -> str:
    """`1 error(s), 2 warning(s)`, and `, 3 info` where the stack's measurements outrank a rule."""
    n = {s: sum(v.severity == s for v in vs) for s in (ERROR, WARNING, INFO)}
    info = f", {n[INFO]} info" if n[INFO] else ""
    return f"{n[ERROR]} error(s), {n[WARNING]} warning(s){info}"


def _command(overrides: list[str], fix: Fix) -> str:
    return shlex.join(["topl", "check", *overrides, *(c.override for c in fix.changes)])


def _print_fix(fix: Fix, after: list[Violation] | None, overrides: list[str]) -> None:
    if not fix.found:
        print(f"\nno fix ({fix.evaluated} candidate sets judged); what blocks it:")
        for rule, msg in fix.blocking.items():
            print(f"  {rule}: {msg}")
        return
    print(f"\nfix: {len(fix.changes)} change(s), {fix.evaluated} candidate sets judged")
    for c in fix.changes:
        who = "  (you set this)" if c.user else ""
        clears = ", ".join(c.clears) if c.clears else "with the others"
        print(f"  {c.override:<40} was {c.old!r}; clears {clears}{who}")
    errs = [v for v in after or [] if v.severity == ERROR]
    warns = [v for v in after or [] if v.severity == WARNING]
    verdict = "OK" if not errs else f"still REJECTED by {', '.join(v.rule for v in errs)}"
    print(f"after the fix: {verdict}, {len(warns)} warning(s)")
    print(f"  {_command(overrides, fix)}")


def installed_verl(spec: JobSpec) -> list[Violation]:
    """A warning when this Python's verl (package metadata; never imported) is not the version the
    spec's stack declares: the job would run the wrong verl if it runs here (`topl doctor` checks
    where it really runs). The reference engines (backend=local) use no verl."""

    name = spec.cluster.backend  # TOP-SPEC-001 has refused a name outside the registry
    got = name in backend_traits.NAMES and backend_traits.of(spec).remote and verl_mismatch(spec)
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
