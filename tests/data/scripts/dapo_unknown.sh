#!/usr/bin/env bash
# Test script with a recipe entrypoint and keys topl cannot map: each must be named with its line.
export RAY_DEDUP_LOGS=0
MAX_RESP=${MAX_RESP:-4096}
workers=$(nproc)
ARGS=(
    data.gen_batch_size=64
    algorithm.filter_groups.enable=True
    algorithm.filter_groups.metric=acc
    reward.reward_manager.name=dapo
    reward.reward_kwargs.overlong_buffer_cfg.enable=True
    reward.reward_kwargs.overlong_buffer_cfg.len=$((MAX_RESP / 4))
    reward.reward_kwargs.max_resp_len=${MAX_RESP}
    data.max_response_length=${MAX_RESP}
    actor_rollout_ref.actor.frobnicate_level=3
    +my_team.custom_flag=on
    trainer.nnodes=${NNODES:-1}
)
python3 -m recipe.dapo.main_dapo --config-name=dapo_megatron_trainer "${ARGS[@]}" \
    actor_rollout_ref.model.path=Qwen/Qwen3-4B \
    data.dataloader_num_workers=${workers}
