"""The whole command verl will receive (`topl.launcher.command`) against verl's config and strict mode.

TOP-VERL-001 checks every key a recipe's `verl_overrides` or `algorithm.extra_overrides` set against
the declared verl's schema (`verl_schema`); TOP-VERL-002 checks every key on the log-prob path for
its strict value whatever its source, and that extra overrides do not re-set topl's own keys.
verl_keys.json is generated from the installed verl's Hydra config (scripts/gen_verl_keys.py; a
test fails when it drifts).
"""

import functools
import json
from importlib.resources import files

from topl.launcher.command import Entry, command, note
from topl.launcher.contract.core import ERROR, is_strict, rule
from topl.launcher.render import ARR, DAPO_RECIPE_KEYS, FREE_FORM, VLLM, fmt

# verl keys that decide batch composition, graph capture or the consistency switches: in strict
# mode `algorithm.extra_overrides` may not set them (they belong to topl, set through the spec).
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
_MCORE = f"{ARR}.actor.megatron"
# Keys on the log-prob path that topl renders from a checked spec field: in strict mode a recipe's
# verl_overrides (or an extra override) may set them only to topl's value. A key below one of
# these prefixes that topl does not render (override_transformer_config.normalization) is free.
NUMERICS = (
    *(
        f"{ARR}.rollout.{k}"
        for k in (
            "tensor_model_parallel_size",
            "data_parallel_size",
            "expert_parallel_size",
            "pipeline_model_parallel_size",
            "enforce_eager",
            "logprobs_mode",
            "calculate_log_probs",
            "temperature",
            "top_p",
            "top_k",
            "log_prob_micro_batch_size_per_gpu",
            "log_prob_use_dynamic_bsz",
            "per_request_seed",
            "enable_chunked_prefill",
            "enable_prefix_caching",
            "dtype",
        )
    ),
    f"{VLLM}.pipeline_parallel_size",
    f"{VLLM}.attention_backend",
    f"{VLLM}.block_size",
    f"{VLLM}.compilation_config",
    f"{VLLM}.additional_config",
    *(
        f"{_MCORE}.{k}"
        for k in (
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "expert_model_parallel_size",
            "expert_tensor_parallel_size",
            "context_parallel_size",
            "sequence_parallel",
            "override_transformer_config",
            "dtype",
        )
    ),
    f"{ARR}.actor.use_dynamic_bsz",
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu",
    f"{ARR}.actor.fsdp_config.fsdp_size",
    f"{ARR}.actor.ulysses_sequence_parallel_size",
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu",
    f"{ARR}.actor.fsdp_config.dtype",
    f"{ARR}.ref.megatron.dtype",
    f"{ARR}.ref.fsdp_config.dtype",
)
# Keys the ref model reads in place of the actor's (verl@0.9.1:verl/trainer/config/ref/
# megatron_ref.yaml and ref/ref.yaml default each to the actor's value through oc.select):
# set apart, the KL reference is computed with another layout or batching than the actor's.
# Checked only where a reference policy runs (use_kl_loss / use_kl_in_reward).
MIRRORS = {
    f"{ARR}.ref.log_prob_use_dynamic_bsz": f"{ARR}.actor.use_dynamic_bsz",
    **{
        f"{ARR}.ref.megatron.{k}": f"{_MCORE}.{k}"
        for k in (
            "tensor_model_parallel_size",
            "pipeline_model_parallel_size",
            "expert_model_parallel_size",
            "expert_tensor_parallel_size",
            "context_parallel_size",
            "sequence_parallel",
        )
    },
}
# Log-prob path keys where topl renders none: the value strict mode runs with is verl's default
# (what the seed ran; a user source may restate it, not change it). Where topl renders the key
# (a dtype from train.dtype), topl's value is the one (NUMERICS).
STRICT_VALUES = {
    f"{ARR}.rollout.dtype": "bfloat16",  # verl@0.9.1:verl/trainer/config/rollout/rollout.yaml:dtype
    f"{ARR}.rollout.quantization": None,  # same file: quantization
    f"{ARR}.rollout.quantization_config_file": None,  # same file: quantization_config_file
    f"{_MCORE}.dtype": "bfloat16",  # verl@0.9.1:verl/trainer/config/engine/megatron.yaml:dtype
    f"{ARR}.ref.megatron.dtype": "bfloat16",  # same (ref/megatron_ref.yaml includes it)
    f"{ARR}.actor.fsdp_config.dtype": "bfloat16",  # verl@0.9.1:.../engine/fsdp.yaml:dtype
    f"{ARR}.ref.fsdp_config.dtype": "bfloat16",  # same
}
# Keys no user source may set in strict mode, whatever the value: graph capture sizes, verl's
# full_determinism (it fixes one seed per replica: facts full_determinism_fixes_replica_seed), and
# vLLM engine arguments that change the rollout's numbers (weight / KV-cache precision).
HARD_OWNED = (
    f"{ARR}.rollout.cudagraph_capture_sizes",
    f"{ARR}.rollout.full_determinism",
    f"{ARR}.actor.fsdp_config.full_determinism",
    f"{VLLM}.quantization",
    f"{VLLM}.kv_cache_dtype",
    f"{VLLM}.dtype",
)


def _under(key: str, prefixes) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


