"""Rendering: `+` exactly where verl 0.9.1 lacks a key, env reaches Ray workers, verl accepts it."""

import json

import pytest
from helpers import (  # noqa: E402
    STRICT_A3,
    compose_verl,
    hf_config_dir,
    run_topl,
    validate_on_declared,
    verl_config_dir,
)

from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.render.invocation import fmt, render

needs_verl = pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed")

LAYOUTS = [
    STRICT_A3,
    STRICT_A3 + ["train.tp=2", "rollout.tp=2", "train.pp=4", "rollout.pp=1"],
    STRICT_A3 + ["train.pp=4", "rollout.pp=2", "cluster.nodes=2", "train.train_batch_size=64"],
    STRICT_A3 + ["alignment=mitigated"],
    STRICT_A3 + ["alignment=off", "collective=default", "rollout.tp=4", "train.tp=4", "train.pp=2"],
    STRICT_A3 + ["algorithm=gspo", "algorithm.policy_loss=gspo"],  # TOP-ALG-003
    STRICT_A3 + ["algorithm=ppo", "algorithm.adv_estimator=gae", "algorithm.use_critic=true"],
    [
        "model=qwen3_4b",
        "cluster=atlas_a2",
        "train=fsdp",
        "rollout=vllm_ascend",
        "collective=hccl_strict",
    ],
    [],
]


def test_strict_rendering_carries_the_seed_switches(compose):
    inv = render(compose(STRICT_A3).to_object())
    o = set(inv.overrides)
    for needed in [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.enforce_eager=true",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend=FLASH_ATTN",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.use_flash_attn_npu_batch_invariant=true",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.batch_invariant_mode=true",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.use_batch_invariant_ops=true",
        "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=flash",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=8",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1",
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=1",
        "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm.pipeline_parallel_size=2",
    ]:
        assert needed in o, needed
    for k, v in {
        "VLLM_BATCH_INVARIANT": "1",
        "HCCL_DETERMINISTIC": "strict",
        "LCCL_DETERMINISTIC": "1",
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "TASK_QUEUE_ENABLE": "2",
        "CPU_AFFINITY_CONF": "1",
        "VLLM_ASCEND_ENABLE_NZ": "0",
        "CLOSE_MATMUL_K_SHIFT": "1",
        "HCCL_CONNECT_TIMEOUT": "3600",  # the seed's
        "HCCL_EXEC_TIMEOUT": "3600",
    }.items():
        assert inv.env[k] == v
        assert f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={fmt(v)}" in o, k
    assert inv.env["VERL_USE_EXTERNAL_MODULES"]


def test_off_renders_no_determinism(compose):
    inv = render(compose(["alignment=off"]).to_object())
    assert "VLLM_BATCH_INVARIANT" not in inv.env
    assert not any("full_determinism" in o for o in inv.overrides)


def test_dapo_has_its_own_entrypoint(compose):
    inv = render(compose(STRICT_A3 + ["algorithm=dapo"]).to_object())
    assert inv.argv[:3] == ["-m", "recipe.dapo.main_dapo", "--config-name=dapo_megatron_trainer"]


@pytest.mark.parametrize("stack", ["seed", "release"])
def test_plus_exactly_where_the_declared_verl_lacks_the_key(compose, stack):
    """`+` is decided by the declared verl's schema (patches included), for every key."""
    spec = compose(["stack=" + stack, "alignment=off", "collective=default"]).to_object()
    sch = schema_for(spec)
    for o in render(spec).overrides:
        key = o.split("=", 1)[0]
        bare = key.lstrip("+")
        assert sch.has(bare) or sch.free_form(bare), o
        assert key.startswith("+") == (not sch.has(bare)), o


@needs_verl
@pytest.mark.slow  # verl's validate_config in a kept verl process: CI runs it, the fast tier not
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda l: " ".join(l)[-60:] or "default")
def test_rendering_composes_against_verl_and_passes_validate_config(
    compose, layout, tmp_path, monkeypatch
):

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = compose(layout).to_object()
    spec.model.hf_path = hf_config_dir(spec.model, tmp_path)  # verl reads config.json; no hub here
    inv = render(spec)  # as rendered: composed against the declared verl (seed: 0.8.0 + patches)
    validate_on_declared(spec, inv, tmp_path)


@needs_verl
def test_a_plus_where_verl_has_the_key_would_fail():
    """The proof has teeth: verl's config rejects `+` on an existing key and a missing key without it."""
    from hydra.errors import ConfigCompositionException

    from topl.launcher.render.invocation import Invocation

    with pytest.raises(ConfigCompositionException):
        compose_verl(Invocation("m", "ppo_trainer", ["+actor_rollout_ref.rollout.n=2"]))
    with pytest.raises(ConfigCompositionException):
        compose_verl(
            Invocation(
                "m", "ppo_trainer", ["actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=2"]
            )
        )


