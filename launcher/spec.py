"""The typed job spec: what `conf/` composes into. Every field is documented here."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from topl.kernels.alignment import Alignment


@dataclass
class ModelSpec:
    """Architecture facts, as in the model's Hugging Face config.json."""

    name: str = MISSING  # short name, e.g. qwen3_30b_a3b
    hf_path: str = MISSING  # Hugging Face repo id or local path with config + safetensors
    num_layers: int = MISSING  # num_hidden_layers
    hidden_size: int = MISSING  # hidden_size
    intermediate_size: int = MISSING  # dense MLP width (intermediate_size)
    num_heads: int = MISSING  # num_attention_heads
    num_kv_heads: int = MISSING  # num_key_value_heads (GQA groups)
    head_dim: int = MISSING  # head_dim
    vocab_size: int = MISSING  # vocab_size
    num_experts: int = 0  # routed experts per MoE layer (0: dense model)
    experts_per_token: int = 0  # num_experts_per_tok (top-k)
    moe_intermediate_size: int = 0  # width of one expert's MLP
    attention: str = "gqa"  # gqa | mla (DeepSeek multi-head latent attention)
    sliding_window: Optional[int] = None  # sliding-window size, None when full attention
    rms_norm_eps: float = 1e-6  # rms_norm_eps
    rope_theta: float = 1_000_000.0  # rope_theta
    tie_word_embeddings: bool = False  # lm_head shares the embedding matrix
    max_position_embeddings: int = 40960  # longest supported context


@dataclass
class AlgorithmSpec:
    """The RL algorithm and how verl runs it."""

    name: str = "grpo"  # grpo | ppo | gspo | dapo
    adv_estimator: str = "grpo"  # verl algorithm.adv_estimator (gae for ppo)
    policy_loss: str = "vanilla"  # verl actor.policy_loss.loss_mode (gspo for GSPO)
    loss_agg_mode: str = "token-mean"  # verl actor.loss_agg_mode
    use_critic: bool = False  # PPO trains a value model
    use_kl_loss: bool = False  # KL(actor || reference) as a loss term (needs a reference policy)
    kl_loss_coef: float = 0.001  # weight of the KL loss
    clip_ratio_low: float = 0.2  # PPO clip, lower side
    clip_ratio_high: float = 0.2  # PPO clip, upper side (DAPO clip-higher: 0.28)
    lr: float = 1e-6  # actor learning rate
    entrypoint: str = "verl.trainer.main_ppo"  # python -m module that runs the job
    config_name: Optional[str] = None  # --config-name for the entrypoint (None: by train engine)
    extra_overrides: Dict[str, Any] = field(default_factory=dict)  # verl keys this algorithm sets


@dataclass
class TrainSpec:
    """Training (log-prob recompute + update) engine layout and batch sizes."""

    engine: str = "megatron"  # megatron (MindSpeed on NPU) | fsdp
    tp: int = 1  # Megatron tensor parallel size
    pp: int = 1  # Megatron pipeline parallel size
    ep: int = 1  # Megatron expert parallel size
    etp: int = 1  # Megatron expert tensor parallel size
    cp: int = 1  # context parallel size
    sequence_parallel: bool = False  # Megatron sequence parallel (needs tp > 1)
    param_offload: bool = False  # offload parameters to host memory between phases
    optimizer_offload: bool = False  # offload optimizer states to host memory
    fsdp_size: int = -1  # FSDP shard group size (-1: all devices)
    ulysses_sp: int = 1  # Ulysses sequence parallel size (FSDP)
    train_batch_size: int = 32  # prompts per step (verl data.train_batch_size)
    ppo_mini_batch_size: int = 16  # prompts per optimizer step
    ppo_micro_batch_size_per_gpu: int = 2  # sequences per forward on one device (update)
    log_prob_micro_batch_size_per_gpu: int = 2  # sequences per forward on one device (recompute)
    max_prompt_length: int = 1024  # data.max_prompt_length
    max_response_length: int = 2048  # data.max_response_length
    use_dynamic_bsz: bool = False  # token-budget micro-batching (changes batch composition)
    dtype: str = "bfloat16"  # parameter / compute dtype
    epochs: int = 1  # trainer.total_epochs
    steps: int = 100  # trainer.total_training_steps


@dataclass
class RolloutSpec:
    """Inference (sampling) engine settings."""

    name: str = "vllm"  # verl rollout.name (vllm-ascend registers as vllm)
    tp: int = 1  # tensor parallel size per replica
    dp: int = 1  # data parallel size per replica
    pp: int = 1  # pipeline parallel size (vLLM PP; needs the verl PP patch)
    ep: int = 1  # expert parallel size (verl asserts ep == tp * dp when > 1)
    graph_mode: str = "eager"  # eager | piecewise | full | full_decode_only
    block_size: int = 128  # paged KV cache block size (tokens)
    prefix_caching: bool = False  # reuse KV blocks across requests
    chunked_prefill: bool = False  # split long prefills across steps
    max_num_seqs: int = 256  # concurrent sequences per replica
    max_num_batched_tokens: int = 8192  # token budget per engine step
    gpu_memory_utilization: float = 0.8  # device memory fraction for weights + KV cache
    n: int = 8  # samples per prompt (GRPO group size)
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling (1.0: off)
    top_k: int = -1  # top-k sampling (-1: off)
    logprobs_mode: str = "processed_logprobs"  # raw_logprobs | processed_logprobs | *_logits
    attention_backend: str = "FLASH_ATTN"  # vLLM attention backend name (FA3 path on Ascend)
    calculate_log_probs: bool = True  # return each sampled token's log-prob
    log_prob_micro_batch_size_per_gpu: int = 2  # verl rollout.log_prob_micro_batch_size_per_gpu


