"""The job spec -> the reference engines' settings: one mapping, used by the local backend's RL
loop (backends/local.py:loop_config) and by `topl probe` (cli/probe.py:run).

Each micro-batch is the one verl uses for the same pass (verl@0.9.1:verl/workers/engine_workers.py:
ActorRolloutRefWorker.init_model: the actor's infer_micro_batch_size_per_gpu, its old-log-prob
recompute, is rollout.log_prob_micro_batch_size_per_gpu; its micro_batch_size_per_gpu, the update,
is actor.ppo_micro_batch_size_per_gpu; the reference policy's is ref.log_prob_micro_batch_size_per_gpu,
which topl renders from train.log_prob_micro_batch_size_per_gpu)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec


@dataclass(frozen=True)
class EngineSettings:
    """What the rollout and training engines read from a spec (topl.kernels: RolloutEngine,
    TrainingEngine, sides)."""

    dtype: str  # compute dtype of both engines
    train_tp: int  # training tensor-parallel size (emulated)
    rollout_tp: int  # rollout tensor-parallel size (emulated)
    order: str  # the rollout's all-reduce order
    block_size: int  # rollout paged-KV block size
    max_num_seqs: int  # rollout continuous-batching limit
    max_num_batched_tokens: int  # rollout tokens per engine step
    chunked_prefill: bool  # rollout splits long prefills
    log_prob_micro_batch: int  # old-log-prob recompute: rollout.log_prob_micro_batch_size_per_gpu
    update_micro_batch: int  # actor update and critic: train.ppo_micro_batch_size_per_gpu
    ref_micro_batch: int  # reference policy: train.log_prob_micro_batch_size_per_gpu

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def engine_settings(spec: JobSpec) -> EngineSettings:
    """The reference engines' settings for `spec` (the one JobSpec -> engines mapping)."""
    r, t = spec.rollout, spec.train
    return EngineSettings(
        dtype=t.dtype,
        train_tp=t.tp,
        rollout_tp=r.tp,
        order=spec.collective.order,
        block_size=r.block_size,
        max_num_seqs=r.max_num_seqs,
        max_num_batched_tokens=r.max_num_batched_tokens,
        chunked_prefill=r.chunked_prefill,
        log_prob_micro_batch=r.log_prob_micro_batch_size_per_gpu,
        update_micro_batch=t.ppo_micro_batch_size_per_gpu,
        ref_micro_batch=t.log_prob_micro_batch_size_per_gpu,
    )
