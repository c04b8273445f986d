"""The local backend: the job spec -> the embedded RL loop on the reference engines, with a
progress bar, verl's metrics file, a plot and a summary table."""

from __future__ import annotations

import io
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from topl.launcher.base.console import make_console
from topl.launcher.base.errors import LOCAL_EXTRA, ToplError, local_extra_error
from topl.launcher.doctor.report import nodes_here
from topl.launcher.render.invocation import overlong_buffer_len
from topl.launcher.run import engines
from topl.launcher.run.watch_io import replace_file
from topl.launcher.spec.backend_traits import TRAITS
from topl.launcher.spec.job import is_strict

if TYPE_CHECKING:
    from rich.console import Console

    from topl.kernels.rl_loop import LoopConfig
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec


def loop_config(spec: JobSpec) -> LoopConfig:
    """The plain arguments the kernels' RL loop reads, taken from the job spec."""
    from topl.kernels.rl_loop import LoopConfig  # lazy: torch and safetensors only when this runs

    r, t, a = spec.rollout, spec.train, spec.algorithm
    e = engines.engine_settings(spec)
    return LoopConfig(
        model=spec.model,
        alignment=spec.alignment,
        steps=t.steps or 0,  # TOP-ENG-009 refuses null for this backend
        batch_size=t.train_batch_size,
        n=r.n,
        max_response_length=t.max_response_length,
        dtype=e.dtype,
        train_tp=e.train_tp,
        rollout_tp=e.rollout_tp,
        order=e.order,
        block_size=e.block_size,
        max_num_seqs=e.max_num_seqs,
        max_num_batched_tokens=e.max_num_batched_tokens,
        chunked_prefill=e.chunked_prefill,
        micro_batch=e.update_micro_batch,
        log_prob_micro_batch=e.log_prob_micro_batch,
        ref_micro_batch=e.ref_micro_batch,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=r.top_k,
        logprobs_mode=r.logprobs_mode,
        adv_estimator=a.adv_estimator,
        policy_loss=a.policy_loss,
        loss_agg_mode=a.loss_agg_mode,
        clip_ratio_low=a.clip_ratio_low,
        clip_ratio_high=a.clip_ratio_high,
        clip_ratio_c=a.clip_ratio_c,
        use_kl_loss=a.use_kl_loss,
        kl_loss_coef=a.kl_loss_coef,
        use_critic=a.use_critic,
        gamma=a.gamma,
        lam=a.lam,
        cliprange_value=a.cliprange_value,
        filter_groups=a.filter_groups,
        max_num_gen_batches=a.max_num_gen_batches,
        overlong_buffer_len=overlong_buffer_len(spec),
        overlong_penalty_factor=a.overlong_penalty_factor,
        lr=spec.local.lr,
        critic_lr=spec.local.critic_lr,
        seed=spec.local.seed,
    )


class LocalBackend:
    """The embedded RL loop on the reference engines, on this machine's CPU (no verl)."""

    traits = TRAITS["local"]

    def preflight(self, spec: JobSpec) -> None:
        """The `local` extra (torch, ...) is installed, or one message (exit 2)."""
        import importlib.util

        for module in LOCAL_EXTRA:
            if importlib.util.find_spec(module) is None:
                raise local_extra_error("the local backend (cluster.backend=local)", module)

    def doctor(self, spec: JobSpec) -> list[dict[str, Any]]:

        return nodes_here(spec)

    def start(self, spec: JobSpec, inv: Invocation, run_dir: Path, follow: bool) -> int:
        try:
            return run_local(spec, run_dir)
        except ToplError as e:  # raised inside Hydra's app, whose handler would bury it in a hint
            import sys

            print(e.render(), file=sys.stderr)
            return 2

    def detached(self, follow: bool) -> bool:
        return False

    def handle(self, run_dir: Path) -> str | None:
        return None

    def driver_dir(self, spec: JobSpec, launched_in: str) -> str | None:
        return None  # no verl: the reference engines write no checkpoints


BACKEND = LocalBackend()


def threads_for(spec: JobSpec) -> int:
    """Intra-op threads for the reference engines (see LocalRunSpec.threads)."""
    if spec.local.threads > 0:
        return spec.local.threads
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isascii() and env.isdigit() and int(env) > 0:  # `isdigit` takes `²`, int() does not
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, spec.model.hidden_size // 256))


@contextmanager
def torch_threads(n: int) -> Iterator[int]:
    """torch's intra-op thread count set to n for the block, then restored."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def _embeddable(spec: JobSpec) -> None:
    """What the loop cannot run is the user's input: one ToplError, before any step."""
    from topl.kernels.rl_loop import (
        ADV_ESTIMATORS,
        POLICY_LOSSES,
    )  # lazy: torch and safetensors only when this runs

    a = spec.algorithm
    bad = [
        f"algorithm.{k}={v}"
        for k, v, ok in (
            ("adv_estimator", a.adv_estimator, ADV_ESTIMATORS),
            ("policy_loss", a.policy_loss, POLICY_LOSSES),
        )
        if v not in ok
    ]
    if bad:
        raise ToplError(
            f"the local backend does not embed {', '.join(bad)}",
            where="algorithm",
            fix=f"adv_estimator in {ADV_ESTIMATORS}, policy_loss in {POLICY_LOSSES} "
            "(algorithm=grpo|ppo|gspo|dapo), or cluster.backend=subprocess/ray_job",
        )
    if (a.adv_estimator == "gae") != a.use_critic:
        raise ToplError(
            f"adv_estimator={a.adv_estimator} with use_critic={a.use_critic}: GAE needs the critic's "
            "values and only GAE uses them",
            where="algorithm.use_critic",
            fix="algorithm=ppo for GAE with a critic, or algorithm.use_critic=false with grpo",
        )