@dataclass
class CollectiveSpec:
    """How collectives reduce: determinism and order."""

    name: str = "default"  # hccl_strict | lccl_aiv | default
    hccl_deterministic: str = "false"  # HCCL_DETERMINISTIC: false | true | strict
    lccl_deterministic: bool = False  # LCCL_DETERMINISTIC=1 (with HCCL_OP_EXPANSION_MODE=AIV)
    op_expansion_mode: Optional[str] = None  # HCCL_OP_EXPANSION_MODE (AIV or None)
    hccl_algo: Optional[str] = None  # HCCL_ALGO pinned on every rank (None: library choice)
    order: str = "ring"  # reduction order of all-reduce partials: ring | tree (used in emulation)


@dataclass
class StackVersions:
    """Declared versions of the target stack (`topl doctor` checks what is really installed)."""

    verl: str = "0.9.1"  # verl release
    vllm_ascend: str = "0.18.0"  # vllm-ascend release
    cann: str = "9.0"  # CANN toolkit
    torch_npu: str = "2.9.0"  # torch_npu (must match torch)
    torch: str = "2.9.0"  # torch
    verl_patches: List[str] = field(default_factory=list)  # applied patches, e.g. [vllm_pp]
    batch_invariant_ops: bool = False  # CANN batch_invariant_ops package installed
    flash_attn_npu: bool = False  # flash-attention-npu (FA3 backend) installed


@dataclass
class ClusterSpec:
    """Where the job runs and how it is launched."""

    name: str = "local"  # local | atlas_a2 | atlas_a3
    device: str = "cpu"  # verl trainer.device: npu | cuda | cpu
    soc: Optional[str] = None  # A2 | A3 | None
    nodes: int = 1  # nodes in the job
    devices_per_node: int = 1  # accelerators per node
    device_memory_gb: float = 24.0  # memory of one device (GB)
    ray_address: Optional[str] = None  # Ray dashboard address for ray_job (http://host:8265)
    backend: str = "local"  # local | subprocess | ray_job
    python: str = "python3"  # interpreter the subprocess backend runs
    external_modules: Optional[str] = None  # VERL_USE_EXTERNAL_MODULES (the alignment patch module)
    versions: StackVersions = field(default_factory=StackVersions)
    env: Dict[str, str] = field(default_factory=dict)  # extra env vars for every process


@dataclass
class LocalRunSpec:
    """The embedded local job (reference engines on this machine). Steps, prompts per step and
    samples per prompt come from train.steps, train.train_batch_size and rollout.n."""

    seed: int = 0  # seed of weights, data and sampling
    lr: float = 1e-2  # AdamW learning rate of the tiny model (algorithm.lr is the real model's)
    task: str = "reverse"  # toy task with a verifiable reward: reverse the prompt's digits
    plot: bool = True  # write metrics.png at the end
    # a tiny model on many threads waits on hand-offs, and collapses when the machine is busy
    threads: int = 0  # torch threads of the local job and probe; 0: OMP_NUM_THREADS, else hidden_size // 256 (1..cores)


@dataclass
class JobSpec:
    """One job: the composition of every config group plus run-level settings."""

    model: ModelSpec = MISSING
    algorithm: AlgorithmSpec = MISSING
    train: TrainSpec = MISSING
    rollout: RolloutSpec = MISSING
    alignment: Alignment = MISSING
    collective: CollectiveSpec = MISSING
    cluster: ClusterSpec = MISSING
    local: LocalRunSpec = field(default_factory=LocalRunSpec)
    seed: int = 42  # verl rollout/trainer seed
    project: str = "topl"  # trainer.project_name
    experiment: str = "${model.name}_${algorithm.name}_${alignment.mode}"  # trainer.experiment_name
    run_root: str = "runs"  # where `topl launch` creates run directories
    data_dir: str = "~/data/topl"  # train/val parquet folder for verl


def register_configs() -> None:
    """Put the schema in Hydra's ConfigStore; every group file is validated against it.
    (The sweeper plugin registers its own config when Hydra's plugin discovery imports it.)"""
    ConfigStore.instance().store(name="topl_schema", node=JobSpec)


# Small facts about a spec, said once (contract rules, memory estimates, render, doctor, backends).
def world_size(s) -> int:
    """Devices the job uses."""
    return s.cluster.nodes * s.cluster.devices_per_node


def is_strict(s) -> bool:
    """True on-policy: rollout and training must agree bit for bit."""
    return s.alignment.mode == "strict"


def is_moe(s) -> bool:
    return s.model.num_experts > 0


def on_npu(s) -> bool:
    return s.cluster.device == "npu"
