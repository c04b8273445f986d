"""`topl recipes [--json]`, `topl recipes show NAME`, `topl recipes diff A B` (A or B may be a
bash launch script, imported on the fly), `topl recipes import SCRIPT.sh`."""

from __future__ import annotations

from omegaconf import OmegaConf

from topl.launcher import recipes, script_import
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json
from topl.launcher.errors import ToplError
from topl.launcher.tree import flatten


def resolved(name: str) -> dict:
    from topl.launcher.compose import compose_job

    if name.endswith(".sh"):  # a launch script: compare what importing it gives
        import tempfile
        from pathlib import Path

        imp = _import(name, {}, [], {})
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / (Path(name).stem.replace("-", "_") + ".yaml")
            path.write_text(script_import.recipe_text(imp, name))
            return OmegaConf.to_container(compose_job([f"recipe={path}"]).cfg, resolve=True)
    return OmegaConf.to_container(compose_job([f"recipe={name}"]).cfg, resolve=True)


def _import(script: str, env: dict, args: list[str], choices: dict):
    from pathlib import Path

    path = Path(script).expanduser()
    if not path.is_file():
        raise ToplError(
            f"script {script!r} does not exist",
            where=f"topl recipes import {script}",
            fix="give the path of a bash launch script",
        )
    s = script_import.read_script(path.read_text(), env, args)
    return script_import.build_recipe(s, choices)


IMPORT_USAGE = (
    "topl recipes import SCRIPT.sh [-o OUT.yaml] [--env NAME=VALUE]... [GROUP=OPTION]... "
    "[--json] [-- SCRIPT_ARGS...]"
)


def import_main(args: list[str]) -> int:
    """Read SCRIPT.sh as data (never run), write the recipe and its report, print the report."""
    from pathlib import Path

    script_args = args[args.index("--") + 1 :] if "--" in args else []
    mine = args[: args.index("--")] if "--" in args else args
    flags, args = parse(mine, flags=("--json",), passthrough=("-o", "--env"))
    as_json = flags.json
    env, choices, out, rest = {}, {}, None, []
    it = iter(args)
    for a in it:
        if a in ("-o", "--env"):
            v = next(it, None)
            if v is None:
                raise ToplError(f"{a} needs a value", fix=IMPORT_USAGE)
            if a == "-o":
                out = v
            else:
                k, sep, val = v.partition("=")
                if not sep:
                    raise ToplError(f"--env {v}: expected NAME=VALUE", fix=IMPORT_USAGE)
                env[k] = val
        elif "=" in a and not a.startswith("-"):
            g, _, o = a.partition("=")
            choices[g] = o
        else:
            rest.append(a)
    if len(rest) != 1:
        raise ToplError("give exactly one script", fix=IMPORT_USAGE)
    imp = _import(rest[0], env, script_args, choices)
    out_path = Path(out or Path(rest[0]).stem.replace("-", "_") + ".yaml")
    out_path.write_text(script_import.recipe_text(imp, rest[0]))
    report_path = out_path.with_suffix(".import.txt")
    lines = [
        f"{r['line'] if r['line'] is not None else '-':>5}  {r['kind']}: "
        + (f"{r['key']} = {r['detail']!r}" if r["key"] else str(r["detail"]))
        for r in imp.report
    ]
    lines += [
        f"{r['line']:>5}  NOT REPRODUCED: {r['key']} script {r['script']!r} rendered {r['rendered']!r}"
        for r in imp.round_trip
    ]
    report_path.write_text("\n".join(lines) + "\n")
    if as_json:
        print_json(
            {
                "recipe": str(out_path),
                "report_file": str(report_path),
                "groups": imp.defaults,
                "report": imp.report,
                "round_trip": imp.round_trip,
            }
        )
    else:
        print("\n".join(lines))
        print(
            f"wrote {out_path} ({len(imp.report)} report line(s) in {report_path}); "
            f"round trip: {'exact' if not imp.round_trip else f'{len(imp.round_trip)} setting(s) differ'}"
        )
    return 0 if not imp.round_trip else 2


def main(args: list[str]) -> int:
    if args[:1] == ["import"]:  # its own flags (-o, --env) and the script's arguments after `--`
        return import_main(args[1:])
    flags, args = parse(args, flags=("--json",))
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
    if args[0] == "diff" and len(args) == 3:
        a, b = flatten(resolved(args[1])), flatten(resolved(args[2]))
        rows = [
            {"key": k, "a": a.get(k), "b": b.get(k)}
            for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)
        ]
        if as_json:
            print_json({"a": args[1], "b": args[2], "differences": rows})
        else:
            width = max((len(r["key"]) for r in rows), default=3)
            print(f"{'key':<{width}}  {args[1]}  ->  {args[2]}")
            for r in rows:
                print(f"{r['key']:<{width}}  {r['a']!r}  ->  {r['b']!r}")
            print(f"{len(rows)} key(s) differ")
        return 0
    raise ToplError(
        f"unknown recipes command: {' '.join(args)}",
        fix="topl recipes | topl recipes show NAME | topl recipes diff A B | " + IMPORT_USAGE,
    )
