"""verl's start-up checks on names and on pairs of keys that exclude each other, over the command
topl renders (verl_overrides and extra_overrides included), per declared verl release: the spec's
own option lists (spec/job.py) hold for the newest verl only, and a key passed straight to verl
skips them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import Outcome, rule
from topl.launcher.contract.verl_layout import USER, lookup, uses_ref
from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.facts.verl_tables import ARR
from topl.launcher.render.command import command, note

if TYPE_CHECKING:
    from topl.launcher.spec.job import JobSpec

_ADV = (
    "gae grpo reinforce_plus_plus reinforce_plus_plus_baseline remax rloo opo grpo_passk gpg "
    "rloo_vectorized grpo_vectorized optimal_token_baseline tir_optimal_token_baseline gdpo"
).split()
_LOSS_080 = (
    "vanilla dppo_tv dppo_kl gspo sapo gpg clip_cov kl_cov geo_mean cispo bypass_mode"
).split()
_AGG_080 = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
_REWARD = ["naive", "dapo", "remote", "gdpo"]
# verl key -> (release -> the names that release accepts), read in each release's source:
# verl@0.9.1:verl/trainer/ppo/core_algos.py:AdvantageEstimator (get_adv_estimator_fn raises for
# another name), core_algos.py:register_policy_loss (get_policy_loss_fn), verl/workers/config/
# actor.py:ActorConfig.__post_init__ (valid_loss_agg_modes), verl/experimental/reward_loop/
# reward_manager/registry.py:register (get_reward_manager_cls); 0.9.0 the same. verl 0.8.0 has
# neither the `dro` policy loss nor the `token-sum` aggregation (verl@0.8.0: the same files).
NAMES: dict[str, dict[str, list[str]]] = {
    "algorithm.adv_estimator": {"0.8.0": _ADV, "0.9.0": _ADV, "0.9.1": _ADV},
    f"{ARR}.actor.policy_loss.loss_mode": {
        "0.8.0": _LOSS_080,
        "0.9.0": [*_LOSS_080[:9], "dro", *_LOSS_080[9:]],
        "0.9.1": [*_LOSS_080[:9], "dro", *_LOSS_080[9:]],
    },
    f"{ARR}.actor.loss_agg_mode": {
        "0.8.0": _AGG_080,
        "0.9.0": [_AGG_080[0], "token-sum", *_AGG_080[1:]],
        "0.9.1": [_AGG_080[0], "token-sum", *_AGG_080[1:]],
    },
    "reward.reward_manager.name": {"0.8.0": _REWARD, "0.9.0": _REWARD, "0.9.1": _REWARD},
}


@rule(
    "TOP-INIT-017",
    ERROR,
    "the estimator, policy loss, loss aggregation and reward manager verl is given are names the "
    "declared verl registers",
    ("algorithm.adv_estimator", "algorithm.policy_loss", "algorithm.loss_agg_mode", *USER),
    "choose a name the declared verl registers (the message lists them), or declare a verl that "
    "has it (stack=release)",
)
def registered_names(s: JobSpec) -> Outcome:
    """verl looks each name up at start-up and raises for one it lacks (verl@0.9.1:verl/trainer/
    ppo/core_algos.py:get_adv_estimator_fn, get_policy_loss_fn; verl/workers/config/actor.py:
    ActorConfig.__post_init__; verl/experimental/reward_loop/reward_manager/registry.py:
    get_reward_manager_cls; verl@0.8.0 the same, with fewer names: NAMES)."""
    cmd = command(s)
    get = lookup(s, cmd)
    version = schema_for(s).version
    bad = []
    for key, by_version in NAMES.items():
        names = by_version.get(version)
        value = get(key)
        if names is None or value is None or value in names:
            continue
        note(s, cmd.entry(key))
        bad.append(f"{key}={value!r} is not one of verl {version}'s names ({', '.join(names)})")
    return "; ".join(bad) or None


# (section, the deprecated global size, the per-GPU size) verl refuses together
_MICRO = (
    ("actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
    ("rollout", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
    ("ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
)


@rule(
    "TOP-INIT-018",
    ERROR,
    "a micro batch size is set once: the per-GPU size topl renders, not also the deprecated global one",
    ("train.use_dynamic_bsz", "algorithm.use_kl_loss", *USER),
    "drop the deprecated *_micro_batch_size (without _per_gpu) from verl_overrides / "
    "extra_overrides: topl sets the *_per_gpu size (train.*, rollout.*)",
)
def micro_once(s: JobSpec) -> Outcome:
    """Without dynamic batch size verl raises when both `<x>_micro_batch_size` and
    `<x>_micro_batch_size_per_gpu` are set: the actor's in ActorConfig.__post_init__, the rollout's
    and (with a reference model) the ref's in validate_config.check_mutually_exclusive
    (verl@0.9.1:verl/workers/config/actor.py:ActorConfig.__post_init__, verl/utils/config.py:
    validate_config; verl@0.8.0 the same)."""
    cmd = command(s)
    get = lookup(s, cmd)
    if get(f"{ARR}.actor.use_dynamic_bsz"):
        return None
    both = []
    for section, old, new in _MICRO:
        if section == "ref" and not uses_ref(get):
            continue
        p = f"{ARR}.{section}."
        if get(p + old) is not None and get(p + new) is not None:
            note(s, cmd.entry(p + old), cmd.entry(p + new))
            both.append(f"{p}{old}={get(p + old)!r} and {p}{new}={get(p + new)!r}")
    if not both:
        return None
    return "verl refuses both sizes of one micro batch (ValueError: You have set both ...): " + (
        "; ".join(both)
    )
