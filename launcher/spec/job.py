"""The typed job spec: what `conf/` composes into. Every field is documented here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from topl.kernels.alignment import Alignment
from topl.launcher.spec.backend_traits import NAMES as BACKENDS  # cluster.backend's values
from topl.launcher.spec.constraints import c

# OmegaConf's marker of a value that must be given (omegaconf@2.3.1:omegaconf/omegaconf.py:MISSING;
# tests/compose/test_compose_cache.py holds it equal): spelled here so that a cached `check` needs no OmegaConf.
MISSING: Any = "???"

# Allowed values that mirror another package's own checks (cited where each field uses them).
ADV_ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "gdpo",
)
POLICY_LOSSES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
)
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
    "seq-mean-token-mean",
)
LOGPROBS_MODES = ("raw_logits", "raw_logprobs", "processed_logits", "processed_logprobs")
ALGOS = "verl@0.9.1:verl/trainer/ppo/core_algos.py"
HCCL_DOC = "CANN 9.0 environment variable reference: HCCL_DETERMINISTIC"
MCORE = "megatron_core@0.16.0:megatron/core/parallel_state.py:initialize_model_parallel"
VERL_CHECK = "verl@0.9.1:verl/utils/config.py:validate_config"
VLLM_SAMPLING = "vllm@0.18.0:vllm/sampling_params.py:SamplingParams._verify_args"
VLLM_CACHE = "vllm@0.18.0:vllm/config/cache.py:CacheConfig.gpu_memory_utilization"
VLLM_LOGPROBS = "vllm@0.18.0:vllm/config/model.py:LogprobsMode"
VERL_FSDP = "verl@0.9.1:verl/workers/config/engine.py:FSDPEngineConfig.fsdp_size"


@dataclass
class ModelSpec:
    """Architecture facts, as in the model's Hugging Face config.json."""

    name: str = MISSING  # short name, e.g. qwen3_30b_a3b
    hf_path: str = MISSING  # Hugging Face repo id or local path with config + safetensors
    num_layers: int = c(MISSING, ge=1)  # num_hidden_layers
    hidden_size: int = c(MISSING, ge=1)  # hidden_size
    intermediate_size: int = c(MISSING, ge=1)  # dense MLP width (intermediate_size)
    num_heads: int = c(MISSING, ge=1)  # num_attention_heads
    num_kv_heads: int = c(MISSING, ge=1)  # num_key_value_heads (GQA groups)
    head_dim: int = c(MISSING, ge=1)  # head_dim
    vocab_size: int = c(MISSING, ge=1)  # vocab_size
    num_experts: int = c(0, ge=0)  # routed experts per MoE layer (0: dense model)
    experts_per_token: int = c(0, ge=0)  # num_experts_per_tok (top-k)
    moe_intermediate_size: int = c(0, ge=0)  # width of one expert's MLP
    # gqa | mla (DeepSeek multi-head latent attention)
    attention: str = c("gqa", one_of=("gqa", "mla"))
    sliding_window: Optional[int] = c(None, ge=1)  # sliding-window size, None when full attention
    rms_norm_eps: float = c(1e-6, gt=0)  # rms_norm_eps
    rope_theta: float = 1_000_000.0  # rope_theta
    tie_word_embeddings: bool = False  # lm_head shares the embedding matrix
    max_position_embeddings: int = c(40960, ge=1)  # longest supported context


