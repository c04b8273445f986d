"""Every rendered key spelled the way the declared verl spells it (`topl.launcher.facts.verl_schema`).

A key the declared verl has is rendered as is; one below a mapping verl passes on gets Hydra's
`+`; a key the version spells otherwise is respelled here; anything else cannot compose and is
refused (contract/verl_version.py names the version and the key; `render` raises the same).
Values a shell would have expanded (`$HOME`, `${VAR}`, `~/`) are expanded here from the
launching environment: topl starts verl without a shell, so verl would read them literally.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topl.launcher.facts.verl_schema import Schema

from topl.launcher import facts
from topl.launcher.base import redact
from topl.launcher.base.tree import flatten
from topl.launcher.facts.verl_tables import ARR, GRAD_OFFLOAD, PARAM_OFFLOAD

# verl@0.9.1:verl/workers/config/engine.py:McoreEngineConfig has no grad_offload; its
# param_offload "offload[s] parameters to CPU and release[s] gradient buffers while inactive"
# (same docstring), where verl@0.8.0 / 0.9.0 had a separate grad_offload (same file).
GRAD_IN_PARAM = "verl@0.9.1:verl/workers/config/engine.py:McoreEngineConfig.param_offload"

# A patch key set to the patch's default, where that default is stock verl's behaviour: on a verl
# without the key, stock behaviour is how it is spelled (no key). The seed's patch: "When false
# (default), rollout behaves as before" (facts: verl_patch_rollout_seed_keys).
STOCK_AT_DEFAULT = {f"{ARR}.rollout.per_request_seed": "verl_patch_rollout_seed_keys"}

_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def respell(pairs: list[tuple[str, Any]], sch: Schema) -> list[tuple[str, Any]]:
    """(key, value) pairs as the declared verl spells them. grad_offload on a verl without it is
    carried by param_offload when the two agree (otherwise it stays, and cannot compose)."""

    values = dict(pairs)
    out = []
    for k, v in pairs:
        if sch.has(k):
            out.append((k, v))
            continue
        if k == GRAD_OFFLOAD and values.get(PARAM_OFFLOAD, False) == v:
            continue  # param_offload, rendered from the same spec, says it on this verl
        fid = STOCK_AT_DEFAULT.get(bare(k)[1])
        if fid and facts.fact(fid).value[bare(k)[1]][1] == v:
            continue  # the patch's off switch: stock verl behaves so without it
        out.append((k, v))
    return out


def bare(key: str) -> tuple[str, str]:
    """(`+` / `++` / `~` prefix as written, the dotted key): `++a.b` -> ("++", "a.b")."""
    key = str(key)
    prefix = key[: len(key) - len(key.lstrip("+~"))]
    return prefix, key[len(prefix) :]


def spell(key: str, sch: Schema) -> str | None:
    """The override name of `key` on this verl; None where it cannot compose. A single `+` written
    in a recipe is decided by the schema too (Hydra refuses `+` on a key that exists); `++` (add
    or override) and `~` (delete) stay as written."""
    memo = getattr(sch, "spelled", None)
    if memo is None:
        return _spell(key, sch)
    try:
        got: str | None = memo[key]
    except KeyError:
        got = memo[key] = _spell(key, sch)
    return got


def _spell(key: str, sch: Schema) -> str | None:
    prefix, k = bare(key)
    if prefix in ("++", "~"):
        return key if (sch.has(k) or sch.free_form(k) or prefix == "++") else None
    if prefix == "+" and sch.accepts_new(k):
        return key  # a new key the recipe adds on purpose (verl's own nodes refuse one)
    return sch.spelling(k)


def unspellable(pairs: list[tuple[str, Any]], sch: Schema) -> list[str]:
    return [k for k, _ in pairs if spell(k, sch) is None]


def shell_vars(v: Any) -> list[str]:
    """Names of the shell variables a value refers to (a leading `~` counts as HOME)."""
    if isinstance(v, (list, tuple)):
        return [n for x in v for n in shell_vars(x)]
    if not isinstance(v, str) or ("$" not in v and not v.startswith("~")):
        return []
    names = [a or b for a, b in _VAR.findall(v)]
    return (["HOME"] if v == "~" or v.startswith("~/") else []) + names


def expand(v: Any, environ: Mapping[str, str] | None = None) -> Any:
    """A value with `$NAME`, `${NAME}` and a leading `~/` expanded from the launching environment
    (KeyError naming the variable when it is unset)."""
    env = os.environ if environ is None else environ
    if isinstance(v, (list, tuple)):
        return type(v)(expand(x, env) for x in v)
    if not isinstance(v, str) or not shell_vars(v):
        return v
    if v == "~" or v.startswith("~/"):
        v = "${HOME}" + v[1:]
    return _VAR.sub(lambda m: env[m.group(1) or m.group(2)], v)


def secret_vars(
    pairs: list[tuple[str, Any]], environ: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """{verl key: [variables]} whose expansion would put a secret on verl's command line: a
    secret-named variable (`team-$WANDB_API_KEY`), or one whose value has a credential shape or
    is a known secret. argv is readable by everyone on the machine (`ps`)."""
    env = os.environ if environ is None else environ
    r = redact.current()
    out = {}
    for k, v in pairs:
        if not isinstance(v, (str, list, tuple)):
            continue
        bad = [
            n
            for n in shell_vars(v)
            if redact.secret_name(n) or (n in env and r.text(env[n]) != env[n])
        ]
        if bad:
            out[k] = bad
    return out


def unset_vars(
    pairs: list[tuple[str, Any]], environ: Mapping[str, str] | None = None
) -> dict[str, list[str]]:
    """{verl key: [unset variable names]} over the rendered values."""
    env = os.environ if environ is None else environ
    out = {}
    for k, v in pairs:
        if not isinstance(v, (str, list, tuple)):
            continue  # a number or a switch names no variable (plan asks this of every key)
        missing = [n for n in shell_vars(v) if n not in env]
        if missing:
            out[k] = missing
    return out


def verl_override_items(verbatim: dict[str, Any]) -> list[tuple[str, Any]]:
    """verl_overrides as (dotted key as written, value): nested mappings (what
    `+verl_overrides.a.b=v` or a nested YAML block composes into) become dotted keys, as verl's
    override grammar needs. Not flattening them would render `a="{'b': v}"`: a string replacing
    a whole verl node."""
    out: list[tuple[str, Any]] = []
    for k, v in verbatim.items():
        if isinstance(v, dict) and v:
            out += [(f"{k}.{sub}", leaf) for sub, leaf in flatten(v).items()]
        else:
            out.append((str(k), v))
    return out
