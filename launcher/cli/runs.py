"""`topl runs [RUN_ROOT] [--json]`: the runs `topl launch` wrote, newest first, one row each: name,
state, steps, max |Δ log p|, started, backend. Sweep points (RUN_ROOT/multirun/STAMP/N) are rows too.

Each run is read by `topl compare`'s reader (launcher/run/compare.py:read_run: untrusted files,
capped, what is missing said in notes); reading never changes a record: a run whose status says
`running` while its topl is gone is shown as such, and `topl watch RUN_DIR` is what records its end.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from topl.launcher.base.errors import ToplError
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_table
from topl.launcher.run import compare
from topl.launcher.spec.job import JobSpec

DEPTH = 3  # RUN_ROOT/RUN, RUN_ROOT/multirun/STAMP/N: no deeper


def default_root() -> Path:
    """Where `topl launch` writes run directories unless run_root= says otherwise (conf/config.yaml:
    hydra.run.dir = ${run_root}/STAMP-EXPERIMENT)."""
    return Path(JobSpec.__dataclass_fields__["run_root"].default)


def run_dirs(root: Path, depth: int = DEPTH) -> list[Path]:
    """Every run directory under root (a run's own folders are not searched)."""
    found: list[Path] = []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return found
    for p in children:
        if any((p / f).is_file() for f in compare.RUN_FILES):
            found.append(p)
        elif depth > 1 and not p.name.startswith("."):
            found += run_dirs(p, depth - 1)
    return found


def _when(row: dict[str, Any], run: Path) -> float:
    """The sort key: topl.json's creation time, else the folder's modification time."""
    try:
        return datetime.strptime(row["started"] or "", "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        try:
            return run.stat().st_mtime
        except OSError:
            return 0.0


def entry(run: Path, root: Path) -> dict[str, Any]:
    """One run's row (`--json`'s fields: keep their names)."""
    row = compare.read_run(run)
    return {
        "name": str(run.relative_to(root)),
        "run_dir": str(run),
        "state": row.state,
        "topl_gone": row.topl_gone,
        "steps": row.steps,
        "logdiff_max": row.logdiff_max,
        "started": row.started,
        "backend": row.backend,
        "attempt": row.attempt,
    }


def listing(root: Path) -> list[dict[str, Any]]:
    """The rows of every run under root, newest first."""
    runs = run_dirs(root)
    rows = [entry(r, root) for r in runs]
    order = sorted(range(len(runs)), key=lambda i: _when(rows[i], runs[i]), reverse=True)
    return [rows[i] for i in order]


def state_text(row: dict[str, Any]) -> str:
    state = row["state"] or "no status"
    state += f" (attempt {row['attempt']})" if row["attempt"] > 1 else ""  # resumed: attempts/
    return f"{state} (topl gone; `topl watch` records its end)" if row["topl_gone"] else state


def show(root: Path, rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json({"root": str(root), "runs": rows})
        return
    if not rows:
        print(
            f"no runs under {root} (`topl launch` writes them there; run_root=PATH elsewhere)",
            file=sys.stderr,
        )
        return
    cells = [
        (
            r["name"],
            state_text(r),
            str(r["steps"]),
            "-" if r["logdiff_max"] is None else f"{r['logdiff_max']:.3g}",
            r["started"] or "-",
            r["backend"] or "-",
        )
        for r in rows
    ]
    columns = ("run", "state", "steps", "max |Δ log p|", "started", "backend")
    print_table(f"topl runs: {root} (newest first)", columns, cells, whole=("run",))


def main(args: list[str]) -> int:
    flags, rest = parse(args, flags=("--json",))
    if len(rest) > 1:
        raise ToplError(
            f"topl runs takes at most one RUN_ROOT, got {rest!r}",
            where="command line",
            fix="topl runs (the default run root, ./runs) or topl runs PATH",
        )
    root = Path(rest[0]) if rest else default_root()
    if rest and not root.is_dir():
        raise ToplError(
            f"{root} is not a directory",
            where="topl runs RUN_ROOT",
            fix=f"the folder `topl launch` writes runs to (run_root; default ./{default_root()})",
        )
    show(root, listing(root), flags.json)
    return 0
