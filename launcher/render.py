"""Render a job spec into the exact verl 0.9.1 invocation. Pure: no I/O, no environment reads.

`VERL_KEYS` is the one table from spec fields to verl keys; keys under `FREE_FORM` containers
do not exist in verl's config and get Hydra's `+` (append) prefix. tests/test_verl_compose.py
composes every rendering against verl's real config to prove both.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from topl.launcher import facts
from topl.launcher.errors import ToplError
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
    # MindSpeed TransformerConfig switches: verl 0.9.1's override_transformer_config holds only
    # recompute_* and attention_backend (verl@0.9.1:trainer/config/engine/megatron.yaml)
    f"{ARR}.actor.megatron.override_transformer_config.use_fused_rmsnorm",
    f"{ARR}.actor.megatron.override_transformer_config.use_fused_rotary_pos_emb",
    f"{ARR}.actor.megatron.override_transformer_config.apply_rope_fusion",
    f"{ARR}.actor.megatron.override_transformer_config.use_flash_attn",
}
# Keys a verl source patch adds (the seed's per-request seed): present on a patched verl only.
PATCHED_KEYS = {f"{ARR}.rollout.per_request_seed"}

# Keys that verl-recipe's DAPO trainer configs add on top of verl's ppo_trainer
# (verl-project/verl-recipe@5e867cf:dapo/config/dapo_sync_trainer.yaml:reward.reward_kwargs; the
# seed passes them without `+` to dapo_megatron_trainer: psyloy/verl-ascend-recipe@0674dbf:
# true_on_policy/scripts/dapo/run_dapo_qwen3_4b_megatron_npu.sh:REWARD).
DAPO_RECIPE_KEYS = ("reward.reward_kwargs.",)

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
    "train.use_fused_rmsnorm": f"{ARR}.actor.megatron.override_transformer_config.use_fused_rmsnorm",
    "train.use_fused_rotary_pos_emb": f"{ARR}.actor.megatron.override_transformer_config.use_fused_rotary_pos_emb",
    "train.apply_rope_fusion": f"{ARR}.actor.megatron.override_transformer_config.apply_rope_fusion",
    "train.use_flash_attn": f"{ARR}.actor.megatron.override_transformer_config.use_flash_attn",
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
        return {
            "entrypoint": self.entrypoint,
            "config_name": self.config_name,
            "overrides": self.overrides,
            "env": self.env,
            "command": self.command(python),
        }


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
        return (
            f'"{s}"'  # Hydra would read 1 / true / null as non-strings (Ray needs str env values)
        )
    return s if _PLAIN.match(s) else '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def plus(key: str) -> str:
    """`+key` where verl 0.9.1 has no such key; `++key` where a patch adds it (either way works);
    a verbatim `+key` / `++key` (verl_overrides) stays as written."""
    if key.startswith("+"):
        return key
    if key in PATCHED_KEYS:
        return f"++{key}"
    return f"+{key}" if key in NEW_KEYS or key.startswith(FREE_FORM) else key


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
VLLM = f"{ARR}.rollout.engine_kwargs.vllm"


def renders(s, field_: str) -> bool:
    """Whether a table row is rendered on this stack."""
    fact = GATED_ON_NPU.get(field_)
    return not (fact and on_npu(s) and not facts.supports(fact, s.cluster.versions))


def logprobs_mode(s) -> str:
    """`auto`: raw_logprobs at temperature 1, else processed_logprobs (raw ones are taken before
    the temperature, facts: raw_logprobs_before_temperature; the trainer divides by it)."""
    r = s.rollout
    if r.logprobs_mode != "auto":
        return r.logprobs_mode
    return "raw_logprobs" if r.temperature == 1.0 else "processed_logprobs"


def rendered_value(s, field_: str):
    return logprobs_mode(s) if field_ == "rollout.logprobs_mode" else get_path(s, field_)


def graph_overrides(s) -> list[tuple[str, Any]]:
    """Eager, or the graph mode the spec names, stated to vLLM (never verl's default)."""
    mode = s.rollout.graph_mode
    if mode == "eager":
        return [(f"{ARR}.rollout.enforce_eager", True)]
    return [
        (f"{ARR}.rollout.enforce_eager", False),
        (f"{VLLM}.compilation_config", json.dumps({"cudagraph_mode": CUDAGRAPH_MODE[mode]})),
    ]


def sampling_seed(s) -> str:
    """How rollout sampling is seeded: per_request (the stack's per-request seed) or none.
    verl's rollout.full_determinism is never rendered: it gives all n samples of a prompt on one
    replica the same seed (facts: full_determinism_fixes_replica_seed)."""
    want = s.rollout.per_request_seed
    if want is None:
        want = is_strict(s) and facts.supports("per_request_seed", s.cluster.versions)
    return "per_request" if want else "none"


def stack_overrides(s) -> list[tuple[str, Any]]:
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
    if npu and facts.supports(
        "nz_config", v
    ):  # NZ off as the config reads it (sleep mode needs it)
        out.append((f"{VLLM}.additional_config.weight_nz_mode", 0))
    if sampling_seed(s) == "per_request":
        out.append((f"{ARR}.rollout.per_request_seed", True))
    return out


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
    """Environment every process (driver and each Ray worker) must see: derived, then cluster.env,
    then topl's guard (strict runs)."""
    env = {**derived_env(s), **{k: str(v) for k, v in s.cluster.env.items()}}
    return {**env, **guard_env(s, env)}


def derived_env(s) -> dict[str, str]:
    """The environment the spec's own fields decide (without cluster.env)."""
    c, strict, npu = s.collective, is_strict(s), on_npu(s)
    env: dict[str, str] = {}
    if npu:
        env.update(
            TASK_QUEUE_ENABLE="2",
            CPU_AFFINITY_CONF="1",
            HCCL_CONNECT_TIMEOUT=str(c.connect_timeout_s),
            HCCL_EXEC_TIMEOUT=str(c.exec_timeout_s),
        )
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
            env.update(
                CLOSE_MATMUL_K_SHIFT="1", ATB_MATMUL_SHUFFLE_K_ENABLE="0", ATB_LLM_LCOC_ENABLE="0"
            )
            if facts.supports("nz_env", s.cluster.versions):  # gone from vllm-ascend 0.27.1rc1
                env["VLLM_ASCEND_ENABLE_NZ"] = "0"
    if s.cluster.external_modules:
        env["VERL_USE_EXTERNAL_MODULES"] = s.cluster.external_modules
    return env


# env var -> the contract rule that requires it (what topl's guard checks in every process)
GUARDED_ENV = {
    "VLLM_BATCH_INVARIANT": "TOP-ALN-001",
    "VLLM_ASCEND_ENABLE_NZ": "TOP-ALN-001",
    "CLOSE_MATMUL_K_SHIFT": "TOP-ALN-001",
    "ATB_MATMUL_SHUFFLE_K_ENABLE": "TOP-ALN-001",
    "ATB_LLM_LCOC_ENABLE": "TOP-ALN-001",
    "HCCL_DETERMINISTIC": "TOP-COLL-001",
    "LCCL_DETERMINISTIC": "TOP-COLL-002",
    "HCCL_ALGO": "TOP-COLL-003",
}
GUARD_MODULE = "topl.launcher.guard"  # = guard.MODULE (not imported: render stays import-light)


def guard_env(s, env: dict[str, str]) -> dict[str, str]:
    """Strict runs: topl's guard after the patch module in VERL_USE_EXTERNAL_MODULES (verl imports
    them in order in every process, verl@0.9.1:verl/__init__.py) and its manifest (TOPL_GUARD):
    the env vars and modules every process must have, each with the rule that requires it."""
    if not is_strict(s):
        return {}
    patch = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    modules = {m: ["loaded", "TOP-STACK-005"] for m in patch}
    if on_npu(s):
        modules["batch_invariant_ops"] = ["importable", "TOP-STACK-004"]
    manifest = {
        "strict": True,
        "modules": modules,
        "env": {k: [v, GUARDED_ENV[k]] for k, v in env.items() if k in GUARDED_ENV},
    }
    return {
        "VERL_USE_EXTERNAL_MODULES": ",".join([*patch, GUARD_MODULE]),
        "TOPL_GUARD": json.dumps(manifest, separators=(",", ":"), sort_keys=True),
    }


def without_guard(env: dict[str, str]) -> dict[str, str]:
    """The env as a launch script writes it: what guard_env adds taken back out (round trips)."""
    out = {k: v for k, v in env.items() if k != "TOPL_GUARD"}
    mods = [m for m in out.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m != GUARD_MODULE]
    if "VERL_USE_EXTERNAL_MODULES" in out:
        out["VERL_USE_EXTERNAL_MODULES"] = ",".join(m for m in mods if m)
        if not out["VERL_USE_EXTERNAL_MODULES"]:
            del out["VERL_USE_EXTERNAL_MODULES"]
    return out


def overrides(s) -> list[tuple[str, Any]]:
    """(verl key, value) pairs, in a stable order."""
    megatron = s.train.engine == "megatron"
    table = {**VERL_KEYS, **(MEGATRON_KEYS if megatron else FSDP_KEYS)}
    out: list[tuple[str, Any]] = [("model_engine", "megatron" if megatron else "dp")]
    out += [
        (verl, v)
        for field_, verl in table.items()
        if renders(s, field_) and (v := rendered_value(s, field_)) is not None
    ]  # None: verl's default
    out += [
        ("data.train_files", f"{s.data_dir}/train.parquet"),
        ("data.val_files", f"{s.data_dir}/test.parquet"),
        *graph_overrides(s),
        (f"{ARR}.rollout.pipeline_model_parallel_size", 1),
        # verl asserts it equals actor.use_dynamic_bsz (verl@0.9.1:verl/workers/engine_workers.py:
        # ActorRolloutRefWorker.init_model)
        (f"{ARR}.rollout.log_prob_use_dynamic_bsz", s.train.use_dynamic_bsz),
        ("trainer.logger", ["console", "file"]),
    ]
    if s.algorithm.use_kl_loss:
        out.append(
            (
                f"{ARR}.ref.log_prob_micro_batch_size_per_gpu",
                s.train.log_prob_micro_batch_size_per_gpu,
            )
        )
    if s.algorithm.use_critic:
        out += [
            ("critic.ppo_micro_batch_size_per_gpu", s.train.ppo_micro_batch_size_per_gpu),
            ("critic.model.path", s.model.hf_path),
        ]
    out += stack_overrides(s)
    out += algorithm_overrides(s)
    if is_strict(s):
        if megatron:
            otc = f"{ARR}.actor.megatron.override_transformer_config"
            out += [
                (f"{otc}.attention_backend", "flash"),
                (f"{otc}.use_flash_attn_npu_batch_invariant", True),
                (f"{otc}.batch_invariant_mode", True),
                (f"{otc}.use_batch_invariant_ops", True),
            ]
        else:
            out += [
                (f"{ARR}.actor.fsdp_config.full_determinism", True),
                (f"{ARR}.ref.fsdp_config.full_determinism", True),
            ]
    rc = s.alignment.rollout_correction
    if s.alignment.mode == "mitigated":
        out += [
            (f"algorithm.rollout_correction.{k}", getattr(rc, k))
            for k in (
                "rollout_is",
                "rollout_is_threshold",
                "rollout_rs",
                "rollout_rs_threshold",
                "bypass_mode",
            )
        ]
    out += extra_items(s.algorithm.extra_overrides)
    return with_verl_overrides(out, s.verl_overrides)


def extra_items(extra, prefix: str = "") -> list[tuple[str, Any]]:
    """extra_overrides as (dotted verl key, value): nested mappings (what `+algorithm.extra_overrides.
    a.b=1` composes into) become dotted keys, as verl's override grammar needs."""
    out = []
    for k, v in extra.items():
        key = f"{prefix}{k}"
        out += extra_items(v, key + ".") if isinstance(v, dict) and v else [(key, v)]
    return out


def with_verl_overrides(pairs: list[tuple[str, Any]], verbatim: dict) -> list[tuple[str, Any]]:
    """`verbatim` (key, possibly `+key`) replaces a rendered key of the same name (and goes last)."""
    out = dict(pairs)
    for k, v in verbatim.items():
        if set(k.lstrip("+").split(".")) & CODE_KEYS:
            raise ToplError(
                f"verl_overrides.{k}: recipes are data and never instantiate code in verl",
                where="verl_overrides",
                fix=f"remove `{k}`",
            )
        out.pop(k.lstrip("+"), None)
        out[k] = v
    return list(out.items())


def overlong_buffer_len(s) -> int:
    """DAPO's overlong buffer in tokens: the last fraction of max_response_length."""
    return round(s.algorithm.overlong_buffer_fraction * s.train.max_response_length)


def algorithm_overrides(s) -> list[tuple[str, Any]]:
    """GAE, critic, DAPO dynamic sampling and overlong shaping, only where the algorithm uses them."""
    a, out = s.algorithm, []
    if a.adv_estimator == "gae":
        out += [("algorithm.gamma", a.gamma), ("algorithm.lam", a.lam)]
    if a.use_critic:
        out.append(("critic.cliprange_value", a.cliprange_value))
    if a.filter_groups:  # verl@0.9.1:verl/trainer/config/algorithm.py:FilterGroupsConfig
        out += [
            ("algorithm.filter_groups.enable", True),
            ("algorithm.filter_groups.metric", a.filter_groups_metric),
            ("algorithm.filter_groups.max_num_gen_batches", a.max_num_gen_batches),
        ]
    cfg = "reward.reward_kwargs.overlong_buffer_cfg"
    if a.overlong_buffer is not None:  # explicit verl-level fields (VERL_KEYS rows) say the rest
        if a.overlong_buffer:
            out.append((f"{cfg}.penalty_factor", a.overlong_penalty_factor))
    elif (
        a.overlong_buffer_fraction > 0
    ):  # verl@0.9.1:verl/workers/reward_manager/dapo.py:DAPORewardManager
        out += [
            ("reward.reward_manager.name", "dapo"),
            (f"{cfg}.enable", True),
            (f"{cfg}.len", overlong_buffer_len(s)),
            (f"{cfg}.penalty_factor", a.overlong_penalty_factor),
            ("reward.reward_kwargs.max_resp_len", s.train.max_response_length),
        ]
    return out


def ray_worker_env(s) -> dict[str, str]:
    """What the rendered job forwards to every Ray worker (`ray_kwargs...runtime_env.env_vars`)."""
    return env_vars(s)


def render(s) -> Invocation:
    """JobSpec -> Invocation; env vars are also forwarded to every Ray worker via runtime_env."""
    env = env_vars(s)
    forwarded = ray_worker_env(s).items()
    pairs = overrides(s) + [
        (f"ray_kwargs.ray_init.runtime_env.env_vars.{k}", v) for k, v in forwarded
    ]
    config_name = s.algorithm.config_name or "ppo_trainer"
    return Invocation(
        s.algorithm.entrypoint, config_name, [f"{plus(k)}={fmt(v)}" for k, v in pairs], env
    )
