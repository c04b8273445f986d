"""Rollout engine: continuous batching over a paged KV cache, chunked prefill, split-KV decode.

Requests arrive at given steps and finish at different times, so the batch every row is computed
in changes from step to step. Each token's K/V is computed once, written to cache pages, and read
back by later steps; nothing recomputes attention over a whole sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from topl.kernels import primitives as P
from topl.kernels.attention import attend_paged
from topl.kernels.model import Model, Side


@dataclass
class Request:
    id: int
    prompt: list[int]
    max_new_tokens: int
    arrival: int = 0  # engine step at which the request arrives
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    cached: int = 0  # tokens whose K/V are in the cache
    blocks: list[int] = field(default_factory=list)  # block table
    done: bool = False

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output


class PagedKVCache:
    """K/V in fixed-size pages; a request's block table maps positions to pages."""

    def __init__(
        self,
        layers: int,
        blocks: int,
        block_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ):
        shape = (layers, blocks, block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size, self.free = block_size, list(range(blocks))

    def reserve(self, req: Request, length: int) -> bool:
        need = -(-length // self.block_size) - len(req.blocks)
        if need > len(self.free):
            return False
        req.blocks += [self.free.pop(0) for _ in range(need)]
        return True

    def release(self, req: Request) -> None:
        self.free += req.blocks
        req.blocks = []

    def _slots(self, req: Request, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        table = torch.tensor(req.blocks, device=positions.device)
        return table[positions // self.block_size], positions % self.block_size

    def write(
        self, layer: int, req: Request, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        b, o = self._slots(req, positions)
        self.k[layer, b, o], self.v[layer, b, o] = k, v

    def read(self, layer: int, req: Request, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        b, o = self._slots(req, torch.arange(length, device=self.k.device))
        return self.k[layer, b, o], self.v[layer, b, o]


LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int = 0
    processed_logprobs: bool = False  # old spelling of logprobs_mode="processed_logprobs"
    eos: int | None = None
    # What the rollout records per token, as vLLM's `logprobs_mode` (see `_sample`):
    # raw_logprobs | processed_logprobs | raw_logits | processed_logits. Default: verl's
    # verl@0.9.1:verl/workers/config/rollout.py:197 (processed_logprobs).
    logprobs_mode: str = "processed_logprobs"

    @property
    def mode(self) -> str:
        """The mode the engine records; `auto` as topl renders it for vLLM (launcher/
        render_stack.py:logprobs_mode): raw_logprobs at temperature 1, else processed_logprobs."""
        if self.processed_logprobs:
            return "processed_logprobs"
        if self.logprobs_mode == "auto":
            return "raw_logprobs" if self.temperature == 1.0 else "processed_logprobs"
        if self.logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(
                f"logprobs_mode={self.logprobs_mode!r}; known: {', '.join(LOGPROBS_MODES)}, auto"
            )
        return self.logprobs_mode

    @property
    def greedy(self) -> bool:
        """vLLM samples greedily below this temperature (vllm@0.18.0:vllm/sampling_params.py:
        _SAMPLING_EPS, SamplingParams.sampling_type); topl's contract refuses it (TOP-SAMP-001)."""
        return self.temperature < 1e-5


class RolloutEngine:
    def __init__(
        self,
        model: Model,
        side: Side,
        block_size: int = 16,
        num_blocks: int = 4096,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 512,
        chunked_prefill: bool = True,
    ):
        a = model.arch
        self.model, self.side = model, side
        self.cache = PagedKVCache(
            a.num_layers,
            num_blocks,
            block_size,
            a.num_kv_heads,
            a.head_dim,
            model.w["model.embed_tokens.weight"].dtype,
            model.device,
        )
        self.max_num_seqs, self.budget, self.chunked = (
            max_num_seqs,
            max_num_batched_tokens,
            chunked_prefill,
        )
        self.batch_sizes: list[int] = []  # rows per step, to show that composition changed
        from topl.kernels.gpu import paged_hook  # lazy: the GPU path only (Triton)

        self.paged = paged_hook(model, side, block_size)  # GPU: one batched paged-attention call

    def _schedule(self, active: list[Request]) -> list[tuple[Request, int]]:
        """(request, tokens to process) for this step: decodes first, then prefill chunks."""
        budget, items = self.budget, []
        for r in active:
            if r.cached == len(r.prompt) + len(r.output) - 1 and r.output and budget > 0:
                items.append((r, 1))
                budget -= 1
        for r in active:
            todo = len(r.prompt) - r.cached
            if r.output or todo <= 0 or budget <= 0:
                continue
            n = min(todo, budget) if self.chunked else (todo if todo <= budget else 0)
            if n and self.cache.reserve(r, r.cached + n):
                items.append((r, n))
                budget -= n
        return items

    def _step(self, items: list[tuple[Request, int]]) -> torch.Tensor:
        """One forward over all scheduled rows; returns logits of each item's last row."""
        m, side = self.model, self.side
        ids: list[int] = []
        pos: list[int] = []
        spans: list[tuple[int, int]] = []
        for r, n in items:
            spans.append((len(ids), len(ids) + n))
            ids += r.tokens[r.cached : r.cached + n]
            pos += list(range(r.cached, r.cached + n))
        positions = torch.tensor(pos, device=m.device)
        self.batch_sizes.append(len(ids))
        m.row_keys = [(r.id, p) for (r, n) in items for p in range(r.cached, r.cached + n)]
        h = m.embed(torch.tensor(ids, device=m.device))
        pending: torch.Tensor | None = None
        m.tap("embed", h)
        for i in range(m.arch.num_layers):
            x, h = m.input_norm(i, h, pending, side)
            q, k, v = m.qkv(i, x, positions, side)
            for (r, _), (a, b) in zip(items, spans):
                self.cache.write(i, r, positions[a:b], k[a:b], v[a:b])
            tables = [r.blocks for r, _ in items]
            if self.paged is not None:  # the GPU's batched paged kernel (kernels/gpu.paged_hook)
                attn = self.paged(q, self.cache.k[i], self.cache.v[i], tables, spans, pos)
            else:
                plans = [side.decode if (n == 1 and r.output) else side.prefill for r, n in items]
                attn = attend_paged(
                    q, self.cache.k[i], self.cache.v[i], tables, spans, pos, plans, m.scale
                )  # the whole batch in one call, as vLLM's backend
            h, pending = m.post_attention(i, h, attn, side)
        last = torch.tensor([b - 1 for _, b in spans], device=m.device)
        keys = m.row_keys
        m.row_keys = [keys[i] for i in last.tolist()]
        assert pending is not None  # a model has at least one layer
        return m.logits(h[last], pending[last], side)

    def _sample(self, r: Request, logits: torch.Tensor, sp: SamplingParams) -> int:
        """Sample one token and record what vLLM's `logprobs_mode` returns for it.

        As vLLM's v1 sampler: raw_* are taken from the logits before temperature
        (vllm@0.18.0:vllm/v1/sample/sampler.py:Sampler.forward:81-82); temperature divides the
        fp32 logits, top-k / top-p set the rest to -inf, and processed_logprobs is ONE log-softmax
        of those masked logits (vllm@main 01fa3fe:vllm/v1/sample/ops/topk_topp_sampler.py:
        TopKTopPSampler.forward_native). With top_p=1, top_k=-1 that is exactly the trainer's
        log_softmax(logits / T); normalising already-normalised log-probs again is not.
        """
        fp32 = self.side.fp32_logits
        raw = logits.float() if fp32 else logits  # vLLM: logits.to(torch.float32) first
        if sp.greedy:  # vLLM: argmax, and processed_* are those of the logits at temperature 1
            # (vllm@0.18.0:vllm/v1/sample/sampler.py:Sampler.sample, the all_greedy return)
            return self._record(r, raw, raw, P.log_softmax(raw, fp32), int(raw.argmax()), sp)
        z = raw / sp.temperature
        keep = torch.ones(z.shape, dtype=torch.bool, device=z.device)
        if sp.top_k > 0:
            keep &= z >= torch.topk(z, sp.top_k).values[-1]
        if sp.top_p < 1.0:
            order = torch.argsort(z.masked_fill(~keep, float("-inf")), descending=True)
            probs = torch.softmax(z.float().masked_fill(~keep, float("-inf")), -1)[order]
            cut = torch.zeros_like(keep)
            cut[order] = (torch.cumsum(probs, 0) - probs) < sp.top_p  # at least the top token
            keep &= cut
        masked = z.masked_fill(~keep, float("-inf"))
        processed = P.log_softmax(masked, fp32)
        g = torch.Generator().manual_seed(sp.seed * 1_000_003 + r.id * 10_007 + len(r.output))
        tok = int(torch.multinomial(processed.exp().cpu(), 1, generator=g))
        return self._record(r, raw, masked, processed, tok, sp)

    def _record(
        self,
        r: Request,
        raw: torch.Tensor,
        masked: torch.Tensor,
        processed: torch.Tensor,
        tok: int,
        sp: SamplingParams,
    ) -> int:
        """Append what `logprobs_mode` returns for the sampled token; returns the token."""
        fp32 = self.side.fp32_logits
        value = {
            "raw_logprobs": lambda: P.log_softmax(raw, fp32)[tok],
            "processed_logprobs": lambda: processed[tok],
            "raw_logits": lambda: raw[tok].float(),
            "processed_logits": lambda: masked[tok].float(),
        }[sp.mode]()
        r.logprobs.append(float(value))
        if self.model.recorder is not None:
            self.model.recorder.record(
                "logprobs", torch.tensor([r.logprobs[-1]]), [(r.id, len(r.tokens) - 1)]
            )
        return tok

    def generate(self, requests: list[Request], sp: SamplingParams) -> list[Request]:
        """Run until every request finished; arrivals are honoured step by step."""
        longest = max((len(r.prompt) for r in requests), default=0)
        if not self.chunked and longest > self.budget:
            # vLLM refuses this at start-up (SchedulerConfig._verify_args: "max_num_batched_tokens
            # (...) is smaller than max_model_len"); without chunking such a prompt never fits a step
            raise ValueError(
                f"chunked prefill is off and a prompt has {longest} tokens, more than "
                f"max_num_batched_tokens={self.budget}: raise the budget or chunk"
            )
        pending = sorted(requests, key=lambda r: (r.arrival, r.id))
        active: list[Request] = []
        step = 0
        with torch.no_grad():
            while pending or active:
                while pending and pending[0].arrival <= step and len(active) < self.max_num_seqs:
                    active.append(pending.pop(0))
                items = self._schedule(active)
                if items:
                    logits = self._step(items)
                    for (r, n), row in zip(items, logits):
                        r.cached += n
                        if r.cached == len(r.tokens):
                            tok = self._sample(r, row, sp)
                            r.output.append(tok)
                            if len(r.output) >= r.max_new_tokens or tok == sp.eos:
                                r.done = True
                    for r in [r for r in active if r.done]:
                        self.cache.release(r)
                        active.remove(r)
                    for r in active:  # reserve room for the next decode token
                        if r.output and not self.cache.reserve(r, len(r.tokens)):
                            raise RuntimeError("KV cache exhausted: raise num_blocks")
                step += 1
        return requests
