"""Strict mode, collectives and parallel layouts: deterministic all-reduce, the same TP on both
sides, EP (facts §2-§5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.spec.job import is_moe, is_strict

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec


@rule(
    "TOP-COLL-001",
    ERROR,
    "deterministic, order-preserving collectives when anything is parallel",
    (
        "alignment.mode",
        "collective.hccl_deterministic",
        "train.tp",
        "train.ep",
        "train.cp",
        "rollout.tp",
        "rollout.ep",
        "rollout.dp",
    ),
    "use collective=hccl_strict",
)
def strict_collectives(s: JobSpec) -> Outcome:
    """HCCL picks algorithms by message size; only HCCL_DETERMINISTIC=strict keeps the order fixed.

    Kept for every parallel degree, 2 included: on NCCL 2.28.9 a 2-rank all-reduce gave the same bits
    under every NCCL_ALGO / NCCL_PROTO / channel pin (one addition per element; docs/performance.md,
    scripts/bench_nccl.py), but HCCL is not NCCL and >= 3 ranks were not measured."""
    parallel = max(s.train.tp, s.train.ep, s.train.cp, s.rollout.tp, s.rollout.ep, s.rollout.dp) > 1
    if is_strict(s) and parallel and s.collective.hccl_deterministic != "strict":
        return f"HCCL_DETERMINISTIC={s.collective.hccl_deterministic} with parallel reductions"


@rule(
    "TOP-COLL-002",
    ERROR,
    "LCCL determinism on the AIV path within 8 ranks",
    (
        "alignment.mode",
        "collective.op_expansion_mode",
        "collective.lccl_deterministic",
        "rollout.tp",
        "train.tp",
    ),
    "set collective.lccl_deterministic=true (collective=hccl_strict), and keep tp <= 8 on AIV",
)
def lccl_aiv(s: JobSpec) -> Outcome:
    """With HCCL_OP_EXPANSION_MODE=AIV small collectives go through LCCL, deterministic only with
    LCCL_DETERMINISTIC=1 and rank size <= 8."""
    if not is_strict(s) or s.collective.op_expansion_mode != "AIV":
        return None
    if not s.collective.lccl_deterministic:
        return "AIV expansion without LCCL_DETERMINISTIC=1"
    if max(s.train.tp, s.rollout.tp) > 8:
        return f"tp={max(s.train.tp, s.rollout.tp)} exceeds LCCL's deterministic rank size 8"


@rule(
    "TOP-COLL-003",
    ERROR,
    "no non-deterministic HCCL algorithm pinned",
    ("alignment.mode", "collective.hccl_algo"),
    "unset collective.hccl_algo or pin a ring/tree algorithm on every rank",
)
def hccl_algo(s: JobSpec) -> Outcome:
    """HCCL's `pipeline` algorithm reduces in a data-dependent order."""
    if is_strict(s) and s.collective.hccl_algo and "pipeline" in s.collective.hccl_algo:
        return f"HCCL_ALGO={s.collective.hccl_algo}"


@rule(
    "TOP-TP-001",
    ERROR,
    "the same tensor-parallel reduction pattern on both sides",
    ("alignment.mode", "train.tp", "rollout.tp"),
    "use the same tp for train and rollout (the seed: tp=1 and pipeline parallel)",
)
def same_tp(s: JobSpec) -> Outcome:
    """A TP=k row-parallel layer sums k partials in the collective's order; TP=1 sums them in the
    GEMM. Different k means a different addition order in every o_proj and down_proj."""
    if is_strict(s) and s.train.tp != s.rollout.tp:
        return f"train.tp={s.train.tp} but rollout.tp={s.rollout.tp}"


@rule(
    "TOP-TP-002",
    WARNING,
    "expert parallel alignment is unproven on Ascend",
    ("alignment.mode", "train.ep", "rollout.ep", "model.num_experts"),
    "prefer ep=1 with pipeline parallelism, as the seed does",
)
def ep_unproven(s: JobSpec) -> Outcome:
    """The seed reports TP+EP 'extremely difficult to align' and used PP instead."""
    if is_strict(s) and is_moe(s) and max(s.train.ep, s.rollout.ep) > 1:
        return f"train.ep={s.train.ep}, rollout.ep={s.rollout.ep} in strict mode"
