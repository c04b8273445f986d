"""Version-aware rendering: the keys whose spelling depends on the declared stack (FA3 selection,
graph mode, NZ, sampling seed, log-prob mode), each decided by a fact in `topl.launcher.facts`.

Pure like render.py, which re-exports every name here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from topl.launcher import facts
from topl.launcher.base.tree import get_path
from topl.launcher.facts.verl_tables import ARR, VLLM
from topl.launcher.spec.job import is_strict, on_npu

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

# spec field -> the stack fact that must hold on NPU for verl / vllm-ascend to read the key
GATED_ON_NPU = {"rollout.attention_backend": "fa3_by_attention_backend"}
# rollout.graph_mode -> vLLM cudagraph_mode, rendered explicitly: verl's default otherwise is
# FULL_AND_PIECEWISE (facts: verl_default_full_and_piecewise), kept by vllm-ascend >= 0.21.0rc1
CUDAGRAPH_MODE = {
    "piecewise": "PIECEWISE",
    "full": "FULL",
    "full_decode_only": "FULL_DECODE_ONLY",
    "full_and_piecewise": "FULL_AND_PIECEWISE",
}


def renders(s: JobSpec, field_: str) -> bool:
    """Whether a table row is rendered on this stack."""
    fact = GATED_ON_NPU.get(field_)
    return not (fact and on_npu(s) and not facts.supports(fact, s.cluster.versions))


def logprobs_mode(s: JobSpec) -> str:
    """`auto`: raw_logprobs at temperature 1, else processed_logprobs (raw ones are taken before
    the temperature, facts: raw_logprobs_before_temperature; the trainer divides by it)."""
    r = s.rollout
    if r.logprobs_mode != "auto":
        return r.logprobs_mode
    return "raw_logprobs" if r.temperature == 1.0 else "processed_logprobs"


def rendered_value(s: JobSpec, field_: str) -> Any:
    return logprobs_mode(s) if field_ == "rollout.logprobs_mode" else get_path(s, field_)


def graph_overrides(s: JobSpec) -> list[tuple[str, Any]]:
    """Eager, or the graph mode the spec names, stated to vLLM (never verl's default)."""
    mode = s.rollout.graph_mode
    if mode == "eager":
        return [(f"{ARR}.rollout.enforce_eager", True)]
    return [
        (f"{ARR}.rollout.enforce_eager", False),
        (f"{VLLM}.compilation_config", json.dumps({"cudagraph_mode": CUDAGRAPH_MODE[mode]})),
    ]


def sampling_seed(s: JobSpec) -> str:
    """How rollout sampling is seeded: per_request (the stack's per-request seed) or none.
    verl's rollout.full_determinism is never rendered: it gives all n samples of a prompt on one
    replica the same seed (facts: full_determinism_fixes_replica_seed)."""
    want = s.rollout.per_request_seed
    if want is None:
        want = is_strict(s) and facts.supports("per_request_seed", s.cluster.versions)
    return "per_request" if want else "none"


def stack_overrides(s: JobSpec) -> list[tuple[str, Any]]:
    """Version-aware keys: FA3 selection, NZ off, sampling seed (each from `topl.launcher.facts`)."""
    v, npu, strict = s.cluster.versions, on_npu(s), is_strict(s)
    out: list[tuple[str, Any]] = []
    if strict and npu and facts.supports("rl_config", v):  # FA3 + batch invariance from rl_config
        rl = f"{VLLM}.additional_config.rl_config"
        out += [
            (f"{rl}.enabled", True),
            (f"{rl}.enable_training_consistency", True),
            (f"{rl}.enable_batch_invariant", True),
        ]
    if npu and facts.supports("nz_config", v):  # NZ off as the config reads it (sleep mode)
        out.append((f"{VLLM}.additional_config.weight_nz_mode", 0))
    if sampling_seed(s) == "per_request":
        out.append((f"{ARR}.rollout.per_request_seed", True))
    elif s.rollout.per_request_seed is False:  # said, as the seed's off scripts do (stock verl:
        out.append((f"{ARR}.rollout.per_request_seed", False))  # dropped, STOCK_AT_DEFAULT)
    return out
