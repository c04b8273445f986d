"""`topl compare`'s reading of runs: one row per run directory (or per point of a sweep directory,
dropped points included) with its verdict, state, steps, logdiff, reward and step time.

A run directory is untrusted input (it may be old, copied, edited or still being written): every
file is read through watch_io (regular files only, capped), the steps through watch's `Tail`
(metrics.jsonl as the local backend and verl's file logger write it, else verl's console lines in
verl.log), and whatever is missing or unreadable becomes a note in that run's row, never an
exception. The prediction (`plan --rank`'s step cost) is the CLI's to add: run and plan are
independent packages of one layer (launcher/cli/compare.py).
"""

from __future__ import annotations

import glob
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from topl.launcher import __version__
from topl.launcher.base.errors import ToplError
from topl.launcher.run import watch_io, watch_status
from topl.launcher.run.watch import DIFF_MAX, LOGP_MAX, REWARD
from topl.launcher.run.watch_lines import Tail, parse_console, parse_metric

RUN_FILES = ("topl.json", "status.json", "spec.yaml")  # any one makes a folder a run directory
SWEEP_FILES = ("sweep_report.json", "multirun.yaml")
STEP_TIME = ("timing_s/step", "perf/time_per_step")  # local and verl@0.9.1 (metric_utils.py)
# tokens of a step: verl's prompt + response tokens (verl@0.9.1:verl/trainer/ppo/metric_utils.py:
# compute_throughout_metrics), else the local backend's response tokens (kernels/rl_loop.py)
TOKENS = ("perf/total_num_tokens", "topl/tokens")
MAX_STEPS = 100_000  # a longer metrics file is read this far (the row says so)
NOT_SWEPT = ("run_root", "hydra.")  # keys that differ between runs without being a layout


@dataclass
class Row:
    """One run (or dropped sweep point). `--json`'s fields: keep their names."""

    run_dir: str
    point: int | None = None  # the sweep's point number (its run directory's name)
    overrides: dict[str, str] = field(default_factory=dict)  # the point's overrides
    swept: dict[str, str] = field(default_factory=dict)  # those that differ between the rows
    verdict: str = "valid"  # valid | dropped (rejected by the contract: nothing started)
    rules: list[str] = field(default_factory=list)  # a dropped point's rule ids
    state: str | None = None  # status.json's state (None: no status file)
    exit_code: int | None = None
    signal: str | None = None
    error: str | None = None
    steps: int = 0  # steps recorded
    last_step: int | None = None
    metrics_source: str | None = None  # metrics.jsonl | verl.log | None (notes say why)
    logdiff_metric: str | None = None  # the metric read as max |Δ log p|
    logdiff_max: float | None = None
    first_nonzero_step: int | None = None  # the first step whose logdiff was not exactly 0
    reward_first: float | None = None
    reward_last: float | None = None
    step_s_median: float | None = None
    tokens_per_s_median: float | None = None
    predicted_step_s: float | None = None  # plan --rank's roofline step (filled by the CLI)
    measured_over_predicted: float | None = None
    topl_version: str | None = None
    started: str | None = None  # topl.json's `created`
    backend: str | None = None  # status.json's `backend`
    attempt: int = 1  # status.json's `attempt`: 2 and on for a run `topl launch --resume` resumed
    topl_gone: bool = False  # status.json says running, its topl no longer exists (never rewritten)
    notes: list[str] = field(default_factory=list)  # what is missing or unreadable, and why
    history: list[tuple[int, dict[str, Any]]] = field(default_factory=list, repr=False)

    def note(self, text: str) -> Row:
        self.notes.append(text)
        return self

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("history")
        return d

    @property
    def label(self) -> str:
        """The row's name in tables and plots: its swept keys, else its directory."""
        if self.swept:
            return " ".join(f"{k}={v}" for k, v in self.swept.items())
        return Path(self.run_dir).name


def collect(paths: list[str]) -> list[Row]:
    """The rows of every run and sweep named (a glob is expanded; what it matches that is no run
    is skipped); a named path that is neither is one ToplError naming it."""
    rows: list[Row] = []
    for p in paths:
        matched = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not matched:
            raise ToplError(f"{p!r} matches nothing", where="topl compare PATH", fix=_FIX)
        found = 0
        for m in matched:
            got = _read_path(Path(m), strict=not glob.has_magic(p))
            rows += got
            found += bool(got)
        if not found:
            raise ToplError(f"{p!r} matches no run or sweep directory", where=p, fix=_FIX)
    mark_swept(rows)
    return rows


_FIX = "give run directories (with status.json / topl.json) or sweep directories (topl launch -m)"


