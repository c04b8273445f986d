"""The dry run's child: `python -m topl.launcher.contract.dryrun.verl_side` with the declared verl
first on sys.path (launcher/contract/dryrun/deep.py starts it). It reads one JSON request a line
(the rendered command and the config folder of that verl) and answers one JSON list a line: every
start-up check that fails, in the order verl reaches them, with verl's own message.

  compose          Hydra composes the command on verl's trainer config (verl/trainer/main_ppo.py:main)
  validate_config  verl/utils/config.py:validate_config, called as main_ppo does
  dataclass        verl/utils/config.py:omega_conf_to_dataclass for each config the workers build
  algorithm        verl's registries: advantage estimator, policy loss, reward manager, and the
                   rollout-correction threshold parsers of step 1
  mesh, batch_split, rollout_replica, vllm_engine, trainer
                   mirror.py over the composed config (they need a process group or a device)
  megatron         megatron-core's TransformerConfig and get_num_layers_to_build on each Megatron
                   engine's layout, called where megatron-core imports (CPU); mcore.py's mirror
                   where it does not, and for parallel_state and the MoE layer (a process group);
                   the engines of one worker sharing the first one's parallel groups (mirrored)

Calls are preferred over mirrors, so each release brings its own checks. Nothing here needs an
accelerator, model weights or the network.
"""

from __future__ import annotations

import copy
import gc
import json
import os
import re
import sys
from typing import Any

from omegaconf import OmegaConf, open_dict

from topl.launcher.contract.dryrun import mcore, mirror
from topl.launcher.contract.dryrun.calls import quiet, text
from topl.launcher.contract.dryrun.mcore_side import megatron

A = "actor_rollout_ref"
STAGE = {  # mirror check -> stage
    "ulysses_remove_padding": "mesh",
    "ulysses_world": "mesh",
    "fsdp_size": "mesh",
    "use_mbridge": "mesh",
    "micro_divides": "batch_split",
    "token_budget": "batch_split",
    "replica_nodes": "rollout_replica",
    "vllm_dp_local": "rollout_replica",
    "vllm_scheduler": "vllm_engine",
    "gen_batch_size": "trainer",
    "filter_groups_metric": "trainer",
    **{check: "megatron" for check in mcore.CHECKS},
    "shared_groups": "megatron",
}
# the init_model renames of the ref's keys before its ActorConfig is built
# (verl@0.9.1:verl/workers/engine_workers.py:ActorRolloutRefWorker.init_model; 0.8.0 the same)
REF_RENAMES = {
    "log_prob_micro_batch_size": "ppo_micro_batch_size",
    "log_prob_micro_batch_size_per_gpu": "ppo_micro_batch_size_per_gpu",
    "log_prob_use_dynamic_bsz": "use_dynamic_bsz",
    "log_prob_max_token_len_per_gpu": "ppo_max_token_len_per_gpu",
}


_UNCHECKED = (
    " (the model's files are not at hand here: verl's checks after loading them did not run)"
)


def _model_files(e: BaseException | None) -> bool:
    """verl reads a model's files while it validates (the critic's HFModelConfig loads its config
    and tokenizer: verl@0.9.1:verl/workers/config/model.py:HFModelConfig.__post_init__): where they
    are on neither this machine nor a reachable hub (a cluster path, offline) that raises OSError
    inside Hydra's InstantiationException, which says nothing of the command."""
    while e is not None:
        if isinstance(e, OSError):
            return True
        e = e.__cause__ or e.__context__
    return False


def _model_path(e: BaseException) -> tuple[str, ...]:
    """The path key of the model node Hydra names (`full_key: critic.model`)."""
    m = re.search(r"full_key: ([\w.]+)", str(e))
    return (f"{m.group(1)}.path",) if m else ()


