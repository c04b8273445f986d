"""verl's first-step and critic checks as rules: what fails after the cluster is allocated and the
first batch is generated (balance batch, PrefixGrouper) or when the critic first trains.

Each rule cites the check it mirrors in `CHECKS` (with the verl releases that have it);
tests/contract/test_verl_firststep.py finds every cited text in verl's source by AST (the installed verl,
and the trees in TOPL_VERL_SOURCES), so a new verl shows what changed.

Which trainer runs decides the balance-batch checks: verl 0.8.0's `RayPPOTrainer` (and verl-recipe's
`RayDAPOTrainer`, its subclass, on every verl) splits the batch over the actor's dp ranks as it is;
verl 0.9.0 / 0.9.1 run the V1 trainer by default (`trainer.use_v1: true`), which pads the batch to
a multiple of dp first, so only `trainer.use_v1=false` keeps the old checks there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.contract.dryrun.mirror import Cite
from topl.launcher.contract.verl_startup import actor_dp
from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.facts.verl_tables import ARR
from topl.launcher.render.command import command, note

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.render.command import Command
    from topl.launcher.spec.job import JobSpec

A, R_ = f"{ARR}.actor", f"{ARR}.rollout"
DAPO_TRAINER = (
    "verl-project/verl-recipe@e7f889574b8301cc0f0fc1d57c6d67f31ffeb689:dapo/dapo_ray_trainer.py:"
    "RayDAPOTrainer.fit (subclasses verl's RayPPOTrainer; calls self._balance_batch)"
)


CHECKS = {
    "balance_equal_size": Cite(
        "utils/seqlen_balancing.py",
        "karmarkar_karp",
        "len(seqlen_list) % k_partitions == 0",
    ),
    "balance_legacy_call": Cite(
        "trainer/ppo/ray_trainer.py",
        "RayPPOTrainer._balance_batch",
        "get_seqlen_balanced_partitions(workload_lst, k_partitions=dp_size, equal_size=True)",
        kind="expr",
    ),
    "prefix_grouper_groups": Cite(
        "trainer/ppo/ray_trainer.py",
        "RayPPOTrainer._balance_batch",
        "num_groups % dp_size != 0",
        kind="raise",
    ),
    "v1_pads_to_dp": Cite(
        "trainer/ppo/v1/trainer_base.py",
        "PPOTrainer._balance_batch",
        "upsample_batch_to_divisible_size(batch, batch_multiple, self.tokenizer.eos_token_id)",
        kind="expr",
        versions=("0.9.0", "0.9.1"),
    ),
    "critic_mini_batch": Cite(
        "trainer/ppo/ray_trainer.py",
        "RayPPOTrainer._update_critic",
        "ppo_mini_batch_size * self.config.actor_rollout_ref.rollout.n",
        kind="expr",  # the critic's global mini batch
    ),
    "critic_mini_batch_dp": Cite(
        "workers/engine_workers.py",
        "TrainingWorker.train_mini_batch",
        "mini_batch_size % self.engine.get_data_parallel_size() == 0",
    ),
    "critic_train_batch": Cite(
        "workers/config/critic.py",
        "CriticConfig.validate",
        "train_batch_size < self.ppo_mini_batch_size",
        kind="raise",
    ),
}


def legacy_trainer(s: JobSpec, cmd: Command) -> bool | None:
    """True where RayPPOTrainer (or RayDAPOTrainer) runs the job, False for verl's V1 trainer,
    None for an entrypoint topl does not know."""
    entry = s.algorithm.entrypoint
    if entry == "recipe.dapo.main_dapo":
        return True  # DAPO_TRAINER
    if entry != "verl.trainer.main_ppo":
        return None
    sch = schema_for(s)
    if not sch.has("trainer.use_v1"):
        return True  # verl 0.8.0: no V1 trainer
    # verl@0.9.1:verl/trainer/main_ppo.py:main runs TaskRunnerV1 when trainer.use_v1 (default true)
    return not cmd.get("trainer.use_v1", sch.default("trainer.use_v1"))


def _setting(s: JobSpec, cmd: Command, key: str) -> Any:
    """The command's value, else the declared verl's default (None where it has no such key)."""
    sch = schema_for(s)
    return cmd.get(key, sch.default(key) if sch.has(key) else None)


# what deciding "verl's old trainer runs, with this actor dp" reads (TOP-INIT-006 / 007)
_OLD_TRAINER_READS = (
    "train.engine",
    "train.tp",
    "train.pp",
    "train.cp",
    "cluster.nodes",
    "cluster.devices_per_node",
    "algorithm.entrypoint",
    "algorithm.config_name",
    "cluster.versions.verl",
    "cluster.versions.verl_patches",
    "verl_overrides",
    "algorithm.extra_overrides",
)


@rule(
    "TOP-INIT-006",
    ERROR,
    "balance batch (verl's old trainer) splits train_batch_size * rollout.n evenly over actor dp",
    ("train.train_batch_size", "rollout.n", *_OLD_TRAINER_READS),
    "make train.train_batch_size * rollout.n a multiple of the actor's data-parallel size, or turn "
    "balancing off (`+verl_overrides.trainer.balance_batch=false`)",
)
def balance_batch_split(s: JobSpec) -> Outcome:
    """With trainer.balance_batch, RayPPOTrainer._balance_batch partitions the generated batch
    (train_batch_size * n sequences) into dp equal-size parts and asserts they are equal
    (verl@0.9.1:verl/utils/seqlen_balancing.py:karmarkar_karp, via get_seqlen_balanced_partitions
    with equal_size=True from verl/trainer/ppo/ray_trainer.py:RayPPOTrainer._balance_batch; the
    same in 0.8.0 and 0.9.0). It fires on the first step, after generation. The V1 trainer that
    verl 0.9.x runs by default pads the batch to a multiple of dp first
    (verl@0.9.1:verl/trainer/ppo/v1/trainer_base.py:PPOTrainer._balance_batch); DAPO runs the old
    one on every verl (verl-recipe RayDAPOTrainer)."""
    cmd = command(s)
    if not legacy_trainer(s, cmd) or not _setting(s, cmd, "trainer.balance_batch"):
        return None
    if _setting(s, cmd, f"{A}.use_prefix_grouper"):
        return None  # balanced by prompt group: TOP-INIT-007
    tbs, n = cmd.get("data.train_batch_size"), cmd.get(f"{R_}.n", 1)
    if not isinstance(tbs, int) or not isinstance(n, int):
        return None
    dp = actor_dp(cmd)
    if (tbs * n) % dp:
        note(s, *(cmd.entry(k) for k in ("data.train_batch_size", f"{R_}.n")))
        return (
            f"train_batch_size*n = {tbs}*{n} = {tbs * n} sequences do not split evenly over "
            f"dp={dp}: verl's balance_batch asserts it on the first step"
        )


@rule(
    "TOP-INIT-007",
    ERROR,
    "PrefixGrouper with balance batch gives every actor dp rank whole prompt groups",
    ("train.train_batch_size", *_OLD_TRAINER_READS),
    "make train.train_batch_size (the prompt groups per step) a multiple of the actor's "
    "data-parallel size, or drop actor_rollout_ref.actor.use_prefix_grouper",
)
def prefix_grouper_groups(s: JobSpec) -> Outcome:
    """With actor.use_prefix_grouper and trainer.balance_batch, RayPPOTrainer._balance_batch keeps
    each prompt's n samples (one uid) on one rank and raises ValueError unless the number of uid
    groups (the step's prompts, train_batch_size) is a multiple of dp
    (verl@0.9.1:verl/trainer/ppo/ray_trainer.py:RayPPOTrainer._balance_batch, `num_groups %
    dp_size != 0`; the same in 0.8.0 and 0.9.0). The V1 trainer reads no use_prefix_grouper."""
    cmd = command(s)
    if not legacy_trainer(s, cmd) or not _setting(s, cmd, "trainer.balance_batch"):
        return None
    if not _setting(s, cmd, f"{A}.use_prefix_grouper"):
        return None
    tbs = cmd.get("data.train_batch_size")
    if not isinstance(tbs, int):
        return None
    dp = actor_dp(cmd)
    if tbs % dp:
        note(s, cmd.entry("data.train_batch_size"), cmd.entry(f"{A}.use_prefix_grouper"))
        return f"train_batch_size={tbs} prompt groups do not split over dp={dp} (PrefixGrouper)"


def critic_dp(cmd: Command) -> int:
    """The critic's data-parallel size: its own engine sizes (verl's critic configs default them
    to 1, not to the actor's: verl@0.9.1:verl/trainer/config/critic/megatron_critic.yaml takes
    engine/megatron.yaml; dp_critic.yaml engine/fsdp.yaml)."""
    gpus = cmd.get("trainer.n_gpus_per_node", 1) * cmd.get("trainer.nnodes", 1)
    if cmd.get("model_engine") == "megatron":
        mp = 1
        for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
            mp *= cmd.get(f"critic.megatron.{k}", 1)
        mp *= cmd.get("critic.megatron.context_parallel_size", 1)
        return int(max(gpus // max(mp, 1), 1))
    return int(max(gpus // max(cmd.get("critic.fsdp.ulysses_sequence_parallel_size", 1), 1), 1))


def _critic_mini(cmd: Command) -> Any:
    # verl@0.9.1:verl/trainer/config/critic/critic.yaml: ppo_mini_batch_size defaults to the actor's
    return cmd.get("critic.ppo_mini_batch_size", cmd.get(f"{A}.ppo_mini_batch_size"))


@rule(
    "TOP-INIT-008",
    ERROR,
    "the critic's PPO mini batch (ppo_mini_batch_size * rollout.n) splits over the critic's dp",
    (
        "algorithm.use_critic",
        "train.ppo_mini_batch_size",
        "rollout.n",
        "cluster.nodes",
        "cluster.devices_per_node",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "make ppo_mini_batch_size * rollout.n a multiple of the critic's data-parallel size (devices "
    "/ critic tp*pp*cp; verl does not give the critic the actor's layout: set "
    "`+verl_overrides.critic.megatron.tensor_model_parallel_size=...` and pipeline too)",
)
def critic_mini_batch_dp(s: JobSpec) -> Outcome:
    """The critic trains with global mini batch critic.ppo_mini_batch_size * rollout.n
    (verl@0.9.1:verl/trainer/ppo/ray_trainer.py:RayPPOTrainer._update_critic; the V1 trainer the
    same, verl/trainer/ppo/v1/trainer_base.py) and its TrainingWorker asserts that divides over
    the critic engine's dp (verl@0.9.1:verl/workers/engine_workers.py:
    TrainingWorker.train_mini_batch; 0.8.0 and 0.9.0 too), on the first critic update."""
    cmd = command(s)
    if not s.algorithm.use_critic:
        return None
    mini, n = _critic_mini(cmd), cmd.get(f"{R_}.n", 1)
    if not isinstance(mini, int) or not isinstance(n, int):
        return None
    dp = critic_dp(cmd)
    if (mini * n) % dp:
        keys = ("critic.ppo_mini_batch_size", f"{A}.ppo_mini_batch_size", f"{R_}.n")
        note(s, *(cmd.entry(k) for k in keys))
        return f"critic mini batch {mini}*{n} = {mini * n} does not split over the critic's dp={dp}"


@rule(
    "TOP-INIT-009",
    ERROR,
    "the critic's mini batch is no larger than train_batch_size (without dynamic batch size)",
    (
        "algorithm.use_critic",
        "train.train_batch_size",
        "train.ppo_mini_batch_size",
        "train.use_dynamic_bsz",
        "verl_overrides",
        "algorithm.extra_overrides",
    ),
    "set critic.ppo_mini_batch_size (through verl_overrides) or train.ppo_mini_batch_size to at "
    "most train.train_batch_size",
)
def critic_train_batch(s: JobSpec) -> Outcome:
    """verl's CriticConfig.validate raises unless train_batch_size >= critic.ppo_mini_batch_size
    when the critic batches by count (verl@0.9.1:verl/workers/config/critic.py:
    CriticConfig.validate; 0.8.0, 0.9.0 too), from validate_config when the job starts. The
    critic's use_dynamic_bsz defaults to the actor's (critic/critic.yaml)."""
    cmd = command(s)
    if not s.algorithm.use_critic:
        return None
    if cmd.get("critic.use_dynamic_bsz", cmd.get(f"{A}.use_dynamic_bsz")):
        return None
    tbs, mini = cmd.get("data.train_batch_size"), _critic_mini(cmd)
    if isinstance(tbs, int) and isinstance(mini, int) and tbs < mini:
        note(s, cmd.entry("data.train_batch_size"), cmd.entry("critic.ppo_mini_batch_size"))
        return f"train_batch_size={tbs} < critic ppo_mini_batch_size={mini}"