class _Json091:
    """verl 0.9.1's composed config key list (verl_keys.json), until per-version schemas exist."""

    version = "0.9.1"

    def __init__(self):
        data = json.loads(files("topl.launcher.contract").joinpath("verl_keys.json").read_text())
        self.keys, self.free, self.source = (
            frozenset(data["keys"]),
            tuple(data["free_form"]),
            data["source"],
        )

    def has(self, key: str) -> bool:
        return key in self.keys

    def free_form(self, key: str) -> bool:
        return any(key.startswith(f + ".") for f in self.free) or key.startswith(FREE_FORM)


@functools.cache
def _json091() -> _Json091:
    return _Json091()


def verl_schema(s):
    """The config schema of the verl the spec declares: `.has(key)`, `.free_form(key)`, `.version`.
    Only verl 0.9.1's is generated so far (verl_keys.json); it stands in for every stack."""
    return _json091()


def schema():
    """(keys, free-form containers, source) of the generated key list (doctor, tests)."""
    j = _json091()
    return j.keys, j.free, j.source


def known(key: str, s=None) -> bool:
    """A key verl's config has, or one below a free-form container (engine_kwargs.vllm, ...);
    under the DAPO recipe config (dapo_megatron_trainer) also its reward_kwargs."""
    sch = verl_schema(s)
    if sch.has(key) or sch.free_form(key):
        return True
    return bool(s is not None and s.algorithm.config_name and key.startswith(DAPO_RECIPE_KEYS))


@rule(
    "TOP-VERL-001",
    ERROR,
    "verl_overrides and extra_overrides name keys the declared verl has (`+` only for new keys)",
    (
        "verl_overrides",
        "algorithm.extra_overrides",
        "algorithm.config_name",
        "cluster.versions.verl",
    ),
    "fix the key's spelling (verl's config: `python -m verl.trainer.main_ppo --cfg job`), or prefix a "
    "genuinely new key with +",
)
def verl_schema_rule(s):
    """Hydra rejects an unknown key without `+` and a `+` on a key that exists, after the cluster is
    allocated; the key list is verl@0.9.1:verl/trainer/config/ppo_trainer.yaml, composed. Every
    key a recipe or override sets verbatim is checked, nested `verl_overrides` flattened."""
    sch = verl_schema(s)
    bad: list[Entry] = []
    for e in command(s).user:
        if (e.prefix in ("", "~") and not known(e.key, s)) or (e.prefix == "+" and sch.has(e.key)):
            bad.append(e)
    if bad:
        note(s, *bad)
        where = "; ".join(f"{e.prefix}{e.key} (set by {e.origin})" for e in bad)
        return f"not in verl {sch.version}'s config as written: {where}"


def same(a, b) -> bool:
    """The same value as verl would read it (1 == 1.0; True == "true" as typed by Hydra)."""
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) | isinstance(b, bool):
        return a == b
    return fmt(a) == fmt(b)


def _strict_problem(cmd, e: Entry, ref: bool) -> tuple[Entry | None, str] | None:
    """(the entry that says what strict mode needs, why) when a user-set entry breaks it."""
    if _under(e.key, HARD_OWNED):
        return None, "owned by strict mode: no recipe or override may set it"
    other = cmd.entry(MIRRORS.get(e.key, "")) if ref else None
    if other is not None:
        return None if same(other.value, e.value) else (other, f"must equal {other.describe()}")
    own = cmd.own.get(e.key)
    if own is not None and _under(e.key, NUMERICS):
        return None if same(own.value, e.value) else (own, f"strict mode checked {own.describe()}")
    above = next((o for k, o in cmd.own.items() if e.key.startswith(k + ".")), None)
    if above is not None and _under(above.key, NUMERICS):
        return above, f"replaces part of {above.describe()}"
    if e.key in STRICT_VALUES and not same(STRICT_VALUES[e.key], e.value):
        want = fmt(STRICT_VALUES[e.key])
        return None, f"strict mode runs {want} (verl's default, what the seed ran)"
    return None


@rule(
    "TOP-VERL-002",
    ERROR,
    "what verl gets on the log-prob path is what strict mode checked, whatever sets it",
    # the spec fields topl renders the log-prob path from (whose values a violation reports)
    (
        "verl_overrides",
        "algorithm.extra_overrides",
        "algorithm.use_kl_loss",
        "algorithm.use_kl_in_reward",
        "alignment",
        "rollout",
        "train",
    ),
    "drop the key from the recipe's verl_overrides / algorithm.extra_overrides and set the spec "
    "field instead (`topl render` shows which field renders it)",
)
def verl_collision(s):
    """verl_overrides and extra overrides are applied after topl's own keys: the contract checked
    the spec field, verl would get another value. Extra overrides may not re-set a key topl
    renders; in strict mode no source may change a key on the log-prob path (parallel sizes,
    dtypes, quantization, batch-invariance switches, attention backend, graph mode, dynamic batch
    size) from the value strict mode checked."""
    cmd = command(s)
    strict = is_strict(s)
    ref = strict and (s.algorithm.use_kl_loss or bool(s.algorithm.use_kl_in_reward))
    bad: list[str] = []
    for e in cmd.user:
        if e.by == "extra_overrides":
            if e.key in cmd.own:
                note(s, e, cmd.own[e.key])
                bad.append(f"{e.key} (set by {e.origin}; rendered by topl)")
                continue
            if strict and _under(e.key, STRICT_OWNED):
                note(s, e)
                bad.append(f"{e.key} (set by {e.origin}; owned by strict mode)")
                continue
        if not strict:
            continue
        problem = _strict_problem(cmd, e, ref)
        if problem is not None:
            note(s, e, problem[0])
            bad.append(f"{e.describe()}: {problem[1]}")
    if bad:
        return "; ".join(bad)
