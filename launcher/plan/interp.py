"""The interpolations of a composed job, for `plan` and `check --fix`: which of them a change of
some keys makes stale, and how to resolve those again from a spec where that equals OmegaConf.

OmegaConf reads `${a.b}` (absolute), `${.b}` / `${..b}` (from the node's container up), resolver
calls `${name:args}`, escapes `\\${` and nestings of these (omegaconf@2.3.1:omegaconf/grammar/
gen/OmegaConfGrammarParser.py:interpolationNode, interpolationResolver). Here a plain reference,
absolute or relative, is replayed from the spec; a resolver call whose arguments hold no
interpolation reads no key, so the value composed for the base stays (`${oc.env:HF_TOKEN}`: the
same shell for every point). Anything else, and any interpolation inside a list or inside a dict
with dotted keys (verl_overrides), is `replay=False`: when it is stale the caller composes the
point through Hydra.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from topl.launcher.base.tree import get_path, overlap

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

_PLAIN = re.compile(r"\$\{(\.*)([A-Za-z_]\w*(?:\.\w+)*)\}")
_RESOLVER = re.compile(r"\$\{[A-Za-z_][\w.]*:[^${}\\]*\}")  # arguments without nesting


@dataclass(frozen=True)
class Interp:
    key: str  # the node's dotted key
    raw: Any  # as written: a str, or the list / dict that holds interpolations
    refs: frozenset[str] | None  # the absolute keys it reads; None: not known here
    replay: bool  # `resolve` gives what OmegaConf gives


def _absolute(key: str, dots: str, rest: str) -> str | None:
    """`${dots+rest}` written at `key`, as an absolute key (None: above the root)."""
    if not dots:
        return rest
    parts = key.split(".")[:-1]  # the node's container
    up = len(dots) - 1
    if up > len(parts):
        return None
    return ".".join([*parts[: len(parts) - up], rest])


def parse(key: str, raw: Any) -> Interp:
    if not isinstance(raw, str) or "\\${" in raw:  # a container, or an escape: not read here
        return Interp(key, raw, _container_refs(key, raw), False)
    refs = set()
    for m in _PLAIN.finditer(raw):
        ref = _absolute(key, m[1], m[2])
        if ref is None:
            return Interp(key, raw, None, False)
        refs.add(ref)
    rest = _PLAIN.sub("", _RESOLVER.sub("", raw))  # resolver calls first: a nested one stays
    if "${" in rest:  # nested, or a form not read here
        return Interp(key, raw, None, False)
    return Interp(key, raw, frozenset(refs), not _RESOLVER.search(raw))


def _container_refs(key: str, raw: Any) -> frozenset[str] | None:
    """The absolute keys the strings inside a list / dict read (None: a relative or unread form)."""
    if isinstance(raw, str):
        if "\\${" in raw:
            return None
        got = list(_PLAIN.finditer(raw))
        if any(m[1] for m in got) or "${" in _PLAIN.sub("", _RESOLVER.sub("", raw)):
            return None
        return frozenset(m[2] for m in got)
    items = raw.values() if isinstance(raw, dict) else raw if isinstance(raw, list) else []
    refs: set[str] = set()
    for item in items:
        sub = _container_refs(key, item)
        if sub is None:
            return None
        refs |= sub
    return frozenset(refs)


def collect(cfg: Any, prefix: str = "") -> list[Interp]:
    """Every interpolation of a DictConfig, in its order."""
    out: list[Interp] = []
    for k in cfg.keys():
        node = cfg._get_node(k)
        key = f"{prefix}{k}"
        if OmegaConf.is_interpolation(cfg, k):
            out.append(parse(key, node._value()))
        elif OmegaConf.is_list(node) or (
            OmegaConf.is_dict(node) and any("." in str(n) for n in node.keys())
        ):
            raw = OmegaConf.to_container(node, resolve=False)
            if "${" in repr(raw):
                out.append(Interp(key, raw, _container_refs(key, raw), False))
        elif OmegaConf.is_dict(node):
            out += collect(node, key + ".")
    return out


def stale(interps: list[Interp], changed: list[str]) -> list[Interp]:
    """The interpolations a change of the keys `changed` makes stale, each after those it reads
    (resolve them in this order): those that read a changed key or a stale one, or read what
    is not known here. A changed key that is itself an interpolation is set, not resolved."""
    moved, out = set(changed), []
    todo = [i for i in interps if i.key not in moved]
    grew = True
    while grew:
        grew = False
        for i in todo:
            if i.key in moved:  # stale already
                continue
            if i.refs is None or any(overlap(r, c) for r in i.refs for c in moved):
                out.append(i)
                moved.add(i.key)
                grew = True
    return out


def resolve(i: Interp, spec: JobSpec) -> Any:
    """A replayable interpolation's value on `spec` (a whole reference keeps its type)."""
    assert i.replay, i

    def value(m: re.Match[str]) -> Any:
        ref = _absolute(i.key, m[1], m[2])
        assert ref is not None  # parse() said replay
        return get_path(spec, ref)

    whole = _PLAIN.fullmatch(i.raw)
    if whole:
        return value(whole)
    return _PLAIN.sub(lambda m: str(value(m)), i.raw)
