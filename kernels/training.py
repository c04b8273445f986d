"""Training engine: whole sequences at once, packed varlen in micro-batches, attention tile by tile.

This is the log-prob recompute of the trainer (verl's `old_log_prob`), and with `grad=True` the
differentiable forward of the policy update.
"""

from __future__ import annotations

import torch

from topl.kernels.attention import attend
from topl.kernels.model import Model, Side, token_logprobs


class TrainingEngine:
    def __init__(self, model: Model, side: Side, micro_batch: int = 8):
        self.model, self.side, self.micro_batch = model, side, micro_batch

    def forward_logits(self, seqs: list[list[int]]) -> list[torch.Tensor]:
        """Logits of every position, per sequence (for comparisons against other implementations)."""
        with torch.no_grad():
            flat = self._forward_packed(seqs)
        return list(flat.split([len(s) for s in seqs]))

    def _forward_packed(self, seqs: list[list[int]], first: int = 0) -> torch.Tensor:
        """Logits for every token of the packed micro-batch [sum(len), vocab]; sequence ids start at `first`."""
        m, side = self.model, self.side
        m.row_keys = [(first + n, p) for n, s in enumerate(seqs) for p in range(len(s))]
        dev = m.device
        ids = torch.tensor([t for s in seqs for t in s], device=dev)
        positions = torch.cat([torch.arange(len(s), device=dev) for s in seqs])
        bounds = torch.tensor([0] + [len(s) for s in seqs]).cumsum(0).tolist()  # cu_seqlens
        h, pending = m.embed(ids), None
        m.tap("embed", h)
        for i in range(m.arch.num_layers):
            x, h = m.input_norm(i, h, pending, side)
            q, k, v = m.qkv(i, x, positions, side)
            attn = torch.cat(
                [
                    attend(q[a:b], list(range(b - a)), k[a:b], v[a:b], side.prefill, m.scale)
                    for a, b in zip(bounds[:-1], bounds[1:])
                ]
            )
            h, pending = m.post_attention(i, h, attn, side)
        return m.logits(h, pending, side)

    def logprobs(
        self, seqs: list[list[int]], starts: list[int], temperature: float = 1.0, grad: bool = False
    ) -> list[torch.Tensor]:
        """log p of each response token seqs[n][starts[n]:] given its prefix, per sequence."""
        out: list[torch.Tensor] = []
        ctx = torch.enable_grad() if grad else torch.no_grad()
        with ctx:
            for lo in range(0, len(seqs), self.micro_batch):
                batch, st = seqs[lo : lo + self.micro_batch], starts[lo : lo + self.micro_batch]
                logits = self._forward_packed(batch, lo)
                offset = 0
                for n, (s, start) in enumerate(zip(batch, st)):
                    rows = logits[offset + start - 1 : offset + len(s) - 1]
                    lp = token_logprobs(rows, temperature, self.side.fp32_logits)
                    out.append(
                        lp.gather(1, torch.tensor(s[start:], device=lp.device)[:, None])[:, 0]
                    )
                    if self.model.recorder is not None:
                        self.model.recorder.record(
                            "logprobs", out[-1], [(lo + n, p) for p in range(start - 1, len(s) - 1)]
                        )
                    offset += len(s)
        return out
