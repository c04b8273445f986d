"""Logdiff metrics between rollout and training log-probs (verl's names where verl has one)."""

from __future__ import annotations

import torch


def compare(rollout: list[torch.Tensor], train: list[torch.Tensor]) -> dict[str, float]:
    """Per-token comparison of the same sampled tokens' log-probs."""
    a = torch.cat([torch.as_tensor(x, dtype=torch.float32).detach().cpu() for x in rollout])
    b = torch.cat([torch.as_tensor(x, dtype=torch.float32).detach().cpu() for x in train])
    if a.shape != b.shape:
        raise ValueError(f"token counts differ: rollout {a.numel()} vs training {b.numel()}")
    d = (a - b).abs()
    log_ratio = b - a  # log pi_train / pi_rollout on tokens sampled from the rollout
    probs_diff = (a.exp() - b.exp()).abs()
    return {
        "tokens": int(a.numel()),
        "max_abs_logprob_diff": float(d.max()) if d.numel() else 0.0,
        "mean_abs_logprob_diff": float(d.mean()) if d.numel() else 0.0,
        "bitwise_equal_fraction": float((a == b).float().mean()) if d.numel() else 1.0,
        "k3_kl": float((log_ratio.exp() - 1 - log_ratio).mean()) if d.numel() else 0.0,
        "training/rollout_probs_diff_max": float(probs_diff.max()) if d.numel() else 0.0,
        "training/rollout_probs_diff_mean": float(probs_diff.mean()) if d.numel() else 0.0,
    }
