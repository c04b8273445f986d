"""Strict mode, scheduling that changes a sequence's batch: prefix cache, chunked prefill (facts
§2-§5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.base.errors import ERROR, INFO
from topl.launcher.contract.core import rule
from topl.launcher.spec.job import is_strict, on_npu

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

SEED_EVIDENCE = "seed_logdiff0_with_cache_and_chunking"
BREAKS_BI = "bi_breaks_with_chunked_prefill_prefix_cache_preemption"


def _scheduling(s: JobSpec, what: str) -> Outcome:
    """Error, or info on the seed's stack, which reported logdiff 0 with it on (the measurement
    outranks a general warning)."""
    v = s.cluster.versions
    if facts.supports(SEED_EVIDENCE, v) and not facts.supports(BREAKS_BI, v):
        return INFO, (
            f"{what} on: the seed ran it at logdiff 0 on this stack, but the trainer "
            "recomputes without it (unproven in general)"
        )
    return ERROR, f"{what} reuses or splits work under a different batch than the trainer's"


@rule(
    "TOP-CACHE-001",
    ERROR,
    "prefix caching off in strict mode",
    (
        "alignment.mode",
        "rollout.prefix_caching",
        "cluster.versions.profile",
        "cluster.versions.vllm_ascend",
    ),
    "set rollout.prefix_caching=false",
    facts=(BREAKS_BI, SEED_EVIDENCE),
)
def prefix_cache(s: JobSpec) -> Outcome:
    """A cached prefix was computed in another batch and chunking than the trainer's recompute;
    vllm-ascend's own docs say it breaks batch invariance from 0.28.0rc1. Info on the seed stack,
    where the seed ran verl's default (on) and reported logdiff 0."""
    if is_strict(s) and s.rollout.prefix_caching:
        return _scheduling(s, "prefix caching")


@rule(
    "TOP-CACHE-002",
    ERROR,
    "chunked prefill off in strict mode",
    (
        "rollout.chunked_prefill",
        "alignment.mode",
        "cluster.device",
        "cluster.versions.profile",
        "cluster.versions.vllm_ascend",
    ),
    "set rollout.chunked_prefill=false (with block_size=128)",
    facts=(BREAKS_BI, SEED_EVIDENCE, "verl_defaults_cache_and_chunking_on"),
)
def chunked_prefill(s: JobSpec) -> Outcome:
    """A chunked prefill splits a prompt's attention over steps the trainer does not; vllm-ascend's
    own docs say it breaks batch invariance from 0.28.0rc1 (and verl turns it on by default). A
    info on the seed stack, where the seed ran it and reported logdiff 0."""
    if is_strict(s) and on_npu(s) and s.rollout.chunked_prefill:  # the reference engines align it
        return _scheduling(s, "chunked prefill")
