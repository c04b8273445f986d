"""GitHub evidence where GitHub cannot be reached (CI reaches package registries only).

`excerpts.json` (next to this module) holds, for each cited GitHub file at its pinned commit: the
repository, branch or short name, full commit and path; the file's git blob id and sha256; the
lines that hold each needle found in it; and the needles it lacks. The checker proves a GitHub
citation from it when neither a local mirror (`TOPL_FACTS_GIT_MIRROR`) nor GitHub
(`TOPL_FACTS_GITHUB=1`) is reachable, and checks it against the real file when one is.

Anyone can re-verify an entry: `git cat-file -p <blob>` in a clone of the repository (or
`git show <commit>:<path>`), then look for the needle. It is written, never edited by hand, by
`scripts/check_facts.py --write-excerpts` from a mirror or GitHub.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from typing import Any

from topl.launcher.facts.evidence import COMMITS, Evidence

FILE = "excerpts.json"


def key(e: Evidence) -> str:
    return f"{e.package.removeprefix('github:')}@{e.version}:{e.path}"


def commit(e: Evidence) -> str:
    repo = e.package.removeprefix("github:")
    return COMMITS.get(repo, {}).get(e.version, e.version)


def load() -> dict[str, Any]:
    """{key: entry} from the shipped excerpt file ({} if there is none)."""
    f = resources.files("topl.launcher.facts").joinpath(FILE)
    return json.loads(f.read_text()).get("files", {}) if f.is_file() else {}


def _span(e: Evidence, text: str) -> tuple[int, int] | None:
    if e.needle.startswith("re:"):
        m = re.search(e.needle[3:], text, re.DOTALL)
        return (m.start(), m.end()) if m else None
    i = text.find(e.needle)
    return (i, i + len(e.needle)) if i >= 0 else None


def entry(evidence: list[Evidence], text: str | None) -> dict[str, Any]:
    """The excerpt of one file (`text` at the pinned commit, None where it is not there) for the
    needles of `evidence` (all of one repository, ref and path)."""
    e0 = evidence[0]
    out = {
        "repo": e0.package.removeprefix("github:"),
        "ref": e0.version,
        "commit": commit(e0),
        "path": e0.path,
        "missing": text is None,
    }
    if text is None:
        return out
    data = text.encode("utf-8")
    out["blob"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's object id
    out["sha256"] = hashlib.sha256(data).hexdigest()
    lines, absent = text.split("\n"), []
    keep: dict[int, str] = {}
    for e in evidence:
        span = _span(e, text)
        if span is None:
            absent.append(e.needle)
            continue
        first, last = text.count("\n", 0, span[0]), text.count("\n", 0, span[1])
        keep.update({n + 1: lines[n] for n in range(first, last + 1)})
    out["lines"] = {str(n): keep[n] for n in sorted(keep)}
    out["absent"] = sorted(set(absent))
    return out


def _runs(lines: dict[str, str]) -> list[str]:
    """Contiguous runs of excerpted lines, each as one text."""
    runs, prev = [], None
    for n in sorted(lines, key=int):
        if prev is not None and int(n) == prev + 1:
            runs[-1].append(lines[n])
        else:
            runs.append([lines[n]])
        prev = int(n)
    return ["\n".join(r) for r in runs]


def verdict(e: Evidence, files: dict[str, dict[str, Any]]) -> bool | None:
    """Whether the needle is in the file per its excerpt; None where no excerpt covers it."""
    ent = files.get(key(e))
    if ent is None or ent.get("commit") != commit(e):
        return None
    if ent["missing"] or e.needle in ent.get("absent", ()):
        return False
    if any(_span(e, run) for run in _runs(ent.get("lines", {}))):
        return True
    return None


def matches(ent: dict[str, Any], text: str | None) -> bool:
    """Whether an excerpt entry describes `text` (the real file at its commit)."""
    if text is None:
        return bool(ent["missing"])
    return ent.get("sha256") == hashlib.sha256(text.encode("utf-8")).hexdigest()
