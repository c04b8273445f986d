"""PPO's value model for the embedded default: a small critic with its own weights and optimizer.

As verl's critic (critic.model.path defaults to the actor's checkpoint, a token-classification
head with one output), it starts from the policy's initial weights with the LM head swapped for a
value head, and trains with its own AdamW. It runs on the training side only: its forward never
touches the rollout or the log-probs whose equality strict mode checks.
"""

from __future__ import annotations

import torch

from topl.kernels.algorithms import masked_mean, value_loss
from topl.kernels.model import Arch, Model, Side
from topl.kernels.training import TrainingEngine


class Critic:
    def __init__(
        self,
        arch: Arch,
        init: dict[str, torch.Tensor],
        side: Side,
        micro_batch: int,
        dtype: torch.dtype,
        lr: float,
        seed: int = 0,
    ):
        g = torch.Generator().manual_seed(seed + 1)
        w = {k: v.detach().clone() for k, v in init.items() if k != "lm_head.weight"}
        # value head [1, hidden]: Model.logits then yields one number per token; std 0.02 is the
        # usual initializer_range of a fresh classification head
        w["lm_head.weight"] = torch.randn(1, arch.hidden_size, generator=g) * 0.02
        self.master = {k: v.requires_grad_(True) for k, v in w.items()}
        self.arch, self.side, self.micro_batch, self.dtype = arch, side, micro_batch, dtype
        self.opt = torch.optim.AdamW(self.master.values(), lr=lr, weight_decay=0.0)

    def values(
        self, seqs: list[list[int]], starts: list[int], grad: bool = False
    ) -> list[torch.Tensor]:
        """V of the state before each response token (the rows that predict seqs[n][starts[n]:])."""
        engine = TrainingEngine(
            Model(self.arch, {k: v.to(self.dtype) for k, v in self.master.items()}),
            self.side,
            self.micro_batch,
        )
        out: list[torch.Tensor] = []
        with torch.enable_grad() if grad else torch.no_grad():
            for lo in range(0, len(seqs), self.micro_batch):
                batch = seqs[lo : lo + self.micro_batch]
                v = engine._forward_packed(batch, lo)[:, 0].float()  # packed micro-batch, [rows]
                offset = 0
                for s, start in zip(batch, starts[lo : lo + self.micro_batch]):
                    out.append(v[offset + start - 1 : offset + len(s) - 1])
                    offset += len(s)
        return out

    def update(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        old_values: torch.Tensor,
        mask: torch.Tensor,
        clip: float,
        agg: str,
    ) -> dict[str, float]:
        """One optimizer step on the clipped value loss of `vpreds` (padded values(..., grad=True)),
        grad norm clipped at 1.0 (verl@0.9.1:verl/trainer/config/_generated_ppo_trainer.yaml:
        critic.optim.clip_grad); metrics as verl@0.9.1:verl/workers/utils/losses.py:value_loss
        names them."""
        loss, clipfrac = value_loss(vpreds, returns, old_values, mask, clip, agg)
        self.opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(self.master.values()), 1.0)
        self.opt.step()
        return {
            "critic/vf_loss": float(loss.detach()),
            "critic/vf_clipfrac": float(clipfrac),
            "critic/vpred_mean": float(masked_mean(vpreds.detach(), mask)),
            "critic/grad_norm": float(norm),
        }
