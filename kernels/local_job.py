"""The embedded default job: true on-policy GRPO on this machine, on the reference engines.

Every step: the rollout engine samples (continuous batching, paged KV), rewards are scored, the
training engine recomputes log-probs, the contract's promise is checked (strict: logdiff must be
exactly 0), the policy is updated, and the new weights are pushed to the rollout engine.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import torch

from topl.kernels.grpo import EOS, DigitTokenizer, ReverseTask, group_advantages, low_var_kl, policy_loss
from topl.kernels.metrics import compare
from topl.kernels.model import Model, sides
from topl.kernels.probe import DTYPES
from topl.kernels.rollout import Request, RolloutEngine, SamplingParams
from topl.kernels.training import TrainingEngine


class LogdiffError(RuntimeError):
    """Strict mode saw rollout and training disagree."""


def _engines(spec, model: Model):
    train_side, rollout_side = sides(spec.alignment, spec.train.tp, spec.rollout.tp, spec.collective.order)
    r = spec.rollout
    rollout = RolloutEngine(model, rollout_side, r.block_size, max_num_seqs=r.max_num_seqs,
                            max_num_batched_tokens=r.max_num_batched_tokens, chunked_prefill=r.chunked_prefill)
    return rollout, TrainingEngine(model, train_side, spec.train.ppo_micro_batch_size_per_gpu)


def train_step(spec, step: int, master: dict, ref: Model | None, opt, task, rnd) -> dict:
    """One GRPO step; returns verl-named metrics."""
    dtype = DTYPES[spec.train.dtype]
    t0 = time.perf_counter()
    model = Model(spec.model, {k: v.detach().to(dtype) for k, v in master.items()})  # weights pushed to both
    rollout, trainer = _engines(spec, model)
    tok, n = DigitTokenizer(), spec.rollout.n
    digits = task.prompts(spec.train.train_batch_size, rnd)
    reqs = [Request(i * n + j, tok.encode(d), spec.train.max_response_length, arrival=(i * n + j) // 4)
            for i, d in enumerate(digits) for j in range(n)]
    sp = SamplingParams(spec.rollout.temperature, spec.rollout.top_p, spec.rollout.top_k,
                        seed=spec.local.seed * 7919 + step, eos=EOS)
    rollout.generate(reqs, sp)
    t1 = time.perf_counter()
    rewards = torch.tensor([task.reward(digits[r.id // n], r.output) for r in reqs])
    adv = group_advantages(rewards, n)
    seqs, starts = [r.tokens for r in reqs], [len(r.prompt) for r in reqs]
    rollout_lp = [torch.tensor(r.logprobs) for r in reqs]
    old_lp = trainer.logprobs(seqs, starts, sp.temperature)  # verl's old_log_prob recompute
    diff = compare(rollout_lp, old_lp)
    t2 = time.perf_counter()
    # update: one mini-batch, so the ratio against the rollout's log-probs is exactly 1 when aligned
    live = Model(spec.model, {k: v.to(dtype) for k, v in master.items()})
    _, live_trainer = _engines(spec, live)
    new_lp = live_trainer.logprobs(seqs, starts, sp.temperature, grad=True)
    token_adv = torch.cat([torch.full((len(lp),), float(a)) for lp, a in zip(new_lp, adv)])
    logp, logp_roll = torch.cat(new_lp).float(), torch.cat(rollout_lp)
    a = spec.algorithm
    loss, m = policy_loss(logp, logp_roll, token_adv, a.clip_ratio_low, a.clip_ratio_high)
    if ref is not None and a.use_kl_loss:
        _, ref_trainer = _engines(spec, ref)
        ref_lp = torch.cat(ref_trainer.logprobs(seqs, starts, sp.temperature)).float()
        kl = low_var_kl(logp, ref_lp).mean()
        loss = loss + a.kl_loss_coef * kl
        m["actor/kl_loss"] = float(kl.detach())
    opt.zero_grad()
    loss.backward()
    m["actor/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(list(master.values()), 1.0))
    opt.step()
    t3 = time.perf_counter()
    lengths = torch.tensor([len(r.output) for r in reqs], dtype=torch.float32)
    return {
        "critic/score/mean": float(rewards.mean()), "critic/rewards/mean": float(rewards.mean()),
        "critic/advantages/mean": float(adv.mean()), "response_length/mean": float(lengths.mean()),
        "training/rollout_probs_diff_max": diff["training/rollout_probs_diff_max"],
        "training/rollout_probs_diff_mean": diff["training/rollout_probs_diff_mean"],
        "rollout_corr/k3_kl": diff["k3_kl"], "topl/max_abs_logprob_diff": diff["max_abs_logprob_diff"],
        "topl/mean_abs_logprob_diff": diff["mean_abs_logprob_diff"],
        "topl/bitwise_equal_fraction": diff["bitwise_equal_fraction"], "topl/tokens": diff["tokens"],
        **m, "timing_s/gen": t1 - t0, "timing_s/old_log_prob": t2 - t1, "timing_s/update_actor": t3 - t2,
        "timing_s/step": t3 - t0,
    }


def run_local(spec, run_dir: Path, quiet: bool = False) -> int:
    """The local backend: returns the exit code (0 ok, 1 strict logdiff violation)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from topl.launcher.errors import ToplError

    if spec.algorithm.name != "grpo" or spec.algorithm.use_critic:
        raise ToplError(f"the local backend runs GRPO; algorithm={spec.algorithm.name} is not embedded yet",
                        where="algorithm", fix="use algorithm=grpo locally, or cluster.backend=subprocess/ray_job")
    console = Console(quiet=quiet)
    torch.manual_seed(spec.local.seed)
    init = Model.random(spec.model, seed=spec.local.seed, dtype=torch.float32, std=0.1)
    master = {k: v.clone().requires_grad_(True) for k, v in init.w.items()}
    ref = Model(spec.model, {k: v.to(DTYPES[spec.train.dtype]) for k, v in init.w.items()})
    opt = torch.optim.AdamW(master.values(), lr=spec.local.lr, weight_decay=0.0)
    task, rnd = ReverseTask(), random.Random(spec.local.seed)
    metrics_path, history = run_dir / "metrics.jsonl", []
    strict = spec.alignment.mode == "strict"
    rc = 0
    with Progress(TextColumn("[bold]GRPO[/]"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("{task.description}"), TimeRemainingColumn(), console=console) as bar:
        job = bar.add_task("", total=spec.train.steps)
        for step in range(1, spec.train.steps + 1):
            data = train_step(spec, step, master, ref, opt, task, rnd)
            history.append(data)
            with metrics_path.open("a") as f:
                f.write(json.dumps({"step": step, "data": data}) + "\n")
            bar.update(job, advance=1, description=f"reward {data['critic/rewards/mean']:.3f}  "
                                                   f"max|Δlogp| {data['topl/max_abs_logprob_diff']:.2e}")
            if strict and data["topl/max_abs_logprob_diff"] != 0.0:
                console.print(f"[red]error[/]: step {step}: topl/max_abs_logprob_diff = "
                              f"{data['topl/max_abs_logprob_diff']:.3e} (training/rollout_probs_diff_max = "
                              f"{data['training/rollout_probs_diff_max']:.3e}) under alignment=strict: the run "
                              "went off-policy; stopping. Find the cause: `topl probe` with one switch off at a time.")
                rc = 1
                break
    if history and spec.local.plot:
        plot(history, run_dir / "metrics.png", spec)
    summary(console, history, spec, run_dir)
    return rc


def plot(history: list[dict], path: Path, spec) -> None:
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
    fig.suptitle(f"{spec.model.name} GRPO, alignment={spec.alignment.mode}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def summary(console, history: list[dict], spec, run_dir: Path) -> None:
    from rich.table import Table

    if not history:
        return
    t = Table(title=f"topl local GRPO: {spec.model.name}, alignment={spec.alignment.mode}")
    t.add_column("")
    t.add_column("first step", justify="right")
    t.add_column("last step", justify="right")
    for key in ("critic/rewards/mean", "topl/max_abs_logprob_diff", "topl/bitwise_equal_fraction",
                "rollout_corr/k3_kl", "actor/ratio_max_abs_dev", "timing_s/step"):
        t.add_row(key, f"{history[0][key]:.4g}", f"{history[-1][key]:.4g}")
    console.print(t)
    worst = max(h["topl/max_abs_logprob_diff"] for h in history)
    console.print(f"steps: {len(history)}   max |Δ log p| over the run: {worst:.3e}   "
                  f"({'on-policy: importance ratio exactly 1' if worst == 0 else 'off-policy'})")
    console.print(f"metrics: {run_dir / 'metrics.jsonl'}   plot: {run_dir / 'metrics.png'}")
