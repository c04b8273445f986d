"""Strict mode, what the rollout records and how the trainer recomputes it: log-probs, their mode,
micro-batches (facts §2-§5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.base.errors import ERROR, INFO
from topl.launcher.contract.core import rule
from topl.launcher.spec.job import is_strict

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec


@rule(
    "TOP-LOGP-001",
    ERROR,
    "the rollout returns its log-probs",
    ("rollout.calculate_log_probs", "alignment.mode"),
    "set rollout.calculate_log_probs=true",
)
def calc_logprobs(s: JobSpec) -> Outcome:
    """Without rollout log-probs there is nothing to compare (or correct) against."""
    if s.alignment.mode != "off" and not s.rollout.calculate_log_probs:
        return "calculate_log_probs=false: logdiff cannot be measured"


@rule(
    "TOP-LOGP-002",
    ERROR,
    "log-prob mode agrees with the trainer's full-vocabulary log-softmax",
    (
        "alignment.mode",
        "rollout.logprobs_mode",
        "rollout.temperature",
        "rollout.top_p",
        "rollout.top_k",
    ),
    "set rollout.logprobs_mode=auto (raw_logprobs at temperature 1, else processed_logprobs with "
    "rollout.top_p=1.0 and rollout.top_k=-1)",
    facts=("raw_logprobs_before_temperature",),
)
def logprobs_mode(s: JobSpec) -> Outcome:
    """The trainer takes log_softmax(logits / temperature) over the whole vocabulary.
    processed_logprobs renormalise over the top-p/top-k set; raw_logprobs are taken before the
    temperature, so they match only at temperature 1."""
    r = s.rollout
    mode = (
        "raw_logprobs"
        if r.logprobs_mode == "auto" and r.temperature == 1.0
        else "processed_logprobs"
        if r.logprobs_mode == "auto"
        else r.logprobs_mode
    )
    if not is_strict(s):
        return None
    if mode == "processed_logprobs" and (r.top_p < 1.0 or r.top_k > 0):
        return f"processed_logprobs with top_p={r.top_p}, top_k={r.top_k}"
    if mode == "raw_logprobs" and r.temperature != 1.0:
        return f"raw_logprobs are pre-temperature but temperature={r.temperature}"
    if mode.endswith("logits"):
        return f"logprobs_mode={r.logprobs_mode} returns logits, not log-probs"


@rule(
    "TOP-LOGP-003",
    ERROR,
    "log-prob micro batch sizes match on both sides",
    (
        "alignment.mode",
        "rollout.log_prob_micro_batch_size_per_gpu",
        "train.log_prob_micro_batch_size_per_gpu",
        "train.ppo_micro_batch_size_per_gpu",
    ),
    "set rollout.log_prob_micro_batch_size_per_gpu = train.ppo_micro_batch_size_per_gpu",
)
def micro_batches(s: JobSpec) -> Outcome:
    """A different micro batch makes old_log_prob differ from log_prob (verl pitfall, facts §3.5)."""
    sizes = {
        s.rollout.log_prob_micro_batch_size_per_gpu,
        s.train.log_prob_micro_batch_size_per_gpu,
        s.train.ppo_micro_batch_size_per_gpu,
    }
    if is_strict(s) and len(sizes) > 1:
        return f"micro batch sizes differ: {sorted(sizes)}"


@rule(
    "TOP-LOGP-004",
    ERROR,
    "no dynamic batch size in strict mode (info on the seed's stack, which measured it)",
    ("alignment.mode", "cluster.versions.profile", "train.use_dynamic_bsz"),
    "set train.use_dynamic_bsz=false",
    facts=("seed_logdiff0_with_dynamic_bsz",),
)
def dynamic_bsz(s: JobSpec) -> Outcome:
    """Token-budget micro-batching regroups sequences each step, so the recompute sees other batch
    shapes than the rollout did: only batch-invariant kernels make that harmless. The seed ran its
    strict scripts with it on (actor and recompute) and reported logdiff 0, so on the seed's stack
    this is info with that evidence; elsewhere it stays an error until measured."""
    if is_strict(s) and s.train.use_dynamic_bsz:
        if facts.supports("seed_logdiff0_with_dynamic_bsz", s.cluster.versions):
            return INFO, "use_dynamic_bsz=true: the seed ran it at logdiff 0 on this stack"
        return "use_dynamic_bsz=true"
