"""`topl recipes [--json]`, `topl recipes show NAME`, `topl recipes diff A B [--env N=V]` (A or B
may be a bash launch script, imported on the fly), `topl recipes import SCRIPT.sh`."""

from __future__ import annotations

import re
import shlex

from omegaconf import OmegaConf

from topl.launcher.base.errors import ToplError
from topl.launcher.base.redact import Redactor, secret_entry
from topl.launcher.base.tree import flatten
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json
from topl.launcher.compose import recipes
from topl.launcher.compose.env_refs import without_secrets
from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors
from topl.launcher.importer import recipe as script_import
from topl.launcher.importer.exact import trip_text
from topl.launcher.importer.groups import CLUSTER_KIND
from topl.launcher.importer.read import read_script
from topl.launcher.importer.report import recipe_text


def resolved(name: str, env: dict | None = None) -> dict:

    if not name.endswith(".sh"):
        return _composed([f"recipe={name}"])
    import tempfile  # a launch script: compare what importing it gives
    from pathlib import Path

    imp = _import(name, env or {}, [], {})
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / (Path(name).stem.replace("-", "_").replace(".", "_") + ".yaml")
        path.write_text(recipe_text(imp, name))
        return _composed([f"recipe={path}", *imp.command_args()])


def _composed(args: list[str]) -> dict:
    """The composed config as data; a secret unset here (`${oc.env:NAME}`) reads as
    env_refs.UNSET_SECRET, on both sides of a diff alike."""
    cfg = without_secrets(lambda: compose_job(args))[0].cfg
    return OmegaConf.to_container(cfg, resolve=True)


def _import(script: str, env: dict, args: list[str], choices: dict, launch: int | None = None):
    from pathlib import Path

    path = Path(script).expanduser()
    if not path.is_file():
        raise ToplError(
            f"script {script!r} does not exist",
            where=f"topl recipes import {script}",
            fix="give the path of a bash launch script",
        )
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise ToplError(f"script {script!r} cannot be read: {e.strerror}") from None
    s = read_script(text, env, args, launch)
    return script_import.build_recipe(s, choices)


IMPORT_USAGE = (
    "topl recipes import SCRIPT.sh [-o OUT.yaml] [--force] [--launch N] [--env NAME=VALUE]... "
    "[GROUP=OPTION]... [--json] [-- SCRIPT_ARGS...]"
)


def _env_flag(v: str, env: dict) -> None:
    k, sep, val = v.partition("=")
    if not sep or not k:
        raise ToplError(f"--env {v}: expected NAME=VALUE", fix=IMPORT_USAGE)
    env[k] = val


def write_private(path, text: str, force: bool) -> None:
    """0600, and never over an existing file unless --force (a recipe may name secrets). Whole or
    not at all: the text goes to a temporary file (0600) moved into place, so a full disk leaves
    neither a half recipe nor, under --force, a truncated old one."""
    import contextlib
    import os
    import tempfile
    from pathlib import Path

    path = Path(path)
    exists = ToplError(
        f"{path} exists: not overwritten", fix="give another -o OUT.yaml, or --force to replace it"
    )
    if not force and (path.exists() or path.is_symlink()):
        raise exists
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise ToplError(f"cannot write {path}: {e.strerror}", fix="give -o OUT.yaml") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if force:
            os.replace(tmp, path)  # a link at `path` is replaced, never followed
        else:
            os.link(tmp, path)  # fails on a name that appeared meanwhile: never overwritten
    except FileExistsError:
        raise exists from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _verdict(out_path, args: list[str] = ()) -> tuple[bool, str, list]:
    """The contract's verdict on the recipe as written, with the command-line settings the report
    prints (what `topl check recipe=OUT ARGS` says)."""
    return _checked(out_path, args)[:3]


def _checked(out_path, args: list[str] = ()) -> tuple[bool, str, list, list]:
    """`_verdict`, and the errors it is made of."""
    try:
        composed, unset = without_secrets(lambda: compose_job([f"recipe={out_path}", *args]))
        vs = errors(check(composed))
    except ToplError as e:
        return False, f"not composable ({e.message})", [], []
    ids = sorted({v.rule for v in vs})
    verdict = "accepted" if not ids else "rejected (" + ", ".join(ids) + ")"
    if unset:  # the recipe reads them as ${oc.env:NAME}: checked without their values
        verdict += f"; export {', '.join(unset)} before `topl launch`"
    return not ids, verdict, ids, vs


# What the local backend refuses for a real model (contract/resources.py, contract/engines.py)
LOCAL_ONLY = ("TOP-RES-009", "TOP-ENG-009")


