"""A roofline estimate of one RL step, to rank the accepted points of a sweep (`topl plan --rank`).

Three phases: rollout generation, log-prob recompute, train forward/backward + optimizer. Each
phase costs max(compute, HBM) + collectives: FLOPs over the device's peak, bytes read from HBM over
its bandwidth, bytes a device receives in collectives over its link (intra- or inter-node, by
where the group lies). Chip figures: launcher/facts/chips.json (sources there). The formulas, term
by term, are docs/rank.md; keep the two in step. An estimate to order layouts, not a prediction:
every sequence is taken at full length, nothing overlaps, kernels run at peak.
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from typing import TYPE_CHECKING, Any

from topl.launcher.spec.job import world_size
from topl.launcher.spec.memory import (
    kv_bytes_per_token,
    param_counts,
    rollout_weight_bytes,
)

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec, ModelSpec

BF16, FP32 = 2, 4  # bytes: weights and activations; gradients (as memory_estimate counts them)
OPT_BYTES = 30  # optimizer step per parameter: read+write fp32 master+Adam (24), read grad (4), write bf16 weight (2)
PHASES = ("rollout", "logprob", "train")


@functools.cache
def chips() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(
        resources.files("topl.launcher.facts").joinpath("chips.json").read_text()
    )
    return table


def figures(s: JobSpec) -> dict[str, float] | None:
    """{peak_tflops, hbm_gbps, intra_node_gbps, inter_node_gbps} of the cluster's device, or None."""
    chip = chips().get(s.cluster.soc or "")
    if chip is None:
        return None
    return {k: v["value"] for k, v in chip.items() if isinstance(v, dict)}


def fwd_flops(m: ModelSpec, n_act: float, tokens: int) -> float:
    """One forward over a `tokens`-long sequence: 2 FLOPs per active weight per token, plus causal
    attention (QK^T and AV: 4*heads*head_dim per token pair, over tokens^2/2 pairs)."""
    return 2.0 * n_act * tokens + 2 * m.num_layers * m.num_heads * m.head_dim * tokens**2


def active_params(m: ModelSpec) -> float:
    """Weights one token multiplies: everything but the input embedding lookup, top-k of the experts."""
    pc = param_counts(m)
    lookup = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size
    experts = pc["expert"] * m.experts_per_token / m.num_experts if m.num_experts else 0
    return pc["dense"] - lookup + experts


def _ring(group: int) -> float:
    """Bytes a device receives per byte of an all-reduce over `group` devices (ring)."""
    return 2 * (group - 1) / group


def _link(f: dict[str, float], s: JobSpec, size: int, stride: int = 1) -> float:
    """GB/s of a group of `size` ranks `stride` apart: intra-node when the group fits in a node."""
    inside = size * stride <= s.cluster.devices_per_node
    return f["intra_node_gbps"] if inside else f["inter_node_gbps"]


class _Phase:
    def __init__(self) -> None:
        self.flops = self.hbm = 0.0
        self.comm: dict[str, tuple[float, float]] = {}  # collective -> (bytes, GB/s)

    def add(self, name: str, nbytes: float, gbps: float) -> None:
        if nbytes > 0:
            b, _ = self.comm.get(name, (0.0, gbps))
            self.comm[name] = (b + nbytes, gbps)

    def terms(self, f: dict[str, float]) -> dict[str, Any]:
        compute = self.flops / (f["peak_tflops"] * 1e12)
        hbm = self.hbm / (f["hbm_gbps"] * 1e9)
        comm = sum(b / (g * 1e9) for b, g in self.comm.values())
        return {
            "flops": self.flops,
            "hbm_bytes": self.hbm,
            "comm_bytes": {k: b for k, (b, _) in self.comm.items()},
            "compute_s": compute,
            "hbm_s": hbm,
            "comm_s": comm,
            "seconds": max(compute, hbm) + comm,
        }


