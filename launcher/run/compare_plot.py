"""`topl compare --plot`: every run of a comparison on shared axes, one line per run labelled by its
swept keys (reward and max |Δ log p| per step), and each run's median step time as a bar with
`plan --rank`'s prediction marked on it. matplotlib comes with the `local` extra; without it there
is no plot and the caller says so."""

from __future__ import annotations

import io
from pathlib import Path

from topl.launcher.run.compare import Row
from topl.launcher.run.watch import LOGP_MAX, REWARD
from topl.launcher.run.watch_io import replace_file


def plot(rows: list[Row], path: Path) -> Path | None:
    """The comparison as a PNG at `path` (None without matplotlib)."""
    try:
        import matplotlib  # lazy: matplotlib (the `local` extra) only when a plot is asked for

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    ran = [r for r in rows if r.history]
    fig, (ax_r, ax_d, ax_t) = plt.subplots(1, 3, figsize=(15, 4.2))
    for r in ran:
        xs = [s for s, _ in r.history]
        ax_r.plot(xs, [_val(d, REWARD) for _, d in r.history], marker="o", label=r.label)
        key = r.logdiff_metric or LOGP_MAX
        ax_d.plot(xs, [_val(d, key) for _, d in r.history], marker="o", label=r.label)
    ax_r.set(title=f"reward ({REWARD})", xlabel="step")
    metrics = {r.logdiff_metric for r in ran} - {None}
    ax_d.set(
        title="max |Δ log p| rollout vs training"
        if metrics <= {LOGP_MAX}
        else f"max |Δ| ({', '.join(sorted(m or '' for m in metrics))})",
        xlabel="step",
    )
    if any((r.logdiff_max or 0) > 0 for r in ran):
        ax_d.set_yscale("symlog", linthresh=1e-8)  # exact zeros stay on the axis
    timed = [r for r in rows if r.step_s_median is not None or r.predicted_step_s is not None]
    xs_t = list(range(len(timed)))
    ax_t.bar(xs_t, [r.step_s_median or 0.0 for r in timed], color="tab:blue", label="measured")
    pred = [(x, r.predicted_step_s) for x, r in zip(xs_t, timed) if r.predicted_step_s]
    if pred:
        ax_t.scatter(*zip(*pred), marker="_", s=900, color="black", label="predicted (plan --rank)")
    ax_t.set_xticks(xs_t, [r.label for r in timed], rotation=30, ha="right", fontsize=8)
    shown = [v for r in timed for v in (r.step_s_median, r.predicted_step_s) if v]
    if shown and max(shown) > 100 * min(shown):  # a CPU run against an NPU prediction
        ax_t.set_yscale("log")
    ax_t.set(title="median step time (s)")
    for ax in (ax_r, ax_d):
        ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in (ax_r, ax_d, ax_t):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    image = io.BytesIO()
    try:  # the format the path's suffix names (.png, .svg, .pdf), as matplotlib reads a path
        fig.savefig(image, format=path.suffix.lstrip(".").lower() or "png", dpi=90)
    finally:
        plt.close(fig)
    replace_file(path, image.getvalue())  # whole or not at all (a full disk), never through a link
    return path


def _val(data: dict, key: str) -> float:
    v = data.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")
