"""`topl compare PATH... [--json | --csv] [--sort KEY] [--plot OUT.png]`: the runs of a sweep (or
any run directories) side by side, one row each, with `plan --rank`'s predicted step cost beside
the measured one.

The rows come from launcher/run/compare.py (which reads run directories as untrusted input); the
prediction is made here, from each run's own spec.yaml, because the cost model lives in plan/ and
run/ may not import it (packages of one layer are independent)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from topl.launcher.base.errors import ToplError, install_hint
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_table
from topl.launcher.compose.composed import Composed
from topl.launcher.plan.cost import step_cost
from topl.launcher.run import compare, compare_plot, rundir, watch_io
from topl.launcher.run.compare import Row
from topl.launcher.run.watch import LOGP_MAX


def no_plot() -> str:
    return f"matplotlib is not installed (it comes with the `local` extra: {install_hint('local')})"


CSV_FIELDS = (
    *("run_dir", "point", "verdict", "rules", "state", "exit_code", "signal", "error", "steps"),
    *("last_step", "metrics_source", "logdiff_metric", "logdiff_max", "first_nonzero_step"),
    *("reward_first", "reward_last", "step_s_median", "tokens_per_s_median", "predicted_step_s"),
    *("measured_over_predicted", "topl_version", "notes"),
)


def main(args: list[str]) -> int:
    flags, paths = parse(
        args, flags=("--json", "--csv", "--desc"), options={"--sort": None, "--plot": None}
    )
    if not paths:
        raise ToplError(
            "topl compare needs at least one PATH",
            where="topl compare",
            fix="topl compare runs/multirun/DATE (a sweep) or RUN_DIR... or 'runs/*'",
        )
    rows = rows_of(paths)
    if flags.sort:
        rows = compare.sort(rows, flags.sort, flags.desc)
    plotted = plot(rows, Path(flags.plot)) if flags.plot else None
    if flags.plot and plotted is None:
        print(f"topl: no plot: {no_plot()}", file=sys.stderr)
    if flags.json:
        print_json(document(rows) | ({"plot": str(plotted)} if plotted else {}))
    elif flags.csv:
        write_csv(rows, sys.stdout)
    else:
        table(rows)
        if plotted:
            print(f"plot: {plotted}")
    return 0


def plot(rows: list[Row], path: Path) -> Path | None:
    try:
        return compare_plot.plot(rows, path)
    except (OSError, ValueError) as e:  # a folder that is not there, a format matplotlib lacks
        raise ToplError(
            f"cannot write the plot {path}: {getattr(e, 'strerror', None) or e}",
            where="--plot",
            fix="a writable path ending in .png (or .svg, .pdf)",
        ) from None


def rows_of(paths: list[str]) -> list[Row]:
    rows = compare.collect(paths)
    for r in rows:
        predict(r)
    return rows


def predict(row: Row) -> None:
    """`plan --rank`'s step estimate for the run's own spec.yaml, and measured / predicted."""
    if row.verdict != "valid" or row.state in ("not started",):
        return
    spec_file = Path(row.run_dir) / "spec.yaml"
    try:
        data = yaml.safe_load(watch_io.read_text(spec_file) or "null")
        if not isinstance(data, dict):
            raise TypeError("no mapping")
        # the resolved spec as written by rundir.write; built without OmegaConf, so nothing in
        # an edited file is interpolated (an `${oc.env:...}` stays a string and fails the types)
        spec = Composed(None, {}, [], data=data, resolved=data).to_object()
    except (yaml.YAMLError, RecursionError, TypeError, KeyError, AttributeError, ValueError):
        row.notes.append(
            "no prediction: spec.yaml missing, unreadable or not this topl's job spec"
            " (written by another version?)"
        )
        return
    cost = step_cost(spec)
    if cost is None:
        soc = watch_io.clean(spec.cluster.soc)
        row.notes.append(
            f"no prediction: cluster.soc={soc} has no chip figures (launcher/facts/chips.json)"
        )
        return
    row.predicted_step_s = cost["step_s"]
    if row.step_s_median is not None and cost["step_s"] > 0:
        row.measured_over_predicted = row.step_s_median / cost["step_s"]


def document(rows: list[Row]) -> dict[str, Any]:
    swept = list(rows[0].swept) if rows else []
    return {"swept": swept, "runs": [r.to_dict() for r in rows]}


def write_csv(rows: list[Row], out) -> None:
    swept = list(rows[0].swept) if rows else []
    w = csv.writer(out)
    w.writerow([*swept, *CSV_FIELDS])
    for r in rows:
        d = r.to_dict()
        d["rules"], d["notes"] = " ".join(r.rules), "; ".join(r.notes)
        w.writerow(
            [
                *(r.swept.get(k, "") for k in swept),
                *("" if (v := d[f]) is None else v for f in CSV_FIELDS),
            ]
        )


def _g(v: float | None, fmt: str = ".3g") -> str:
    return "-" if v is None else format(v, fmt)


def table(rows: list[Row]) -> None:
    swept = list(rows[0].swept) if rows else []
    out = []
    for r in rows:
        diff = _g(r.logdiff_max, ".2e") + ("" if r.logdiff_metric in (None, LOGP_MAX) else " (p)")
        state = r.state or "?"
        if r.exit_code not in (None, 0):
            state += (
                f" ({r.signal or 'exit'} {r.exit_code})" if r.signal else f" (exit {r.exit_code})"
            )
        out.append(
            (
                "-" if r.point is None else str(r.point),
                *(watch_io.clean(r.swept[k]) for k in swept),
                r.verdict if r.verdict == "valid" else f"dropped {' '.join(r.rules)}",
                state,
                str(r.steps)
                if r.last_step in (None, r.steps)
                else f"{r.steps} (last {r.last_step})",
                diff,
                "-" if r.first_nonzero_step is None else str(r.first_nonzero_step),
                f"{_g(r.reward_first)} → {_g(r.reward_last)}",
                _g(r.step_s_median),
                _g(r.tokens_per_s_median, ".4g"),
                _g(r.predicted_step_s),
                _g(r.measured_over_predicted),
                watch_io.clean("; ".join(r.notes)) or "-",
            )
        )
    columns = (
        *("#", *swept, "verdict", "state", "steps", "max|Δlogp|", "first≠0", "reward"),
        *("step s", "tok/s", "pred. s", "meas/pred", "notes"),
    )
    console = print_table(f"topl compare: {len(rows)} run(s)", columns, out)
    console.print(
        "step s and tok/s: medians over the steps; pred. s: plan --rank's roofline estimate of "
        "one step on the run's chip (docs/rank.md); (p): verl's probability difference",
        highlight=False,
    )


def write_sweep(sweep_dir: Path) -> None:
    """compare.json and compare.png in a sweep directory after its last point (`topl launch -m`);
    a failure here is one line, never the launch's exit code."""
    try:
        rows = rows_of([str(sweep_dir)])
        rundir.write_file(sweep_dir / "compare.json", json.dumps(document(rows), indent=1))
        png = compare_plot.plot(rows, sweep_dir / "compare.png")
        if png:
            png.chmod(0o600)  # as everything in a run directory (rundir.seal)
    except (ToplError, OSError, ValueError) as e:
        print(f"topl: no sweep comparison written: {e}", file=sys.stderr)
        return
    shown = f" and {png.name}" if png else f" (no plot: {no_plot()})"
    print(f"comparison: {sweep_dir / 'compare.json'}{shown}; table: topl compare {sweep_dir}")
