"""Re-read every cited stack fact in the real packages (downloaded into a cache, not installed),
and prove each fact's version range at its edges: the release just inside and the release just
outside every boundary of `when`, from the registry's own release list.

Sources: PyPI sdists / wheels (wheels by HTTP range requests: only the files read); GitHub files
(the seed, MindSpeed) from a local mirror (TOPL_FACTS_GIT_MIRROR=DIR of owner+name/repo git
dirs), from GitHub (TOPL_FACTS_GITHUB=1), else from the shipped excerpt file
(launcher/facts/excerpts.json: commit, path, blob id and the needle lines; re-verifiable).

Exit status: 1 when a citation or an edge is WRONG; with --strict also when any is not proven
(a source was unreachable: "skipped"). Facts with nothing to read (CANN docs) and ranges with no
edge to read are listed as unchecked, with why.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from topl.launcher.facts import bounds, excerpts
from topl.launcher.facts.sources import Unreachable, found, read_all, releases
from topl.launcher.facts.table import FACTS


def _edges(rows: list[dict]) -> list[tuple]:
    """(fact, evidence) for every fact's edges; a row for each range that is not read there."""
    out, lists = [], {}
    for f in FACTS:
        why = bounds.unbounded(f)
        if why:
            rows.append(_row(f, f"{f.package} when={f.when!r}", "unchecked", why, "edge"))
            continue
        src = bounds.source(f)
        if src not in lists:
            try:
                got = bounds.branch_releases(src) if src.startswith("github:") else releases(src)
                lists[src] = (got, "")
            except Unreachable as e:
                lists[src] = ([], f"release list unreachable: {e}")
        got, err = lists[src]
        if err:
            rows.append(_row(f, f"{f.package} when={f.when!r}", "skipped", err, "edge"))
            continue
        out += [(f, e) for e in bounds.edge_evidence(f, got)]
    return out


def _row(f, cite, status, why, kind, via=""):
    return {"fact": f.id, "cite": cite, "status": status, "why": why, "kind": kind, "via": via}


def _judge(e, text) -> tuple[str, str]:
    if found(e, text) == e.present:
        return "ok", ""
    if text is None:
        return "WRONG", "file not in the release"
    return "WRONG", "needle found" if found(e, text) else "needle not found"


def check(edges: bool = True) -> list[dict]:
    """One row per citation (kind `cited`) and per edge read (kind `edge`): fact, cite, status
    (ok | WRONG | skipped | unchecked), why, kind, via (package | git | excerpt)."""
    rows: list[dict] = []
    todo = [(f, e, "cited") for f in FACTS for e in f.evidence]
    if edges:
        todo += [(f, e, "edge") for f, e in _edges(rows)]
    for f in FACTS:
        if not f.evidence:
            rows.append(_row(f, f.source, "unchecked", f.unchecked, "cited"))
    texts, skipped = read_all([e for _, e, _ in todo])
    shipped = excerpts.load()
    for f, e, kind in todo:
        cite = e.cite + " [edge]" * (kind == "edge")
        github = e.package.startswith("github:")
        if (e.package, e.version) in skipped:
            seen = excerpts.verdict(e, shipped) if github else None
            if seen is None:
                why = skipped[(e.package, e.version)]
                rows.append(_row(f, cite, "skipped", why, kind))
            else:
                ok = seen == e.present
                why = "" if ok else ("needle found" if seen else "needle not found")
                rows.append(_row(f, cite, "ok" if ok else "WRONG", why, kind, "excerpt"))
            continue
        text = texts[(e.package, e.version, e.path)]
        status, why = _judge(e, text)
        ent = shipped.get(excerpts.key(e)) if github else None
        if ent is not None and not excerpts.matches(ent, text):
            status, why = "WRONG", "the shipped excerpt does not match the file at its commit"
        rows.append(_row(f, cite, status, why, kind, "git" if github else "package"))
    return rows


def summary(rows: list[dict]) -> str:
    n = Counter(r["status"] for r in rows)
    by_excerpt = sum(r["status"] == "ok" and r["via"] == "excerpt" for r in rows)
    edges = sum(r["kind"] == "edge" and r["status"] == "ok" for r in rows)
    return (
        f"proven {n['ok']} (of them {edges} at range edges, {by_excerpt} from shipped excerpts); "
        f"WRONG {n['WRONG']}; not proven {n['skipped']} (source unreachable: skipped); "
        f"unchecked {n['unchecked']} (nothing to read, or a range with no edge to read: why given)"
    )


def write_excerpts() -> int:
    """Rewrite the excerpt file from the real GitHub files (mirror or GitHub)."""
    rows: list[dict] = []
    evs = [e for f in FACTS for e in f.evidence] + [e for _, e in _edges(rows)]
    evs = [e for e in evs if e.package.startswith("github:")]
    texts, skipped = read_all(evs)
    if skipped:
        print("cannot read GitHub: " + "; ".join(skipped.values()), file=sys.stderr)
        print(
            "set TOPL_FACTS_GIT_MIRROR=DIR (owner+name/repo) or TOPL_FACTS_GITHUB=1",
            file=sys.stderr,
        )
        return 2
    groups: dict[str, list] = {}
    for e in evs:
        groups.setdefault(excerpts.key(e), []).append(e)
    files = {
        k: excerpts.entry(g, texts[(g[0].package, g[0].version, g[0].path)])
        for k, g in sorted(groups.items())
    }
    doc = {
        "about": "written by scripts/check_facts.py --write-excerpts; see "
        "topl.launcher.facts.excerpts",
        "files": files,
    }
    path = Path(__file__).resolve().parent.parent / "launcher" / "facts" / excerpts.FILE
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(doc, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {len(files)} excerpts to {path}")
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="check_facts.py",
        description=__doc__.split("\n\n")[0],
        epilog="Environment: TOPL_FACTS_CACHE (cache, default ~/.cache/topl-facts), "
        "TOPL_FACTS_INDEX (package index), TOPL_FACTS_GIT_MIRROR, TOPL_FACTS_GITHUB=1.",
    )
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument(
        "--strict", action="store_true", help="exit 1 when anything is not proven (skipped)"
    )
    ap.add_argument(
        "--cited-only", action="store_true", help="read the cited releases only, not range edges"
    )
    ap.add_argument(
        "--write-excerpts",
        action="store_true",
        help="rewrite launcher/facts/excerpts.json from a mirror or GitHub, then exit",
    )
    args = ap.parse_args(argv)
    if args.write_excerpts:
        return write_excerpts()
    rows = check(edges=not args.cited_only)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            via = f" [{r['via']}]" if r["via"] == "excerpt" else ""
            why = f"  ({r['why']})" if r["why"] else ""
            print(f"{r['status']:9} {r['fact']:50} {r['cite']}{via}{why}")
        print(summary(rows))
    bad = any(r["status"] == "WRONG" for r in rows)
    unproven = args.strict and any(r["status"] == "skipped" for r in rows)
    return 1 if bad or unproven else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
