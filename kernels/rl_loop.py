"""The embedded RL loop: GRPO, PPO, GSPO and DAPO on the reference engines, on plain arguments.

Every step: the rollout engine samples (continuous batching, paged KV), rewards are scored (DAPO:
shaped, and groups without signal dropped and resampled), the training engine recomputes
log-probs, advantages are estimated (GRPO groups or a critic's GAE), the critic (PPO) and the
policy are updated, and the new weights are pushed to the rollout engine. The algorithm math is
in `kernels/algorithms.py`. The loop knows nothing about the launcher:
`launcher/run/backends/local.py` builds a :class:`LoopConfig` from the job spec and owns progress,
files and plots.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from topl.kernels import algorithms as A
from topl.kernels.alignment import Alignment
from topl.kernels.critic import Critic
from topl.kernels.metrics import compare
from topl.kernels.model import Model, sides
from topl.kernels.probe import DTYPES
from topl.kernels.rollout import Request, RolloutEngine, SamplingParams
from topl.kernels.task import EOS, DigitTokenizer, ReverseTask
from topl.kernels.training import TrainingEngine

ADV_ESTIMATORS = ("grpo", "gae")
POLICY_LOSSES = ("vanilla", "gspo")


class FilterGroupsExhausted(RuntimeError):
    """DAPO could not fill a batch with groups whose rewards differ."""


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
    micro_batch: int = 2  # training sequences per forward: the actor's update and the critic
    log_prob_micro_batch: int = 2  # sequences per forward of the old-log-prob recompute
    ref_micro_batch: int = 2  # sequences per forward of the reference policy
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling
    top_k: int = -1  # top-k sampling (-1: off)
    logprobs_mode: str = "processed_logprobs"  # what the rollout records (vLLM's; auto resolved)
    adv_estimator: str = "grpo"  # grpo (group-normalised) | gae (critic + GAE)
    policy_loss: str = "vanilla"  # vanilla (token ratio) | gspo (sequence ratio)
    loss_agg_mode: str = "token-mean"  # verl's loss aggregation mode
    clip_ratio_low: float = 0.2  # PPO clip, lower side
    clip_ratio_high: float = 0.2  # PPO clip, upper side
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    use_kl_loss: bool = False  # KL(actor || reference) as a loss term
    kl_loss_coef: float = 0.001  # weight of the KL loss
    use_critic: bool = False  # train a value model (PPO)
    gamma: float = 1.0  # GAE discount
    lam: float = 1.0  # GAE lambda
    cliprange_value: float = 0.5  # value clip around the old values
    filter_groups: bool = False  # DAPO: keep only groups whose score varies
    max_num_gen_batches: int = 10  # DAPO: generation batches per step at most (<= 0: no limit)
    overlong_buffer_len: int = 0  # DAPO: soft overlong penalty over the last tokens (0: off)
    overlong_penalty_factor: float = 1.0  # DAPO: penalty at max_response_length
    lr: float = 1e-2  # AdamW learning rate
    critic_lr: float = 1e-2  # the critic's AdamW learning rate
    seed: int = 0  # weights, prompts and sampling


def _engines(
    cfg: LoopConfig, model: Model, micro_batch: int | None = None
) -> tuple[RolloutEngine, TrainingEngine]:
    """(rollout, training) engines on `model`; the training engine's micro-batch is the pass's
    (recompute, update or reference; default: the update's)."""
    train_side, rollout_side = sides(cfg.alignment, cfg.train_tp, cfg.rollout_tp, cfg.order)
    rollout = RolloutEngine(
        model,
        rollout_side,
        cfg.block_size,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        chunked_prefill=cfg.chunked_prefill,
    )
    return rollout, TrainingEngine(model, train_side, micro_batch or cfg.micro_batch)


def _generate(
    cfg: LoopConfig,
    rollout: RolloutEngine,
    step: int,
    gen: int,
    task: ReverseTask,
    rnd: random.Random,
) -> tuple[list[Request], torch.Tensor]:
    """One generation batch: (requests, their prompts' digits, unshaped scores)."""
    tok, n = DigitTokenizer(), cfg.n
    digits = task.prompts(cfg.batch_size, rnd)
    reqs = [
        Request(i * n + j, tok.encode(d), cfg.max_response_length, arrival=(i * n + j) // 4)
        for i, d in enumerate(digits)
        for j in range(n)
    ]
    sp = SamplingParams(
        cfg.temperature,
        cfg.top_p,
        cfg.top_k,
        seed=cfg.seed * 7919 + step + 100_003 * gen,
        eos=EOS,
        logprobs_mode=cfg.logprobs_mode,
    )
    rollout.generate(reqs, sp)
    acc = torch.tensor([task.reward(digits[r.id // n], r.output) for r in reqs])
    return reqs, acc


def _sample(
    cfg: LoopConfig, rollout: RolloutEngine, step: int, task: ReverseTask, rnd: random.Random
) -> tuple[list[Request], torch.Tensor, int]:
    """The step's batch: (requests, unshaped scores, generation batches used). With filter_groups,
    DAPO's dynamic sampling: groups whose scores are all equal are dropped and fresh prompts
    sampled until batch_size groups are kept (verl-project/verl-recipe@59fa05c:
    dapo/dapo_ray_trainer.py:RayDAPOTrainer.fit)."""
    reqs: list[Request] = []
    acc: list[torch.Tensor] = []
    gen = 0
    while True:
        new, new_acc = _generate(cfg, rollout, step, gen, task, rnd)
        gen += 1
        if not cfg.filter_groups:
            return new, new_acc, gen
        for g in A.kept_groups(new_acc, cfg.n).nonzero()[:, 0].tolist():
            reqs += new[g * cfg.n : (g + 1) * cfg.n]
            acc.append(new_acc[g * cfg.n : (g + 1) * cfg.n])
        if len(reqs) >= cfg.batch_size * cfg.n:
            k = cfg.batch_size * cfg.n
            return reqs[:k], torch.cat(acc)[:k], gen
        if 0 < cfg.max_num_gen_batches <= gen:
            raise FilterGroupsExhausted(
                f"step {step}: {len(reqs) // cfg.n} of {cfg.batch_size} groups with differing rewards after "
                f"{gen} generation batches (max_num_gen_batches={cfg.max_num_gen_batches})"
            )


def _policy_loss(
    cfg: LoopConfig, old: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    if cfg.policy_loss == "gspo":
        return A.gspo_policy_loss(
            old, logp, adv, mask, cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.loss_agg_mode
        )
    return A.vanilla_policy_loss(
        old,
        logp,
        adv,
        mask,
        cfg.clip_ratio_low,
        cfg.clip_ratio_high,
        cfg.clip_ratio_c,
        cfg.loss_agg_mode,
    )


def train_step(
    cfg: LoopConfig,
    step: int,
    master: dict[str, torch.Tensor],
    ref: Model | None,
    opt: torch.optim.Optimizer,
    task: ReverseTask,
    rnd: random.Random,
    critic: Critic | None = None,
) -> dict[str, Any]:
    """One RL step; returns verl-named metrics."""
    dtype = DTYPES[cfg.dtype]
    t0 = time.perf_counter()
    model = Model(
        cfg.model, {k: v.detach().to(dtype) for k, v in master.items()}
    )  # weights pushed to both
    rollout, trainer = _engines(cfg, model, cfg.log_prob_micro_batch)
    reqs, acc, num_gen = _sample(cfg, rollout, step, task, rnd)
    t1 = time.perf_counter()
    lengths = torch.tensor([len(r.output) for r in reqs])
    scores = acc
    if cfg.overlong_buffer_len > 0:
        scores = acc + A.overlong_penalty(
            lengths, cfg.max_response_length, cfg.overlong_buffer_len, cfg.overlong_penalty_factor
        )
    seqs, starts = [r.tokens for r in reqs], [len(r.prompt) for r in reqs]
    rollout_lp = [torch.tensor(r.logprobs) for r in reqs]
    old_lp = trainer.logprobs(seqs, starts, cfg.temperature)  # verl's old_log_prob recompute
    diff = compare(rollout_lp, old_lp)
    t2 = time.perf_counter()
    old, mask = A.pad(rollout_lp)
    m: dict[str, float] = {}
    if cfg.adv_estimator == "gae":
        # verl computes values, then updates the critic on the same batch and weights: with one
        # mini-batch and one epoch the update's first forward *is* compute_values, so run it once
        assert critic is not None  # run() builds one with adv_estimator=gae
        vpreds, _ = A.pad(critic.values(seqs, starts, grad=True))
        values = vpreds.detach()
        adv, returns = A.gae(
            A.outcome_token_rewards(scores, mask), values, mask, cfg.gamma, cfg.lam
        )
        m.update(
            critic.update(vpreds, returns, values, mask, cfg.cliprange_value, cfg.loss_agg_mode)
        )
        m.update(
            {
                "critic/values/mean": float(A.masked_mean(values, mask)),
                "critic/returns/mean": float(A.masked_mean(returns, mask)),
            }
        )
    else:
        adv = A.grpo_advantages(scores, cfg.n)[:, None] * mask
    t3 = time.perf_counter()
    # update: one mini-batch, so the ratio against the rollout's log-probs is exactly 1 when aligned
    live = Model(cfg.model, {k: v.to(dtype) for k, v in master.items()})
    _, live_trainer = _engines(cfg, live, cfg.micro_batch)
    logp, _ = A.pad(
        [lp.float() for lp in live_trainer.logprobs(seqs, starts, cfg.temperature, grad=True)]
    )
    loss, pm = _policy_loss(cfg, old, logp, adv, mask)
    m.update(pm)
    if ref is not None and cfg.use_kl_loss:
        _, ref_trainer = _engines(cfg, ref, cfg.ref_micro_batch)
        ref_lp, _ = A.pad(
            [lp.float() for lp in ref_trainer.logprobs(seqs, starts, cfg.temperature)]
        )
        kl = A.agg_loss(A.low_var_kl(logp, ref_lp), mask, cfg.loss_agg_mode)
        loss = loss + cfg.kl_loss_coef * kl
        m["actor/kl_loss"] = float(kl.detach())
    opt.zero_grad()
    loss.backward()
    m["actor/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(list(master.values()), 1.0))
    opt.step()
    t4 = time.perf_counter()
    out = {
        "critic/score/mean": float(scores.mean()),
        "critic/rewards/mean": float(scores.mean()),
        "critic/advantages/mean": float(A.masked_mean(adv, mask)),
        "response_length/mean": float(lengths.float().mean()),
        "response_length/clip_ratio": float((lengths == cfg.max_response_length).float().mean()),
        "training/rollout_probs_diff_max": diff["training/rollout_probs_diff_max"],
        "training/rollout_probs_diff_mean": diff["training/rollout_probs_diff_mean"],
        "rollout_corr/k3_kl": diff["k3_kl"],
        "topl/max_abs_logprob_diff": diff["max_abs_logprob_diff"],
        "topl/mean_abs_logprob_diff": diff["mean_abs_logprob_diff"],
        "topl/bitwise_equal_fraction": diff["bitwise_equal_fraction"],
        "topl/tokens": diff["tokens"],
        **m,
        "timing_s/gen": t1 - t0,
        "timing_s/old_log_prob": t2 - t1,
        "timing_s/update_actor": t4 - t3,
        "timing_s/step": t4 - t0,
    }
    if cfg.use_critic:
        out["timing_s/update_critic"] = t3 - t2
    if cfg.filter_groups:
        out["train/num_gen_batches"] = num_gen
    if cfg.overlong_buffer_len > 0:
        out["topl/acc/mean"] = float(acc.mean())  # the score before overlong shaping
    return out


def run(cfg: LoopConfig) -> Iterator[dict[str, Any]]:
    """Seeded weights, reference policy, critic and optimizers; yields each step's metrics (the
    caller may stop)."""
    if cfg.adv_estimator not in ADV_ESTIMATORS or cfg.policy_loss not in POLICY_LOSSES:
        raise ValueError(
            f"adv_estimator={cfg.adv_estimator}, policy_loss={cfg.policy_loss}: the loop runs "
            f"{'/'.join(ADV_ESTIMATORS)} with {'/'.join(POLICY_LOSSES)}"
        )
    if (cfg.adv_estimator == "gae") != cfg.use_critic:
        raise ValueError("adv_estimator=gae and use_critic go together")
    torch.manual_seed(cfg.seed)
    init = Model.random(cfg.model, seed=cfg.seed, dtype=torch.float32, std=0.1)
    master = {k: v.clone().requires_grad_(True) for k, v in init.w.items()}
    ref = Model(cfg.model, {k: v.to(DTYPES[cfg.dtype]) for k, v in init.w.items()})
    opt = torch.optim.AdamW(master.values(), lr=cfg.lr, weight_decay=0.0)
    critic = None
    if cfg.use_critic:
        train_side, _ = sides(cfg.alignment, cfg.train_tp, cfg.rollout_tp, cfg.order)
        critic = Critic(
            cfg.model,
            init.w,
            train_side,
            cfg.micro_batch,
            DTYPES[cfg.dtype],
            cfg.critic_lr,
            cfg.seed,
        )
    task, rnd = ReverseTask(), random.Random(cfg.seed)
    for step in range(1, cfg.steps + 1):
        yield train_step(cfg, step, master, ref, opt, task, rnd, critic)
