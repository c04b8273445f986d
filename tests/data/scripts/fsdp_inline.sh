#!/bin/bash
# Test script in the verl examples' style: one long command with continuations, $VAR, an
# env switch choosing values, `export` of a list of names, an unquoted variable holding two args.
set -x
ENGINE=${ENGINE:-fsdp}
if [[ "$ENGINE" == "fsdp" ]]; then
  OFFLOAD=True
  SP=2
elif [ "$ENGINE" = "fsdp2" ]; then
  OFFLOAD=False
  SP=1
else
  echo "unknown engine" >&2
  exit 1
fi
HCCL_DETERMINISTIC=true
LCCL_DETERMINISTIC=1
export HCCL_DETERMINISTIC LCCL_DETERMINISTIC
EXTRA="trainer.save_freq=20 trainer.test_freq=5"
gpus=${GPUS:-8}
[[ $gpus -ge 16 && -n "$ENGINE" ]] && NODES=2 || NODES=1

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_batch_size=64 \
    data.max_prompt_length=512 data.max_response_length=1024 \
    actor_rollout_ref.model.path=Qwen/Qwen3-8B \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.ulysses_sequence_parallel_size=$SP \
    actor_rollout_ref.actor.fsdp_config.param_offload=$OFFLOAD \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=$OFFLOAD \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.01 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    trainer.n_gpus_per_node=$gpus \
    trainer.nnodes=$NODES \
    trainer.project_name='my project' \
    $EXTRA $@