def test_render_cli_json():
    r = run_topl("render", *STRICT_A3, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"entrypoint", "overrides", "env", "command"}
    assert out["entrypoint"] == "verl.trainer.main_ppo"
    assert "HCCL_DETERMINISTIC=strict" in out["command"]


def test_env_values_are_spelt_as_the_shell_and_yaml_write_them(compose):
    """`+cluster.env.X=false` once reached the workers as Python's `False`."""
    from topl.launcher.render.env import env_vars

    spec = compose(["+cluster.env.X=false", "+cluster.env.Y=true", "+cluster.env.N=8"]).to_object()
    inv = render(spec)
    for k, v in {"X": "false", "Y": "true", "N": "8"}.items():
        assert inv.env[k] == env_vars(spec)[k] == v  # doctor's TOP-DOC-ENV-001 reads env_vars
        assert f'+ray_kwargs.ray_init.runtime_env.env_vars.{k}="{v}"' in inv.overrides
        assert f" {k}={v} " in inv.command()


def test_the_contract_compares_the_value_workers_get(compose):
    """HCCL_DETERMINISTIC=true typed as a YAML bool is what collective=lccl_aiv renders: no error."""
    from topl.launcher.contract import check

    ok = compose(["collective=lccl_aiv", "+cluster.env.HCCL_DETERMINISTIC=true"])
    bad = compose(["collective=hccl_strict", "+cluster.env.HCCL_DETERMINISTIC=true"])
    assert "TOP-ENV-001" not in {v.rule for v in check(ok)}
    (v,) = [v for v in check(bad) if v.rule == "TOP-ENV-001"]
    assert "cluster.env.HCCL_DETERMINISTIC='true'" in v.message


SECRET = "s3cret-api-key-1"
URL_PW = "db-pass-42"


def test_no_secret_on_the_command_line_and_the_env_still_carries_it(compose, tmp_path):
    """Secret-named or credential-shaped env entries are on no argv: verl prints its runtime_env
    and whole config (verl@0.9.1:verl/trainer/main_ppo.py:run_ppo, TaskRunner.run), and `ps`
    shows argv. The backends pass them in the environment (tests/base/test_secrets.py)."""
    import subprocess
    import sys

    spec = compose(
        [
            "collective=hccl_strict",
            f"+cluster.env.MY_API_KEY={SECRET}",
            f"+cluster.env.DATABASE_URL=postgres://alice:{URL_PW}@db:5432/x",
        ]
    ).to_object()
    inv = render(spec)
    assert inv.env["MY_API_KEY"] == SECRET and URL_PW in inv.env["DATABASE_URL"]
    assert sorted(inv.secrets) == ["DATABASE_URL", "MY_API_KEY"]
    shown = " ".join(inv.argv) + inv.command() + json.dumps(inv.to_dict())
    assert SECRET not in shown and URL_PW not in shown  # no redactor involved here
    assert not [o for o in inv.overrides if "MY_API_KEY" in o or "DATABASE_URL" in o]
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_DETERMINISTIC=strict" in inv.overrides
    assert inv.to_dict()["env"]["MY_API_KEY"] == "<redacted>"
    # the command stays runnable: bash reads the secret from the running shell, or stops
    (tmp_path / "show_env.py").write_text("import os; print(os.environ['MY_API_KEY'])\n")
    from topl.launcher.render.invocation import Invocation

    probe = Invocation("show_env", "x", [], inv.env).command(sys.executable)
    run = dict(cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
    unset = subprocess.run(["bash", "-c", probe], **run)
    assert unset.returncode != 0 and ": is a secret: export it first" in unset.stderr
    run["env"].update(MY_API_KEY="from-the-shell", DATABASE_URL="x")
    assert subprocess.run(["bash", "-c", probe], **run).stdout == "from-the-shell\n"


def test_fsdp_strict_renders_no_full_determinism(compose):
    """fsdp_config.full_determinism would rewrite HCCL_DETERMINISTIC=true in the FSDP workers."""
    inv = render(compose(["train=fsdp", "collective=hccl_strict", "cluster=atlas_a2"]).to_object())
    assert not [o for o in inv.overrides if "full_determinism" in o]
    assert inv.env["HCCL_DETERMINISTIC"] == "strict"


@needs_verl
def test_verl_fsdp_full_determinism_rewrites_hccl_deterministic():
    """The reason FSDP strict drops it, read from the installed verl 0.9.1 (skips on others)."""
    import re
    from importlib import metadata

    if metadata.version("verl") != "0.9.1":
        pytest.skip("the fact is about verl 0.9.1")
    workers = verl_config_dir().parent.parent / "workers" / "engine"
    init = (workers / "fsdp" / "transformer_impl.py").read_text()
    assert re.search(r"if self\.engine_config\.full_determinism:\s+enable_full_determinism\(", init)
    util = (workers / "utils.py").read_text()
    body = util[util.index("def enable_full_determinism(") :]
    body = body[: body.index("\ndef ")]
    assert 'os.environ["HCCL_DETERMINISTIC"] = "true"' in body
