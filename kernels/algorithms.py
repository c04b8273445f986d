"""The RL algorithms' math as verl 0.9.1 computes it: advantages, losses, reward shaping, filtering.

Pure tensors in, tensors out. Token tensors are padded `[batch, response_len]` with a 0/1 float
`mask`, the layout of verl's `responses` / `response_mask`. Each function names the verl function
it mirrors (`verl@0.9.1:path:symbol`); tests/numerics/test_algorithms.py checks them against verl itself.
"""

from __future__ import annotations

import torch


def pad(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence 1-d tensors -> ([B, L] right-padded with 0, float mask); keeps the graph."""
    x = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    lengths = torch.tensor([len(r) for r in rows])
    mask = (torch.arange(x.shape[1])[None, :] < lengths[:, None]).float()
    return x, mask


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """verl@0.9.1:verl/utils/torch_functional.py:masked_mean (1e-8: an empty mask stays finite)."""
    s = (x * mask).sum() if dim is None else (x * mask).sum(dim)
    return s / ((mask.sum() if dim is None else mask.sum(dim)) + 1e-8)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl@0.9.1:verl/utils/torch_functional.py:masked_whiten: unbiased var, rsqrt(var+1e-8)."""
    mean = masked_mean(x, mask)
    n = mask.sum()
    var = masked_mean((x - mean) ** 2, mask) * n / (n - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:agg_loss on one data-parallel rank (dp_size=1)."""
    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss_mat * mask).sum()
    seq_tokens = mask.sum(-1)
    seqs = (seq_tokens > 0).float()  # fully masked sequences do not count
    if mode == "seq-mean-token-mean":
        per_seq = (loss_mat * mask).sum(-1) / (seq_tokens + 1e-8)
    elif mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        per_seq = (loss_mat * mask).sum(-1)
    else:
        raise ValueError(f"loss_agg_mode={mode!r} is not one of verl 0.9.1's modes")
    loss = (per_seq * seqs).sum() / seqs.sum()
    return loss / mask.shape[-1] if mode == "seq-mean-token-sum-norm" else loss


def grpo_advantages(
    scores: torch.Tensor, n: int, eps: float = 1e-6, norm_by_std: bool = True
) -> torch.Tensor:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_grpo_outcome_advantage, for groups of
    n consecutive samples: (r - mean) / (unbiased std + eps); a group of one gets mean 0, std 1."""
    if n == 1:
        return scores / (1 + eps) if norm_by_std else scores.clone()
    g = scores.view(-1, n)
    out = g - g.mean(1, keepdim=True)
    return (out / (g.std(1, keepdim=True) + eps) if norm_by_std else out).reshape(-1)


def outcome_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The scalar reward on each response's last token, zeros elsewhere: where verl's reward
    managers put it (verl@0.9.1:verl/workers/reward_manager/dapo.py:DAPORewardManager.__call__,
    `reward_tensor[i, valid_response_length - 1] = reward`)."""
    last = mask.sum(-1).long() - 1
    out = torch.zeros_like(mask)
    out[torch.arange(len(scores)), last] = scores.to(out.dtype)
    return out


def gae(
    token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_gae_advantage_return: (whitened
    advantages, returns = raw advantages + values). Padding adds no TD error and keeps the
    recursion going."""
    with torch.no_grad():
        next_v = torch.zeros(len(values))
        last = torch.zeros(len(values))
        out = []
        for t in reversed(range(token_rewards.shape[-1])):
            delta = token_rewards[:, t] + gamma * next_v - values[:, t]
            m = mask[:, t]
            next_v = values[:, t] * m + (1 - m) * next_v
            last = (delta + gamma * lam * last) * m + (1 - m) * last
            out.append(last)
        adv = torch.stack(out[::-1], dim=1)
        return masked_whiten(adv, mask), adv + values


def vanilla_policy_loss(
    old_logp: torch.Tensor,
    logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    clip_c: float,
    agg: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_policy_loss_vanilla: PPO clip with
    asymmetric ranges (DAPO's clip-higher: clip_high > clip_low) and the dual clip at clip_c for
    negative advantages."""
    log_ratio = torch.clamp(logp - old_logp, -20.0, 20.0)
    ratio = torch.exp(log_ratio)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clipped = torch.maximum(l1, l2)
    l3 = -adv * clip_c
    losses = torch.where(adv < 0, torch.minimum(l3, clipped), clipped)
    loss = agg_loss(losses, mask, agg)
    return loss, {
        "actor/pg_loss": float(loss.detach()),
        "actor/pg_clipfrac": float(masked_mean(torch.gt(l2, l1).float(), mask)),
        "actor/ppo_kl": float(masked_mean(-log_ratio.detach(), mask)),
        "actor/pg_clipfrac_lower": float(
            masked_mean((torch.gt(clipped, l3) & (adv < 0)).float(), mask)
        ),
        **_ratio_metrics(ratio.detach(), mask),
    }


def gspo_policy_loss(
    old_logp: torch.Tensor,
    logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    agg: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_policy_loss_gspo: one importance ratio
    per sequence, the geometric mean of its token ratios, carried to each token as
    sg[s_i] * p_t / sg[p_t], and clipped."""
    log_ratio = logp - old_logp
    seq = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    log_s = torch.clamp(logp - logp.detach() + seq.detach()[:, None], max=10.0)
    s = torch.exp(log_s)
    l1 = -adv * s
    l2 = -adv * torch.clamp(s, 1 - clip_low, 1 + clip_high)
    loss = agg_loss(torch.maximum(l1, l2), mask, agg)
    return loss, {
        "actor/pg_loss": float(loss.detach()),
        "actor/pg_clipfrac": float(masked_mean(torch.gt(l2, l1).float(), mask)),
        "actor/ppo_kl": float(masked_mean(-log_ratio.detach(), mask)),
        "actor/pg_clipfrac_lower": 0.0,  # verl reports 0 for GSPO
        **_ratio_metrics(s.detach(), mask),
    }


def _ratio_metrics(ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """topl's own view of the importance ratio: exactly 1 everywhere when the run is on-policy."""
    dev = ((ratio - 1).abs() * mask).max()
    return {
        "actor/ratio_mean": float(masked_mean(ratio, mask)),
        "actor/ratio_max_abs_dev": float(dev),
    }


def value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    clip: float,
    agg: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_value_loss:
    0.5 * agg(max((v - R)^2, (clip(v, v_old +- clip) - R)^2)), and the fraction of tokens where
    the clipped term won."""
    clipped = torch.maximum(torch.minimum(vpreds, values + clip), values - clip)
    l1, l2 = (vpreds - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * agg_loss(torch.maximum(l1, l2), mask, agg), masked_mean(
        torch.gt(l2, l1).float(), mask
    )


def overlong_penalty(
    lengths: torch.Tensor, max_len: int, buffer_len: int, factor: float
) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the score: 0 up to max_len - buffer_len tokens,
    then falling linearly to -factor at max_len
    (verl@0.9.1:verl/workers/reward_manager/dapo.py:DAPORewardManager.__call__)."""
    exceed = lengths.float() - (max_len - buffer_len)
    return torch.clamp(-exceed / buffer_len * factor, max=0.0)


def kept_groups(metric: torch.Tensor, n: int) -> torch.Tensor:
    """DAPO dynamic sampling: a group of n samples is kept if its metric varies (a group whose
    rewards are all equal has zero advantage everywhere) or it has one sample. Per group, bool.
    verl-project/verl-recipe@59fa05c:dapo/dapo_ray_trainer.py:RayDAPOTrainer.fit (np.std > 0 or
    len == 1); verl@0.9.1:verl/trainer/ppo/v1/replay_buffer.py:ReplayBuffer._dapo_filtered_keys.
    "Varies" is tested exactly: np.std of three equal 0.1s is 1.4e-17, not 0."""
    g = metric.view(-1, n)
    return (g != g[:, :1]).any(1) | (n == 1)


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """verl@0.9.1:verl/trainer/ppo/core_algos.py:kl_penalty_forward 'low_var_kl' (k3), clamped
    to [-10, 10], per token."""
    kl = torch.clamp(ref_logp - logp, -20.0, 20.0)
    return torch.clamp(torch.exp(kl) - kl - 1, -10.0, 10.0)
