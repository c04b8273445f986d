"""`topl diagnose A B [--json] [--plots DIR]`: where two dumps first diverge, and why."""

from __future__ import annotations

import json
from pathlib import Path

from topl.launcher.base.errors import ToplError
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_table


def main(args: list[str]) -> int:
    from topl.kernels import dump  # lazy: torch and safetensors only when this runs
    from topl.kernels.diagnose import (
        BoundaryMismatch,
        diagnose,
        plot,
    )  # lazy: torch and safetensors only when this runs

    flags, args = parse(args, flags=("--json", "--common"), options={"--plots": None})
    as_json, plots = flags.json, flags.plots
    if len(args) != 2:
        raise ToplError(
            "topl diagnose needs two dump folders",
            fix="topl diagnose DUMP_A DUMP_B [--json] [--plots DIR]",
        )
    loaded = []
    for a in args:
        if not (Path(a) / "manifest.json").is_file():
            raise ToplError(
                f"{a} is not a dump folder (no manifest.json)",
                where=a,
                fix="make dumps with `topl probe --dump DIR` or kernels.dump.HookDumper",
            )
        try:
            loaded.append(dump.load(a))
        except dump.BadDump as e:  # checked before any work: one message, exit 2
            raise ToplError(
                str(e),
                where=a,
                fix="point at a dump folder written by `topl probe --dump DIR` (or HookDumper)",
            ) from None
    try:
        report = diagnose(*loaded, common_only=flags.common)
    except BoundaryMismatch as e:
        raise ToplError(
            str(e),
            where=f"{args[0]} vs {args[1]}",
            fix="dump the same boundaries on both sides (same name map and num_layers), "
            "or --common to compare only the boundaries both have",
        ) from None
    if plots:
        report["plots"] = [str(p) for p in plot(report, loaded[0][1], loaded[1][1], plots)]
    if as_json:  # strict JSON: the report carries non-finite floats as strings
        print(json.dumps(report, indent=1, allow_nan=False))
        return 0
    rows = []
    for r in report["boundaries"]:
        if "equal" not in r:
            rows.append((r["boundary"], r.get("mapped", "-"), "", "", "", "", "", ""))
            continue
        if "dtype_mismatch" in r or "shape_mismatch" in r:
            what = " vs ".join(map(str, r.get("dtype_mismatch") or r["shape_mismatch"]))
            rows.append((r["boundary"], f"[red]{what}[/]", "", "", "", "", "", ""))
            continue
        nf = r.get("nonfinite", {})
        nonfinite = (
            " / ".join(str(nf[s]["nan"] + nf[s]["inf"]) if s in nf else "0" for s in "AB")
            if nf
            else ""
        )
        mark = "[green]yes[/]" if r["equal"] else "[red]no[/]"
        bias = f"{r['sign_bias']:.2f} / {r['magnitude_bias']:.2f}" if "sign_bias" in r else ""
        rows.append(
            (
                r["boundary"],
                mark,
                f"{r.get('max_abs', 0):.3e}",
                str(r.get("max_ulp", "")),
                f"{r.get('fraction_equal', 0):.3f}",
                f"{r.get('median_ulp_of_diffs', 0):.0f}",
                bias,
                nonfinite,
            )
        )
    # median ULP and the shares A > B / |A| > |B| of the differing elements: rounding ~1 and 0.5 / 0.5
    columns = (
        "boundary",
        "equal",
        "max |Δ|",
        "max ULP",
        "fraction equal",
        "median ULP",
        "A>B / |A|>|B|",
        "NaN+inf A / B",
    )
    console = print_table(f"topl diagnose: A={report['a']}  B={report['b']}", columns, rows)
    console.print(
        f"weights: {'differ in ' + ', '.join(report['weights_differ']) if report['weights_differ'] else 'identical'}"
    )
    console.print(f"first diverging boundary: {report['first_divergence']}")
    console.print(f"[bold]verdict: {report['verdict']}[/] — {report['reason']}")
    if report["remedy"]:
        console.print(f"addressed by: {report['remedy']}")
    return 0
