"""Resource arithmetic: layouts that cannot be placed on the declared cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.contract.verl_firststep import legacy_trainer
from topl.launcher.render.command import command
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_moe, whole_nodes, world_size
from topl.launcher.spec.memory import param_counts

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec


@rule(
    "TOP-RES-001",
    ERROR,
    "training model-parallel size tp*pp*cp divides the world size",
    (
        "train.tp",
        "train.pp",
        "train.cp",
        "cluster.nodes",
        "cluster.devices_per_node",
        "train.engine",
    ),
    "choose tp*pp*cp that divides nodes*devices_per_node, or change the cluster",
)
def train_world(s: JobSpec) -> Outcome:
    """Megatron builds dp = world / (tp*pp*cp) replicas; a remainder leaves ranks without a group."""
    mp = s.train.tp * s.train.pp * s.train.cp
    if s.train.engine == "megatron" and (mp > world_size(s) or world_size(s) % mp):
        return f"tp*pp*cp = {mp} does not divide the world size {world_size(s)}"


@rule(
    "TOP-RES-002",
    ERROR,
    "expert parallel size divides the number of experts (MoE only)",
    ("train.ep", "model.num_experts"),
    "set train.ep to a divisor of model.num_experts (1 for dense models)",
)
def expert_split(s: JobSpec) -> Outcome:
    """Each EP rank owns num_experts/ep experts; EP on a dense model has nothing to split."""
    if not is_moe(s) and s.train.ep > 1:
        return f"train.ep={s.train.ep} on a dense model"
    if is_moe(s) and s.model.num_experts % s.train.ep:
        return f"{s.model.num_experts} experts cannot be split over ep={s.train.ep}"


@rule(
    "TOP-RES-003",
    ERROR,
    "attention heads and KV heads split evenly over tensor parallel ranks",
    ("model.num_heads", "model.num_kv_heads", "train.tp", "rollout.tp", "train.engine"),
    "use a tp that divides num_heads and divides (or is a multiple of) num_kv_heads",
)
def heads_vs_tp(s: JobSpec) -> Outcome:
    """Megatron needs query groups % tp == 0; vLLM replicates KV heads when tp > kv heads."""
    h, kv = s.model.num_heads, s.model.num_kv_heads
    if s.train.engine == "megatron" and (h % s.train.tp or kv % s.train.tp):
        return f"train.tp={s.train.tp} does not divide heads={h} and kv_heads={kv}"
    t = s.rollout.tp
    if h % t or (kv % t and t % kv):
        return f"rollout.tp={t} does not split heads={h} / kv_heads={kv}"


@rule(
    "TOP-RES-004",
    ERROR,
    "rollout replicas (tp*pp*dp) fit the world size",
    ("rollout.tp", "rollout.pp", "rollout.dp", "cluster.nodes", "cluster.devices_per_node"),
    "pick rollout tp*pp*dp that divides nodes*devices_per_node",
)
def rollout_world(s: JobSpec) -> Outcome:
    """verl colocates rollout replicas on the training devices: whole replicas must tile the world."""
    per = s.rollout.tp * s.rollout.pp * s.rollout.dp
    if per > world_size(s) or world_size(s) % per:
        return f"rollout tp*pp*dp = {per} does not divide the world size {world_size(s)}"


@rule(
    "TOP-RES-005",
    ERROR,
    "verl batch sizes divide evenly over data-parallel ranks",
    (
        "train.train_batch_size",
        "train.ppo_mini_batch_size",
        "train.ppo_micro_batch_size_per_gpu",
        "rollout.n",
        "cluster.devices_per_node",
        "cluster.nodes",
        "train.cp",
        "train.engine",
        "train.pp",
        "train.tp",
        "train.ulysses_sp",
        "train.use_dynamic_bsz",
        "cluster.backend",
        "algorithm.entrypoint",
        "cluster.versions.verl",
        "verl_overrides",
    ),
    "make train_batch_size*n a multiple of dp*micro batch and train_batch_size a multiple of the "
    "mini batch (verl 0.9's default trainer pads the batch to one itself)",
)
def batch_divisibility(s: JobSpec) -> Outcome:
    """Mirrors verl's validate_config (verl@0.9.1:verl/utils/config.py:validate_config): without
    dynamic batch size, train_batch_size*n must split into Megatron dp * micro batch (into the
    device count on FSDP), and each mini batch's share of a rank into whole micro batches
    (verl@0.9.1:verl/workers/engine/utils.py:prepare_micro_batches). With dynamic batch size
    verl makes micro batches from a token budget: none of these apply (verl skips them too).
    The mini batch over dp ranks, which holds either way, is TOP-INIT-003. verl 0.9's V1 trainer
    pads a batch that is not a multiple of the mini batch (verl@0.9.1:verl/trainer/ppo/v1/
    trainer_base.py:PPOTrainer._get_required_batch_multiple, upsample_batch_to_divisible_size);
    verl 0.8.0's and DAPO's RayPPOTrainer split it as it is (verl@0.8.0:verl/utils/
    tensordict_utils.py:make_iterator asserts the per-rank batch % per-rank mini batch == 0)."""
    t = s.train
    if t.ppo_mini_batch_size > t.train_batch_size:
        return (
            f"ppo_mini_batch_size={t.ppo_mini_batch_size} > train_batch_size={t.train_batch_size}"
        )
    if t.train_batch_size % t.ppo_mini_batch_size and not _pads_to_mini(s):
        return "train_batch_size is not a multiple of ppo_mini_batch_size"
    if t.use_dynamic_bsz:
        return None
    megatron = t.engine == "megatron"
    mp = t.tp * t.pp * t.cp if megatron else t.ulysses_sp
    dp = max(world_size(s) // max(mp, 1), 1)
    real, micro = t.train_batch_size * s.rollout.n, t.ppo_micro_batch_size_per_gpu
    need = dp * micro if megatron else world_size(s)
    if real % need:
        how = f"dp*micro = {dp}*{micro}" if megatron else f"the device count {need}"
        return f"train_batch_size*n = {real} is not divisible by {how}"
    mini = t.ppo_mini_batch_size * s.rollout.n
    if mini % dp == 0 and (mini // dp) % micro:
        return f"mini batch {mini} sequences over dp={dp} does not split into micro={micro}"


def _pads_to_mini(s: JobSpec) -> bool:
    """verl's V1 trainer runs the job (it pads the batch to whole mini batches)."""
    return backend_traits.of(s).remote and legacy_trainer(s, command(s)) is False


