"""The embedded RL loop: GRPO on the reference engines, on plain arguments.

Every step: the rollout engine samples (continuous batching, paged KV), rewards are scored, the
training engine recomputes log-probs, the policy is updated, and the new weights are pushed to the
rollout engine. The loop knows nothing about the launcher: `launcher/backends/local.py` builds a
:class:`LoopConfig` from the job spec and owns progress, files and plots.
"""
from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from topl.kernels.alignment import Alignment
from topl.kernels.grpo import (
    EOS,
    DigitTokenizer,
    ReverseTask,
    group_advantages,
    low_var_kl,
    policy_loss,
)
from topl.kernels.metrics import compare
from topl.kernels.model import Model, sides
from topl.kernels.probe import DTYPES
from topl.kernels.rollout import Request, RolloutEngine, SamplingParams
from topl.kernels.training import TrainingEngine


@dataclass
class LoopConfig:
    """Everything the loop reads; the launcher fills it from the job spec."""

    model: Any  # architecture config read by kernels.model.Model (num_layers, hidden_size, ...)
    alignment: Alignment  # which rollout/training numerics are aligned
    steps: int = 10  # optimizer steps
    batch_size: int = 4  # prompts per step
    n: int = 4  # responses per prompt (GRPO group size)
    max_response_length: int = 8  # tokens generated per response at most
    dtype: str = "bfloat16"  # compute dtype of both engines (master weights stay fp32)
    train_tp: int = 1  # training tensor-parallel size (simulated)
    rollout_tp: int = 1  # rollout tensor-parallel size (simulated)
    order: str = "ring"  # all-reduce order of the rollout: ring | tree
    block_size: int = 16  # rollout paged-KV block size
    max_num_seqs: int = 256  # rollout continuous-batching limit (sequences)
    max_num_batched_tokens: int = 8192  # rollout tokens per engine step
    chunked_prefill: bool = True  # rollout splits long prefills
    micro_batch: int = 2  # training sequences per forward
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling
    top_k: int = -1  # top-k sampling (-1: off)
    clip_ratio_low: float = 0.2  # PPO clip, lower side
    clip_ratio_high: float = 0.2  # PPO clip, upper side
    use_kl_loss: bool = False  # KL(actor || reference) as a loss term
    kl_loss_coef: float = 0.001  # weight of the KL loss
    lr: float = 1e-2  # AdamW learning rate
    seed: int = 0  # weights, prompts and sampling


def _engines(cfg: LoopConfig, model: Model):
    train_side, rollout_side = sides(cfg.alignment, cfg.train_tp, cfg.rollout_tp, cfg.order)
    rollout = RolloutEngine(model, rollout_side, cfg.block_size, max_num_seqs=cfg.max_num_seqs,
                            max_num_batched_tokens=cfg.max_num_batched_tokens, chunked_prefill=cfg.chunked_prefill)
    return rollout, TrainingEngine(model, train_side, cfg.micro_batch)


def train_step(cfg: LoopConfig, step: int, master: dict, ref: Model | None, opt, task, rnd) -> dict:
    """One GRPO step; returns verl-named metrics."""
    dtype = DTYPES[cfg.dtype]
    t0 = time.perf_counter()
    model = Model(cfg.model, {k: v.detach().to(dtype) for k, v in master.items()})  # weights pushed to both
    rollout, trainer = _engines(cfg, model)
    tok, n = DigitTokenizer(), cfg.n
    digits = task.prompts(cfg.batch_size, rnd)
    reqs = [Request(i * n + j, tok.encode(d), cfg.max_response_length, arrival=(i * n + j) // 4)
            for i, d in enumerate(digits) for j in range(n)]
    sp = SamplingParams(cfg.temperature, cfg.top_p, cfg.top_k, seed=cfg.seed * 7919 + step, eos=EOS)
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
    live = Model(cfg.model, {k: v.to(dtype) for k, v in master.items()})
    _, live_trainer = _engines(cfg, live)
    new_lp = live_trainer.logprobs(seqs, starts, sp.temperature, grad=True)
    token_adv = torch.cat([torch.full((len(lp),), float(a)) for lp, a in zip(new_lp, adv)])
    logp, logp_roll = torch.cat(new_lp).float(), torch.cat(rollout_lp)
    loss, m = policy_loss(logp, logp_roll, token_adv, cfg.clip_ratio_low, cfg.clip_ratio_high)
    if ref is not None and cfg.use_kl_loss:
        _, ref_trainer = _engines(cfg, ref)
        ref_lp = torch.cat(ref_trainer.logprobs(seqs, starts, sp.temperature)).float()
        kl = low_var_kl(logp, ref_lp).mean()
        loss = loss + cfg.kl_loss_coef * kl
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


def run(cfg: LoopConfig) -> Iterator[dict]:
    """Seeded weights, reference policy and optimizer; yields each step's metrics (the caller may stop)."""
    torch.manual_seed(cfg.seed)
    init = Model.random(cfg.model, seed=cfg.seed, dtype=torch.float32, std=0.1)
    master = {k: v.clone().requires_grad_(True) for k, v in init.w.items()}
    ref = Model(cfg.model, {k: v.to(DTYPES[cfg.dtype]) for k, v in init.w.items()})
    opt = torch.optim.AdamW(master.values(), lr=cfg.lr, weight_decay=0.0)
    task, rnd = ReverseTask(), random.Random(cfg.seed)
    for step in range(1, cfg.steps + 1):
        yield train_step(cfg, step, master, ref, opt, task, rnd)
