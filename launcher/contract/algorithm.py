"""Algorithm settings the rendered verl run (and the embedded default) would not honour."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.contract.verl_firststep import legacy_trainer
from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.render.command import command
from topl.launcher.spec import backend_traits

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

DAPO_ENTRYPOINT = "recipe.dapo.main_dapo"


@rule(
    "TOP-ALG-001",
    ERROR,
    "dynamic sampling and overlong shaping run under DAPO's entrypoint",
    (
        "algorithm.filter_groups",
        "algorithm.overlong_buffer_fraction",
        "algorithm.entrypoint",
        "cluster.versions.verl",
        "cluster.backend",
        "verl_overrides",
    ),
    "use algorithm=dapo, or set algorithm.filter_groups=false algorithm.overlong_buffer_fraction=0 "
    "(filter_groups alone runs on verl 0.9's default trainer)",
)
def dapo_only(s: JobSpec) -> Outcome:
    """verl's RayPPOTrainer (main_ppo on verl 0.8.0, or with trainer.use_v1=false) never reads
    algorithm.filter_groups, and ppo_trainer has no reward.reward_kwargs: the run would silently
    be plain GRPO. verl-recipe's RayDAPOTrainer implements both. verl 0.9's V1 trainer (main_ppo's
    default there) filters groups itself (verl@0.9.1:verl/trainer/ppo/v1/trainer_base.py:
    PPOTrainer._resolve_filter_groups_metric, the ReplayBuffer's filter_groups_metric)."""
    a = s.algorithm
    v1_filters = a.filter_groups and (
        backend_traits.of(s).remote  # the embedded loop (backend=local) follows the entrypoint
        and legacy_trainer(s, command(s)) is False
        and schema_for(s).has("algorithm.filter_groups.enable")
    )
    used = [
        k
        for k, on in (
            ("filter_groups", a.filter_groups and not v1_filters),
            ("overlong_buffer_fraction", a.overlong_buffer_fraction > 0),
        )
        if on
    ]
    if used and a.entrypoint != DAPO_ENTRYPOINT:
        return f"algorithm.{' and algorithm.'.join(used)} set, but entrypoint={a.entrypoint} ignores them"


@rule(
    "TOP-ALG-002",
    ERROR,
    "the overlong buffer is a part of the response budget",
    ("algorithm.overlong_buffer_fraction", "train.max_response_length"),
    "set algorithm.overlong_buffer_fraction in (0, 1) so the buffer has at least one token, or 0",
)
def overlong_fits(s: JobSpec) -> Outcome:
    """verl@0.9.1:verl/workers/reward_manager/dapo.py:DAPORewardManager.__init__ asserts
    0 < overlong_buffer_cfg.len <= max_resp_len."""
    f = s.algorithm.overlong_buffer_fraction
    if f and not (0 < f < 1 and round(f * s.train.max_response_length) >= 1):
        return f"overlong_buffer_fraction={f} of max_response_length={s.train.max_response_length}"


# What each algorithm choice is defined by. A recipe's own `algorithm:` values are composed after
# the group, so `recipe=..._grpo_... algorithm=ppo` keeps the recipe's estimator and loss unless the
# user names them too: without this rule the run would be PPO in name and GRPO in fact.
DEFINING: dict[str, dict[str, Any]] = {
    # GAE reads the critic's values (verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_gae_advantage_return);
    # verl trains a critic for gae only (verl@0.9.1:verl/trainer/ppo/utils.py:need_critic)
    "ppo": {"adv_estimator": "gae", "use_critic": True},
    # GSPO is the sequence-level loss (verl@0.9.1:verl/trainer/ppo/core_algos.py:compute_policy_loss_gspo)
    "gspo": {"policy_loss": "gspo"},
}


@rule(
    "TOP-ALG-003",
    ERROR,
    "the chosen algorithm's defining settings are set",
    ("algorithm.name", "algorithm.adv_estimator", "algorithm.use_critic", "algorithm.policy_loss"),
    "name them with the choice, e.g. algorithm=ppo algorithm.adv_estimator=gae "
    "algorithm.use_critic=true, or algorithm=gspo algorithm.policy_loss=gspo (a recipe's own "
    "algorithm values replace the group's)",
)
def algorithm_defined(s: JobSpec) -> Outcome:
    """algorithm=ppo|gspo composed under a recipe that sets the estimator or the loss itself."""
    a = s.algorithm
    want = DEFINING.get(a.name, {})
    bad = [f"algorithm.{k}={getattr(a, k)!r}" for k, v in want.items() if getattr(a, k) != v]
    if bad:
        return f"algorithm.name={a.name!r} but " + ", ".join(bad)
