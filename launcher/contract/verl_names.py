"""verl's start-up checks on names and on pairs of keys that exclude each other, over the command
topl renders (verl_overrides and extra_overrides included), per declared verl release: the spec's
own option lists (spec/job.py) hold for the newest verl only, and a key passed straight to verl
skips them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


RC = "algorithm.rollout_correction"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def is_threshold_problem(spec: Any) -> str | None:
    """verl@0.9.1:verl/trainer/ppo/rollout_corr_helper.py:_parse_rollout_is_threshold (0.8.0 and
    0.9.0 the same): a number, or "upper" / "lower_upper", each bound positive, lower <= upper."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        return "must be a float or a string threshold specification"
    if isinstance(spec, str):
        parts = spec.strip().split("_", 1) if "_" in spec else [spec.strip()]
        got = [_number(p) for p in parts]
        if not spec.strip() or None in got:
            return f"invalid threshold {spec!r}"
        lower, upper = (got[0], got[1]) if len(got) == 2 else (None, got[0])
    else:
        lower, upper = None, float(spec)
    assert upper is not None
    if upper <= 0 or (lower is not None and lower <= 0):
        return f"bounds must be positive, got {spec!r}"
    if lower is not None and lower > upper:
        return f"lower bound must be <= upper bound, got {spec!r}"
    return None


def rs_threshold_problem(options: str, spec: Any, ordered: bool) -> str | None:
    """verl@0.9.1:verl/trainer/ppo/rollout_corr_helper.py:_parse_rollout_rs_thresholds: one
    threshold or one per option; a k1 option takes "lower_upper" (or "upper": lower = 1/upper),
    the others one upper bound; each positive; lower <= upper only from 0.9.0 (`ordered`)."""
    opts = list(dict.fromkeys(o.strip() for o in str(options).split(",") if o.strip()))
    if spec is None:
        return "rollout_rs_threshold must be provided for rejection sampling"
    specs = [s.strip() for s in str(spec).split(",") if s.strip()]
    if len(specs) not in (1, len(opts)):
        return f"expects one threshold or {len(opts)} (one per rollout_rs option), got {spec!r}"
    specs = specs * len(opts) if len(specs) == 1 else specs
    for opt, s in zip(opts, specs):
        if opt.endswith("k1"):
            parts = s.split("_", 1) if "_" in s else [None, s]
            upper = _number(parts[1] or "")
            lower = (1.0 / upper if upper else None) if parts[0] is None else _number(parts[0])
        elif "_" in s:
            return f"option {opt!r} takes a single upper bound, got {s!r}"
        else:
            lower, upper = 1.0, _number(s)
        if upper is None or lower is None:
            return f"invalid threshold {s!r} for option {opt!r}"
        if upper <= 0 or lower <= 0:
            return f"thresholds for option {opt!r} must be positive, got {s!r}"
        if ordered and opt.endswith("k1") and lower > upper:
            return f"thresholds for option {opt!r} must be lower <= upper, got {s!r}"
    return None


@rule(
    "TOP-INIT-019",
    ERROR,
    "the rollout-correction thresholds parse as the declared verl parses them on step 1",
    ("alignment.rollout_correction", *USER),
    "give rollout_is_threshold as a positive number or 'lower_upper' with lower <= upper, and "
    "rollout_rs_threshold one positive bound per rollout_rs option ('lower_upper' for k1 options)",
)
def correction_thresholds(s: JobSpec) -> Outcome:
    """compute_rollout_correction_and_rejection_mask parses the thresholds on the first step's
    batch (verl@0.9.1:verl/trainer/ppo/rollout_corr_helper.py:_parse_rollout_is_threshold,
    _parse_rollout_rs_thresholds; 0.8.0 the same without the rs lower <= upper check). bypass_mode
    skips the correction."""
    cmd = command(s)
    get = lookup(s, cmd)
    if get(f"{RC}.bypass_mode"):
        return None
    bad = []
    if get(f"{RC}.rollout_is"):
        why = is_threshold_problem(get(f"{RC}.rollout_is_threshold"))
        if why:
            note(s, cmd.entry(f"{RC}.rollout_is"), cmd.entry(f"{RC}.rollout_is_threshold"))
            bad.append(f"{RC}.rollout_is_threshold: {why}")
    if get(f"{RC}.rollout_rs"):
        ordered = schema_for(s).version != "0.8.0"
        why = rs_threshold_problem(
            get(f"{RC}.rollout_rs"), get(f"{RC}.rollout_rs_threshold"), ordered
        )
        if why:
            note(s, cmd.entry(f"{RC}.rollout_rs"), cmd.entry(f"{RC}.rollout_rs_threshold"))
            bad.append(f"{RC}.rollout_rs_threshold: {why}")
    return "; ".join(bad) or None
