"""`topl recipes [--json]`, `topl recipes show NAME`, `topl recipes diff A B`."""
from __future__ import annotations

from omegaconf import OmegaConf

from topl.launcher import recipes
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json
from topl.launcher.errors import ToplError
from topl.launcher.tree import flatten


def resolved(name: str) -> dict:
    from topl.launcher.compose import compose_job

    return OmegaConf.to_container(compose_job([f"recipe={name}"]).cfg, resolve=True)


def main(args: list[str]) -> int:
    flags, args = parse(args, flags=("--json",))
    as_json = flags.json
    if not args:
        rows = [{"name": n, "description": recipes.description(p), "path": str(p)} for n, p in recipes.available().items()]
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
        rows = [{"key": k, "a": a.get(k), "b": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if as_json:
            print_json({"a": args[1], "b": args[2], "differences": rows})
        else:
            width = max((len(r["key"]) for r in rows), default=3)
            print(f"{'key':<{width}}  {args[1]}  ->  {args[2]}")
            for r in rows:
                print(f"{r['key']:<{width}}  {r['a']!r}  ->  {r['b']!r}")
            print(f"{len(rows)} key(s) differ")
        return 0
    raise ToplError(f"unknown recipes command: {' '.join(args)}",
                    fix="topl recipes | topl recipes show NAME | topl recipes diff A B")
