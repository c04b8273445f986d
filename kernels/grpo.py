"""GRPO on a verifiable toy task: tokenizer, reward, group advantages, clipped loss."""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

DIGITS = 10
BOS, SEP, EOS = 10, 11, 12  # token ids after the ten digits


class DigitTokenizer:
    """Ten digits plus BOS, '=' and EOS."""

    vocab = [str(d) for d in range(DIGITS)] + ["<s>", "=", "</s>"]

    def encode(self, text: str) -> list[int]:
        return [BOS] + [int(c) for c in text] + [SEP]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] if i < len(self.vocab) else f"<{i}>" for i in ids)


@dataclass
class ReverseTask:
    """Prompt: `<s>d1..dk=`; answer: dk..d1 then `</s>`. Reward: fraction of answer positions right."""

    min_digits: int = 2
    max_digits: int = 4

    def prompts(self, n: int, rnd: random.Random) -> list[str]:
        return ["".join(str(rnd.randrange(DIGITS)) for _ in range(rnd.randint(self.min_digits, self.max_digits)))
                for _ in range(n)]

    @staticmethod
    def reward(digits: str, response: list[int]) -> float:
        target = [int(c) for c in reversed(digits)] + [EOS]
        hits = sum(1 for i, t in enumerate(target) if i < len(response) and response[i] == t)
        return hits / len(target)


def group_advantages(rewards: torch.Tensor, n: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: (r - mean of its group) / (std of its group + eps); groups are n consecutive samples."""
    g = rewards.view(-1, n)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + eps)).view(-1)


def policy_loss(logp: torch.Tensor, logp_rollout: torch.Tensor, adv: torch.Tensor, clip_low: float,
                clip_high: float) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate, token-mean; the ratio is taken against the rollout engine's log-probs."""
    ratio = torch.exp(logp - logp_rollout)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    loss = torch.maximum(-adv * ratio, -adv * clipped).mean()
    r = ratio.detach()
    return loss, {"actor/pg_loss": float(loss.detach()), "actor/ratio_mean": float(r.mean()),
                  "actor/ratio_max_abs_dev": float((r - 1).abs().max()),
                  "actor/pg_clipfrac": float(((r < 1 - clip_low) | (r > 1 + clip_high)).float().mean())}


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """verl's low_var_kl (k3) of the policy against the reference, per token, clamped."""
    kl = ref_logp - logp
    return torch.clamp(torch.exp(kl) - kl - 1, -10, 10)
