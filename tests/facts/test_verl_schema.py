"""verl's schema per version (launcher/facts/verl_schema.py), generated from the real releases."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from paths import ROOT

from topl.launcher import facts
from topl.launcher.compose.hydra import compose_job
from topl.launcher.facts.verl_schema import KNOWN, _load, schema, schema_for

ARR = "actor_rollout_ref"


def test_versions_differ_where_verl_changed():
    """grad_offload left with 0.9.1; rollout.seed came with 0.9.0 (default 42)."""
    g = f"{ARR}.actor.megatron.grad_offload"
    assert schema("0.8.0").has(g) and schema("0.9.0").has(g) and not schema("0.9.1").has(g)
    seed = f"{ARR}.rollout.seed"
    assert not schema("0.8.0").has(seed)
    assert schema("0.9.1").default(seed) == 42 and schema("0.9.1").type(seed) == "int"


def test_the_seed_patches_add_their_keys_from_the_cited_fact():
    s = schema("0.8.0", ("vllm_pp", "per_request_seed", "mindspeed_batch_invariant"))
    for key, (typ, default) in facts.fact("verl_patch_rollout_seed_keys").value.items():
        assert s.has(key) and s.default(key) == default and s.type(key) == typ
        assert "verl_per_request_seed_v0.8.0.patch" in s.cite(key)
    assert not schema("0.8.0", ("mindspeed_batch_invariant",)).has(f"{ARR}.rollout.seed")


def test_free_form_containers_take_new_keys_with_plus():
    s = schema("0.9.1")
    assert s.free_form(f"{ARR}.rollout.engine_kwargs.vllm.block_size")
    assert s.spelling(f"{ARR}.rollout.engine_kwargs.vllm.block_size").startswith("+")
    # a dict field of McoreEngineConfig (verl passes it to TransformerConfig)
    assert s.free_form(f"{ARR}.actor.megatron.override_transformer_config.use_flash_attn")
    assert s.free_form("ray_kwargs.ray_init.runtime_env.env_vars.X")
    assert (
        not s.free_form(f"{ARR}.rollout.n") and s.spelling(f"{ARR}.rollout.n") == f"{ARR}.rollout.n"
    )
    assert s.spelling(f"{ARR}.actor.megatron.grad_offload") is None  # a dataclass: no new keys


def test_dapo_keys_come_with_the_dapo_trainer_config():
    k = "reward.reward_kwargs.overlong_buffer_cfg.len"
    assert schema("0.9.1", (), "dapo_megatron_trainer").has(k)
    assert not schema("0.9.1").has(k)
    assert "verl-recipe@" in schema("0.9.1", (), "dapo_megatron_trainer").source


def test_schema_for_reads_the_declared_stack():
    s = schema_for(compose_job(["recipe=seed_qwen3_4b_dapo_on"]).to_object())
    assert (s.version, s.config) == ("0.8.0", "dapo_megatron_trainer")
    assert "per_request_seed" in s.patches and s.exact
    other = schema_for(compose_job(["stack=release", "cluster.versions.verl=0.9.5"]).to_object())
    assert other.version == "0.9.5" and not other.exact  # the nearest older one: 0.9.1's keys


def test_loaded_lazily_per_version():
    _load.cache_clear()
    schema.cache_clear()
    schema("0.9.1")
    assert _load.cache_info().currsize == 1


@pytest.mark.verl_versions
@pytest.mark.skipif(
    not os.environ.get("TOPL_VERL_VERSIONS"),
    reason="downloads verl wheels: set TOPL_VERL_VERSIONS=1 (.ci/run does)",
)
def test_schema_files_match_the_real_releases():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_verl_schema.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(KNOWN) == 3


def test_a_written_plus_adds_a_key_only_where_verl_builds_no_dataclass():
    s = schema("0.9.1")
    assert s.accepts_new("my_team.custom_flag")  # Hydra adds it; verl's root is a plain mapping
    assert not s.accepts_new(f"{ARR}.actor.frobnicate_level")  # ActorConfig would refuse it
    assert not s.accepts_new(f"{ARR}.rollout.n")  # exists: `+` would fail to compose
