#!/usr/bin/env bash
# Test script in the seed's style: arrays, ${VAR:-default}, exports, a switch, case, "$@".
set -xeuo pipefail

export TASK_QUEUE_ENABLE=2
export HCCL_CONNECT_TIMEOUT=3600
export HCCL_EXEC_TIMEOUT=3600
export VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch

ENABLE_TRUE_ON_POLICY=${ENABLE_TRUE_ON_POLICY:-1}
if [ "${ENABLE_TRUE_ON_POLICY}" = "1" ]; then
    export VLLM_BATCH_INVARIANT=1
fi
seed_raw=${ROLLOUT_PER_REQUEST_SEED:-${ENABLE_TRUE_ON_POLICY}}
case "${seed_raw}" in
    1 | true) per_request_seed=true ;;
    *) per_request_seed=false ;;
esac

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B}
NGPUS=${NGPUS_PER_NODE:-16}
train_batch_size=${TRAIN_BATCH_SIZE:-32}
max_prompt_length=${MAX_PROMPT_LENGTH:-1024}
max_response_length=${MAX_RESPONSE_LENGTH:-3072}
max_tokens=$((max_prompt_length + max_response_length))

DATA=(
    algorithm.adv_estimator=grpo
    data.train_files="['$HOME/data/gsm8k/train.parquet']"
    data.train_batch_size=${train_batch_size}
    data.max_prompt_length=${max_prompt_length}
    data.max_response_length=${max_response_length}
)
ACTOR=(
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.actor.optim.lr=2e-6
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${max_tokens}
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=${ACTOR_PP:-2}
    +actor_rollout_ref.actor.megatron.override_transformer_config.use_fused_rmsnorm=True
    actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full
    actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method=uniform
    actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers=1
)
ROLLOUT=(
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=${ROLLOUT_N:-4}
    actor_rollout_ref.rollout.per_request_seed=${per_request_seed}
    actor_rollout_ref.rollout.val_kwargs.top_p=0.7
)
if [ "${per_request_seed}" = "true" ]; then
    ROLLOUT+=(actor_rollout_ref.rollout.seed=${ROLLOUT_SEED:-7})
fi
TRAINER=(
    trainer.logger='["console"]'
    trainer.n_gpus_per_node=${NGPUS}
    trainer.total_epochs=3
)

PYTHONUNBUFFERED=1 python3 -m verl.trainer.main_ppo \
    "${DATA[@]}" \
    "${ACTOR[@]}" \
    "${ROLLOUT[@]}" \
    "${TRAINER[@]}" \
    model_engine=megatron \
    "$@" 2>&1 | tee "./logs/run_$(date +%s).log"
