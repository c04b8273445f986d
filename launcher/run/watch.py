"""Follow a running job: logdiff and reward per step, the guard's records, and in strict mode a stop
on the first step whose max logdiff is not exactly 0 (or whose diff metrics are missing).

Sources, in the run directory: `metrics.jsonl`, one `{"step": N, "data": {...}}` per line as the
local backend writes it and as verl's file logger does (verl@0.9.1:verl/utils/tracking.py:FileLogger.log,
path from VERL_FILE_LOGGER_PATH, which the subprocess backend points here; a followed Ray job's
from its log's step lines, backends/ray_job.py:MetricsFile); `guard/*.json` (one per
verl process, launcher/guard.py); else the job's console lines `step:N - key:value - ...`
(verl@0.9.1:verl/utils/logger/aggregate_logger.py:concat_dict_to_str) in `verl.log` or, for a Ray
job nobody streams (`submitted`, or its topl is gone), from the Ray Job API, and `TOPL-GUARD {...}`
lines there. The run's end comes from status.json, or from Ray for a Ray job nobody follows; watch
records an end topl could not (a Ray job's, or a topl killed with SIGKILL) in status.json.
"""

from __future__ import annotations

import io
import json
import math
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from topl.launcher.run import watch_io, watch_status
from topl.launcher.run.watch_io import clean
from topl.launcher.run.watch_lines import Tail, parse_console, parse_metric
from topl.launcher.run.watch_ray import RayJob
from topl.launcher.run.watch_slurm import SlurmJob
from topl.launcher.run.watch_status import mark

PREFIX = "TOPL-GUARD"  # = guard.PREFIX (importing guard would run it in this process)
# verl@0.9.1:verl/utils/debug/metrics.py:calculate_debug_metrics (not computed under bypass_mode)
DIFF_MAX, DIFF_MEAN = "training/rollout_probs_diff_max", "training/rollout_probs_diff_mean"
REWARD = "critic/rewards/mean"
RATIO_KEYS = ("actor/ratio_max_abs_dev", "rollout_corr/rollout_is_mean", "actor/ppo_kl")


def verdict(data: dict) -> str | None:
    """Why this step is off-policy under alignment=strict, or None."""
    if DIFF_MAX not in data:
        return (
            f"{DIFF_MAX} missing: verl did not compare rollout and training log-probs "
            "(bypass_mode, or the rollout returned no log-probs)"
        )
    v = data[DIFF_MAX]
    if not isinstance(v, (int, float)) or math.isnan(v) or v != 0:
        return f"{DIFF_MAX} = {v!r}, not exactly 0: the run went off-policy"
    return None