def run_local(spec: JobSpec, run_dir: Path, quiet: bool = False) -> int:
    """The local backend: returns the exit code (0 ok, 1 strict logdiff violation)."""
    with torch_threads(threads_for(spec)):
        return _run_local(spec, run_dir, quiet)


def _run_local(spec: JobSpec, run_dir: Path, quiet: bool = False) -> int:
    """The local backend: returns the exit code (0 ok, 1 strict logdiff violation)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from topl.kernels import rl_loop  # lazy: torch and safetensors only when this runs

    _embeddable(spec)

    console = make_console(quiet=quiet)
    metrics_path, history = run_dir / "metrics.jsonl", []
    strict = is_strict(spec)
    rc = 0
    with Progress(
        TextColumn(f"[bold]{spec.algorithm.name.upper()}[/]"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.description}"),
        TimeRemainingColumn(),
        console=console,
    ) as bar:
        job = bar.add_task("", total=spec.train.steps)
        steps = rl_loop.run(loop_config(spec))
        for step, data in enumerate(_guard(steps, spec), start=1):
            history.append(data)
            with metrics_path.open("a") as f:
                f.write(json.dumps({"step": step, "data": data}) + "\n")
            bar.update(
                job,
                advance=1,
                description=f"reward {data['critic/rewards/mean']:.3f}  "
                f"max|Δlogp| {data['topl/max_abs_logprob_diff']:.2e}",
            )
            if strict and data["topl/max_abs_logprob_diff"] != 0.0:
                console.print(
                    f"[red]error[/]: step {step}: topl/max_abs_logprob_diff = "
                    f"{data['topl/max_abs_logprob_diff']:.3e} (training/rollout_probs_diff_max = "
                    f"{data['training/rollout_probs_diff_max']:.3e}) under alignment=strict: the run "
                    "went off-policy; stopping. Find the cause: `topl probe` with one switch off at a time."
                )
                rc = 1
                break
    if history and spec.local.plot:
        plot(history, run_dir / "metrics.png", spec)
    summary(console, history, spec, run_dir)
    return rc


def _guard(steps: Iterable[dict[str, Any]], spec: JobSpec) -> Iterator[dict[str, Any]]:
    """The loop's steps; DAPO running out of generation batches becomes topl's one-message error."""
    from topl.kernels.rl_loop import (
        FilterGroupsExhausted,
    )  # lazy: torch and safetensors only when this runs

    try:
        yield from steps
    except FilterGroupsExhausted as e:
        raise ToplError(
            str(e),
            where="algorithm.max_num_gen_batches",
            fix="raise algorithm.max_num_gen_batches (<= 0: no limit) or rollout.n, "
            "or algorithm.filter_groups=false",
        ) from None


def plot(history: list[dict[str, Any]], path: Path, spec: JobSpec) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = range(1, len(history) + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
    ax1.plot(steps, [h["critic/rewards/mean"] for h in history], marker="o")
    ax1.set(title="reward (critic/rewards/mean)", xlabel="step")
    diffs = [h["topl/max_abs_logprob_diff"] for h in history]
    ax2.plot(steps, diffs, marker="o", color="tab:red")
    ax2.set(title="max |Δ log p| rollout vs training", xlabel="step")
    if any(d > 0 for d in diffs):
        ax2.set_yscale("log")
    fig.suptitle(
        f"{spec.model.name} {spec.algorithm.name.upper()}, alignment={spec.alignment.mode}"
    )
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    replace_file(path, png.getvalue())  # whole or not at all: a full disk leaves no half image


def summary(console: Console, history: list[dict[str, Any]], spec: JobSpec, run_dir: Path) -> None:
    from rich.table import Table

    if not history:
        return
    t = Table(
        title=f"topl local {spec.algorithm.name.upper()}: {spec.model.name}, alignment={spec.alignment.mode}"
    )
    t.add_column("")
    t.add_column("first step", justify="right")
    t.add_column("last step", justify="right")
    for key in (
        "critic/rewards/mean",
        "topl/max_abs_logprob_diff",
        "topl/bitwise_equal_fraction",
        "rollout_corr/k3_kl",
        "actor/ratio_max_abs_dev",
        "critic/vf_loss",
        "train/num_gen_batches",
        "topl/acc/mean",
        "timing_s/step",
    ):
        if key not in history[0]:
            continue  # the algorithm has no such metric
        t.add_row(key, f"{history[0][key]:.4g}", f"{history[-1][key]:.4g}")
    console.print(t)
    worst = max(h["topl/max_abs_logprob_diff"] for h in history)
    console.print(
        f"steps: {len(history)}   max |Δ log p| over the run: {worst:.3e}   "
        f"({'on-policy: importance ratio exactly 1' if worst == 0 else 'off-policy'})"
    )
    # soft_wrap: paths stay whole (the terminal wraps them, rich would break mid-filename)
    console.print(f"metrics: {run_dir / 'metrics.jsonl'}", soft_wrap=True, highlight=False)
    console.print(f"plot:    {run_dir / 'metrics.png'}", soft_wrap=True, highlight=False)
