"""Helpers shared by the tests (on sys.path through pytest's `pythonpath = tests`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

# The seed's 30B GRPO strict recipe with every rule green: the seed ran chunked prefill, dynamic
# batch size and verl's max_num_seqs 1024 (warnings on its stack, see docs/seed.md); the tests that
# need a clean strict baseline turn them off.
STRICT_A3 = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "rollout.chunked_prefill=false",
    "train.use_dynamic_bsz=false",
    "rollout.max_num_seqs=64",
]


def run_topl(*args, cwd=None, env=None, timeout=300):
    """Run the real CLI in a child process (exit codes and stderr as a user sees them).

    PYTHONSAFEPATH keeps the repository root off sys.path: its `kernels/` folder would shadow the
    PyPI `kernels` package that transformers probes."""
    e = {**os.environ, "PYTHONSAFEPATH": "1", **(env or {})}
    e.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "topl.launcher.cli", *args],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def verl_config_dir() -> Path | None:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def compose_verl(invocation):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return compose(invocation.config_name, overrides=invocation.overrides)
    finally:
        GlobalHydra.instance().clear()


def hf_config_dir(m, where):
    """A local HF model folder (config.json only) with the spec's architecture facts."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    common = dict(
        vocab_size=m.vocab_size,
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_kv_heads,
        head_dim=m.head_dim,
    )
    cfg = (
        Qwen3MoeConfig(
            num_experts=m.num_experts,
            num_experts_per_tok=m.experts_per_token,
            moe_intermediate_size=m.moe_intermediate_size,
            **common,
        )
        if m.num_experts
        else Qwen3Config(**common)
    )
    cfg.architectures = ["Qwen3MoeForCausalLM" if m.num_experts else "Qwen3ForCausalLM"]
    cfg.save_pretrained(where)
    return str(where)


# Keys the seed's stack (verl 0.8.0 + its patches) has and stock verl 0.9.1 lacks. Recipes on
# `stack: seed` render them; to run verl 0.9.1's own validation, grad_offload (a field of
# verl@0.8.0:verl/workers/config/engine.py:McoreEngineConfig, none in 0.9.1) is dropped and the
# others are appended with `+`.
DROPPED_ON_091 = ("actor_rollout_ref.actor.megatron.grad_offload",)
SEED_STACK_ONLY = (
    "actor_rollout_ref.rollout.per_request_seed",  # the seed's verl_per_request_seed_v0.8.0.patch
    "reward.reward_kwargs.",  # the DAPO recipe config (dapo_megatron_trainer), not ppo_trainer
)


def on_verl_091(invocation):
    """A rendered command made composable against verl 0.9.1's ppo_trainer (in place).

    DAPO's dapo_megatron_trainer (verl-recipe) extends ppo_trainer: its keys are proven there."""
    invocation.config_name = "ppo_trainer"
    invocation.overrides = [
        f"+{o}" if o.startswith(SEED_STACK_ONLY) else o
        for o in invocation.overrides
        if not o.startswith(DROPPED_ON_091)
    ]
    return invocation


def validate_on_verl_091(spec, invocation) -> None:
    """Compose a rendered command against verl 0.9.1 and run its validate_config."""
    from verl.utils.config import validate_config

    on_verl_091(invocation)
    validate_config(
        compose_verl(invocation),
        use_reference_policy=spec.algorithm.use_kl_loss,
        use_critic=spec.algorithm.use_critic,
    )


def run_topl_inproc(*args, cwd=None, env=None, timeout=None):
    """`run_topl` in this process: the same exit code, stdout and stderr, without a Python start
    and imports per call. For tests whose subject is not the process boundary (exit through
    signals, a child's environment at start-up, stdin). `env` is set in os.environ for the call
    and its PYTHONPATH put in front of sys.path, as a child would see them; `timeout` is ignored."""
    import contextlib
    import io

    from topl.launcher.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_path, saved_cwd = dict(os.environ), list(sys.path), os.getcwd()
    saved_modules = set(sys.modules)
    os.environ.update(env or {})
    os.environ.pop("HYDRA_FULL_ERROR", None)
    extra = [p for p in (env or {}).get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = extra
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as e:  # Hydra's own exits
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:  # modules from `env`'s PYTHONPATH
            mod = sys.modules[name]
            if any(str(getattr(mod, "__file__", "") or "").startswith(p) for p in extra):
                del sys.modules[name]
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())