@dataclass
class Watcher:
    """One run directory followed step by step; `poll()` yields what is new since the last call."""

    run_dir: Path
    strict: bool
    ray: RayJob | None = None  # the run's Ray job (None: not one)
    slurm: SlurmJob | None = None  # the run's Slurm job (None: not one)
    ray_logs: bool = False  # read the job's log from Ray (nobody streams it into verl.log)
    steps: list[tuple[int, dict]] = field(default_factory=list)
    guards: dict[str, dict] = field(default_factory=dict)
    reason: str | None = None
    notes: list[str] = field(default_factory=list)  # shown with the next poll (Ray job states)
    job_state: str | None = None
    _seen: int = 0

    def __post_init__(self):
        self.metrics = Tail(self.run_dir / "metrics.jsonl")
        self.console = Tail(self.run_dir / "verl.log")

    def ended(self) -> bool:
        """Whether the run is over. Records the ends topl could not: a Ray job nobody follows (Ray's
        state), and a topl that died without writing one (SIGKILL, the OOM killer)."""
        st = watch_io.read_status(self.run_dir)
        if not st:
            self._no_status_since = getattr(self, "_no_status_since", None) or time.monotonic()
            watch_status.no_status(self.run_dir, time.monotonic() - self._no_status_since)
        gone = st.get("state") == "running" and watch_status.topl_gone(st)
        if gone:  # topl writes its end before it exits: read again, the end may be there now
            st = watch_io.read_status(self.run_dir)
            gone = st.get("state") == "running"
        state = st.get("state")
        job = self.ray or self.slurm  # a job that outlives its topl: Ray or Slurm says how it goes
        if gone:
            if job is None:
                self._record(
                    self.run_dir,
                    "failed",
                    error=f"topl (pid {st['pid']}) ended without recording the run's end "
                    "(killed by SIGKILL or the OOM killer?); the job went with it",
                    recorded_by="topl watch",
                )
                return True
            state = "submitted"
        if state == "submitted" and job is not None:
            self.ray_logs = self.ray is not None  # nobody streams it (no --follow, or topl gone)
            shown, end = job.poll()
            if shown != self.job_state:  # PENDING can last long (no free resources): say where
                self.job_state = shown
                self.notes.append(shown)
            if end is not None:
                self._record(self.run_dir, end.pop("state"), **end)
            return end is not None
        return state not in (None, "running", "submitted")

    def _record(self, run_dir: Path, state: str, **details) -> None:
        if why := watch_status.update(run_dir, state, **details):  # a read-only run dir
            self.notes.append(f"topl watch: {why}")

    def _lines(self, final: bool) -> Iterator[str]:
        yield from self.console.lines(final)
        if self.ray is not None and self.ray_logs:
            text = self.ray.logs()  # the whole log so far: take the new complete lines
            end = text.rfind("\n", self._seen) + 1
            if end > self._seen:
                yield from text[self._seen : end].splitlines()
                self._seen = end

    def judge(self, rec: dict) -> dict:
        """A guard record as written by a process, checked again here against the run's own
        manifest (invocation.json): a record that says nothing is missing while a determinism
        variable it recorded differs from the rendered one is not ok."""
        if not hasattr(self, "_manifest"):
            self._manifest = _manifest(self.run_dir)
        missing = rec.get("missing") if isinstance(rec.get("missing"), list) else []
        env = rec.get("env") if isinstance(rec.get("env"), dict) else {}
        named = {m.get("what") for m in missing if isinstance(m, dict)}
        for name, (value, rule) in self._manifest.items():
            # a variable the record does not show was not set in that process: not the value
            if env.get(name) != value and f"env {name}" not in named:
                missing.append(
                    {
                        "rule": rule,
                        "what": f"env {name}",
                        "needed": value,
                        "found": env.get(name),
                        "seen_by": "topl watch",
                    }
                )
        if rec.get("strict") and not self._manifest and "manifest" not in named:
            missing.append(  # nothing to check a strict record's `ok` against: not shown as ok
                {
                    "rule": "TOP-GUARD-001",
                    "what": "manifest",
                    "needed": "the run's TOPL_GUARD manifest (invocation.json) to check it",
                    "found": None,
                    "seen_by": "topl watch",
                }
            )
        return {**rec, "missing": missing}

    def poll(self, final: bool = False) -> list[tuple[str, object]]:
        """What is new; `final`: the run has ended (its files' last lines are whole)."""
        new: list[tuple[str, object]] = []
        for p in sorted((self.run_dir / "guard").glob("*.json"))[:4096]:
            if p.name not in self.guards:
                try:
                    rec = json.loads(watch_io.read_text(p) or "")
                except (ValueError, RecursionError):
                    continue  # still being written (or not a record)
                if isinstance(rec, dict):
                    self.guards[p.name] = rec = self.judge(rec)
                    new.append(("guard", rec))
        from_file = self.metrics.path.is_file()
        for batch in self.metrics.batches(final):  # the whole file, a chunk at a time
            for line in batch:
                if (step := parse_metric(line)) is not None:
                    new.append(("step", step))
        for line in self._lines(final):
            if line.startswith(PREFIX + " "):
                try:
                    rec = json.loads(line[len(PREFIX) + 1 :])
                    key = f"{rec['host']}-{rec['pid']}"
                except (ValueError, KeyError, TypeError, RecursionError):
                    continue  # a mangled line in a log is not a reason to stop watching
                if key not in self.guards and isinstance(rec, dict):
                    self.guards[key] = rec = self.judge(rec)
                    new.append(("guard", rec))
            elif not from_file and (parsed := parse_console(line)):
                new.append(("step", parsed))
        fresh: list[tuple[str, object]] = [("note", n) for n in self.notes]
        self.notes.clear()
        for kind, item in new:
            if kind == "step":
                if self.steps and item[0] <= self.steps[-1][0]:
                    # seen already (verl.log, then the same job's log from Ray; a resumed run
                    # redoing a step): not shown again, but an off-policy record still counts
                    if self.strict and self.reason is None and (why := verdict(item[1])):
                        self.reason = f"step {item[0]} (a repeated record): {why}"
                    continue
                self.steps.append(item)
                if self.strict and self.reason is None and (why := verdict(item[1])):
                    self.reason = f"step {item[0]}: {why}"
            fresh.append((kind, item))
        return fresh


def row(step: int, data: dict) -> str:
    def f(k):
        v = data.get(k)
        return f"{v:>10.3g}" if isinstance(v, (int, float)) else f"{'-':>10}"

    ratio = next((k for k in RATIO_KEYS if k in data), RATIO_KEYS[0])
    return f"{step:>5} {f(LOGP_MAX)} {f(DIFF_MAX)} {f(DIFF_MEAN)} {f(REWARD)} {f(ratio)}"