def _read_path(path: Path, strict: bool) -> list[Row]:
    if any((path / f).is_file() for f in SWEEP_FILES):
        return read_sweep(path)
    if any((path / f).is_file() for f in RUN_FILES):
        return [read_run(path)]
    if strict:
        what = "does not exist" if not path.exists() else "is not a topl run or sweep directory"
        raise ToplError(
            f"{path} {what} (no {', '.join(RUN_FILES)} or sweep_report.json in it)",
            where=str(path),
            fix=_FIX,
        )
    return []


def _json(path: Path, cap: int = watch_io.RECORD_CAP) -> Any:
    try:
        return json.loads(watch_io.read_text(path, cap) or "null")
    except (ValueError, RecursionError):
        return None


def read_sweep(sweep: Path) -> list[Row]:
    """One row per point of sweep_report.json, numbered as its run directories; a point with a
    directory but no report line (or no report) is read all the same."""
    report = _json(sweep / "sweep_report.json", 64 << 20)
    verdicts = report.get("verdicts") if isinstance(report, dict) else None
    rows: list[Row] = []
    if not isinstance(verdicts, list):
        verdicts = []
        note = "sweep_report.json missing or unreadable: points read from the numbered folders"
    else:
        note = None
    for i, v in enumerate(verdicts):
        v = v if isinstance(v, dict) else {}
        ov = [str(o) for o in v.get("overrides") or [] if isinstance(o, str)]
        run = sweep / str(i)
        if v.get("valid") is False:
            rows.append(
                Row(
                    str(run),
                    point=i,
                    overrides=_split(ov),
                    verdict="dropped",
                    rules=[str(r) for r in v.get("rules") or []],
                    state="not started",
                )
            )
        elif run.is_dir():
            rows.append(read_run(run, point=i, overrides=ov))
        else:
            rows.append(
                Row(str(run), point=i, overrides=_split(ov), state="not started").note(
                    f"no run directory {i}/: the sweep stopped before this point"
                )
            )
    numbered = sorted(
        (int(d.name), d)
        for d in sweep.iterdir()
        if d.name.isascii() and d.name.isdigit() and d.is_dir()
    )
    rows += [read_run(d, point=n) for n, d in numbered if n >= len(verdicts)]
    if note:
        for r in rows:
            r.notes.append(note)
    return rows


def _split(overrides: list[str]) -> dict[str, str]:
    return {k.lstrip("+~"): v for k, _, v in (o.partition("=") for o in overrides)}


def read_run(run: Path, point: int | None = None, overrides: list[str] | None = None) -> Row:
    """A run directory's row; what it lacks is said in `notes`."""
    row = Row(str(run), point=point)
    topl = _json(run / "topl.json")
    if isinstance(topl, dict):
        row.topl_version = str(topl.get("topl_version"))
        row.started = _str(topl.get("created"))
        if row.topl_version != __version__:
            row.notes.append(
                f"written by topl {watch_io.clean(row.topl_version)!s:.40}, this is {__version__}:"
                " fields may be read differently"
            )
    else:
        row.notes.append("topl.json missing or unreadable")
    if overrides is None:
        overrides = _point_overrides(run, topl)
    row.overrides = _split(overrides)
    st = watch_io.read_status(run)
    if not st:
        row.notes.append("status.json missing or unreadable: the launch stopped before the job")
    row.state = _str(st.get("state"))
    row.exit_code = st.get("exit_code") if isinstance(st.get("exit_code"), int) else None
    row.signal = _str(st.get("signal"))
    row.error = _str(st.get("reason") or st.get("error"))
    row.backend = _str(st.get("backend"))
    row.attempt = st["attempt"] if isinstance(st.get("attempt"), int) else 1
    row.history, row.metrics_source = read_steps(run, final=watch_status.ended(st))
    if len(row.history) >= MAX_STEPS:
        row.notes.append(f"read the first {MAX_STEPS} steps of {row.metrics_source}")
    row.topl_gone = row.state == "running" and watch_status.topl_gone(st)
    if row.topl_gone:
        row.notes.append(
            "status.json says running but its topl is gone (killed?): `topl watch` records the end"
        )
    if row.history:
        summarize(row)
    elif row.state not in ("dry_run", "not started"):
        row.notes.append(
            "no steps: neither metrics.jsonl nor step lines in verl.log"
            + (
                " (a Ray job without --follow: its log is on the cluster; `topl watch` reads it)"
                if (run / "ray_job_id").is_file()
                else ""
            )
        )
    return row


def _str(v: Any) -> str | None:
    return None if v is None else watch_io.clean(v)[:2000]


