"""Run both engines on generated prompts and compare their log-probs."""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from topl.kernels.alignment import Alignment
from topl.kernels.dump import Recorder, manifest_for, save
from topl.kernels.metrics import compare
from topl.kernels.model import Arch, Model, sides
from topl.kernels.rollout import Request, RolloutEngine, SamplingParams
from topl.kernels.training import TrainingEngine

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def default_prompt_length(kv_tile: int, block_size: int) -> int:
    """The probe's longest prompt: at least 40 tokens and two and a half KV tiles / cache blocks, so
    sequences cross tile and block boundaries (a sequence inside one tile leaves reduction_order and
    softmax_tiling nothing to change)."""
    return max(40, 5 * max(kv_tile, block_size) // 2)


def make_requests(
    n: int,
    vocab: int,
    seed: int,
    min_len: int = 3,
    max_len: int = 30,
    max_new: int = 20,
    arrival: str = "staggered",
) -> list[Request]:
    """Prompts of varied length; arrivals staggered, all at once, or reversed."""
    rnd = random.Random(seed)
    reqs = []
    for i in range(n):
        prompt = [rnd.randrange(vocab) for _ in range(rnd.randint(min_len, max_len))]
        at = {"staggered": i // 2, "burst": 0, "reversed": (n - i) // 2}[arrival]
        reqs.append(Request(i, prompt, rnd.randint(max(1, max_new // 2), max_new), at))
    return reqs


def tp_pair_arch(train_tp: int, rollout_tp: int) -> SimpleNamespace:
    """The smallest dense model whose heads and MLP width split over both TP degrees (heads =
    lcm(train_tp, rollout_tp)): the TP-pair table (scripts/numerics_tables.py) and its tests."""
    n = math.lcm(train_tp, rollout_tp)
    return SimpleNamespace(
        name=f"tp_pair_{n}",
        num_layers=1,
        hidden_size=32,
        intermediate_size=8 * n,
        num_heads=n,
        num_kv_heads=n,
        head_dim=8,
        vocab_size=64,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        tie_word_embeddings=False,
        num_experts=0,
        experts_per_token=0,
        moe_intermediate_size=0,
    )


def tp_pair_logdiff(train_tp: int, rollout_tp: int, alignment: Alignment | None = None) -> float:
    """Max |logdiff| of 4 requests on `tp_pair_arch` at (train_tp, rollout_tp), KV tile 8."""
    model = Model.random(tp_pair_arch(train_tp, rollout_tp), seed=0)
    reqs = make_requests(4, 64, seed=1, max_len=20, max_new=6)
    out = probe(
        model,
        alignment or Alignment(kv_tile=8),
        requests=reqs,
        train_tp=train_tp,
        rollout_tp=rollout_tp,
        block_size=8,
        max_num_batched_tokens=32,
    )
    return float(out["max_abs_logprob_diff"])


def long_requests(
    n: int, vocab: int, seed: int, length: int = 600, min_new: int = 32
) -> list[Request]:
    """n requests of exactly `length` tokens (prompt + response), responses of min_new..2*min_new
    tokens, arriving two per engine step."""
    rnd = random.Random(seed)
    reqs = []
    for i in range(n):
        new = rnd.randint(min_new, 2 * min_new)
        reqs.append(Request(i, [rnd.randrange(vocab) for _ in range(length - new)], new, i // 2))
    return reqs


def probe(
    model: Model,
    alignment: Alignment,
    *,
    requests: list[Request],
    train_tp: int = 1,
    rollout_tp: int = 1,
    order: str = "ring",
    block_size: int = 16,
    chunked_prefill: bool = True,
    max_num_batched_tokens: int = 64,
    max_num_seqs: int = 256,
    micro_batch: int = 4,
    sampling: SamplingParams | None = None,
    dump_dir: str | Path | None = None,
    train_model: Model | None = None,
) -> dict[str, Any]:
    """Rollout then training recompute of the same tokens; metrics plus timing.

    `dump_dir`: write boundary dumps of both engines (`rollout/`, `training/`) for `topl diagnose`.
    `train_model`: a different model object for the training side (to plant framework differences)."""
    train_side, rollout_side = sides(alignment, train_tp, rollout_tp, order)
    train_model = train_model or model
    sp = sampling or SamplingParams()
    recs = (Recorder(), Recorder()) if dump_dir else (None, None)
    t0 = time.perf_counter()
    eng = RolloutEngine(
        model,
        rollout_side,
        block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        chunked_prefill=chunked_prefill,
    )
    model.recorder = recs[0]
    done = eng.generate(requests, sp)
    model.recorder = None
    t1 = time.perf_counter()
    trainer = TrainingEngine(train_model, train_side, micro_batch)
    train_model.recorder = recs[1]
    lp = trainer.logprobs([r.tokens for r in done], [len(r.prompt) for r in done], sp.temperature)
    train_model.recorder = None
    t2 = time.perf_counter()
    if dump_dir:
        assert recs[0] is not None and recs[1] is not None
        layout = {
            "train_tp": train_tp,
            "rollout_tp": rollout_tp,
            "order": order,
            "block_size": block_size,
            "alignment": asdict(alignment),
        }
        save(
            Path(dump_dir) / "rollout", recs[0], manifest_for("topl-rollout", model, layout=layout)
        )
        save(
            Path(dump_dir) / "training",
            recs[1],
            manifest_for("topl-training", train_model, layout=layout),
        )
    out = compare([torch.tensor(r.logprobs) for r in done], lp)
    out.update(
        rollout_s=t1 - t0,
        train_s=t2 - t1,
        engine_steps=len(eng.batch_sizes),
        distinct_batch_sizes=len(set(eng.batch_sizes)),
    )
    return out


def matrix_point(
    arch: Arch, seed: int, dtype: str, chunked: bool, batch: int, length: int = 600, tile: int = 64
) -> dict[str, Any]:
    """One point of the strict-exactness matrix: `batch` requests of `length` tokens on seeded
    weights, KV tile = cache block = `tile`; chunked prefill with a 256-token budget, or unchunked
    with a budget that holds the longest prompt. Returns the probe's metrics plus the point."""
    model = Model.random(arch, seed=seed, dtype=DTYPES[dtype])
    reqs = long_requests(batch, arch.vocab_size, seed, length)
    budget = 256 if chunked else length
    out = probe(
        model,
        Alignment(kv_tile=tile),
        requests=reqs,
        block_size=tile,
        chunked_prefill=chunked,
        max_num_batched_tokens=budget,
        sampling=SamplingParams(seed=seed),
    )
    return {
        "seed": seed,
        "model": getattr(arch, "name", "?"),
        "dtype": dtype,
        "chunked": chunked,
        "batch": batch,
        **out,
    }