@dataclass
class AlgorithmSpec:
    """The RL algorithm and how verl runs it."""

    name: str = c("grpo", one_of=("grpo", "ppo", "gspo", "dapo"))  # grpo | ppo | gspo | dapo
    # verl algorithm.adv_estimator (gae for ppo)
    adv_estimator: str = c("grpo", one_of=ADV_ESTIMATORS, src=f"{ALGOS}:AdvantageEstimator")
    # verl actor.policy_loss.loss_mode (gspo for GSPO)
    policy_loss: str = c("vanilla", one_of=POLICY_LOSSES, src=f"{ALGOS}:register_policy_loss")
    # verl actor.loss_agg_mode
    loss_agg_mode: str = c("token-mean", one_of=LOSS_AGG_MODES, src=f"{ALGOS}:agg_loss")
    use_critic: bool = False  # PPO trains a value model
    use_kl_loss: bool = False  # KL(actor || reference) as a loss term (needs a reference policy)
    kl_loss_coef: float = c(0.001, ge=0)  # weight of the KL loss
    clip_ratio_low: float = c(0.2, ge=0)  # PPO clip, lower side
    clip_ratio_high: float = c(0.2, ge=0)  # PPO clip, upper side (DAPO clip-higher: 0.28)
    # dual-clip bound for negative advantages (verl default 3.0; DAPO 10.0)
    clip_ratio_c: float = c(3.0, gt=1)
    gamma: float = c(1.0, ge=0, le=1)  # GAE discount (verl algorithm.gamma; adv_estimator=gae)
    lam: float = c(1.0, ge=0, le=1)  # GAE lambda (verl algorithm.lam; adv_estimator=gae)
    # PPO critic: value clip around the old values (verl critic.cliprange_value)
    cliprange_value: float = c(0.5, ge=0)
    filter_groups: bool = False  # DAPO dynamic sampling: drop groups whose metric is all equal
    filter_groups_metric: str = "acc"  # what must vary within a group (acc: the unshaped score)
    # DAPO: give up after this many generation batches (<=0: never)
    max_num_gen_batches: int = 10
    # DAPO: penalty buffer, share of max_response_length (0: off)
    overlong_buffer_fraction: float = c(0.0, ge=0, le=1)
    overlong_penalty_factor: float = c(1.0, ge=0)  # DAPO: penalty at max_response_length
    lr: float = c(1e-6, gt=0)  # actor learning rate
    entrypoint: str = "verl.trainer.main_ppo"  # python -m module that runs the job
    config_name: Optional[str] = None  # --config-name for the entrypoint (None: by train engine)
    extra_overrides: Dict[str, Any] = field(default_factory=dict)  # verl keys this algorithm sets
    # Optional knobs below: None leaves verl's own default (the key is not rendered).
    entropy_coeff: Optional[float] = None  # entropy bonus weight (verl default 0)
    ppo_epochs: Optional[int] = None  # passes over each batch (verl default 1)
    use_kl_in_reward: Optional[bool] = None  # KL penalty inside the reward (verl default false)
    gen_batch_size: Optional[int] = None  # prompts generated per try (DAPO: 2 x train batch)
    reward_manager: Optional[str] = c(  # verl reward manager name (dapo, naive ...)
        None,
        one_of=(None, "dapo", "gdpo", "naive", "remote"),
        src="verl@0.9.1:verl/experimental/reward_loop/reward_manager/registry.py:register "
        "(the @register names; 0.8.0 the same)",
    )
    # Explicit verl-level overlong shaping (imported scripts, the seed recipes): when set it
    # replaces the rendering derived from overlong_buffer_fraction.
    overlong_buffer: Optional[bool] = None  # DAPO overlong reward shaping on
    overlong_buffer_len: Optional[int] = None  # tokens before max_resp_len where the penalty starts
    overlong_max_resp_len: Optional[int] = None  # response length the shaping measures against


