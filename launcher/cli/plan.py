"""`topl plan [OVERRIDES with sweeps] [--json] [--all]`: the sweep's verdicts, nothing launched.

Verdicts stream: `--json` writes each point as it is checked, the table keeps only the rows it
shows, so a 100k-point sweep holds one point at a time (docs/performance.md)."""

from __future__ import annotations

import json
import sys

from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_table

SHOWN = 200  # rows printed without --all


def main(args: list[str]) -> int:
    from topl.launcher.plan import iter_plan, swept_keys

    flags, overrides = parse(args, flags=("--json", "--all"))
    verdicts = iter_plan(overrides)
    if flags.json:
        return _stream_json(verdicts)
    keys = swept_keys(overrides)
    rows, points, valid = [], 0, 0
    for v in verdicts:
        points, valid = points + 1, valid + v.valid
        if not flags.all and len(rows) >= SHOWN:
            continue
        point = dict(o.split("=", 1) for o in v.overrides)
        verdict = "[green]valid[/]" if v.valid else "[red]invalid[/]"
        rows.append(
            (
                str(points - 1),
                *[point.get(k, "") for k in keys],
                verdict,
                " ".join(v.rules),
                f"{v.train_gb}",
                f"{v.rollout_gb}",
                str(v.devices),
            )
        )
    columns = ("#", *keys, "verdict", "rules", "train GB/dev", "rollout GB/dev", "devices")
    console = print_table("topl plan", columns, rows)
    if not flags.all and points > SHOWN:
        console.print(
            f"(first {SHOWN} of {points} points; --all shows every one, --json for machines)"
        )
    console.print(f"{points} points, {valid} valid")
    return 0


def _stream_json(verdicts) -> int:
    """{"verdicts": [...], "points": N, "valid": V}, one verdict a line as it is checked. A point
    that fails to compose mid-way closes the document with "ok": false and the error."""
    from topl.launcher.errors import ToplError

    out = sys.stdout
    first = next(verdicts, None)  # an input error before any output gets the usual error JSON
    out.write('{\n "verdicts": [')
    points = valid = 0
    lines: list[str] = []  # written a few hundred at a time (each write is redacted as a whole)
    try:
        v = first
        while v is not None:
            lines.append(("\n  " if not points else ",\n  ") + json.dumps(v.to_dict(), default=str))
            points, valid = points + 1, valid + v.valid
            if len(lines) >= 256:
                out.write("".join(lines))
                lines.clear()
            v = next(verdicts, None)
    except ToplError as e:
        out.write("".join(lines))
        out.write(f'\n ],\n "points": {points},\n "valid": {valid},\n "ok": false,\n')
        out.write(f' "error": {json.dumps(e.to_dict(), default=str)}\n}}\n')
        return e.exit_code
    out.write("".join(lines) + f'\n ],\n "points": {points},\n "valid": {valid}\n}}\n')
    return 0
