"""verl's key tables: spec field -> verl key, the key prefixes, the containers verl passes on,
and the env vars topl's fields own. Below the renderer, the contract and compose's did-you-mean
(which names the topl field of a verl key typed on the command line), so that all of them read
one table and none imports another for it. Data only, no logic.
"""

from __future__ import annotations

ARR = "actor_rollout_ref"
VLLM = f"{ARR}.rollout.engine_kwargs.vllm"
GRAD_OFFLOAD = f"{ARR}.actor.megatron.grad_offload"  # verl 0.8.0 / 0.9.0 only (render_version.py)
PARAM_OFFLOAD = f"{ARR}.actor.megatron.param_offload"

# Containers that are empty dicts in verl 0.9.1 (script_import and verl_keys read them). Whether a
# rendered key needs `+` is decided by the declared verl's schema (render_version.spell).
FREE_FORM = (
    f"{ARR}.rollout.engine_kwargs.vllm.",
    "ray_kwargs.ray_init.runtime_env.env_vars.",
)

# Hydra instantiation keys: a verbatim verl override naming one would make verl build an object.
CODE_KEYS = {"_target_", "_partial_", "_call_"}

# spec field -> verl key (a callable value derives it)
VERL_KEYS: dict[str, str] = {
    "algorithm.adv_estimator": "algorithm.adv_estimator",
    "algorithm.policy_loss": f"{ARR}.actor.policy_loss.loss_mode",
    "algorithm.loss_agg_mode": f"{ARR}.actor.loss_agg_mode",
    "algorithm.use_kl_loss": f"{ARR}.actor.use_kl_loss",
    "algorithm.kl_loss_coef": f"{ARR}.actor.kl_loss_coef",
    "algorithm.clip_ratio_low": f"{ARR}.actor.clip_ratio_low",
    "algorithm.clip_ratio_high": f"{ARR}.actor.clip_ratio_high",
    "algorithm.clip_ratio_c": f"{ARR}.actor.clip_ratio_c",
    "algorithm.lr": f"{ARR}.actor.optim.lr",
    "model.hf_path": f"{ARR}.model.path",
    "train.train_batch_size": "data.train_batch_size",
    "train.max_prompt_length": "data.max_prompt_length",
    "train.max_response_length": "data.max_response_length",
    "train.ppo_mini_batch_size": f"{ARR}.actor.ppo_mini_batch_size",
    "train.ppo_micro_batch_size_per_gpu": f"{ARR}.actor.ppo_micro_batch_size_per_gpu",
    "train.use_dynamic_bsz": f"{ARR}.actor.use_dynamic_bsz",
    "train.epochs": "trainer.total_epochs",
    "train.steps": "trainer.total_training_steps",
    "rollout.name": f"{ARR}.rollout.name",
    "rollout.tp": f"{ARR}.rollout.tensor_model_parallel_size",
    "rollout.dp": f"{ARR}.rollout.data_parallel_size",
    "rollout.ep": f"{ARR}.rollout.expert_parallel_size",
    "rollout.pp": f"{ARR}.rollout.engine_kwargs.vllm.pipeline_parallel_size",
    "rollout.block_size": f"{ARR}.rollout.engine_kwargs.vllm.block_size",
    "rollout.attention_backend": f"{ARR}.rollout.engine_kwargs.vllm.attention_backend",
    "rollout.chunked_prefill": f"{ARR}.rollout.enable_chunked_prefill",
    "rollout.prefix_caching": f"{ARR}.rollout.enable_prefix_caching",
    "rollout.max_num_seqs": f"{ARR}.rollout.max_num_seqs",
    "rollout.max_num_batched_tokens": f"{ARR}.rollout.max_num_batched_tokens",
    "rollout.gpu_memory_utilization": f"{ARR}.rollout.gpu_memory_utilization",
    "rollout.n": f"{ARR}.rollout.n",
    "rollout.temperature": f"{ARR}.rollout.temperature",
    "rollout.top_p": f"{ARR}.rollout.top_p",
    "rollout.top_k": f"{ARR}.rollout.top_k",
    "rollout.logprobs_mode": f"{ARR}.rollout.logprobs_mode",
    "rollout.calculate_log_probs": f"{ARR}.rollout.calculate_log_probs",
    "rollout.log_prob_micro_batch_size_per_gpu": f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu",
    "cluster.device": "trainer.device",
    "cluster.nodes": "trainer.nnodes",
    "cluster.devices_per_node": "trainer.n_gpus_per_node",
    "project": "trainer.project_name",
    "experiment": "trainer.experiment_name",
    "seed": f"{ARR}.rollout.seed",
    # optional rows: a None field is not rendered (verl keeps its default)
    "algorithm.entropy_coeff": f"{ARR}.actor.entropy_coeff",  # verl@0.9.1:trainer/config/actor/actor.yaml
    "algorithm.ppo_epochs": f"{ARR}.actor.ppo_epochs",  # same file
    "algorithm.use_kl_in_reward": "algorithm.use_kl_in_reward",  # verl@0.9.1:trainer/config/algorithm.py:AlgoConfig
    "algorithm.gen_batch_size": "data.gen_batch_size",  # verl@0.9.1:trainer/config/data/legacy_data.yaml
    "algorithm.reward_manager": "reward.reward_manager.name",  # verl@0.9.1:workers/config/reward.py:RewardManagerConfig
    # DAPO overlong shaping: verl@0.9.1:experimental/reward_loop/reward_manager/dapo.py reads
    # reward_kwargs.overlong_buffer_cfg / max_resp_len; the DAPO recipe config declares them
    "algorithm.overlong_buffer": "reward.reward_kwargs.overlong_buffer_cfg.enable",
    "algorithm.overlong_buffer_len": "reward.reward_kwargs.overlong_buffer_cfg.len",
    "algorithm.overlong_max_resp_len": "reward.reward_kwargs.max_resp_len",
    "train.ppo_max_token_len_per_gpu": f"{ARR}.actor.ppo_max_token_len_per_gpu",  # actor.yaml
}
MEGATRON_KEYS = {
    "train.tp": f"{ARR}.actor.megatron.tensor_model_parallel_size",
    "train.pp": f"{ARR}.actor.megatron.pipeline_model_parallel_size",
    "train.ep": f"{ARR}.actor.megatron.expert_model_parallel_size",
    "train.etp": f"{ARR}.actor.megatron.expert_tensor_parallel_size",
    "train.cp": f"{ARR}.actor.megatron.context_parallel_size",
    "train.sequence_parallel": f"{ARR}.actor.megatron.sequence_parallel",
    "train.param_offload": f"{ARR}.actor.megatron.param_offload",
    "train.optimizer_offload": f"{ARR}.actor.megatron.optimizer_offload",
    # verl@0.8.0:workers/config/engine.py:McoreEngineConfig.grad_offload (gone in 0.9.1)
    "train.grad_offload": f"{ARR}.actor.megatron.grad_offload",
    # verl@0.9.1:trainer/config/engine/megatron.yaml override_transformer_config.recompute_*
    "train.recompute_granularity": f"{ARR}.actor.megatron.override_transformer_config.recompute_granularity",
    "train.recompute_method": f"{ARR}.actor.megatron.override_transformer_config.recompute_method",
    "train.recompute_num_layers": f"{ARR}.actor.megatron.override_transformer_config.recompute_num_layers",
    # verl@0.8.0..0.9.1:verl/trainer/config/engine/megatron.yaml:dtype (actor and ref engines)
    "train.dtype": f"{ARR}.actor.megatron.dtype",
    "train.use_fused_rmsnorm": f"{ARR}.actor.megatron.override_transformer_config.use_fused_rmsnorm",
    "train.use_fused_rotary_pos_emb": f"{ARR}.actor.megatron.override_transformer_config.use_fused_rotary_pos_emb",
    "train.apply_rope_fusion": f"{ARR}.actor.megatron.override_transformer_config.apply_rope_fusion",
    "train.use_flash_attn": f"{ARR}.actor.megatron.override_transformer_config.use_flash_attn",
}
# The critic's Megatron sizes, the actor's fields: verl runs every engine of the worker in the
# parallel groups the first one built initializes, the critic's (contract TOP-INIT-021), and the
# critic's own defaults are 1 (verl@0.9.1:verl/trainer/config/critic/megatron_critic.yaml takes
# engine/megatron.yaml; 0.8.0 the same), not the actor's as the reference's are
CRITIC_MEGATRON_KEYS = {
    f: MEGATRON_KEYS[f].replace(f"{ARR}.actor.", "critic.")
    for f in ("train.tp", "train.pp", "train.ep", "train.etp", "train.cp")
}
FSDP_KEYS = {
    "train.fsdp_size": f"{ARR}.actor.fsdp_config.fsdp_size",
    "train.param_offload": f"{ARR}.actor.fsdp_config.param_offload",
    "train.optimizer_offload": f"{ARR}.actor.fsdp_config.optimizer_offload",
    "train.ulysses_sp": f"{ARR}.actor.ulysses_sequence_parallel_size",
    "train.dtype": f"{ARR}.actor.fsdp_config.dtype",  # verl@0.9.1:trainer/config/engine/fsdp.yaml
}


# Variables the determinism settings decide, and the spec fields that decide them: set them through
# those fields, not cluster.env (the contract reads the fields; TOP-ENV-001/002 compare the two).
ENV_OWNERS: dict[str, tuple[str, ...]] = {
    "HCCL_DETERMINISTIC": ("collective.hccl_deterministic",),
    "LCCL_DETERMINISTIC": ("collective.lccl_deterministic",),
    "HCCL_OP_EXPANSION_MODE": ("collective.op_expansion_mode",),
    "HCCL_ALGO": ("collective.hccl_algo",),
    "VLLM_BATCH_INVARIANT": ("alignment.mode",),
    "VLLM_ASCEND_ENABLE_NZ": ("alignment.mode", "cluster.device"),
    "CLOSE_MATMUL_K_SHIFT": ("alignment.mode", "cluster.device"),
    "ATB_MATMUL_SHUFFLE_K_ENABLE": ("alignment.mode", "cluster.device"),
    "ATB_LLM_LCOC_ENABLE": ("alignment.mode", "cluster.device"),
    "VERL_USE_EXTERNAL_MODULES": ("cluster.external_modules",),
}
