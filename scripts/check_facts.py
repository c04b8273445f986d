"""Re-read every cited stack fact in the real packages (downloaded into a cache, not installed).

    python scripts/check_facts.py            # table of every citation; exit 1 on a wrong one
    python scripts/check_facts.py --json     # machine-readable
    TOPL_FACTS_CACHE=DIR                     # cache (default ~/.cache/topl-facts)
    TOPL_FACTS_GIT_MIRROR=DIR                # GitHub sources from local git dirs (owner+name/repo)

A source that cannot be reached is reported as skipped (exit 0 unless --strict); a fact with no
package file to read (CANN docs) is listed with why it is unchecked.
"""

from __future__ import annotations

import json
import sys

from topl.launcher.facts import FACTS
from topl.launcher.facts.sources import found, read_all


def check() -> list[dict]:
    evidence = [e for f in FACTS for e in f.evidence]
    texts, skipped = read_all(evidence)
    rows = []
    for f in FACTS:
        if not f.evidence:
            rows.append({"fact": f.id, "cite": f.source, "status": "unchecked", "why": f.unchecked})
        for e in f.evidence:
            if (e.package, e.version) in skipped:
                rows.append(
                    {
                        "fact": f.id,
                        "cite": e.cite,
                        "status": "skipped",
                        "why": skipped[(e.package, e.version)],
                    }
                )
                continue
            text = texts[(e.package, e.version, e.path)]
            ok = found(e, text) == e.present
            why = (
                ""
                if ok
                else (
                    "file not in the release"
                    if text is None
                    else "needle found"
                    if found(e, text)
                    else "needle not found"
                )
            )
            rows.append(
                {"fact": f.id, "cite": e.cite, "status": "ok" if ok else "WRONG", "why": why}
            )
    return rows


def main(argv: list[str]) -> int:
    rows = check()
    if "--json" in argv:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(
                f"{r['status']:9} {r['fact']:50} {r['cite']}"
                + (f"  ({r['why']})" if r["why"] else "")
            )
        n = {
            s: sum(r["status"] == s for r in rows) for s in ("ok", "WRONG", "skipped", "unchecked")
        }
        print(" ".join(f"{k}={v}" for k, v in n.items()))
    bad = any(r["status"] == "WRONG" for r in rows)
    strict_skip = "--strict" in argv and any(r["status"] == "skipped" for r in rows)
    return 1 if bad or strict_skip else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