def _placed(imp, vs: list, script: str, out_path, env: dict, script_args: list, launch) -> None:
    """The report's cluster row of a GPU script (importer/groups.py:cluster_choice) with the
    commands as this import was typed (its --env, --launch and script arguments; a secret --env is
    named, never written), and where it kept cluster=local, the contract's own refusals of that
    (rule, message)."""
    flags = [f"--env {k}={shlex.quote(v)}" for k, v in env.items() if not secret_entry(k, v)]
    flags += [f"--launch {launch}"] if launch is not None else []
    secret = [k for k, v in env.items() if secret_entry(k, v)]
    tail = " -- " + " ".join(map(shlex.quote, script_args)) if script_args else ""
    note = f" (with your --env {', '.join(secret)} again)" if secret else ""

    # OUT: this recipe (replaced); ASCEND.yaml: a new one next to it (this one is kept)
    out, ascend = shlex.quote(str(out_path)), shlex.quote(f"{out_path.with_suffix('')}_ascend.yaml")

    def again(m) -> str:
        rest = m[1].replace(" -o OUT", f" -o {out}").replace(" -o ASCEND.yaml", f" -o {ascend}")
        return f"`topl recipes import {' '.join([shlex.quote(script), *flags])}{rest}{tail}`{note}"

    for r in imp.report:
        if r["kind"] != CLUSTER_KIND:
            continue
        detail = re.sub(r"`topl recipes import SCRIPT([^`]*)`", again, r["detail"])
        r["detail"] = detail.replace("recipe=ASCEND.yaml", f"recipe={ascend}")
        refused = [v for v in vs if v.rule in LOCAL_ONLY]
        if r.get("cluster") == "local" and refused:
            said = "; ".join(f"{v.rule}: {v.message}" for v in refused)
            r["refused_by"] = [v.rule for v in refused]
            r["detail"] += f". On cluster=local the contract refuses this recipe ({said})"


