"""Render a job spec into the exact verl 0.9.1 invocation. Pure: no I/O, no environment reads.

`VERL_KEYS` is the one table from spec fields to verl keys; keys under `FREE_FORM` containers
do not exist in verl's config and get Hydra's `+` (append) prefix. tests/test_verl_compose.py
composes every rendering against verl's real config to prove both.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from topl.launcher.spec import is_strict, on_npu
from topl.launcher.tree import get_path  # noqa: F401  (render's table reads dotted spec paths)

ARR = "actor_rollout_ref"

# Containers that are empty dicts in verl 0.9.1: new keys below them need `+`.
FREE_FORM = (
    f"{ARR}.rollout.engine_kwargs.vllm.",
    "ray_kwargs.ray_init.runtime_env.env_vars.",
)
# Single keys verl 0.9.1 lacks (the seed's Megatron batch-invariance switches).
NEW_KEYS = {
    f"{ARR}.actor.megatron.override_transformer_config.use_flash_attn_npu_batch_invariant",
    f"{ARR}.actor.megatron.override_transformer_config.batch_invariant_mode",
    f"{ARR}.actor.megatron.override_transformer_config.use_batch_invariant_ops",
}

# spec field -> verl key (a callable value derives it)
VERL_KEYS: dict[str, str] = {
    "algorithm.adv_estimator": "algorithm.adv_estimator",
    "algorithm.policy_loss": f"{ARR}.actor.policy_loss.loss_mode",
    "algorithm.loss_agg_mode": f"{ARR}.actor.loss_agg_mode",
    "algorithm.use_kl_loss": f"{ARR}.actor.use_kl_loss",
    "algorithm.kl_loss_coef": f"{ARR}.actor.kl_loss_coef",
    "algorithm.clip_ratio_low": f"{ARR}.actor.clip_ratio_low",
    "algorithm.clip_ratio_high": f"{ARR}.actor.clip_ratio_high",
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
}
FSDP_KEYS = {
    "train.fsdp_size": f"{ARR}.actor.fsdp_config.fsdp_size",
    "train.param_offload": f"{ARR}.actor.fsdp_config.param_offload",
    "train.optimizer_offload": f"{ARR}.actor.fsdp_config.optimizer_offload",
    "train.ulysses_sp": f"{ARR}.actor.ulysses_sequence_parallel_size",
}


@dataclass
class Invocation:
    """What to run: `python -m entrypoint --config-name=... overrides`, with env on every process."""

    entrypoint: str
    config_name: str
    overrides: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        return ["-m", self.entrypoint, f"--config-name={self.config_name}", *self.overrides]

    def command(self, python: str = "python3") -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        head = " ".join(shlex.quote(a) for a in [python, *self.argv[:3]])
        args = " \\\n    ".join([head, *(shlex.quote(a) for a in self.overrides)])
        return f"{env} \\\n  {args}" if env else args

    def to_dict(self, python: str = "python3") -> dict[str, Any]:
        return {"entrypoint": self.entrypoint, "config_name": self.config_name,
                "overrides": self.overrides, "env": self.env, "command": self.command(python)}


_PLAIN = re.compile(r"^[A-Za-z0-9_./:@\-]+$")
_LOOKS_TYPED = re.compile(r"^([-+]?[0-9_.]+([eE][-+]?[0-9]+)?|true|false|null|none|inf|nan)$", re.I)


def fmt(v: Any) -> str:
    """A value in Hydra's override grammar."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(fmt(x) for x in v) + "]"
    s = str(v)
    if isinstance(v, str) and _LOOKS_TYPED.match(s):
        return f'"{s}"'  # Hydra would read 1 / true / null as non-strings (Ray needs str env values)
    return s if _PLAIN.match(s) else '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plus(key: str) -> str:
    """`+key` where verl 0.9.1 has no such key."""
    return f"+{key}" if key in NEW_KEYS or key.startswith(FREE_FORM) else key


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


def env_vars(s) -> dict[str, str]:
    """Environment every process (driver and each Ray worker) must see: derived, then cluster.env."""
    return {**derived_env(s), **{k: str(v) for k, v in s.cluster.env.items()}}


