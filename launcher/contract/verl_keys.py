"""`algorithm.extra_overrides` against verl 0.9.1's real config and against topl's own keys.

verl_keys.json is generated from the installed verl's Hydra config (scripts/gen_verl_keys.py;
a test fails when it drifts). Extra overrides reach verl last, after everything the contract
checked, so a key topl renders from a spec field must not be set again there.
"""

import functools
import json
from importlib.resources import files

from topl.launcher.contract.core import ERROR, is_strict, rule
from topl.launcher.contract.view import unwrap

# verl keys that decide batch composition, graph capture or the consistency switches: in strict
# mode they belong to topl (set through the spec) even where topl does not render them.
STRICT_OWNED = (
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
    "actor_rollout_ref.rollout.cudagraph_capture_sizes",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config",
    "actor_rollout_ref.actor.megatron.override_transformer_config",
    "actor_rollout_ref.actor.fsdp_config.full_determinism",
    "actor_rollout_ref.rollout.full_determinism",
)


@functools.cache
def schema() -> tuple[frozenset, tuple[str, ...], str]:
    data = json.loads(files("topl.launcher.contract").joinpath("verl_keys.json").read_text())
    return frozenset(data["keys"]), tuple(data["free_form"]), data["source"]


def known(key: str) -> bool:
    """A key verl's config has, or one below a free-form container (engine_kwargs.vllm, ...)."""
    from topl.launcher.render import FREE_FORM

    keys, free, _ = schema()
    return key in keys or any(key.startswith(f + ".") for f in free) or key.startswith(FREE_FORM)


def _bare(key) -> tuple[str, str]:
    k = str(key)
    prefix = k[: len(k) - len(k.lstrip("+~"))]
    return prefix, k[len(prefix) :]


def _entries(s):
    """(dotted verl key, value) of every extra override; each entry read is recorded as
    `algorithm.extra_overrides.<key as written>` so its own source is reported."""
    from topl.launcher.render import extra_items

    view = s.algorithm.extra_overrides
    out = []
    for top in view:
        value = view[top]
        out += extra_items({top: value})
    return out


@rule(
    "TOP-VERL-001",
    ERROR,
    "extra_overrides name keys verl 0.9.1 has (`+` only for new keys)",
    ("algorithm.extra_overrides",),
    "fix the key's spelling (verl's config: `python -m verl.trainer.main_ppo --cfg job`), or prefix a "
    "genuinely new key with +",
)
def verl_schema(s):
    """Hydra rejects an unknown key without `+` and a `+` on a key that exists, after the cluster is
    allocated; the key list is verl@0.9.1:verl/trainer/config/ppo_trainer.yaml, composed."""
    bad = []
    for key, _ in _entries(s):
        prefix, bare = _bare(key)
        if (prefix in ("", "~") and not known(bare)) or (prefix == "+" and bare in schema()[0]):
            bad.append(key)
    if bad:
        return f"not in {schema()[2].split(':')[0]}'s config as written: {', '.join(bad)}"


@rule(
    "TOP-VERL-002",
    ERROR,
    "extra_overrides do not re-set what topl renders from the spec",
    ("algorithm.extra_overrides", "alignment.mode"),
    "set the spec field instead of the verl key (`topl render` shows which field renders it)",
)
def verl_collision(s):
    """An extra override is applied after topl's own; the contract checked the spec field, verl
    would get another value. In strict mode the batch-composition, graph-capture and consistency
    keys are topl's even where it renders none."""
    from dataclasses import replace

    from topl.launcher.render import overrides

    plain = unwrap(s)
    own = replace(plain, algorithm=replace(plain.algorithm, extra_overrides={}))
    rendered = {k for k, _ in overrides(own)}  # computed, not read: the entries below are
    bad = []
    for key, _ in _entries(s):
        bare = _bare(key)[1]
        owned = any(bare == o or bare.startswith(o + ".") for o in STRICT_OWNED)
        if bare in rendered or (owned and is_strict(s)):
            bad.append(
                f"{bare} ({'rendered by topl' if bare in rendered else 'owned by strict mode'})"
            )
    if bad:
        return "extra_overrides set " + ", ".join(bad)