@dataclass
class TrainSpec:
    """Training (log-prob recompute + update) engine layout and batch sizes."""

    engine: str = c("megatron", one_of=("megatron", "fsdp"))  # megatron (MindSpeed on NPU) | fsdp
    tp: int = c(1, ge=1, src=MCORE)  # Megatron tensor parallel size
    pp: int = c(1, ge=1, src=MCORE)  # Megatron pipeline parallel size
    ep: int = c(1, ge=1, src=MCORE)  # Megatron expert parallel size
    etp: int = c(1, ge=1, src=MCORE)  # Megatron expert tensor parallel size
    cp: int = c(1, ge=1, src=MCORE)  # context parallel size
    sequence_parallel: bool = False  # Megatron sequence parallel (needs tp > 1)
    param_offload: bool = False  # offload parameters to host memory between phases
    optimizer_offload: bool = False  # offload optimizer states to host memory
    fsdp_size: int = c(-1, ge=-1, ne=0, src=VERL_FSDP)  # FSDP shard group size (-1: all devices)
    ulysses_sp: int = c(1, ge=1)  # Ulysses sequence parallel size (FSDP)
    # prompts per step (verl data.train_batch_size)
    train_batch_size: int = c(32, ge=1, src=VERL_CHECK)
    ppo_mini_batch_size: int = c(16, ge=1, src=VERL_CHECK)  # prompts per optimizer step
    # sequences per forward on one device (update)
    ppo_micro_batch_size_per_gpu: int = c(2, ge=1, src=VERL_CHECK)
    # sequences per forward on one device (recompute)
    log_prob_micro_batch_size_per_gpu: int = c(2, ge=1)
    max_prompt_length: int = c(1024, ge=1)  # data.max_prompt_length
    max_response_length: int = c(2048, ge=1)  # data.max_response_length
    use_dynamic_bsz: bool = False  # token-budget micro-batching (changes batch composition)
    # parameter / compute dtype
    dtype: str = c("bfloat16", one_of=("bfloat16", "float16", "float32"))
    epochs: int = c(1, ge=1)  # trainer.total_epochs
    # trainer.total_training_steps; null: verl's default (total_epochs bounds the run)
    steps: Optional[int] = c(100, ge=1)
    # Optional knobs below: None leaves verl's / MindSpeed's own default (the key is not rendered).
    # offload gradients (Megatron; verl 0.8.0 has it, 0.9.1 not)
    grad_offload: Optional[bool] = None
    ppo_max_token_len_per_gpu: Optional[int] = None  # token budget per device with dynamic bsz
    recompute_granularity: Optional[str] = None  # activation recompute: full | selective
    recompute_method: Optional[str] = None  # uniform | block
    recompute_num_layers: Optional[int] = None  # layers per recompute unit
    # MindSpeed fused kernels on the training side; the seed's vLLM-side patch was aligned
    # against the path they select, so the seed's values matter for logdiff 0.
    use_fused_rmsnorm: Optional[bool] = None  # fused RMSNorm kernel
    use_fused_rotary_pos_emb: Optional[bool] = None  # fused rotary embedding kernel
    apply_rope_fusion: Optional[bool] = None  # Megatron's RoPE fusion switch
    use_flash_attn: Optional[bool] = None  # flash attention kernel (with attention_backend=flash)


@dataclass
class RolloutSpec:
    """Inference (sampling) engine settings."""

    name: str = c("vllm", one_of=("vllm",))  # verl rollout.name (vllm-ascend registers as vllm)
    tp: int = c(1, ge=1)  # tensor parallel size per replica
    dp: int = c(1, ge=1)  # data parallel size per replica
    pp: int = c(1, ge=1)  # pipeline parallel size (vLLM PP; needs the verl PP patch)
    ep: int = c(1, ge=1)  # expert parallel size (verl asserts ep == tp * dp when > 1)
    # eager | piecewise | full | full_decode_only | full_and_piecewise
    graph_mode: str = c(
        "eager", one_of=("eager", "piecewise", "full", "full_decode_only", "full_and_piecewise")
    )
    block_size: int = c(128, ge=1)  # paged KV cache block size (tokens)
    prefix_caching: bool = False  # reuse KV blocks across requests
    chunked_prefill: bool = False  # split long prefills across steps
    max_num_seqs: int = c(256, ge=1)  # concurrent sequences per replica
    max_num_batched_tokens: int = c(8192, ge=1)  # token budget per engine step
    # device memory fraction for weights + KV cache
    gpu_memory_utilization: float = c(0.8, gt=0, le=1, src=VLLM_CACHE)
    n: int = c(8, ge=1, src=VLLM_SAMPLING)  # samples per prompt (GRPO group size)
    temperature: float = c(1.0, ge=0, src=VLLM_SAMPLING)  # sampling temperature
    top_p: float = c(1.0, gt=0, le=1, src=VLLM_SAMPLING)  # nucleus sampling (1.0: off)
    top_k: int = c(-1, ge=-1, src=VLLM_SAMPLING)  # top-k sampling (-1: off)
    # raw_logprobs | processed_logprobs | *_logits | auto (raw at T=1, else processed)
    logprobs_mode: str = c(
        "processed_logprobs", one_of=LOGPROBS_MODES + ("auto",), src=VLLM_LOGPROBS
    )
    attention_backend: str = "FLASH_ATTN"  # vLLM attention backend name (FA3 path on Ascend)
    calculate_log_probs: bool = True  # return each sampled token's log-prob
    # verl rollout.log_prob_micro_batch_size_per_gpu
    log_prob_micro_batch_size_per_gpu: int = c(2, ge=1)
    # verl's full_determinism is never rendered: one seed per replica makes the n samples equal.
    # One seed per request (a verl patch); None: on in strict where the stack has it.
    per_request_seed: Optional[bool] = None


