"""The stack model: what each version of verl, vllm-ascend, torch_npu, MindSpeed and CANN does.

Facts are data (`topl.launcher.facts.table.FACTS`), each with the citations
`package@version:path:symbol` that `scripts/check_facts.py` re-reads in the real packages.
Rules, the renderer and the doctor ask through one API instead of comparing versions themselves:

    supports("fa3_backend", spec.cluster.versions)   -> bool
    value("fa3_selected_by", spec.cluster.versions)  -> "backend" | "rl_config" | None
    why("fa3_backend", spec.cluster.versions)         -> "text (citation; ...)"

No torch, no I/O: the launcher paths (check / render / doctor) import this freely.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from topl.launcher.base.versions import VersionError, parse, problem
from topl.launcher.facts.evidence import Evidence, Fact
from topl.launcher.facts.table import FACTS

BY_ID: dict[str, Fact] = {f.id: f for f in FACTS}
# the cluster.versions keys that hold a version (the others: profile name, patch lists, flags)
VERSION_KEYS = ("verl", "vllm", "vllm_ascend", "cann", "torch", "torch_npu", "mindspeed")


def version(package: str, text: Any) -> Version | None:
    """A declared version as PEP 440, read by `topl.launcher.base.versions` (one parser for every
    package): `core_r0.16.0` -> 0.16.0 (MindSpeed branches), `9.0.0.B160` -> 9.0.0.dev160 (a
    CANN build, before 9.0.0's betas), `8.5.RC1` -> 8.5rc1, `2.9.0+cpu` -> 2.9.0 (a local build
    label names a build of the same release); None when unreadable (`unreadable` says why)."""
    return _version(package, "" if text is None else str(text).strip())


@lru_cache(maxsize=4096)
def _version(package: str, text: str) -> Version | None:
    v = parse(text, package)
    return v if v is None or v.local is None else Version(v.public)


@lru_cache(maxsize=None)
def ranges(when: str) -> tuple[SpecifierSet, ...]:
    """`when` as its ranges: PEP 440 specifier sets joined by ` || ` (any one holds). A feature
    back-ported to several release lines (torch_npu 2.7.1.post4, 2.8.0.post4, ...) is a union."""
    return tuple(SpecifierSet(part.strip()) for part in when.split("||"))


@lru_cache(maxsize=4096)
def in_range(when: str, v: Version) -> bool:
    """Whether `v` is in `when` (cached: packaging re-parses the specifier's version per test)."""
    return any(r.contains(v, prereleases=True) for r in ranges(when))


def fact(fid: str) -> Fact:
    try:
        return BY_ID[fid]
    except KeyError:
        raise KeyError(f"unknown stack fact {fid!r}; known: {', '.join(sorted(BY_ID))}") from None


def _declared(versions: Any, key: str) -> Any:
    return versions.get(key) if isinstance(versions, dict) else getattr(versions, key, None)


def holds(fid: str, versions: Any) -> bool:
    """Whether fact `fid` holds on the declared stack (`cluster.versions`, object or dict)."""
    f = fact(fid)
    if f.patch:
        group, _, name = f.patch.partition(":")
        if name in (_declared(versions, group) or []):
            return True
    if f.when is None:
        return False
    if f.package == "profile":
        return _declared(versions, "profile") in f.when.split(",")
    if not f.when:
        return True
    v = version(f.package, _declared(versions, f.package))
    return v is not None and in_range(f.when, v)


def unreadable(versions: Any) -> dict[str, str]:
    """{cluster.versions key: why} for each declared version a fact reads that cannot be read:
    such a fact does not hold, and TOP-STACK-008 says why instead of a silent `no`."""
    out = {}
    for k in VERSION_KEYS:
        text = _declared(versions, k)
        if text not in (None, "") and (why := problem(k, text)):
            out[k] = why
    return out


def supports(fid: str, versions: Any) -> bool:
    """Alias of `holds` for features: `supports("rl_config", spec.cluster.versions)`."""
    return holds(fid, versions)


def value(fid: str, versions: Any) -> Any:
    """The fact's value on this stack (`otherwise` where it does not hold)."""
    f = fact(fid)
    return f.value if holds(fid, versions) else f.otherwise


def cites(fid: str) -> list[str]:
    f = fact(fid)
    return [e.cite for e in f.evidence] + ([f.source] if f.source else [])


def why(fid: str, versions: Any = None) -> str:
    """One line for people: what holds, for which versions, and where that was read."""
    f = fact(fid)
    scope = (
        f"no {f.package} release"
        if f.when is None
        else f"{f.package} {f.when}"
        if f.when
        else f"every {f.package}"
    )
    if f.patch:
        scope += f"; with patch {f.patch.partition(':')[2]}"
    head = f"{f.text} [{scope}]"
    if versions is not None:
        head += (
            f" (declared {f.package} {_declared(versions, f.package)}: "
            f"{'holds' if holds(fid, versions) else 'does not hold'})"
        )
    return f"{head} — {'; '.join(cites(fid))}"


__all__ = [
    "BY_ID",
    "FACTS",
    "Evidence",
    "Fact",
    "VERSION_KEYS",
    "VersionError",
    "cites",
    "fact",
    "holds",
    "in_range",
    "ranges",
    "unreadable",
    "supports",
    "value",
    "version",
    "why",
]
