"""verl's start-up assertions as rules: what fires after submission (trainer, worker and engine
init, the first step), checked in `topl check` over the command verl will receive.

Each rule cites the assertion it mirrors in `ASSERTIONS`; tests/contract/test_verl_startup.py finds every
cited text in the installed verl (by AST, inside the cited function), so a new verl shows what
changed. The assertions are the same in verl 0.8.0, 0.9.0 and 0.9.1 (read from each release).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.facts.verl_tables import ARR
from topl.launcher.render.command import Command, command, note
from topl.launcher.spec.job import is_moe, is_strict

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

VERSIONS = ("0.8.0", "0.9.0", "0.9.1")
A, R_, MC = f"{ARR}.actor", f"{ARR}.rollout", f"{ARR}.actor.megatron"


@dataclass(frozen=True)
class Cite:
    path: str  # below the verl package
    symbol: str  # Class.method or function holding the assertion
    text: str  # the asserted condition, as verl writes it

    def __str__(self) -> str:
        return f"verl@{VERSIONS[-1]}:verl/{self.path}:{self.symbol} (same in {', '.join(VERSIONS)})"


ASSERTIONS = {
    "dynamic_bsz_equal": Cite(
        "workers/engine_workers.py",
        "ActorRolloutRefWorker.init_model",
        "self.config.actor.use_dynamic_bsz == self.config.rollout.log_prob_use_dynamic_bsz",
    ),
    "micro_set": Cite(
        "workers/engine_workers.py",
        "ActorRolloutRefWorker.init_model",
        "self.config.rollout.log_prob_micro_batch_size_per_gpu is not None",
    ),
    "token_len_set": Cite(
        "workers/engine_workers.py",
        "ActorRolloutRefWorker.init_model",
        "self.config.rollout.log_prob_max_token_len_per_gpu is not None",
    ),
    "rollout_world": Cite(
        "workers/engine_workers.py",
        "ActorRolloutRefWorker.init_model",
        "self.world_size % infer_world_size == 0",
    ),
    "mini_batch_dp": Cite(
        "workers/engine_workers.py",
        "TrainingWorker.train_mini_batch",
        "mini_batch_size % self.engine.get_data_parallel_size() == 0",
    ),
    "micro_divides": Cite(
        "workers/engine/utils.py",
        "prepare_micro_batches",
        "total_data_size % (force_group_size * micro_batch_size_per_gpu) == 0",
    ),
    "real_batch": Cite(
        "utils/config.py", "validate_config", "real_train_batch_size % minimal_bsz == 0"
    ),
    "ulysses_heads": Cite(
        "models/transformers/monkey_patch.py",
        "apply_monkey_patch",
        "num_attention_heads % ulysses_sp_size == 0",
    ),
    "ulysses_kv_heads": Cite(
        "models/transformers/monkey_patch.py",
        "apply_monkey_patch",
        "num_key_value_heads % ulysses_sp_size == 0 or ulysses_sp_size % num_key_value_heads == 0",
    ),
}


def actor_dp(cmd: Command) -> int:
    """The actor's data-parallel size as verl builds it from the command."""
    gpus = cmd.get("trainer.n_gpus_per_node", 1) * cmd.get("trainer.nnodes", 1)
    if cmd.get("model_engine") == "megatron":
        mp = cmd.get(f"{MC}.tensor_model_parallel_size", 1) * cmd.get(
            f"{MC}.pipeline_model_parallel_size", 1
        )
        dp: int = max(gpus // max(mp * cmd.get(f"{MC}.context_parallel_size", 1), 1), 1)
        return dp
    dp = max(gpus // max(cmd.get(f"{A}.ulysses_sequence_parallel_size", 1), 1), 1)
    return dp


def _entries(s: JobSpec, cmd: Command, *keys: str) -> None:
    note(s, *(cmd.entry(k) for k in keys))


@rule(
    "TOP-INIT-001",
    ERROR,
    "the actor and the log-prob recompute agree on dynamic batch size (verl asserts it)",
    (
        "train.use_dynamic_bsz",
        "train.ppo_micro_batch_size_per_gpu",
        "train.ppo_max_token_len_per_gpu",
        "rollout.log_prob_micro_batch_size_per_gpu",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "set the same value for both: train.use_dynamic_bsz, and where a recipe's verl_overrides set "
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz, override it too "
    "(`+verl_overrides.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=<same>`)",
)
def dynamic_bsz_equal(s: JobSpec) -> Outcome:
    """verl's worker asserts actor.use_dynamic_bsz == rollout.log_prob_use_dynamic_bsz when it
    builds the actor, after the cluster is allocated (verl@0.9.1:verl/workers/engine_workers.py:
    ActorRolloutRefWorker.init_model; the same in 0.8.0 and 0.9.0)."""
    cmd = command(s)
    actor, rollout = cmd.entry(f"{A}.use_dynamic_bsz"), cmd.entry(f"{R_}.log_prob_use_dynamic_bsz")
    if actor is not None and rollout is not None and bool(actor.value) != bool(rollout.value):
        note(s, actor, rollout)
        return f"{actor.describe()} but {rollout.describe()}"


@rule(
    "TOP-INIT-002",
    ERROR,
    "the batching verl uses has its sizes set (token budgets with dynamic bsz, micro batches without)",
    (
        "train.use_dynamic_bsz",
        "train.ppo_micro_batch_size_per_gpu",
        "train.ppo_max_token_len_per_gpu",
        "rollout.log_prob_micro_batch_size_per_gpu",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "remove the null from verl_overrides / extra_overrides (topl renders these sizes from train.*)",
)
def batch_sizes_set(s: JobSpec) -> Outcome:
    """verl's worker asserts the token budgets (dynamic bsz) or the micro batch sizes are not None
    (verl@0.9.1:verl/workers/engine_workers.py:ActorRolloutRefWorker.init_model; 0.8.0, 0.9.0
    too); a key absent from the command keeps verl's non-null default: only an explicit null fails."""
    cmd = command(s)
    if cmd.get(f"{A}.use_dynamic_bsz"):
        keys = (f"{R_}.log_prob_max_token_len_per_gpu", f"{A}.ppo_max_token_len_per_gpu")
    else:
        keys = (f"{R_}.log_prob_micro_batch_size_per_gpu", f"{A}.ppo_micro_batch_size_per_gpu")
    nulls = [e for k in keys if (e := cmd.entry(k)) is not None and cmd.get(k) is None]
    if nulls:
        note(s, *nulls)
        return "; ".join(e.describe() for e in nulls)


@rule(
    "TOP-INIT-003",
    ERROR,
    "each PPO mini batch (ppo_mini_batch_size * rollout.n sequences) splits over the actor's dp ranks",
    (
        "train.ppo_mini_batch_size",
        "rollout.n",
        "train.engine",
        "train.tp",
        "train.pp",
        "train.cp",
        "train.ulysses_sp",
        "cluster.nodes",
        "cluster.devices_per_node",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "make ppo_mini_batch_size * rollout.n a multiple of the actor's data-parallel size "
    "(devices / (tp*pp*cp) on Megatron, devices / ulysses_sp on FSDP)",
)
def mini_batch_dp(s: JobSpec) -> Outcome:
    """verl multiplies ppo_mini_batch_size by rollout.n (verl@0.9.1:verl/trainer/ppo/ray_trainer.py:
    RayPPOTrainer._update_actor) and the training worker asserts the result divides over dp,
    with or without dynamic batch size (verl@0.9.1:verl/workers/engine_workers.py:
    TrainingWorker.train_mini_batch; 0.8.0, 0.9.0 too)."""
    cmd = command(s)
    mini, n = cmd.get(f"{A}.ppo_mini_batch_size"), cmd.get(f"{R_}.n", 1)
    if not isinstance(mini, int) or not isinstance(n, int):
        return None
    dp = actor_dp(cmd)
    if (mini * n) % dp:
        _entries(s, cmd, f"{A}.ppo_mini_batch_size", f"{R_}.n", "trainer.n_gpus_per_node")
        return f"ppo_mini_batch_size*n = {mini}*{n} = {mini * n} does not split over dp={dp}"


@rule(
    "TOP-INIT-004",
    ERROR,
    "Ulysses sequence parallel divides the attention heads (FSDP)",
    (
        "train.ulysses_sp",
        "model.num_heads",
        "model.num_kv_heads",
        "train.engine",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "choose train.ulysses_sp dividing model.num_heads, and dividing (or a multiple of) num_kv_heads",
)
def ulysses_heads(s: JobSpec) -> Outcome:
    """verl's FSDP model patch asserts num_attention_heads % ulysses_sp == 0 and num_kv_heads %
    sp == 0 or sp % num_kv_heads == 0 (verl@0.9.1:verl/models/transformers/monkey_patch.py:
    apply_monkey_patch; 0.8.0, 0.9.0 too)."""
    cmd = command(s)
    if cmd.get("model_engine") == "megatron":
        return None
    sp = cmd.get(f"{A}.ulysses_sequence_parallel_size", 1)
    if not isinstance(sp, int) or sp <= 1:
        return None
    h, kv = s.model.num_heads, s.model.num_kv_heads
    if h % sp or (kv % sp and sp % kv):
        _entries(s, cmd, f"{A}.ulysses_sequence_parallel_size")
        return f"ulysses_sp={sp} does not split heads={h} / kv_heads={kv}"


@rule(
    "TOP-INIT-005",
    ERROR,
    "rollout sizes set verbatim still tile the world (verl asserts it)",
    (
        "rollout.tp",
        "rollout.dp",
        "cluster.nodes",
        "cluster.devices_per_node",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "set rollout.tp / rollout.dp (TOP-RES-004 checks them) instead of verl keys",
)
def rollout_world(s: JobSpec) -> Outcome:
    """verl asserts world_size % (rollout tp * dp * pp) == 0 when it builds the rollout
    (verl@0.9.1:verl/workers/engine_workers.py:ActorRolloutRefWorker.init_model; 0.8.0, 0.9.0
    too). The spec's sizes are TOP-RES-004's; this rule reads the command where a recipe or
    override set one of them verbatim."""
    cmd = command(s)
    keys = [f"{R_}.{k}" for k in ("tensor_model_parallel_size", "data_parallel_size")]
    keys.append(f"{R_}.pipeline_model_parallel_size")
    entries = [cmd.entry(k) for k in keys]
    if not any(e is not None and e.user for e in entries):
        return None
    per = 1
    for e in entries:
        per *= e.value if e is not None and isinstance(e.value, int) else 1
    world = cmd.get("trainer.n_gpus_per_node", 1) * cmd.get("trainer.nnodes", 1)
    if world % per:
        note(s, *entries)
        return f"rollout tp*dp*pp = {per} does not divide the world size {world}"


@rule(
    "TOP-TP-003",
    ERROR,
    "no expert-tensor parallelism in strict mode (MoE)",
    ("alignment.mode", "train.engine", "train.etp", "model.num_experts"),
    "set train.etp=1 (the seed's layout: etp=1, experts whole on each rank, pipeline parallel)",
)
def strict_etp(s: JobSpec) -> Outcome:
    """Expert-tensor parallel splits every expert's FFN over etp ranks; the token dispatcher sums
    the partial outputs with a reduce-scatter over the expert-TP group (megatron_core@0.16.0:
    megatron/core/transformer/moe/token_dispatcher.py:MoEAllGatherTokenDispatcher.token_combine,
    tp_group = pg_collection.expt_tp): a different addition order from the rollout's fused MoE,
    as TOP-TP-001 says of dense TP. The seed ran etp=1 in every strict script."""
    if is_strict(s) and is_moe(s) and s.train.engine == "megatron" and s.train.etp != 1:
        return f"train.etp={s.train.etp} in strict mode"