def _rollout(s: JobSpec, f: dict[str, float], n_act: float, seqs: int, world: int) -> _Phase:
    m, r, t = s.model, s.rollout, s.train
    ph, length = _Phase(), t.max_prompt_length + t.max_response_length
    ph.flops = seqs * fwd_flops(m, n_act, length) / world
    group = r.tp * r.pp  # devices that decode one stream of sequences together
    per_group = seqs / max(world // group, 1)
    steps = math.ceil(per_group / r.max_num_seqs) * t.max_response_length
    kv_read = per_group * t.max_response_length * (t.max_prompt_length + t.max_response_length / 2)
    ph.hbm = steps * rollout_weight_bytes(s) + kv_read * kv_bytes_per_token(s)
    layers = m.num_layers / r.pp
    if r.tp > 1:  # two all-reduces of the hidden state per layer per token
        nbytes = per_group * length * layers * 2 * m.hidden_size * BF16 * _ring(r.tp)
        ph.add("rollout_tp", nbytes, _link(f, s, r.tp))
    if m.num_experts and r.ep > 1:  # dispatch + combine of top-k copies per MoE layer per token
        tokens = seqs * length * r.pp / world
        nbytes = tokens * layers * 2 * m.experts_per_token * m.hidden_size * BF16
        ph.add("rollout_ep", nbytes * (r.ep - 1) / r.ep, _link(f, s, r.ep))
    # the trained weights reach the rollout engine once a step: each device receives its shard
    ph.add("weight_sync", rollout_weight_bytes(s), _link(f, s, world))
    return ph


def _megatron(
    s: JobSpec,
    f: dict[str, float],
    ph: _Phase,
    seqs: int,
    world: int,
    passes: float,
    bwd: bool,
    mbs: int,
) -> None:
    """Collectives and weight reads of `passes` forward (+ backward when `bwd`) passes."""
    m, t = s.model, s.train
    length = t.max_prompt_length + t.max_response_length
    pc = param_counts(m)
    dp = max(world // (t.tp * t.pp * t.cp), 1)
    shard = BF16 * (pc["dense"] / (t.tp * t.pp) + pc["expert"] / (t.ep * t.etp * t.pp))
    micro = math.ceil(seqs / dp / mbs)
    ph.hbm += passes * micro * shard * (3 if bwd else 1)  # weights read: fwd, + dgrad and wgrad
    tokens = seqs * length / (dp * t.cp)  # per model replica rank (cp splits each sequence)
    layers = m.num_layers / t.pp
    calls = 4 if bwd else 2  # all-reduces (or reduce-scatter + all-gather) per layer
    if t.tp > 1:
        nbytes = tokens * layers * calls * m.hidden_size * BF16 * _ring(t.tp)
        ph.add("train_tp", passes * nbytes, _link(f, s, t.tp))
    if t.cp > 1:  # ring attention: the other ranks' K and V (fwd), again with their grads (bwd)
        kv = 2 * max(m.num_kv_heads // t.tp, 1) * m.head_dim * BF16
        nbytes = tokens * layers * kv * (t.cp - 1) * (3 if bwd else 1)
        ph.add("train_cp", passes * nbytes, _link(f, s, t.cp, t.tp))
    if m.num_experts and t.ep > 1:
        per_dev = seqs * length * t.pp / world
        nbytes = per_dev * layers * (4 if bwd else 2) * m.experts_per_token * m.hidden_size * BF16
        ph.add("train_ep", passes * nbytes * (t.ep - 1) / t.ep, _link(f, s, t.ep, t.etp))
    if t.pp > 1:  # activations across each stage boundary (and their grads back)
        nbytes = tokens * m.hidden_size * BF16 * (2 if bwd else 1)
        ph.add("train_pp", passes * nbytes, _link(f, s, t.pp, t.tp * t.cp * dp))


def _fsdp(
    s: JobSpec,
    f: dict[str, float],
    ph: _Phase,
    seqs: int,
    world: int,
    passes: float,
    bwd: bool,
    mbs: int,
) -> None:
    """ZeRO-3: every micro-batch gathers the weights (fwd, and again for bwd) and reduce-scatters grads."""
    t = s.train
    total = param_counts(s.model)["total"]
    group = world if t.fsdp_size in (-1, 0) else min(t.fsdp_size, world)
    micro = math.ceil(seqs / max(world // t.ulysses_sp, 1) / mbs)
    ph.hbm += passes * micro * BF16 * total * (3 if bwd else 1)
    gathers = (2 * BF16 + FP32) if bwd else BF16
    nbytes = passes * micro * gathers * total * (group - 1) / group
    ph.add("fsdp_shard", nbytes, _link(f, s, group))


def _models(s: JobSpec) -> tuple[int, int]:
    """(forward-only log-prob passes, trained models): actor old log-probs, + reference, + critic."""
    a = s.algorithm
    ref = a.use_kl_loss or bool(a.use_kl_in_reward)
    return 1 + ref + a.use_critic, 1 + a.use_critic


def step_cost(s: JobSpec) -> dict[str, Any] | None:
    """Per-phase terms and the step estimate in seconds, or None without published chip figures."""
    f = figures(s)
    if f is None:
        return None
    m, t, world = s.model, s.train, world_size(s)
    n_act = active_params(m)
    seqs = t.train_batch_size * s.rollout.n
    length = t.max_prompt_length + t.max_response_length
    seq_flops = fwd_flops(m, n_act, length)
    forwards, trained = _models(s)
    epochs = s.algorithm.ppo_epochs or 1
    recompute = 1 if t.recompute_granularity == "full" else 0
    comm = _megatron if t.engine == "megatron" else _fsdp

    logprob = _Phase()
    logprob.flops = forwards * seqs * seq_flops / world
    comm(s, f, logprob, seqs, world, forwards, False, t.log_prob_micro_batch_size_per_gpu)

    train = _Phase()
    passes = trained * epochs
    train.flops = passes * seqs * (3 + recompute) * seq_flops / world
    comm(s, f, train, seqs, world, passes, True, t.ppo_micro_batch_size_per_gpu)
    steps = passes * max(t.train_batch_size // t.ppo_mini_batch_size, 1)  # optimizer steps
    _optimizer(s, f, train, world, steps)

    terms = {
        "rollout": _rollout(s, f, n_act, seqs, world).terms(f),
        "logprob": logprob.terms(f),
        "train": train.terms(f),
    }
    return {"step_s": sum(p["seconds"] for p in terms.values()), **_dominant(terms), **terms}


def _optimizer(s: JobSpec, f: dict[str, float], ph: _Phase, world: int, steps: int) -> None:
    """Per optimizer step: the device's share of the states read and written; gradients reduced."""
    t, pc = s.train, param_counts(s.model)
    if t.engine == "megatron":  # distributed optimizer: states and grads sharded over dp
        groups = [
            (pc["dense"] / (t.tp * t.pp), max(world // (t.tp * t.pp), 1), t.tp),
            (
                pc["expert"] / (t.ep * t.etp * t.pp),
                max(world // (t.ep * t.etp * t.pp), 1),
                t.ep * t.etp,
            ),
        ]
        for params, dp, stride in groups:
            ph.hbm += steps * OPT_BYTES * params / dp
            if dp > 1:  # gradient reduce-scatter + all-gather of the shard: a ring all-reduce
                ph.add("grad_dp", steps * FP32 * params * _ring(dp), _link(f, s, dp, stride))
        return
    group = world if t.fsdp_size in (-1, 0) else min(t.fsdp_size, world)
    shard, replicas = pc["total"] / group, max(world // group, 1)
    ph.hbm += steps * OPT_BYTES * shard
    if replicas > 1:  # hybrid shard: the shard's gradients all-reduced across replica groups
        ph.add("grad_dp", steps * FP32 * shard * _ring(replicas), _link(f, s, replicas, group))


def _dominant(terms: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The term that adds the most seconds: a phase's compute or HBM (whichever bounds it) or comm."""
    best = ("", -1.0)
    for name, p in terms.items():
        bound = ("compute", p["compute_s"]) if p["compute_s"] >= p["hbm_s"] else ("hbm", p["hbm_s"])
        for kind, sec in (bound, ("comm", p["comm_s"])):
            if sec > best[1]:
                best = (f"{name}.{kind}", sec)
    return {"dominant": best[0]}