@dataclass
class CollectiveSpec:
    """How collectives reduce: determinism and order."""

    # hccl_strict | lccl_aiv | default
    name: str = c("default", one_of=("hccl_strict", "lccl_aiv", "default"))
    # HCCL_DETERMINISTIC: false | true | strict
    hccl_deterministic: str = c("false", one_of=("false", "true", "strict"), src=HCCL_DOC)
    lccl_deterministic: bool = False  # LCCL_DETERMINISTIC=1 (with HCCL_OP_EXPANSION_MODE=AIV)
    op_expansion_mode: Optional[str] = None  # HCCL_OP_EXPANSION_MODE (AIV or None)
    hccl_algo: Optional[str] = None  # HCCL_ALGO pinned on every rank (None: library choice)
    # reduction order of all-reduce partials: ring | tree (used in emulation)
    order: str = c("ring", one_of=("ring", "tree"))
    connect_timeout_s: int = c(1800, ge=1)  # HCCL_CONNECT_TIMEOUT on NPU (the seed: 3600)
    exec_timeout_s: int = c(3600, ge=1)  # HCCL_EXEC_TIMEOUT on NPU


@dataclass
class StackVersions:
    """Declared versions of the target stack, normally set by one `conf/stack/` profile
    (`stack=seed|release|prerelease`); `topl doctor` checks what is really installed. Rules,
    rendering and doctor read what each version supports through `topl.launcher.facts`."""

    profile: str = "release"  # the conf/stack profile these come from (custom: set by hand)
    verl: str = "0.9.1"  # verl release
    vllm: str = "0.23.0"  # vLLM release (vllm-ascend X pairs with vLLM X)
    vllm_ascend: str = "0.23.0.post1"  # vllm-ascend release
    cann: str = "9.1.0"  # CANN toolkit
    torch: str = "2.10.0"  # torch (torch_npu pins one exact torch release)
    torch_npu: str = "2.10.0.post4"  # torch_npu
    # MindSpeed branch (the batch-invariant switches need core_r0.16.0)
    mindspeed: str = "core_r0.16.0"
    # verl source patches the patch module applies: vllm_pp, per_request_seed, mindspeed_batch_invariant
    verl_patches: List[str] = field(default_factory=list)
    # vllm-ascend source patches: true_on_policy (the seed's FA3 + batch-invariant ops)
    vllm_ascend_patches: List[str] = field(default_factory=list)
    batch_invariant_ops: bool = False  # CANN batch_invariant_ops package installed
    flash_attn_npu: bool = False  # flash-attention-npu (FA3 kernels) installed


@dataclass
class SlurmSpec:
    """One Slurm allocation for backend=slurm: what `sbatch` is asked for (the directives topl
    writes into the run directory's slurm.sbatch) and how Ray starts inside it."""

    partition: Optional[str] = None  # sbatch --partition (the contract wants one named)
    account: Optional[str] = None  # sbatch --account
    qos: Optional[str] = None  # sbatch --qos
    # sbatch --time in minutes (the contract wants one: partitions often require a limit)
    time_min: Optional[int] = c(None, ge=1)
    # devices per node as a generic resource (sbatch --gres=NAME:devices_per_node); None: no --gres
    gres: Optional[str] = c(None, one_of=(None, "gpu", "npu"))
    cpus_per_node: Optional[int] = c(None, ge=1)  # sbatch --cpus-per-task (one task per node)
    # more sbatch directives, each `--flag=value`; none may repeat one a field above sets
    sbatch: List[str] = field(default_factory=list)
    # verl: the rendered verl command on a Ray cluster started in the allocation; embedded: topl's reference engines on the allocation's first node (no Ray, no verl)
    run: str = c("verl", one_of=("verl", "embedded"))
    ray_port: Optional[int] = c(None, ge=1024, le=65535)  # Ray head's port; None: a free one
    # longest wait for every node's Ray to join the head before the job fails
    ray_ready_s: float = c(300.0, gt=0)
    doctor: bool = True  # run topl's doctor on every node of the allocation before Ray starts


