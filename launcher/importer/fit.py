"""What `topl recipes import` may and may not change: the script's model, verl's own defaults.

- `find_model`: the script's checkpoint -> a shipped model group (by its Hugging Face name), else
  the model's fields from the checkpoint's `config.json` when it is readable here, else a refusal
  (TOP-IMPORT-001). The tiny test model is never a fallback.
- `verl_default`: the value verl gives a key the script does not set, from the installed verl's
  resolved config (`verl/trainer/config/_generated_ppo*_trainer.yaml`, verl@0.9.1).
- `TOPL_ADDS`: keys topl renders although the script leaves them to verl, and why; every other
  such key is put back to verl's default, so the imported recipe runs what the script runs.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from topl.launcher.base.errors import ToplError
from topl.launcher.facts.verl_schema import KNOWN, schema
from topl.launcher.facts.verl_tables import ARR

MODEL_KEY = f"{ARR}.model.path"
MISSING = object()
MANDATORY = "???"  # verl's own marker for a value it requires and does not default

# Keys topl renders that verl's config does not have, or where topl names what verl would
# detect; each with the reason it stays (shown in the report's own "topl adds" section).
_VLLM = f"{ARR}.rollout.engine_kwargs.vllm"
TOPL_ADDS = {
    "trainer.device": "named instead of detected: verl sets npu itself on Ascend "
    "(verl@0.9.1:verl/trainer/main_ppo.py:main, auto_set_device)",
    f"{_VLLM}.block_size": "the KV block size the attention rules check (TOP-ATTN-004)",
    f"{_VLLM}.attention_backend": "the rollout group's attention backend, stated to vLLM",
    f"{_VLLM}.pipeline_parallel_size": "rollout PP stated to vLLM (topl's rollout.pp)",
    f"{_VLLM}.additional_config.weight_nz_mode": "weight NZ format off (facts: nz_config)",
    f"{_VLLM}.compilation_config": "the graph mode stated to vLLM (rollout.graph_mode)",
    f"{ARR}.rollout.per_request_seed": "the stack's per-request sampling seed",
}
_PREFIXES = {
    "ray_kwargs.ray_init.runtime_env.env_vars.": "the script's environment forwarded to every "
    "Ray worker (verl@0.9.1:verl/trainer/main_ppo.py:run_ppo merges it into ray.init)",
    f"{_VLLM}.additional_config.rl_config.": "vllm-ascend batch invariance (strict alignment)",
    f"{ARR}.actor.megatron.override_transformer_config.": "topl's Megatron strict switches",
}


# Keys verl reads only while a switch the script sets is off: topl's value is never used, and
# verl's default (null) is one topl's typed field cannot hold. The engine path batches by token
# budget under use_dynamic_bsz and reads micro_batch_size_per_gpu only without it
# (verl@0.8.0:verl/workers/engine/utils.py:prepare_micro_batches; verl@0.8.0:verl/workers/
# engine_workers.py:ActorRolloutRefWorker.init_model copies actor.use_dynamic_bsz,
# actor.ppo_micro_batch_size_per_gpu and rollout.log_prob_micro_batch_size_per_gpu into the engine
# config; the same in verl@0.9.1).
_DYN = "ignored: the script's actor.use_dynamic_bsz=true batches by token budget"
_MEG = f"{ARR}.actor.megatron"


def _dyn(script: dict, value: Any, default: Any) -> bool:
    return script.get(f"{ARR}.actor.use_dynamic_bsz") is True


def _ref_dyn(script: dict, value: Any, default: Any) -> bool:
    """The ref batches by token budget: its own log_prob_use_dynamic_bsz, which defaults to the
    actor's (verl@0.9.1:verl/trainer/config/ref/ref.yaml: oc.select actor.use_dynamic_bsz);
    init_model renames it to the ref ActorConfig's use_dynamic_bsz
    (verl@0.9.1:verl/workers/engine_workers.py:ActorRolloutRefWorker.init_model)."""
    own = script.get(f"{ARR}.ref.log_prob_use_dynamic_bsz", MISSING)
    return own is True or (own is MISSING and _dyn(script, value, default))


def _etp_is_tp(script: dict, value: Any, default: Any) -> bool:
    return default is None and value == script.get(f"{_MEG}.tensor_model_parallel_size", MISSING)


def _sp_off_at_tp1(script: dict, value: Any, default: Any) -> bool:
    return value is False and script.get(f"{_MEG}.tensor_model_parallel_size") == 1


# key -> (holds(script values, topl's value, verl's default), why): the run verl's default gives
UNUSED_WHEN = {
    f"{ARR}.actor.ppo_micro_batch_size_per_gpu": (_dyn, _DYN),
    f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu": (_dyn, _DYN),
    f"{ARR}.ref.log_prob_micro_batch_size_per_gpu": (
        _ref_dyn,
        "ignored: the script's ref batches by token budget (ref.log_prob_use_dynamic_bsz)",
    ),
    # verl passes null on to Megatron, which takes the TP size for it
    # (verl@0.8.0:verl/workers/engine/megatron/transformer_impl.py: mpu.initialize_model_parallel;
    # megatron-core@0.16.0:megatron/core/parallel_state.py:initialize_model_parallel)
    f"{_MEG}.expert_tensor_parallel_size": (
        _etp_is_tp,
        "the script's actor TP: what Megatron takes for verl's null",
    ),
    # verl@0.8.0 and 0.9.1:verl/workers/config/engine.py:McoreEngineConfig.__post_init__
    f"{_MEG}.sequence_parallel": (
        _sp_off_at_tp1,
        "off: verl turns sequence parallel off itself at the script's TP 1",
    ),
}


def topl_adds(
    key: str, default: Any = None, script: dict | None = None, value: Any = MISSING
) -> str | None:
    """Why topl keeps `key` although the script does not set it (None: it is not kept);
    `script` (the script's values, key -> value) and `value` (topl's): for a key whose topl value
    runs as verl's default would under the script's settings (UNUSED_WHEN)."""
    if default == MANDATORY:
        return "verl requires a value and has no default (`???` in its config): topl's group value"
    if key in TOPL_ADDS:
        return TOPL_ADDS[key]
    same = UNUSED_WHEN.get(key)
    if same and same[0](script or {}, value, default):
        return same[1]
    return next((why for p, why in _PREFIXES.items() if key.startswith(p)), None)


@lru_cache(maxsize=2)
def _verl_config(megatron: bool):
    import importlib.util

    from omegaconf import OmegaConf

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    f = root / (
        "_generated_ppo_megatron_trainer.yaml" if megatron else "_generated_ppo_trainer.yaml"
    )
    return OmegaConf.load(f) if f.is_file() else None


def script_config(s, megatron: bool):
    """verl's resolved config with the script's own overrides applied (so a default that verl
    derives from another key, `${oc.select:...}`, is derived from the script's value); None when
    verl is not installed."""
    from omegaconf import OmegaConf

    base = _verl_config(megatron)
    if base is None:
        return None
    cfg = base.copy()
    OmegaConf.set_struct(cfg, False)
    # a Hydra group choice, not a key of the resolved tree: ppo_trainer picks `model_engine: dp`,
    # ppo_megatron_trainer overrides it to megatron (verl@0.9.1:verl/trainer/config/ppo_trainer.yaml
    # and ppo_megatron_trainer.yaml, defaults lists)
    cfg.model_engine = "megatron" if "megatron" in (s.config_name or "") else "dp"
    for key, st in s.overrides.items():
        try:
            OmegaConf.update(cfg, key, st.value, merge=False, force_add=True)
        except Exception:  # noqa: BLE001 - a key verl's tree cannot hold: reported elsewhere
            continue
    return cfg


def verl_default(key: str, cfg, sch=None) -> Any:
    """verl's own value for `key` under the script's overrides (plain data), or MISSING when
    verl's config lacks it, cannot resolve it here, or verl is not installed. With `sch` (the
    declared verl's schema) on a verl other than the installed one: a key that release lacks is
    MISSING, and a literal default that changed between the two releases is the declared one's
    (verl 0.8.0's rollout.max_num_seqs is 1024, 0.9.1's 256); the rest is read from the
    installed config (the schema merges the dp and megatron compositions, so an engine-dependent
    default such as actor.strategy is not read from it)."""
    from omegaconf import DictConfig, OmegaConf

    changed = _declared_default(key.lstrip("+"), sch)
    if changed is not None:
        if changed[0] is None and key.lstrip("+") in NULL_RUNS_AS:
            return NULL_RUNS_AS[key.lstrip("+")]
        return changed[0]
    if cfg is None:
        return MISSING
    parent, _, last = key.lstrip("+").rpartition(".")
    try:
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if not isinstance(node, DictConfig) or last not in node.keys():
            return MISSING
        if OmegaConf.is_missing(node, last):  # `???`: verl needs a value and has none
            return MANDATORY
        v = OmegaConf.select(cfg, key.lstrip("+"))
        return OmegaConf.to_container(v, resolve=True) if hasattr(v, "_get_node") else v
    except Exception:  # noqa: BLE001 - a resolver verl registers at run time: not known here
        return MISSING


# Keys whose null default the release reads as a value a typed field holds: the seed's patched
# verl 0.8.0 (rollout.seed: null) seeds the engine with replica_rank + (seed or 0) and per-request
# seeds from (base_seed or 0) (psyloy/verl-ascend-recipe@6823af1:true_on_policy/patch/
# verl_patches/verl_per_request_seed_v0.8.0.patch: vllm_async_server.py, rollout/utils.py).
NULL_RUNS_AS = {f"{ARR}.rollout.seed": 0}


def _declared_default(key: str, sch) -> tuple[Any] | None:
    """(value,) where the declared verl's default differs from the installed verl's (or it
    lacks the key: (MISSING,)); None where the installed config says it (same release, same
    default, a derived one, or no schema / no installed verl known)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("verl")
    except PackageNotFoundError:
        return None
    if sch is None or installed not in KNOWN or sch.version == installed:
        return None
    here = schema(installed, (), sch.config)
    if not sch.has(key):
        return None if sch.free_form(key) else (MISSING,)
    if sch.type(key) == "interp" or (here.has(key) and here.keys[key] == sch.keys[key]):
        return None
    return (sch.default(key),)


def script_values(s) -> dict[str, Any]:
    """The script's overrides, key -> value (none without a script)."""
    return {k: st.value for k, st in s.overrides.items()} if s is not None else {}


# The data_dir convention (render/invocation.py:data_files): what each data key is rendered as.
DATA_FILES = {"data.train_files": "train.parquet", "data.val_files": "test.parquet"}


def as_verl_reads(key: str, value: Any) -> Any:
    """A data file given as one string is the one-element list verl makes of it
    (verl@0.8.0 and 0.9.1:verl/utils/dataset/rl_dataset.py:RLHFDataset.__init__), so it goes on
    topl's List[str] field and renders back to what verl runs."""
    return [value] if key in DATA_FILES and isinstance(value, str) else value


# enforce_eager=false with no compilation_config: verl sets cudagraph_mode FULL_AND_PIECEWISE
# (verl@0.8.0 and 0.9.1:verl/workers/rollout/vllm_rollout/vllm_async_server.py:
# vLLMHttpServer.launch_server, compilation_config.setdefault), which rollout.graph_mode names.
EAGER_KEY = f"{ARR}.rollout.enforce_eager"


def graph_mode_of(s: Any, default: Any) -> str | None:
    """The rollout.graph_mode that renders the script's enforce_eager (or verl's `default` for it)
    as verl runs it; None where the script states its own compilation_config (kept verbatim)."""
    st = s.overrides.get(EAGER_KEY)
    eager = st.value if st is not None else default
    if not isinstance(eager, bool) or any(".vllm.compilation_config" in k for k in s.overrides):
        return None
    return "eager" if eager else "full_and_piecewise"


def data_dir_of(s: Any) -> str | None:
    """DIR where the script's (read.Script) data files are DIR/train.parquet and DIR/test.parquet (strings):
    written as `data_dir`, the spec field that renders both, not as verl_overrides that replace
    what topl renders from it (TOP-VERL-003)."""
    dirs = set()
    for key, name in DATA_FILES.items():
        st = s.overrides.get(key)
        if st is None or not isinstance(st.value, str) or not st.value.endswith("/" + name):
            return None
        dirs.add(st.value[: -len(name) - 1])
    return dirs.pop() if len(dirs) == 1 else None


def field_holds(cfg, f: str, value: Any) -> bool:
    """Does spec field `f` take `value` (a typed field refuses None where it is not Optional)?"""
    from omegaconf import OmegaConf

    try:
        OmegaConf.update(cfg.copy(), f, value, merge=True)
    except Exception:  # noqa: BLE001 - omegaconf's validation errors: the field does not hold it
        return False
    return True


def _shipped_models() -> dict[str, str]:
    """Hugging Face repo name (lower case, no org) -> model group."""
    import yaml

    from topl.launcher.compose.sources import (
        conf_dir,
    )  # lazy: Hydra and OmegaConf only when this runs

    out = {}
    for f in sorted((conf_dir() / "model").glob("*.yaml")):
        hf = str((yaml.safe_load(f.read_text()) or {}).get("hf_path", ""))
        if hf and not hf.startswith("topl/"):  # topl's own test models are only ever asked for
            out[hf.split("/")[-1].lower()] = f.stem
    return out


def model_group(path: str) -> str | None:
    """The shipped group whose Hugging Face name the checkpoint path ends with (a fine-tuned or
    instruct variant keeps the architecture: Qwen3-8B-Base -> qwen3_8b); the longest name wins."""
    name = str(path).rstrip("/").split("/")[-1].lower()
    best = None
    for hf, group in _shipped_models().items():
        if name.startswith(hf) and not re.match(r"[a-z0-9.]", name[len(hf) : len(hf) + 1]):
            if best is None or len(hf) > len(best[0]):
                best = (hf, group)
    return best[1] if best else None


def model_from_config(path: str) -> dict | None:
    """The model's fields from `<path>/config.json` when it is readable on this machine."""
    local = Path(os.path.expanduser(os.path.expandvars(str(path))))
    f = local / "config.json"
    try:
        if not f.is_file() or f.stat().st_size > 1_000_000:
            return None
        c = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(c, dict):
        return None
    c = c.get("text_config", c) if "num_hidden_layers" not in c else c
    try:
        heads = int(c["num_attention_heads"])
        out = {
            "name": re.sub(r"[^a-z0-9]+", "_", local.name.lower()).strip("_") or "model",
            "hf_path": str(path),
            "num_layers": int(c["num_hidden_layers"]),
            "hidden_size": int(c["hidden_size"]),
            "intermediate_size": int(c["intermediate_size"]),
            "num_heads": heads,
            "num_kv_heads": int(c.get("num_key_value_heads") or heads),
            "head_dim": int(c.get("head_dim") or int(c["hidden_size"]) // heads),
            "vocab_size": int(c["vocab_size"]),
        }
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    experts = c.get("num_experts") or c.get("n_routed_experts") or c.get("num_local_experts")
    if experts:
        out["num_experts"] = int(experts)
        out["experts_per_token"] = int(c.get("num_experts_per_tok") or 0)
        out["moe_intermediate_size"] = int(c.get("moe_intermediate_size") or 0)
    if c.get("kv_lora_rank"):
        out["attention"] = "mla"
    if c.get("sliding_window") and c.get("use_sliding_window", True):
        out["sliding_window"] = int(c["sliding_window"])
    for ours, theirs in (
        ("rms_norm_eps", "rms_norm_eps"),
        ("rope_theta", "rope_theta"),
        ("max_position_embeddings", "max_position_embeddings"),
        ("tie_word_embeddings", "tie_word_embeddings"),
    ):
        if isinstance(c.get(theirs), (int, float, bool)):
            out[ours] = c[theirs]
    return out


def not_recognised(path: Any, line: int | None) -> ToplError:
    shipped = ", ".join(sorted(set(_shipped_models().values())))
    where = f"{MODEL_KEY}={path}" + (f" (line {line})" if line else "")
    return ToplError(
        f"TOP-IMPORT-001: model not recognised: {where} names no model group topl ships "
        f"({shipped}) and its config.json is not readable here; topl does not guess the "
        "architecture (the contract's memory and layout rules read it)",
        where=where,
        fix="name the group: `topl recipes import SCRIPT model=GROUP`; or import where the "
        "checkpoint is readable (`--env MODEL_PATH=/local/checkpoint` if the script reads it "
        "from a variable); or add conf/model/NAME.yaml with the fields of its config.json",
    )
