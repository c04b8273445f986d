"""`topl diagnose A B [--json] [--plots DIR]`: where two dumps first diverge, and why."""
from __future__ import annotations

import json
from pathlib import Path


def main(args: list[str]) -> int:
    from topl.kernels import dump
    from topl.kernels.diagnose import diagnose, plot
    from topl.launcher.errors import ToplError

    from topl.launcher.cli.argv import flag, option

    as_json, args = flag(args, "--json")
    plots, args = option(args, "--plots")
    if len(args) != 2:
        raise ToplError("topl diagnose needs two dump folders", fix="topl diagnose DUMP_A DUMP_B [--json] [--plots DIR]")
    loaded = []
    for a in args:
        if not (Path(a) / "manifest.json").is_file():
            raise ToplError(f"{a} is not a dump folder (no manifest.json)", where=a,
                            fix="make dumps with `topl probe --dump DIR` or kernels.dump.HookDumper")
        loaded.append(dump.load(a))
    report = diagnose(*loaded)
    if plots:
        report["plots"] = [str(p) for p in plot(report, loaded[0][1], loaded[1][1], plots)]
    if as_json:
        print(json.dumps(report, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"topl diagnose: A={report['a']}  B={report['b']}")
    for col in ("boundary", "equal", "max |Δ|", "max ULP", "fraction equal"):
        t.add_column(col)
    for r in report["boundaries"]:
        if "equal" not in r:
            t.add_row(r["boundary"], r.get("mapped", "-"), "", "", "")
            continue
        mark = "[green]yes[/]" if r["equal"] else "[red]no[/]"
        t.add_row(r["boundary"], mark, f"{r.get('max_abs', 0):.3e}", str(r.get("max_ulp", "")),
                  f"{r.get('fraction_equal', 0):.3f}")
    console = Console()
    console.print(t)
    console.print(f"weights: {'differ in ' + ', '.join(report['weights_differ']) if report['weights_differ'] else 'identical'}")
    console.print(f"first diverging boundary: {report['first_divergence']}")
    console.print(f"[bold]verdict: {report['verdict']}[/] — {report['reason']}")
    if report["remedy"]:
        console.print(f"addressed by: {report['remedy']}")
    return 0
