"""`topl plan [OVERRIDES with sweeps] [--json] [--all] [--rank] [-q|--quiet]`: the sweep's verdicts,
nothing launched; `--rank` orders the accepted points by a roofline estimate of one step
(docs/rank.md); `-q` shows the rejected points only (nothing when every point is valid).

Verdicts stream: `--json` writes each point as it is checked, the table keeps only the rows it
shows, so a 100k-point sweep holds one point at a time (docs/performance.md). `--rank` keeps, in
addition, one (estimate, index) pair per accepted point for the final order."""

from __future__ import annotations

import heapq
import json
import math
import sys
from json.encoder import encode_basestring_ascii as _str  # what json.dumps writes a str as

from topl.launcher.base.console import make_console
from topl.launcher.base.errors import ToplError
from topl.launcher.cli.argv import QUIET, parse, quiet
from topl.launcher.cli.output import print_table

SHOWN = 200  # rows printed without --all


def main(args: list[str]) -> int:
    from topl.launcher.plan.sweep import (
        iter_plan,
        swept_keys,
    )  # lazy: Hydra and OmegaConf only when this runs

    flags, overrides = parse(args, flags=("--json", "--all", "--rank", *QUIET))
    verdicts = iter_plan(overrides, rank=flags.rank)
    if flags.json:
        return _stream_json(verdicts, flags.rank)
    keys = swept_keys(overrides)
    if flags.rank:
        return _ranked_table(verdicts, keys, flags.all)
    rows, points, valid = [], 0, 0
    for v in verdicts:
        points, valid = points + 1, valid + v.valid
        if (not flags.all and len(rows) >= SHOWN) or (v.valid and quiet(flags)):
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
    if quiet(flags) and not rows:
        return 0
    columns = ("#", *keys, "verdict", "rules", "train GB/dev", "rollout GB/dev", "devices")
    console = print_table("topl plan", columns, rows)
    if not flags.all and len(rows) >= SHOWN and points > SHOWN:
        console.print(
            f"(first {SHOWN} of {points} points; --all shows every one, --json for machines)"
        )
    console.print(f"{points} points, {valid} valid")
    return 0


def _ranked_table(verdicts, keys, every: bool) -> int:
    """The accepted points, cheapest estimate first: the step estimate and its dominant term."""
    best: list = []  # a max-heap (negated) of the SHOWN cheapest, or every row with --all
    points = valid = unknown = 0
    skipped: list[str] = []  # the first NAMED points not estimated, named as the table numbers them
    for v in verdicts:
        points += 1
        if not v.valid:
            continue
        valid += 1
        if v.cost is None:
            unknown += 1
            if len(skipped) < NAMED:
                skipped.append(f"#{points - 1} ({' '.join(v.overrides) or 'no overrides'})")
            continue
        point = dict(o.split("=", 1) for o in v.overrides)
        c = v.cost
        row = (
            str(points - 1),
            *[point.get(k, "") for k in keys],
            f"{c['step_s']:.3g}",
            c["dominant"],
            *(f"{c[p]['seconds']:.3g}" for p in ("rollout", "logprob", "train")),
            str(v.devices),
        )
        item = (-c["step_s"], -(points - 1), row)  # ties: the earlier point first
        if every or len(best) < SHOWN:
            heapq.heappush(best, item)
        elif item > best[0]:
            heapq.heapreplace(best, item)
    rows = [r for _, _, r in sorted(best, reverse=True)]
    columns = ("#", *keys, "step s (est.)", "dominant", "rollout s", "logprob s", "train s")
    if rows:
        console = print_table("topl plan --rank", (*columns, "devices"), rows)
    else:  # no header over an empty table: the lines below say why nothing is ranked
        console = make_console()
        console.print("topl plan --rank: no accepted point has an estimate", highlight=False)
    ranked = valid - unknown
    if not every and ranked > SHOWN:
        console.print(f"(the {SHOWN} cheapest of {ranked} accepted points; --all shows every one)")
    if unknown:
        more = f" and {unknown - len(skipped)} more" if unknown > len(skipped) else ""
        console.print(
            f"{unknown} accepted points not estimated: {', '.join(skipped)}{more}; their cluster "
            "has no chip figures (launcher/facts/chips.json has cluster.soc A2 and A3)"
        )
    console.print(
        f"{points} points, {valid} valid; roofline estimate of one step, not a measurement "
        "(formula and chip figures: docs/rank.md)"
    )
    return 0


NAMED = 20  # points not estimated named one by one, then counted


def _stream_json(verdicts, rank: bool = False) -> int:
    """{"verdicts": [...], "points": N, "valid": V}, one verdict a line as it is checked. A point
    that fails to compose mid-way closes the document with "ok": false and the error. With `rank`:
    each verdict has "cost" and the document ends with "ranking", the indices of the estimated
    accepted points, cheapest first."""

    out = sys.stdout
    first = next(verdicts, None)  # an input error before any output gets the usual error JSON
    out.write('{\n "verdicts": [')
    points = valid = 0
    order: list[tuple[float, int]] = []  # (estimate, index) of each estimated accepted point
    lines: list[str] = []  # written a few hundred at a time (each write is redacted as a whole)
    try:
        v = first
        while v is not None:
            lines.append(("\n  " if not points else ",\n  ") + _json_line(v))
            if v.cost is not None:
                order.append((v.cost["step_s"], points))
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
    tail = f',\n "ranking": {json.dumps([i for _, i in sorted(order)])}' if rank else ""
    out.write("".join(lines) + f'\n ],\n "points": {points},\n "valid": {valid}{tail}\n}}\n')
    return 0


_TEXT: dict[str, str] = {}  # a string as JSON: a sweep repeats its few override texts and rules


def _json_line(v) -> str:
    """json.dumps(v.to_dict(), default=str), written directly where each field is of the type a
    verdict has (tests/plan/test_plan_trace.py holds them equal); anything else goes to json.dumps."""
    gb = (v.train_gb, v.rollout_gb)
    if v.ranked or not all(x is None or type(x) is float and math.isfinite(x) for x in gb):
        return json.dumps(v.to_dict(), default=str)
    if type(v.valid) is not bool or type(v.devices) is not int:
        return json.dumps(v.to_dict(), default=str)
    if len(_TEXT) > 65536:
        _TEXT.clear()
    try:  # a text that is no str (unhashable, or refused by the encoder): json.dumps
        o, r, w = (
            ", ".join([_TEXT.get(x) or _TEXT.setdefault(x, _str(x)) for x in xs])
            for xs in (v.overrides, v.rules, v.warnings)
        )
    except TypeError:
        return json.dumps(v.to_dict(), default=str)
    t, g = ("null" if x is None else repr(x) for x in gb)
    return (
        f'{{"overrides": [{o}], "valid": {"true" if v.valid else "false"}, "rules": [{r}], '
        f'"warnings": [{w}], "train_gb": {t}, "rollout_gb": {g}, "devices": {v.devices}}}'
    )