@dataclass
class ClusterSpec:
    """Where the job runs and how it is launched."""

    name: str = "local"  # local | atlas_a2 | atlas_a3 | slurm_a3
    device: str = c("cpu", one_of=("npu", "cuda", "cpu"))  # verl trainer.device: npu | cuda | cpu
    soc: Optional[str] = c(None, one_of=(None, "A2", "A3"))  # A2 | A3 | None
    nodes: int = c(1, ge=1)  # nodes in the job
    devices_per_node: int = c(1, ge=1)  # accelerators per node
    # What the node hardware holds, cited in conf/cluster/*.yaml; None for local (the machine
    # decides) and for a cluster file of your own that does not state it: then nothing is checked.
    # devices one node of the group holds; devices_per_node may not exceed it (TOP-RES-010)
    max_devices_per_node: Optional[int] = c(None, ge=1)
    device_memory_gb: float = c(24.0, gt=0)  # memory of one device (GB)
    ray_address: Optional[str] = None  # Ray dashboard address for ray_job (http://host:8265)
    # longest wait for one answer from the Ray head (connect, submit, status)
    ray_timeout_s: float = c(30.0, gt=0)
    # local | subprocess | ray_job | slurm
    backend: str = c("local", one_of=BACKENDS)
    slurm: SlurmSpec = field(default_factory=SlurmSpec)  # backend=slurm: the allocation
    python: str = "python3"  # interpreter the subprocess backend runs
    external_modules: Optional[str] = None  # VERL_USE_EXTERNAL_MODULES (the alignment patch module)
    versions: StackVersions = field(default_factory=StackVersions)
    env: Dict[str, str] = field(default_factory=dict)  # extra env vars for every process


@dataclass
class LocalRunSpec:
    """The embedded local job (reference engines on this machine). Steps, prompts per step and
    samples per prompt come from train.steps, train.train_batch_size and rollout.n."""

    seed: int = 0  # seed of weights, data and sampling
    # AdamW learning rate of the tiny model (algorithm.lr is the real model's)
    lr: float = c(1e-2, gt=0)
    critic_lr: float = c(1e-2, gt=0)  # AdamW learning rate of the tiny PPO critic
    # toy task with a verifiable reward: reverse the prompt's digits
    task: str = c("reverse", one_of=("reverse",))
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
    train_files: Optional[List[str]] = None  # verl data.train_files; None: <data_dir>/train.parquet
    val_files: Optional[List[str]] = None  # verl data.val_files; None: <data_dir>/test.parquet
    # Recipes that reproduce a script (`topl recipes import`) keep its remaining overrides here.
    # verl keys without a spec field, rendered verbatim last (replacing a rendered key of the same name; a leading + appends a key verl lacks)
    verl_overrides: Dict[str, Any] = field(default_factory=dict)


def register_configs() -> None:
    """Put the schema in Hydra's ConfigStore; every group file is validated against it.
    (The sweeper plugin registers its own config when Hydra's plugin discovery imports it.)"""
    from hydra.core.config_store import ConfigStore  # here: a cached `check` never imports Hydra

    ConfigStore.instance().store(name="topl_schema", node=JobSpec)


# Small facts about a spec, said once (contract rules, memory estimates, render, doctor, backends).
def world_size(s: JobSpec) -> int:
    """Devices the job uses."""
    return s.cluster.nodes * s.cluster.devices_per_node


def whole_nodes(world: int, most: int) -> tuple[int, int]:
    """(nodes, devices per node): the fewest nodes of at most `most` devices that hold `world`
    devices, each node using the same count (verl places n_gpus_per_node on every node)."""
    per = next(p for p in range(min(most, world), 0, -1) if world % p == 0)
    return world // per, per


def is_strict(s: JobSpec) -> bool:
    """True on-policy: rollout and training must agree bit for bit."""
    return s.alignment.mode == "strict"


def is_moe(s: JobSpec) -> bool:
    return s.model.num_experts > 0


def on_npu(s: JobSpec) -> bool:
    return s.cluster.device == "npu"
