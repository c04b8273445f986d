"""Recipes and command-line overrides are untrusted input: data for topl's keys, never code.

A recipe may set topl's own keys and pick topl's group options (or include other recipes) by
name; nothing in it may name code (`_target_`, a logging `()` factory), call a resolver
(`${oc.env:...}` would copy a secret into a printed key) or configure Hydra beyond the sweeper's
parameters. The command line's overrides of Hydra's machinery: overrides_guard.py.
YAML is parsed with size, alias and expansion limits (a billion-laughs file is refused at once).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Iterator

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.compose import meaning
from topl.launcher.compose.did_you_mean import nearest
from topl.launcher.compose.untrusted_options import (
    OPTION_NAME,
    SELECTABLE,
    sweep_params,
    sweep_points,
)
from topl.launcher.compose.untrusted_yaml import (
    MAX_BYTES,
    load_yaml,
    read_capped,
)
from topl.launcher.spec.job import JobSpec

MAX_INCLUDES = 8  # recipes including recipes, depth
# Keys that make Hydra, OmegaConf users or logging.config call code.
CODE_KEYS = {"_target_", "_partial_", "_args_", "()"}
# hydra.* keys a recipe may set: the validating sweeper's settings (plain values).
RECIPE_HYDRA = {"sweeper": {"params", "max_batch_size", "on_invalid"}}
_GROUP_ENTRY = re.compile(r"^(override )?/?(?P<group>[a-z_]+)$")
# `${` that does not open a plain key reference (`${model.name}`, `${.x}`): a resolver call
# (`${oc.env:X}`), a nested one whose name is itself interpolated (`${${k}:X}`), or an escape.
_RESOLVER = re.compile(r"\$\{(?!\s*\.*[A-Za-z_][\w.]*(?:\[\d+\][\w.]*)*\s*\})")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab / newline, DEL, C1
_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)\s*$", re.MULTILINE)


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted path, key, value) for every mapping entry, dotted keys split into their parts."""
    if isinstance(node, dict):
        for k, v in node.items():
            here = f"{path}.{k}" if path else str(k)
            for part in str(k).split("."):
                yield here, part, v
            yield from _walk(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield f"{path}[{i}]", None, v
            yield from _walk(v, f"{path}[{i}]")


def code_keys(node: Any) -> list[str]:
    """Dotted paths of every key that names code (`_target_`, `()`, ...), dotted keys included."""
    return sorted({p for p, part, _ in _walk(node) if part in CODE_KEYS})


def check_values(node: Any, where: str, *, resolvers: bool) -> None:
    """No code keys anywhere; no resolver calls in strings unless `resolvers` (the user's own typing)."""
    hits = code_keys(node)
    if hits:
        raise ToplError(
            f"{', '.join(hits)}: names code to run; recipes, configs and overrides are data",
            where=where,
            fix="remove those keys (topl never instantiates code from a config)",
        )
    if not resolvers:
        controls = [
            p
            for p, k, v in _walk(node)
            if any(isinstance(t, str) and _CONTROL.search(t) for t in (k, v))
        ]
        if controls:  # a terminal escape (or a NUL) printed by check / render would run there
            raise ToplError(
                f"control character (a terminal escape sequence or NUL) at "
                f"{', '.join(sorted(set(map(repr, controls))))}",
                where=where,
                fix="write the value as plain text (tab and newline are fine)",
            )
        calls = [
            p
            for p, _, v in _walk(node)
            if isinstance(v, str) and _RESOLVER.search(v) and not env_reference(p, v)
        ]
        if calls:
            # (no `NAME: text` in the message: the redactor would read it as a secret's value)
            raise ToplError(
                f"resolver call (`${{name:...}}`) at {', '.join(calls)} (a recipe may reference "
                "keys, `${model.name}`, but call no resolver; the one exception is a job "
                "variable read from the launching environment, `cluster.env.NAME` = "
                "`${oc.env:NAME}`)",
                where=where,
                fix="write the value, or pass it on the command line; a secret goes to the job "
                "as `cluster.env.NAME` = `${oc.env:NAME}` (never its value in a file)",
            )


# The one resolver a recipe may call: cluster.env.NAME = ${oc.env:NAME} (plain: a variable name,
# no default, nothing nested). The job's variable is then read from the launching environment at
# launch, so a secret never lands in a file (docs/security.md); anywhere else oc.env would copy
# the launching machine's environment into a printed key or verl's argv.
_ENV_REF = re.compile(r"^\$\{oc\.env:(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}$")
_ENV_KEY = re.compile(r"^cluster\.env\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


def env_reference(path: str, value: str) -> bool:
    """Is `value` at `path` the accepted `cluster.env.NAME: ${oc.env:NAME}` form (the same NAME:
    the job gets the launching shell's own variable, nothing renamed)?"""
    key, ref = _ENV_KEY.match(path), _ENV_REF.match(value)
    return bool(key and ref and key["name"] == ref["name"])


# Keys whose value never goes on a command line: the job's environment (secrets reach the job
# there, launcher/render/env.py) and the Ray head topl itself talks to.
OFF_ARGV = ("cluster.env", "cluster.ray_address")


def check_no_secret_on_argv(node: Any, where: str) -> None:
    """No value that becomes part of verl's command line (or a printed key) holds a secret: a known
    secret value (a secret-named variable's) or a credential shape (URL password, token), anywhere
    outside cluster.env. Everyone on the machine reads argv (`ps`)."""

    r = redact.current()
    built = [
        p
        for p, _, v in _walk(node)
        if isinstance(v, str) and not p.startswith(OFF_ARGV) and _RESOLVER.search(v)
    ]
    if built:  # `$${x}` with x `{oc.env:HF_TOKEN}`: verl's own Hydra would resolve it
        raise ToplError(
            f"{', '.join(sorted(set(built)))}: resolves to a resolver call (`${{name:...}}`), "
            "which verl's Hydra would run on its side (`oc.env` copies a secret into verl's "
            "config and logs)",
            where=where,
            fix="write the value out; a secret goes to the job only through cluster.env",
        )
    hits = [
        p
        for p, _, v in _walk(node)
        if isinstance(v, str) and not p.startswith(OFF_ARGV) and r.text(v) != v
    ]
    if hits:
        raise ToplError(
            f"{', '.join(sorted(set(hits)))}: holds a secret (a secret variable's value, a URL "
            "password or a token); it would be on verl's command line, readable by everyone (`ps`)",
            where=where,
            fix="remove it from that key; hand a secret to the job only through cluster.env "
            "(`+cluster.env.MY_TOKEN='${oc.env:MY_TOKEN}'`)",
        )


def check_recipe(data: Any, where: str, spec_fields: set[str]) -> list[str]:
    """Validate a parsed recipe; return the names of the recipes it includes."""
    if not isinstance(data, dict):
        raise ToplError("a recipe must be a YAML mapping", where=where)
    check_values(data, where, resolvers=False)
    unknown = [k for k in data if k not in spec_fields | {"defaults", "hydra"}]
    if unknown:
        raise ToplError(
            f"unknown top-level key(s) {', '.join(map(str, unknown))}: a recipe sets topl's keys only",
            where=where,
            fix=_near(unknown, spec_fields)
            + f"use the job spec's keys: {', '.join(sorted(spec_fields))}",
        )
    _check_hydra(data.get("hydra"), where)
    _check_meaning(data, where)
    for point in sweep_points(data, where):  # each value a sweep parameter may take is a recipe's
        check_values(point, f"{where}: hydra.sweeper.params", resolvers=False)
        _check_meaning(point, f"{where}: hydra.sweeper.params")
    return _check_defaults(data.get("defaults", []), where)


def _near(unknown: list[Any], fields: set[str]) -> str:
    """`did you mean train? ` for each unknown key with a near field (a typo, not a new key)."""

    pairs = [(k, c[0]) for k in map(str, unknown) if (c := nearest(k, fields, 1))]
    return "".join(f"{k}: did you mean {c}? " for k, c in pairs)


def _check_hydra(node: Any, where: str) -> None:
    if node is None:
        return
    allowed = ", ".join(f"hydra.{g}.{k}" for g, ks in RECIPE_HYDRA.items() for k in sorted(ks))
    bad = [f"hydra.{g}" for g in node] if isinstance(node, dict) else ["hydra"]
    bad = [b for b in bad if b.removeprefix("hydra.") not in RECIPE_HYDRA]
    for group, keys in RECIPE_HYDRA.items():
        sub = node.get(group) if isinstance(node, dict) else None
        if sub is not None:
            bad += [
                f"hydra.{group}.{k}"
                for k in (sub if isinstance(sub, dict) else ["?"])
                if k not in keys
            ]
            params = sub.get("params") if isinstance(sub, dict) else None
            if params is not None and not (
                isinstance(params, dict)
                and all(isinstance(v, (str, int, float, bool)) for v in params.values())
            ):
                bad.append(f"hydra.{group}.params")
    if bad:
        raise ToplError(
            f"{', '.join(bad)}: a recipe may not configure Hydra (logging, callbacks, output "
            "and environment settings run code or write outside the run directory)",
            where=where,
            fix=f"remove the `hydra:` keys; allowed: {allowed}",
        )


def _check_meaning(data: dict[str, Any], where: str) -> None:
    """Settings that choose what runs (meaning.py) are the user's own, at any nesting level."""

    hits = meaning.recipe_hits(data)
    if hits:
        lines = "; ".join(f"{k}: {why}" for k, why in hits)
        first = hits[0][0].removeprefix("hydra.sweeper.params.")
        raise ToplError(
            f"a recipe may not choose what runs: {lines}",
            where=where,
            fix=f"remove it from the recipe; if you trust it, type it yourself on the command "
            f"line (`{first.lstrip('+~')}=...`); `topl check` shows each setting's source",
        )


def _check_defaults(entries: Any, where: str) -> list[str]:
    how = (
        "defaults entries are `override /GROUP: OPTION` (GROUP one of "
        f"{', '.join(sorted(SELECTABLE))}), another recipe's name, or `_self_`"
    )
    if not isinstance(entries, list):
        raise ToplError("`defaults` must be a list", where=where, fix=how)
    includes = []
    for e in entries:
        if e == "_self_":
            continue
        if isinstance(e, str) and OPTION_NAME.match(e) and not e.endswith((".yaml", ".yml")):
            includes.append(
                e
            )  # a recipe by name (resolved in the shipped folder / TOPL_RECIPE_PATH)
            continue
        if isinstance(e, dict) and len(e) == 1:
            ((key, value),) = e.items()
            m = _GROUP_ENTRY.match(str(key))
            if (
                m
                and m["group"] in SELECTABLE
                and isinstance(value, str)
                and OPTION_NAME.match(value)
            ):
                continue
        raise ToplError(f"defaults entry {e!r} is not allowed in a recipe", where=where, fix=how)
    return includes


@dataclasses.dataclass
class Recipe:
    """A recipe file read once: its bytes (what Hydra will load) and the recipes it includes."""

    path: Path
    text: bytes
    includes: list[str]
    swept: list[str] = dataclasses.field(default_factory=list)  # its hydra.sweeper.params keys


def read_recipe(path: Path, spec_fields: set[str]) -> Recipe:
    """Read a recipe file once and validate that content (Hydra is then given these bytes)."""
    text = read_capped(path, MAX_BYTES + 1)
    data = load_yaml(text, str(path)) or {}
    package = _PACKAGE.findall(text.decode("utf-8"))
    if package and package[0] != "_global_":
        raise ToplError(
            f"`# @package {package[0]}`: recipes are `# @package _global_`",
            where=str(path),
            fix="start the file with `# @package _global_`",
        )
    includes = check_recipe(data, str(path), spec_fields)
    swept = [str(k).lstrip("+~").strip() for k in sweep_params(data)]
    return Recipe(path, text, includes, swept)


def spec_fields() -> set[str]:

    return {f.name for f in dataclasses.fields(JobSpec)}