def _short(v, width: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= width else text[: width - 3] + "..."


def _report_lines(imp) -> list[str]:
    lines = [
        f"{r['line'] if r['line'] is not None else '-':>5}  {r['kind']}: "
        + (f"{r['key']} = {r['detail']!r}" if r["key"] else str(r["detail"]))
        for r in imp.report
    ]
    if imp.topl_adds:
        lines.append("topl adds (not in the script; kept because topl needs them):")
        lines += [f"    -  {a['key']} = {_short(a['value'])}: {a['why']}" for a in imp.topl_adds]
    if imp.verl_defaults:
        lines.append(
            f"    -  {len(imp.verl_defaults)} key(s) written out with verl's own value (no change)"
        )
    lines += [
        f"{r['line'] if r['line'] is not None else '-':>5}  NOT REPRODUCED: {r['key']} "
        f"script {r['script']!r} rendered {r['rendered']!r}"
        for r in imp.round_trip
    ]
    lines += [
        f"{r['line']:>5}  NOT REPRODUCED ({r['kind']}): {r['key']}: {r['why']} "
        f"(script: {_short(r['script'])})"
        for r in imp.dropped
    ]
    return lines


def _scrub(red, o):
    """Secret values out of every string of a JSON-like object (keys such as "key" are kept:
    Redactor.obj would hide any value under a secret-looking key name)."""
    if isinstance(o, dict):
        return {k: _scrub(red, v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_scrub(red, v) for v in o]
    return red.text(o) if isinstance(o, str) else o


def import_main(args: list[str]) -> int:
    """Read SCRIPT.sh as data (never run), write the recipe and its report, print the report."""
    from pathlib import Path

    script_args = args[args.index("--") + 1 :] if "--" in args else []
    mine = args[: args.index("--")] if "--" in args else args
    flags, args = parse(mine, flags=("--json",), passthrough=("-o", "--env", "--launch", "--force"))
    as_json = flags.json
    env, choices, out, rest, force, launch = {}, {}, None, [], False, None
    it = iter(args)
    for a in it:
        if a in ("-o", "--env", "--launch"):
            v = next(it, None)
            if v is None:
                raise ToplError(f"{a} needs a value", fix=IMPORT_USAGE)
            if a == "-o":
                out = v
            elif a == "--env":
                _env_flag(v, env)
            elif not (v.isascii() and v.isdigit()):  # `isdigit` takes `²`, int() does not
                raise ToplError(f"--launch {v}: expected a number (1, 2, ...)", fix=IMPORT_USAGE)
            else:
                launch = int(v)
        elif a == "--force":
            force = True
        elif "=" in a and not a.startswith("-"):
            g, _, o = a.partition("=")
            choices[g] = o
        else:
            rest.append(a)
    if len(rest) != 1:
        raise ToplError("give exactly one script", fix=IMPORT_USAGE)
    out_path = Path(out or Path(rest[0]).stem.replace("-", "_").replace(".", "_") + ".yaml")
    report_path = out_path.with_suffix(".import.txt")
    if not force and (out_path.exists() or report_path.exists()):  # before the import's work
        raise ToplError(
            f"{out_path if out_path.exists() else report_path} exists: not overwritten",
            fix="give another -o OUT.yaml, or --force to replace it",
        )
    imp = _import(rest[0], env, script_args, choices, launch)
    red = Redactor(sec.value for sec in imp.secrets.values())
    write_private(out_path, red.text(recipe_text(imp, rest[0])), force)
    args = imp.command_args()
    ok, verdict, ids, vs = _checked(out_path, args)
    _placed(imp, vs, rest[0], out_path, env, script_args, launch)
    lines = [red.text(line) for line in _report_lines(imp)]
    trip = trip_text(imp.round_trip, imp.dropped)
    # the script's program / trainer config are the user's to type (a recipe may not say them)
    run = " ".join(["topl launch", f"recipe={out_path}", *(shlex.quote(a) for a in args)])
    if vs:  # each refusal with its message (the fix and the keys: `topl check` on the command)
        lines.append(f"the contract refuses it ({run.replace('topl launch', 'topl check')}):")
        lines += [red.text(f"    -  {v.rule}: {v.message}") for v in vs]
    lines += [f"declared verl: {imp.verl}; run it as: {run}"]
    final = (
        f"wrote {out_path} ({len(imp.report)} report line(s) in {report_path}); "
        f"round trip: {trip}; contract: {verdict}"
    )
    write_private(report_path, "\n".join([*lines, final]) + "\n", force)
    if as_json:
        print_json(
            _scrub(
                red,
                {
                    "recipe": str(out_path),
                    "report_file": str(report_path),
                    "groups": imp.defaults,
                    "report": imp.report,
                    "round_trip": imp.round_trip,
                    "dropped": imp.dropped,
                    "topl_adds": imp.topl_adds,
                    "verl_defaults": imp.verl_defaults,
                    "contract": {"ok": ok, "verdict": verdict, "rejected_by": ids},
                    "command_line": args,
                    "launch_command": run,
                    "verl": imp.verl,
                    "ok": ok and trip == "exact",
                },
            )
        )
    else:
        print("\n".join(lines))
        print(final)
    return 0 if ok and trip == "exact" else 2


def _diff(args: list[str], as_json: bool) -> int:
    """`recipes diff A B [--env NAME=VALUE]...`: null and absent are different things."""
    env, names, it = {}, [], iter(args)
    for a in it:
        if a == "--env":
            v = next(it, None)
            if v is None:
                raise ToplError("--env needs NAME=VALUE", fix="topl recipes diff A B --env N=V")
            _env_flag(v, env)
        else:
            names.append(a)
    if len(names) != 2:
        raise ToplError("give two recipes or scripts", fix="topl recipes diff A B [--env N=V]")
    a, b = flatten(resolved(names[0], env)), flatten(resolved(names[1], env))
    rows = []
    for k in sorted(set(a) | set(b)):
        if (k in a) != (k in b) or a.get(k) != b.get(k):
            row = {"key": k, "a": a.get(k), "b": b.get(k)}
            if (k in a) != (k in b):  # null is a value; "absent" names the side without the key
                row["absent"] = "b" if k in a else "a"
            rows.append(row)
    if as_json:
        print_json({"a": names[0], "b": names[1], "differences": rows})
        return 0

    def show(row, side):
        return "(absent)" if row.get("absent") == side else repr(row[side])

    width = max((len(r["key"]) for r in rows), default=3)
    print(f"{'key':<{width}}  {names[0]}  ->  {names[1]}")
    for r in rows:
        print(f"{r['key']:<{width}}  {show(r, 'a')}  ->  {show(r, 'b')}")
    print(f"{len(rows)} key(s) differ")
    return 0


def main(args: list[str]) -> int:
    if args[:1] == ["import"]:  # its own flags (-o, --env) and the script's arguments after `--`
        return import_main(args[1:])
    # `diff` takes --env NAME=VALUE (read by _diff); the other subcommands take --json alone
    flags, args = parse(
        args, flags=("--json",), passthrough=("--env",) if args[:1] == ["diff"] else ()
    )
    as_json = flags.json
    if not args:
        rows = [
            {"name": n, "description": recipes.description(p), "path": str(p)}
            for n, p in recipes.available().items()
        ]
        if as_json:
            print_json(rows)
        else:
            width = max((len(r["name"]) for r in rows), default=0)
            for r in rows:
                print(f"{r['name']:<{width}}  {r['description']}")
        return 0
    if args[0] == "show" and len(args) == 2:
        data = resolved(args[1])
        if as_json:
            print_json(data)
        else:
            print(OmegaConf.to_yaml(OmegaConf.create(data)))
        return 0
    if args[0] == "diff":
        return _diff(args[1:], as_json)
    raise ToplError(
        f"unknown recipes command: {' '.join(args)}",
        fix="topl recipes | topl recipes show NAME | topl recipes diff A B [--env N=V] | "
        + IMPORT_USAGE,
    )