def compose(conf: str, config_name: str, overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose  # lazy: Hydra, in the child only
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=conf, version_base=None):
            return hydra_compose(config_name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


def dry_run(req: dict[str, Any]) -> list[dict[str, Any]]:
    """Every start-up check of this verl that fails for the request's command; [] when none does."""
    out: list[dict[str, Any]] = []

    def fail(stage: str, check: str, message: str, keys=(), cite: str = "") -> None:
        if not any(f["message"] == message for f in out):  # one failure per distinct message
            out.append(
                {
                    "stage": stage,
                    "check": check,
                    "message": message,
                    "keys": list(keys),
                    "cite": cite,
                }
            )

    def raised(stage: str, check: str, e: BaseException, keys: tuple[str, ...], cite: str) -> None:
        """`fail` with verl's exception; one reading a model's files that are not here: "model"."""
        if _model_files(e):
            fail("model", check, text(e) + _UNCHECKED, _model_path(e), cite)
        else:
            fail(stage, check, text(e), keys, cite)

    try:
        import verl  # lazy: the declared verl, first on this child's sys.path
        from verl.utils.config import omega_conf_to_dataclass, validate_config
    except Exception as e:  # ImportError, or a verl whose import breaks on this host
        fail("import", "import", f"verl cannot be imported here: {text(e)}")
        return out
    V = f"verl@{getattr(verl, '__version__', '?')}:verl/"
    try:
        with quiet():
            cfg = compose(req["conf"], req["config_name"], req["overrides"])
    except Exception as e:
        fail("compose", "compose", text(e), (), f"{V}trainer/main_ppo.py:main (Hydra compose)")
        return out
    if req["entrypoint"] == "recipe.dapo.main_dapo":  # verl-recipe dapo/main_dapo.py:main does so
        from verl.experimental.reward_loop import migrate_legacy_reward_impl  # lazy: verl

        with quiet():
            cfg = migrate_legacy_reward_impl(cfg)
    use_ref, use_critic = _need_ref_critic(cfg)
    try:
        with quiet():
            validate_config(
                config=copy.deepcopy(cfg), use_reference_policy=use_ref, use_critic=use_critic
            )
    except Exception as e:
        raised("validate_config", "validate_config", e, (), f"{V}utils/config.py:validate_config")
    try:
        OmegaConf.resolve(cfg)  # TaskRunner.run resolves before it builds the workers
    except Exception as e:
        fail("compose", "resolve", text(e), (), f"{V}trainer/main_ppo.py:TaskRunner.run")
        return out
    patched = set(req.get("patch_keys", ()))  # keys a declared patch adds to the dataclass too

    def build(name: str, node: Any, prefix: str) -> None:
        node = copy.deepcopy(node)
        with open_dict(node):
            for k in [k for k in patched if k.startswith(prefix + ".")]:
                node.pop(k[len(prefix) + 1 :], None)
        try:
            with quiet():
                omega_conf_to_dataclass(node)
        except Exception as e:
            cite = f"{V}utils/config.py:omega_conf_to_dataclass ({name})"
            raised("dataclass", f"dataclass_{name}", e, (prefix,), cite)

    a = cfg[A]
    if use_ref:
        ref = copy.deepcopy(a.ref)
        with open_dict(ref):
            ref.ppo_mini_batch_size = a.actor.ppo_mini_batch_size
            for old, new in REF_RENAMES.items():
                ref[new] = (
                    ref.pop(old, None) if old != "log_prob_use_dynamic_bsz" else ref.pop(old, False)
                )
        build("ref", ref, f"{A}.ref")
    build("actor", a.actor, f"{A}.actor")
    build("rollout", a.rollout, f"{A}.rollout")
    if use_critic:
        build("critic", cfg.critic, "critic")
    build("algorithm", cfg.algorithm, "algorithm")
    _algorithm(cfg, fail, V)
    get = _getter(cfg)
    v1 = req["entrypoint"] == "verl.trainer.main_ppo" and bool(cfg.trainer.get("use_v1", False))
    roles = ("actor", "ref") if use_ref else ("actor",)
    found = mirror.fsdp_meshes(get, roles) + mirror.use_mbridge(get, roles)
    found += mirror.batch_split(get, use_ref, v1, use_critic) + mirror.replicas(get)
    found += mirror.vllm_scheduler(get, raises_budget=bool(req.get("raises_budget")))
    found += mirror.v1_trainer(get) if v1 else []
    if req.get("model") and mirror.megatron(get):
        engines = mcore.roles(get, use_ref, use_critic)
        found += megatron(get, req["model"], engines, fail) + mcore.shared_groups(get, engines)
    cites = {**mirror.CHECKS, **mcore.CHECKS}
    for f in found:
        cite = str(cites[f.check]) if f.check in cites else mirror.VLLM_SCHEDULER
        fail(STAGE[f.check], f.check, f.message, f.keys, cite)
    return out


def _getter(cfg: Any) -> mirror.Get:
    def get(key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None)

    return get


def _need_ref_critic(cfg: Any) -> tuple[bool, bool]:
    """verl/trainer/ppo/utils.py:need_reference_policy / need_critic, called; their 4-line mirror
    where that module does not import (it pulls `datasets` in through verl.trainer.distillation)."""
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy  # lazy: verl

        return bool(need_reference_policy(cfg)), bool(need_critic(cfg))
    except ImportError:
        ref = bool(cfg.algorithm.get("use_kl_in_reward", False) or cfg[A].actor.use_kl_loss)
        if cfg.critic.get("enable") is not None:
            return ref, bool(cfg.critic.enable)
        return ref, cfg.algorithm.adv_estimator == "gae"


def _algorithm(cfg: Any, fail: Any, V: str) -> None:
    """Step 1 looks the estimator and the loss up (compute_advantage; workers/utils/losses.py:
    ppo_loss), the reward loop its manager, and parses the rollout-correction thresholds."""
    from verl.trainer.ppo import core_algos  # lazy: verl

    algo, actor = cfg.algorithm, cfg[A].actor
    for check, fn, value, key in (
        (
            "adv_estimator",
            core_algos.get_adv_estimator_fn,
            algo.adv_estimator,
            "algorithm.adv_estimator",
        ),
        (
            "policy_loss",
            core_algos.get_policy_loss_fn,
            actor.policy_loss.loss_mode,
            f"{A}.actor.policy_loss.loss_mode",
        ),
    ):
        try:
            fn(value)
        except Exception as e:
            fail("algorithm", check, text(e), (key,), f"{V}trainer/ppo/core_algos.py:{fn.__name__}")
    # verl reads reward.reward_manager as a DictConfig and looks its name up
    # (trainer/ppo/reward.py); RewardManagerConfig is never built whole (its __post_init__ calls a
    # super().__post_init__ that BaseConfig lacks in 0.9.1)
    rm = cfg.get("reward", {}).get("reward_manager")
    if rm is not None and rm.get("source", "register") == "register" and rm.get("name"):
        try:
            from verl.experimental.reward_loop.reward_manager import (
                get_reward_manager_cls,  # lazy: verl
            )

            get_reward_manager_cls(rm.name)
        except Exception as e:
            fail(
                "algorithm",
                "reward_manager",
                text(e),
                ("reward.reward_manager.name",),
                f"{V}experimental/reward_loop/reward_manager/registry.py:get_reward_manager_cls",
            )
    rc = algo.get("rollout_correction")
    if rc is None or rc.get("bypass_mode", False):
        return
    from verl.trainer.ppo import rollout_corr_helper as h  # lazy: verl

    k = "algorithm.rollout_correction"
    if rc.get("rollout_is"):
        try:
            h._parse_rollout_is_threshold(rc.get("rollout_is_threshold"))
        except Exception as e:
            fail(
                "algorithm",
                "rollout_is_threshold",
                text(e),
                (f"{k}.rollout_is_threshold",),
                f"{V}trainer/ppo/rollout_corr_helper.py:_parse_rollout_is_threshold",
            )
    if rc.get("rollout_rs"):
        try:
            opts = [o.strip() for o in str(rc.rollout_rs).split(",") if o.strip()]
            h._parse_rollout_rs_thresholds(opts, rc.get("rollout_rs_threshold"))
        except Exception as e:
            fail(
                "algorithm",
                "rollout_rs_threshold",
                text(e),
                (f"{k}.rollout_rs", f"{k}.rollout_rs_threshold"),
                f"{V}trainer/ppo/rollout_corr_helper.py:_parse_rollout_rs_thresholds",
            )


def main() -> None:
    reply, sys.stdout = sys.stdout, sys.stderr  # verl prints at import: keep the answers apart
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    # The first request imports verl (torch, tensordict, transformers, Ray): the cyclic GC would
    # scan the growing heap again and again for garbage imports hardly make (~1 s of the ~5 s,
    # scripts/bench_cli.py). Off for it; then the imported heap is frozen out of later scans.
    gc.disable()
    for line in sys.stdin:
        try:
            got = dry_run(json.loads(line))
        except Exception as e:  # a bug here is reported, never a hang of the parent
            got = [
                {
                    "stage": "internal",
                    "check": "internal",
                    "message": text(e),
                    "keys": [],
                    "cite": "",
                }
            ]
        reply.write(json.dumps(got) + "\n")
        reply.flush()
        if not gc.isenabled():
            gc.freeze()
            gc.enable()


if __name__ == "__main__":
    main()
