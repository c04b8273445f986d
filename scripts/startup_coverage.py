"""Issue 46's figure: of the start-up failures derived from verl's source
(tests/contract/startup_cases.py), how many are refused before launch with the right keys, by a
rule (plain `check`) or by the dry run (`check --deep`, which `launch` runs before a remote
submission), and how many valid neighbours are refused (target: >= 95 %, 0).

    python scripts/startup_coverage.py [--deep] [--json]

--deep also dry-runs, with the declared verl (installed here, or its wheel in ~/.cache/topl-verl,
fetched where missing), every case `check` accepts and every neighbour. docs/startup.md records
the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "contract"))

from startup_cases import CASES, NEIGHBOURS  # noqa: E402

from topl.launcher.compose.hydra import compose_job  # noqa: E402
from topl.launcher.contract import check, errors  # noqa: E402
from topl.launcher.contract.dryrun import deep as D  # noqa: E402


def _named(vs, keys) -> bool:
    return any(v.severity == "error" and all(k in v.keys for k in keys) for v in vs)


def _dry(composed_list) -> list:
    """The dry run's violations per composed job (None where its verl is not at hand), one child
    per verl release for all its jobs."""
    by_root: dict[str, list[int]] = defaultdict(list)
    reqs: dict[int, dict] = {}
    out: list = [None] * len(composed_list)
    for i, c in enumerate(composed_list):
        root, _ = D.where(c.to_object(), True)
        if root is not None:
            by_root[str(root)].append(i)
            reqs[i] = D.request(c.to_object(), root)
    for root, idx in by_root.items():
        for i, fails in zip(idx, D.run_child(root, [reqs[i] for i in idx])):
            c = composed_list[i]
            out[i] = [D.violation(f, c, c.to_object()) for f in fails]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deep", action="store_true", help="also run the dry run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    jobs = [compose_job(c.overrides) for c in CASES]
    fast = [errors(check(j)) for j in jobs]
    verdict = {c.id: "rule" if _named(vs, c.keys) else "neither" for c, vs in zip(CASES, fast)}
    near_jobs = [compose_job(n.overrides) for n in NEIGHBOURS]
    near_refused = {
        n.id: [v.rule for v in vs]
        for n, j in zip(NEIGHBOURS, near_jobs)
        if (vs := errors(check(j)))
    }
    if a.deep:
        rest = [i for i, c in enumerate(CASES) if verdict[c.id] == "neither"]
        for i, vs in zip(rest, _dry([jobs[i] for i in rest])):
            if vs is not None and _named(vs, CASES[i].keys):
                verdict[CASES[i].id] = "dry"
        for n, vs in zip(NEIGHBOURS, _dry(near_jobs)):
            if vs and errors(vs):
                near_refused.setdefault(n.id, []).extend(v.rule for v in errors(vs))
    count = Counter(verdict.values())
    refused = count["rule"] + count["dry"]
    report = {
        "cases": len(CASES),
        "by_release": dict(Counter(c.verl for c in CASES)),
        "refused_by_rule": count["rule"],
        "refused_by_dry_run": count["dry"] if a.deep else None,
        "neither": sorted(k for k, v in verdict.items() if v == "neither"),
        "refused_share": round(refused / len(CASES), 4),
        "neighbours": len(NEIGHBOURS),
        "neighbours_refused": near_refused,
        "deep": a.deep,
    }
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print(
            f"start-up failures: {len(CASES)} ({report['by_release']}); refused before launch "
            f"with the right keys: {refused}/{len(CASES)} ({100 * refused / len(CASES):.1f} %): "
            f"by a rule {count['rule']}, by the dry run "
            f"{count['dry'] if a.deep else 'not run (--deep)'}; neither: "
            f"{', '.join(report['neither']) or 'none'}"
        )
        print(
            f"valid neighbours: {len(NEIGHBOURS)}; refused: {len(near_refused)} "
            f"{near_refused or ''}"
        )
    return 0 if refused / len(CASES) >= 0.95 and not near_refused else 1


if __name__ == "__main__":
    sys.exit(main())