def _point_overrides(run: Path, topl: Any) -> list[str]:
    """The overrides that made this run: Hydra's record of the job (a sweep point's own), else
    topl.json's (a single run's, as typed)."""
    try:
        ov = yaml.safe_load(watch_io.read_text(run / ".hydra" / "overrides.yaml") or "null")
    except (yaml.YAMLError, RecursionError):
        ov = None
    if not isinstance(ov, list) and isinstance(topl, dict):
        ov = topl.get("overrides")
    return [str(o) for o in ov if isinstance(o, str)] if isinstance(ov, list) else []


def read_steps(
    run: Path, final: bool = False
) -> tuple[list[tuple[int, dict[str, Any]]], str | None]:
    """(step, the metrics a row reads) in step order, the last record of a step winning but for
    logdiff, where an off-policy record of a repeated step (a resumed run) still counts, as in
    `topl watch`; and where they came from: metrics.jsonl, else verl's console lines in verl.log.
    `final`: the run has ended, so a last line without its newline is whole."""
    steps: dict[int, dict[str, Any]] = {}
    for name in ("metrics.jsonl", "verl.log"):
        for lines in Tail(run / name).batches(final):  # a chunk at a time: bounded memory
            if len(steps) >= MAX_STEPS:
                break
            for line in lines:
                got = parse_metric(line) if name == "metrics.jsonl" else parse_console(line)
                if got is not None:
                    new = {k: v for k, v in got[1].items() if k in KEPT}
                    for k in (LOGP_MAX, DIFF_MAX):
                        old = steps.get(got[0], {}).get(k)
                        if old is not None and (k not in new or _worse(old, new[k])):
                            new[k] = old
                    steps[got[0]] = new
        if steps:
            return sorted(steps.items()), name
    return [], None


def _worse(a: float, b: float) -> bool:
    """Whether logdiff `a` is further from exactly 0 than `b` (NaN is furthest)."""
    return a != a or (b == b and abs(a) > abs(b))


KEPT = {LOGP_MAX, DIFF_MAX, REWARD, *STEP_TIME, *TOKENS}  # what a row and the plot read


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def summarize(row: Row) -> None:
    """Steps, logdiff, reward, step time and tokens/s from the row's history."""
    h = row.history
    row.steps, row.last_step = len(h), h[-1][0]
    key = next((k for k in (LOGP_MAX, DIFF_MAX) if any(k in d for _, d in h)), None)
    row.logdiff_metric = key
    if key is not None:
        vals = [(s, _num(d.get(key))) for s, d in h if key in d]
        known = [v for _, v in vals if v is not None]
        row.logdiff_max = max(known) if known else None
        row.first_nonzero_step = next((s for s, v in vals if v is None or v != 0), None)
    rewards = [v for _, d in h if (v := _num(d.get(REWARD))) is not None]
    if rewards:
        row.reward_first, row.reward_last = rewards[0], rewards[-1]
    times, rates = [], []
    for _, d in h:
        t = next((v for k in STEP_TIME if (v := _num(d.get(k))) is not None), None)
        n = next((v for k in TOKENS if (v := _num(d.get(k))) is not None), None)
        if t is not None and t > 0:
            times.append(t)
            if n is not None:
                rates.append(n / t)
    row.step_s_median = statistics.median(times) if times else None
    row.tokens_per_s_median = statistics.median(rates) if rates else None


def mark_swept(rows: list[Row]) -> None:
    """Each row's `swept`: the override keys whose values differ between the rows."""
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r.overrides if k not in keys and not k.startswith(NOT_SWEPT)]
    differ = [k for k in keys if len({r.overrides.get(k) for r in rows}) > 1]
    for r in rows:
        r.swept = {k: r.overrides.get(k, "-") for k in differ}


SORTS = (
    "step_s_median",
    "tokens_per_s_median",
    "logdiff_max",
    "reward_last",
    "predicted_step_s",
    "measured_over_predicted",
    "steps",
    "point",
    "state",
)


def sort(rows: list[Row], name: str, desc: bool = False) -> list[Row]:
    """Rows by a field (or a swept key), ascending (`desc`: descending); rows without it last."""
    fields = set(Row.__dataclass_fields__) - {"history", "notes"}
    swept = {k for r in rows for k in r.swept}
    if name not in fields and name not in swept:
        raise ToplError(
            f"--sort {name}: no such column",
            where="--sort",
            fix=f"one of {', '.join(SORTS)}, a swept key ({', '.join(sorted(swept)) or 'none'}),"
            " or any --json field (--desc: descending)",
        )

    def value(r: Row) -> Any:
        return r.swept.get(name) if name in swept else getattr(r, name)

    have = [r for r in rows if value(r) is not None]
    none = [r for r in rows if value(r) is None]
    try:
        have.sort(key=value, reverse=desc)
    except TypeError:  # mixed types (a swept key's values): as text
        have.sort(key=lambda r: str(value(r)), reverse=desc)
    return have + none
