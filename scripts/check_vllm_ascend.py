"""Watch vllm-ascend for releases topl's alignment module does not cover yet, and read one against
the targets topl has (launcher/align/targets.py), so that covering it is a reviewed diff.

    python scripts/check_vllm_ascend.py              # releases newer than the newest covered one
    python scripts/check_vllm_ascend.py 0.31.0rc1    # read it against the newest group's targets
    python scripts/check_vllm_ascend.py 0.31.0rc1 --against 0.27.1rc1 --json

For a release it downloads the sdist (sha256 checked against the index; cached like the facts:
TOPL_FACTS_CACHE), reads the vLLM it pins (Dockerfile `ARG VLLM_TAG`), then for every target:
`holds` (same module, attribute and parameter names), `changed` (other parameters) or `gone`; and
re-reads in it every needle the align_* and FA3 facts cite in the `--against` release: `holds`
or `broke`. Exit 1 on any drift (the targets need a new group: see docs/stacks.md, "Adding a
release"), 2 when the index cannot be reached, else 0.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace

from packaging.version import Version

from topl.launcher.align import targets
from topl.launcher.facts.evidence import Evidence
from topl.launcher.facts.sources import Unreachable, found, params, read_all, releases
from topl.launcher.facts.table import FACTS

VERL = "0.9.1"  # both stock profiles' verl: the logits_vocab target is read there
# facts re-read in a new release: the alignment targets and how FA3 is chosen
WATCHED = ("fa3_backend", "fa3_by_attention_backend", "rl_config", "nz_env", "nz_config",
           "silu_weight_prefetch", "training_consistency_only_selects_fa3")  # fmt: skip
TAG = re.compile(r"^ARG VLLM_TAG=v(\S+)", re.M)


def newer() -> list[str]:
    """Releases on the index newer than the newest one covered, oldest first."""
    top = Version(targets.NEWEST)
    return sorted((v for v in releases("vllm-ascend") if Version(v) > top), key=Version)


def pinned_vllm(release: str) -> str:
    texts, skipped = read_all([Evidence("vllm-ascend", release, "Dockerfile", "")])
    if skipped:
        raise Unreachable("; ".join(skipped.values()))
    m = TAG.search(texts[("vllm-ascend", release, "Dockerfile")] or "")
    return m.group(1) if m else ""


def where(t: targets.Target, release: str, vllm: str) -> Evidence:
    top = t.module.split(".")[0]
    pkg, ver = {"vllm_ascend": ("vllm-ascend", release), "vllm": ("vllm", vllm)}.get(
        top, (top, VERL)
    )
    return Evidence(pkg, ver, t.module.replace(".", "/") + ".py", "")


def read(release: str, against: str) -> list[dict]:
    """One row per target and per watched needle: what holds in `release`."""
    vllm = pinned_vllm(release)
    rows: list[dict] = [{"kind": "pin", "what": "Dockerfile ARG VLLM_TAG", "status": "holds"
                         if vllm else "gone", "got": vllm, "want": targets.VLLM_PIN[against]}]  # fmt: skip
    ts = targets.TARGETS[against]
    here = [where(t, release, vllm) for t in ts]
    facts_ev = [e for f in FACTS if f.id in WATCHED or f.id.startswith("align_")
                for e in f.evidence if e.package == "vllm-ascend" and e.version == against]  # fmt: skip
    moved = [replace(e, version=release) for e in facts_ev]
    texts, skipped = read_all(here + moved)
    if skipped:
        raise Unreachable("; ".join(skipped.values()))
    for t, e in zip(ts, here):
        text = texts[(e.package, e.version, e.path)]
        got = params(text, t.attr) if text is not None else None
        status = "holds" if got == t.params else "gone" if got is None else "changed"
        rows.append({"kind": "target", "what": f"{t.alignment}: {t.module}:{t.attr}",
                     "status": status, "got": got, "want": t.params})  # fmt: skip
    for e in moved:
        ok = found(e, texts[(e.package, e.version, e.path)]) == e.present
        rows.append({"kind": "fact", "what": e.cite, "status": "holds" if ok else "broke"})
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("release", nargs="?", help="a vllm-ascend release to read")
    ap.add_argument("--against", default=targets.NEWEST, choices=list(targets.TARGETS),
                    help="the covered release whose targets and facts to read it against")  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        if not args.release:
            got = newer()
            print(json.dumps(got) if args.json else "\n".join(got) or (
                f"none newer than {targets.NEWEST} (covered: {targets.covered()})"))  # fmt: skip
            return 0
        rows = read(args.release, args.against)
    except Unreachable as e:
        print(f"cannot read the index: {e}", file=sys.stderr)
        return 2
    drift = [r for r in rows if r["status"] != "holds"]
    if args.json:
        print(json.dumps(rows, indent=1, default=list))
    else:
        for r in rows:
            extra = f"  (got {r['got']}, want {r['want']})" if r["status"] != "holds" and r[
                "kind"] != "fact" else ""  # fmt: skip
            print(f"{r['status']:8} {r['kind']:6} {r['what']}{extra}")
        print(f"vllm-ascend {args.release} against {args.against}: {len(rows) - len(drift)} hold, "
              f"{len(drift)} drifted")  # fmt: skip
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