def derived_env(s) -> dict[str, str]:
    """The environment the spec's own fields decide (without cluster.env)."""
    c, strict, npu = s.collective, is_strict(s), on_npu(s)
    env: dict[str, str] = {}
    if npu:
        env.update(TASK_QUEUE_ENABLE="2", CPU_AFFINITY_CONF="1", HCCL_CONNECT_TIMEOUT="1800",
                   HCCL_EXEC_TIMEOUT="3600")
    if c.op_expansion_mode:
        env["HCCL_OP_EXPANSION_MODE"] = c.op_expansion_mode
    if c.hccl_deterministic != "false":
        env["HCCL_DETERMINISTIC"] = c.hccl_deterministic
    if c.lccl_deterministic:
        env["LCCL_DETERMINISTIC"] = "1"
    if c.hccl_algo:
        env["HCCL_ALGO"] = c.hccl_algo
    if strict:
        env["VLLM_BATCH_INVARIANT"] = "1"
        if npu:
            env.update(VLLM_ASCEND_ENABLE_NZ="0", CLOSE_MATMUL_K_SHIFT="1",
                       ATB_MATMUL_SHUFFLE_K_ENABLE="0", ATB_LLM_LCOC_ENABLE="0")
    if s.cluster.external_modules:
        env["VERL_USE_EXTERNAL_MODULES"] = s.cluster.external_modules
    return env


def overrides(s) -> list[tuple[str, Any]]:
    """(verl key, value) pairs, in a stable order."""
    megatron = s.train.engine == "megatron"
    table = {**VERL_KEYS, **(MEGATRON_KEYS if megatron else FSDP_KEYS)}
    out: list[tuple[str, Any]] = [("model_engine", "megatron" if megatron else "dp")]
    out += [(verl, get_path(s, field_)) for field_, verl in table.items()]
    out += [("data.train_files", f"{s.data_dir}/train.parquet"), ("data.val_files", f"{s.data_dir}/test.parquet"),
            (f"{ARR}.rollout.enforce_eager", s.rollout.graph_mode == "eager"),
            (f"{ARR}.rollout.pipeline_model_parallel_size", 1),
            # verl asserts it equals actor.use_dynamic_bsz (verl@0.9.1:verl/workers/engine_workers.py:
            # ActorRolloutRefWorker.init_model)
            (f"{ARR}.rollout.log_prob_use_dynamic_bsz", s.train.use_dynamic_bsz),
            ("trainer.logger", ["console", "file"])]
    if s.algorithm.use_kl_loss:
        out.append((f"{ARR}.ref.log_prob_micro_batch_size_per_gpu", s.train.log_prob_micro_batch_size_per_gpu))
    if s.algorithm.use_critic:
        out += [("critic.ppo_micro_batch_size_per_gpu", s.train.ppo_micro_batch_size_per_gpu),
                ("critic.model.path", s.model.hf_path)]
    if is_strict(s):
        out.append((f"{ARR}.rollout.full_determinism", True))
        rl = f"{ARR}.rollout.engine_kwargs.vllm.additional_config.rl_config"
        if s.cluster.device == "npu":
            out += [(f"{rl}.enabled", True), (f"{rl}.enable_training_consistency", True),
                    (f"{rl}.enable_batch_invariant", True)]
        if megatron:
            otc = f"{ARR}.actor.megatron.override_transformer_config"
            out += [(f"{otc}.attention_backend", "flash"), (f"{otc}.use_flash_attn_npu_batch_invariant", True),
                    (f"{otc}.batch_invariant_mode", True), (f"{otc}.use_batch_invariant_ops", True)]
        else:
            out += [(f"{ARR}.actor.fsdp_config.full_determinism", True),
                    (f"{ARR}.ref.fsdp_config.full_determinism", True)]
    rc = s.alignment.rollout_correction
    if s.alignment.mode == "mitigated":
        out += [(f"algorithm.rollout_correction.{k}", getattr(rc, k))
                for k in ("rollout_is", "rollout_is_threshold", "rollout_rs", "rollout_rs_threshold", "bypass_mode")]
    out += extra_items(s.algorithm.extra_overrides)
    return out


def extra_items(extra, prefix: str = "") -> list[tuple[str, Any]]:
    """extra_overrides as (dotted verl key, value): nested mappings (what `+algorithm.extra_overrides.
    a.b=1` composes into) become dotted keys, as verl's override grammar needs."""
    out = []
    for k, v in extra.items():
        key = f"{prefix}{k}"
        out += extra_items(v, key + ".") if isinstance(v, dict) and v else [(key, v)]
    return out


def ray_worker_env(s) -> dict[str, str]:
    """What the rendered job forwards to every Ray worker (`ray_kwargs...runtime_env.env_vars`)."""
    return env_vars(s)


def render(s) -> Invocation:
    """JobSpec -> Invocation; env vars are also forwarded to every Ray worker via runtime_env."""
    env = env_vars(s)
    forwarded = ray_worker_env(s).items()
    pairs = overrides(s) + [(f"ray_kwargs.ray_init.runtime_env.env_vars.{k}", v) for k, v in forwarded]
    config_name = s.algorithm.config_name or "ppo_trainer"
    return Invocation(s.algorithm.entrypoint, config_name, [f"{plus(k)}={fmt(v)}" for k, v in pairs], env)
