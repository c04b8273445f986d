"""Sampling settings whose meaning differs between the rollout engine and the trainer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

# vLLM treats temperature below this as greedy (vllm@0.18.0:vllm/sampling_params.py:_SAMPLING_EPS)
VLLM_SAMPLING_EPS = 1e-5


@rule(
    "TOP-SAMP-001",
    ERROR,
    "a positive sampling temperature (temperature 0 means different things to vLLM and verl)",
    ("rollout.temperature",),
    "set rollout.temperature > 0 (1.0 samples the policy itself; for greedy evaluation use a "
    "separate generation job, not an RL run)",
)
def zero_temperature(s: JobSpec) -> Outcome:
    """vLLM reads temperature < 1e-5 as greedy: argmax tokens, and the log-probs it returns are
    taken at temperature 1 (it swaps the temperature for 1.0 before dividing; vllm@0.18.0:
    vllm/sampling_params.py:SamplingParams.sampling_type, vllm/v1/sample/sampler.py:Sampler.sample
    and Sampler.apply_temperature). verl's trainer clamps it instead and divides the logits by
    1e-8 (verl@0.9.1:verl/workers/engine/megatron/transformer_impl.py:
    MegatronEngineWithLMHead._lm_head_logits_processor, verl/workers/engine/fsdp/transformer_impl.py:
    _scale_logits_by_temperature): a near one-hot distribution whose gradients are scaled by 1e8.
    The two sides compute log-probs of different distributions, in every alignment mode, and the n
    samples of a prompt are all the same greedy answer (no group baseline)."""
    t = s.rollout.temperature
    if t < VLLM_SAMPLING_EPS:
        return (
            f"rollout.temperature={t}: vLLM samples greedily and returns log-probs at temperature "
            "1, while verl's trainer divides the logits by 1e-8"
        )
