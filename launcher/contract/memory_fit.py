"""Memory fit: layouts whose states cannot live on one device are rejected before launch."""
from topl.launcher.contract.core import ERROR, WARNING, rule
from topl.launcher.memory_estimate import estimate

HEADROOM = 0.9  # leave 10% for activations, workspace and fragmentation


@rule("TOP-MEM-001", ERROR, "training model states fit one device",
      ("model.name", "train.engine", "train.tp", "train.pp", "train.ep", "train.etp",
       "train.param_offload", "train.optimizer_offload", "cluster.device_memory_gb"),
      "raise tp/pp/ep, turn on train.param_offload / train.optimizer_offload, or add nodes")
def train_fit(s):
    """Megatron: shard = dense/(tp*pp) + expert/(ep*etp*pp); bytes = 2 (bf16 weights) + 4 (fp32
    grads) per shard parameter + 12 (fp32 master, Adam m, v) / dp with the distributed optimizer.
    FSDP: DeepSpeed's ZeRO-3 estimator (estimate_zero3_model_states_mem_needs), or its closed
    form without DeepSpeed (memory_estimate.zero3_gpu_bytes)."""
    e = estimate(s)
    if e["train_gb"] > HEADROOM * e["device_gb"]:
        return f"training needs ~{e['train_gb']:.1f} GB per device, {HEADROOM * e['device_gb']:.1f} GB usable"


@rule("TOP-MEM-002", ERROR, "rollout weights leave room for at least one full-length sequence's KV cache",
      ("model.name", "rollout.tp", "rollout.pp", "rollout.gpu_memory_utilization", "cluster.device_memory_gb"),
      "raise rollout.tp/pp or rollout.gpu_memory_utilization, or shorten max_prompt/response_length")
def rollout_fit(s):
    """weights = 2 B x (dense/(tp*pp) + expert/(max(ep,tp)*pp)); KV/token = 2 x layers/pp x
    max(kv_heads/tp, 1) x head_dim x 2 B; room = utilisation x device - weights."""
    e = estimate(s)
    if e["kv_seqs"] < 1:
        return (f"rollout weights ~{e['rollout_weights_gb']:.1f} GB leave {e['kv_room_gb']:.1f} GB: "
                "not one full-length sequence fits the KV cache")


@rule("TOP-MEM-003", WARNING, "the KV cache holds max_num_seqs full-length sequences",
      ("rollout.max_num_seqs", "train.max_prompt_length", "train.max_response_length"),
      "lower rollout.max_num_seqs or raise rollout.tp (vLLM will preempt and recompute otherwise)")
def rollout_concurrency(s):
    """Preemption recomputes prefixes: not wrong, but a different batch history and slower."""
    e = estimate(s)
    if 1 <= e["kv_seqs"] < s.rollout.max_num_seqs:
        return f"KV room for ~{int(e['kv_seqs'])} full-length sequences, max_num_seqs={s.rollout.max_num_seqs}"