@rule(
    "TOP-RES-006",
    ERROR,
    "rollout expert parallel equals tp*dp (verl asserts it)",
    ("rollout.ep", "rollout.tp", "rollout.dp", "model.num_experts"),
    "set rollout.ep to 1 or to rollout.tp*rollout.dp",
)
def rollout_ep(s: JobSpec) -> Outcome:
    """verl's vLLM rollout asserts expert_parallel_size == tp * dp when EP is used."""
    if s.rollout.ep > 1 and s.rollout.ep != s.rollout.tp * s.rollout.dp:
        return f"rollout.ep={s.rollout.ep} but tp*dp={s.rollout.tp * s.rollout.dp}"
    if s.rollout.ep > 1 and not is_moe(s):
        return "rollout.ep > 1 on a dense model"


@rule(
    "TOP-RES-007",
    WARNING,
    "layers split evenly over rollout pipeline stages",
    ("model.num_layers", "rollout.pp"),
    "choose rollout.pp dividing num_layers",
)
def layers_vs_pp(s: JobSpec) -> Outcome:
    """vLLM accepts uneven stages (vllm@0.18.0:vllm/distributed/utils.py:get_pp_indices) but the
    slowest stage sets the pace. (Megatron's side is an error: TOP-ENG-005.)"""
    if s.model.num_layers % s.rollout.pp:
        return f"{s.model.num_layers} layers over rollout.pp={s.rollout.pp} stages is uneven"


@rule(
    "TOP-RES-008",
    WARNING,
    "sequence parallel only with tensor parallel",
    ("train.sequence_parallel", "train.tp"),
    "set train.sequence_parallel=false when train.tp=1",
)
def sp_needs_tp(s: JobSpec) -> Outcome:
    """Megatron ignores sequence parallel at tp=1 (verl's default turns it on)."""
    if s.train.sequence_parallel and s.train.tp == 1:
        return "sequence_parallel is on with train.tp=1"


LOCAL_MAX_PARAMS = 50e6  # the embedded engines (local backend, `topl probe`) build at most this


@rule(
    "TOP-RES-009",
    ERROR,
    "the local backend runs only models the reference engines can hold",
    (
        "cluster.backend",
        "model.name",
        "cluster.name",
        "cluster.device",
        "model.head_dim",
        "model.hidden_size",
        "model.intermediate_size",
        "model.num_experts",
        "model.num_heads",
        "model.num_kv_heads",
        "model.num_layers",
        "model.tie_word_embeddings",
        "model.vocab_size",
    ),
    "use model=tiny_dense or model=tiny_moe locally, or a cluster with backend subprocess/ray_job",
)
def local_model_size(s: JobSpec) -> Outcome:
    """The embedded engines run on this machine's CPU: a real checkpoint would not fit or finish."""

    if not backend_traits.of(s).remote:  # the reference engines, here
        total = param_counts(s.model)["total"]
        if total > LOCAL_MAX_PARAMS:
            return f"{s.model.name} has {total / 1e9:.1f}B parameters; the local backend takes at most 50M"
        if s.cluster.device == "npu":
            return (
                f"cluster {s.cluster.name} is an NPU cluster but backend=local runs on this machine"
            )


@rule(
    "TOP-RES-010",
    ERROR,
    "a node runs no more devices than the cluster group's node hardware holds",
    ("cluster.devices_per_node", "cluster.max_devices_per_node"),
    "run the same devices on more nodes, at most cluster.max_devices_per_node on each (the "
    "message gives cluster.nodes and cluster.devices_per_node); fewer devices per node than the "
    "node holds are fine",
)
def node_holds(s: JobSpec) -> Outcome:
    """verl places each node's share as one Ray placement group of trainer.n_gpus_per_node
    one-device bundles, STRICT_PACK (all on one node), and waits for it to be ready (verl@0.9.1:
    verl/single_controller/ray/base.py:RayResourcePool.get_placement_groups, the pool
    [n_gpus_per_node] * nnodes: verl/trainer/ppo/v1/trainer_base.py; 0.8.0 the same). Its
    check before (ResourcePoolManager._check_resource_available) adds devices over all nodes:
    1 x 32 on two nodes of 16 passes it, then waits for a node that never appears. What a node
    holds is the group's hardware: cluster.max_devices_per_node, from the vendor documents
    conf/cluster/*.yaml names; a group that does not state it is not checked. The rule reads
    nothing else (the layout it names is per node), so `check --fix`, which never changes the
    hardware, sees at once that only you can clear it."""
    per, most = s.cluster.devices_per_node, s.cluster.max_devices_per_node
    if most is None or per <= most:
        return None
    k, fits = whole_nodes(per, most)
    return (
        f"cluster.devices_per_node={per}, but a node of this group holds {most} devices "
        f"(cluster.max_devices_per_node): run the same devices on {k} times as many nodes of "
        f"{fits} each (from 1 node: cluster.nodes={k} cluster.devices_per_node={fits})"
    )