# Named for what they hold: max|Δlogp| is topl's log-prob difference (the local backend's, as in
# launch's progress line; "-" where only verl's metrics exist), max|Δp| / mean|Δp| verl's
# *probability* difference (DIFF_MAX / DIFF_MEAN). Both are exactly 0 on-policy.
LOGP_MAX = "topl/max_abs_logprob_diff"
HEADER = " ".join(
    (
        f"{'step':>5}",
        *(f"{c:>10}" for c in ("max|Δlogp|", "max|Δp|", "mean|Δp|", "reward", "ratio")),
    )
)


def _manifest(run_dir: Path) -> dict:
    """{NAME: (value, rule)} the rendered TOPL_GUARD manifest requires; {} when unreadable."""
    try:
        inv = json.loads(watch_io.read_text(run_dir / "invocation.json") or "{}")
        env = json.loads(inv["env"]["TOPL_GUARD"])["env"]
        return {str(k): (str(v[0]), str(v[1])) for k, v in env.items()}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return {}


def guard_line(rec: dict) -> str:
    def get(d, k):
        return d.get(k) if isinstance(d, dict) else None

    missing = rec.get("missing") if isinstance(rec.get("missing"), list) else []
    miss = "; ".join(f"{get(m, 'rule')} {get(m, 'what')}" for m in missing) or "ok"
    return (
        f"guard {rec.get('role')} {rec.get('host')}:{rec.get('pid')} "
        f"verl {get(rec.get('versions'), 'verl')} {get(rec.get('accelerator'), 'kind')}: {miss}"
    )


def plot(steps: list[tuple[int, dict]], path: Path) -> Path | None:
    """logdiff / reward / ratio over steps (matplotlib if installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [s for s, _ in steps]
    ratio = next((k for k in RATIO_KEYS if any(k in d for _, d in steps)), RATIO_KEYS[0])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for ax, key in zip(axes, (DIFF_MAX, REWARD, ratio)):
        ax.plot(xs, [d.get(key, float("nan")) for _, d in steps], marker="o")
        ax.set(title=key, xlabel="step")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=90)
    plt.close(fig)
    try:
        watch_io.replace_file(path, png.getvalue())  # never through a link planted in the run dir
    except OSError:
        return None  # a read-only run dir: the table is the result
    return path


def follow(
    w: Watcher,
    out=None,
    interval: float = 1.0,
    on_stop: Callable[[str], None] | None = None,
    done: Callable[[], bool] | None = None,
    quiet: bool = False,
    live: bool = False,
) -> Watcher:
    """Poll until the run ends (`ended`) or a strict violation (then `on_stop(reason)`).

    `live`: print to the sys.stdout of each moment, not of the start: beside a running job whose
    progress bar owns the terminal (rich's Live swaps sys.stdout for a proxy that prints above
    the bar), a row written past the proxy would land inside the bar's line."""
    done = done or w.ended
    bound = out or sys.stdout  # the stdout of this moment (redacting, captured...)

    def say(text: str) -> None:
        print(clean(text), file=sys.stdout if live and out is None else bound, flush=True)

    if not quiet:
        say(HEADER)
    while True:
        finished = done()  # read before the last poll: nothing written before the end is missed
        for kind, item in w.poll(final=finished):
            if not quiet:
                say(row(*item) if kind == "step" else item if kind == "note" else guard_line(item))
        if w.reason:
            if not quiet:
                say(f"topl watch: STOP {w.reason}")
            if on_stop:
                on_stop(w.reason)
            return w
        if finished:
            return w
        time.sleep(interval)


def launched(run_dir: Path, strict: bool, run: Callable[[], int], interval: float = 0.5) -> int:
    """`topl launch --watch`: `run()` (the recorded backend) with a watcher beside it; a strict
    violation interrupts the main thread as SIGTERM would (the backend stops its job) and the
    status says why."""
    import _thread
    import threading

    finished = threading.Event()
    w = Watcher(run_dir, strict)

    def stop(_reason: str) -> None:
        # raises Interrupted in the main thread while the job runs; a no-op once the default
        # SIGTERM handler is back (Python skips SIG_DFL here), so a late stop cannot kill topl
        _thread.interrupt_main(signal.SIGTERM)

    t = threading.Thread(
        target=follow,
        args=(w,),
        daemon=True,
        name="topl-watch",
        kwargs=dict(interval=interval, on_stop=stop, done=finished.is_set, live=True),
    )
    t.start()
    try:
        rc = run()
    finally:
        finished.set()
        t.join(30)
    if w.steps:
        plot(w.steps, run_dir / "watch.png")
    if w.reason:
        mark(run_dir, w.reason, "topl launch --watch interrupted the job", wait_s=0)
        print(f"topl watch: stopped: {w.reason} (run dir {run_dir})", file=sys.stderr)
        return rc or 1
    return rc
