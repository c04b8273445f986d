"""Memory-fit estimates per device, from the model's architecture facts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher.spec.job import world_size

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec, ModelSpec

GB = 1e9


def param_counts(m: ModelSpec) -> dict[str, int]:
    """Parameter counts: total, non-expert ("dense"), expert, and the largest single layer."""
    attn = m.hidden_size * m.head_dim * (2 * m.num_heads + 2 * m.num_kv_heads) + 2 * m.head_dim
    if m.num_experts:
        expert = m.num_experts * 3 * m.hidden_size * m.moe_intermediate_size
        mlp_dense = m.hidden_size * m.num_experts  # router
    else:
        expert, mlp_dense = 0, 3 * m.hidden_size * m.intermediate_size
    layer_dense = attn + mlp_dense + 2 * m.hidden_size
    embed = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2)
    dense = m.num_layers * layer_dense + embed + m.hidden_size
    experts = m.num_layers * expert
    return {
        "total": dense + experts,
        "dense": dense,
        "expert": experts,
        "largest_layer": max(layer_dense + expert, m.vocab_size * m.hidden_size),
    }


def megatron_train_bytes(s: JobSpec) -> float:
    """Per device: bf16 weights (2 B) + fp32 grads (4 B) on the shard, fp32 master+Adam (12 B) over dp.

    shard = dense / (tp*pp) + expert / (ep*etp*pp); dense dp = world/(tp*pp*cp), expert dp =
    world/(ep*etp*pp). Offload flags move the matching term to host memory.
    """
    t, world = s.train, world_size(s)
    pc = param_counts(s.model)
    shards = [
        (pc["dense"] / (t.tp * t.pp), max(world // (t.tp * t.pp * t.cp), 1)),
        (pc["expert"] / (t.ep * t.etp * t.pp), max(world // (t.ep * t.etp * t.pp), 1)),
    ]
    total = 0.0
    for p, dp in shards:
        total += 0 if t.param_offload else 2 * p
        total += 4 * p
        total += 0 if t.optimizer_offload else 12 * p / dp
    return total


def fsdp_train_bytes(s: JobSpec) -> float:
    """ZeRO-3 model states per device: the closed form of DeepSpeed's estimator
    (`zero3_gpu_bytes`). DeepSpeed is never imported here (it pulls in torch: seconds on every
    `check`); tests/cli/test_front_door.py proves the two equal where DeepSpeed is installed."""
    pc = param_counts(s.model)
    return float(
        zero3_gpu_bytes(
            total_params=pc["total"],
            largest_layer_params=pc["largest_layer"],
            num_gpus_per_node=s.cluster.devices_per_node,
            num_nodes=s.cluster.nodes,
            cpu_offload=s.train.param_offload or s.train.optimizer_offload,
            cpu_offload_params=s.train.param_offload,
        )
    )


def zero3_gpu_bytes(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int,
    num_nodes: int,
    cpu_offload: bool,
    cpu_offload_params: bool,
) -> int:
    """The device term of deepspeed@0.19.8:deepspeed/runtime/zero/stage3.py:
    estimate_zero3_model_states_mem_needs: 4 B per largest-layer parameter, plus 2 B (bf16
    weights, optimizer offloaded) or 18 B (weights, grads, fp32 master and Adam) per parameter over
    all devices; nothing more with params offloaded too."""
    gpus = num_nodes * num_gpus_per_node
    largest = 4 * largest_layer_params
    if cpu_offload and cpu_offload_params:
        return largest
    return largest + int((2 if cpu_offload else 18) * total_params / gpus)


def train_bytes(s: JobSpec) -> float:
    return megatron_train_bytes(s) if s.train.engine == "megatron" else fsdp_train_bytes(s)


def rollout_weight_bytes(s: JobSpec) -> float:
    """bf16 weights of one rollout rank: dense over tp*pp, experts over max(ep, tp)*pp."""
    r, pc = s.rollout, param_counts(s.model)
    return 2 * (pc["dense"] / (r.tp * r.pp) + pc["expert"] / (max(r.ep, r.tp) * r.pp))


def kv_bytes_per_token(s: JobSpec) -> float:
    """K and V, bf16, for the layers and KV heads one rollout rank holds."""
    m, r = s.model, s.rollout
    layers = -(-m.num_layers // r.pp)
    heads = max(m.num_kv_heads // r.tp, 1)
    return 2 * layers * heads * m.head_dim * 2


def rollout_fit(s: JobSpec) -> dict[str, float]:
    """Rollout side only, per device: weights GB, KV room GB, full-length sequences that fit."""
    weights = rollout_weight_bytes(s)
    kv_room = s.rollout.gpu_memory_utilization * s.cluster.device_memory_gb * GB - weights
    seq = s.train.max_prompt_length + s.train.max_response_length
    return {
        "rollout_weights_gb": weights / GB,
        "kv_room_gb": kv_room / GB,
        "kv_seqs": kv_room / (kv_bytes_per_token(s) * seq),
    }


def estimate(s: JobSpec) -> dict[str, float]:
    """Per-device GB: training states, rollout weights, KV room, and the device budget."""
    return {
        "train_gb": train_bytes(s) / GB,
        "device_gb": s.cluster.device_memory_gb,
        **rollout_fit(s),
    }
