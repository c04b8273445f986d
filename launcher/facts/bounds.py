"""A fact's range, proven at its edges: for every place in the release list where `when` changes
from holding to not holding, the release just inside and the release just outside are read, and
each probe (path, needle) must be present inside and absent outside.

The release list is the registry's own (the PyPI simple index, as `pip index versions --pre`
lists it; yanked releases left out), ordered by `topl.launcher.base.versions`; MindSpeed's releases
are its `core_r*` branches (pinned in `evidence.COMMITS`). Facts whose range cannot be checked
this way say why (`range_note`, or `unbounded` below). A fact in no release (`when` None, a
patch adds it) is read in the newest release instead: it must still lack what the patch adds.

No I/O here: `scripts/check_facts.py` passes the release lists it fetched.
"""

from __future__ import annotations

from topl.launcher.base.versions import parse
from topl.launcher.facts import in_range
from topl.launcher.facts.evidence import COMMITS, Evidence, Fact

# cluster.versions key -> where its releases are listed and read
REGISTRY = {"vllm_ascend": "vllm-ascend", "verl": "verl", "vllm": "vllm", "torch_npu": "torch-npu"}
BRANCHES = {"mindspeed": "github:Ascend/MindSpeed"}  # releases are branches (COMMITS)


def source(f: Fact) -> str:
    """Where the fact's package is read (`vllm-ascend`, `github:Ascend/MindSpeed`), or ''."""
    return REGISTRY.get(f.package) or BRANCHES.get(f.package, "")


def branch_releases(src: str) -> list[str]:
    return list(COMMITS.get(src.removeprefix("github:"), {}))


def unbounded(f: Fact) -> str:
    """Why the range of `f` is not checked at its edges ('' when it is)."""
    if f.range_note:
        return f.range_note
    if f.package == "profile":
        return "a profile's own evidence, not a version range"
    if f.when is None and not (source(f) and _absent(f)):
        return f"no {f.package} release has it (a patch adds it): no edge to read"
    if f.when == "":
        return f"holds in every {f.package} release: no edge to read"
    if not source(f):
        return f"{f.package} releases are not in a registry the checker reads"
    if f.when is not None and not probes(f):
        return "no present-needle evidence in the fact's own package to read at the edges"
    return ""


def probes(f: Fact) -> list[tuple[str, str]]:
    """(path, needle) read at the edges: `f.probe`, else the fact's present evidence in its own
    package (deduplicated, in citation order)."""
    if f.probe:
        return list(f.probe)
    src, out = source(f), []
    for e in f.evidence:
        if e.present and e.package == src and (e.path, e.needle) not in out:
            out.append((e.path, e.needle))
    return out


def _absent(f: Fact) -> list[tuple[str, str]]:
    src = source(f)
    return list(
        dict.fromkeys((e.path, e.needle) for e in f.evidence if not e.present and e.package == src)
    )


def edges(when: str, releases: list[str], package: str) -> list[tuple[str, str]]:
    """(inside, outside) release pairs, neighbours in version order where `when` flips."""
    known = sorted(
        {(v, r) for r in releases if (v := parse(r, package)) is not None}, key=lambda t: t[0]
    )
    out = []
    for (va, a), (vb, b) in zip(known, known[1:]):
        ia, ib = in_range(when, va), in_range(when, vb)
        if ia != ib:
            out.append((a, b) if ia else (b, a))
    return out


def edge_evidence(f: Fact, releases: list[str]) -> list[Evidence]:
    """The evidence that proves `f`'s range at its edges, given its package's release list."""
    if unbounded(f):
        return []
    src, out = source(f), []
    if f.when is None:  # in no release: the newest one still lacks what the patch adds
        known = [(v, r) for r in releases if (v := parse(r, f.package)) is not None]
        newest = max(known)[1] if known else None
        lacks = list(f.probe) if f.probe else _absent(f)  # a probe names what the patch adds
        return [Evidence(src, newest, p, n, False) for p, n in lacks] if newest else []
    for inside, outside in edges(f.when, releases, f.package):
        for path, needle in probes(f):
            out.append(Evidence(src, inside, path, needle, True))
            out.append(Evidence(src, outside, path, needle, False))
    return list(dict.fromkeys(out))
