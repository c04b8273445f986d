"""TOP-VERL-003: a recipe's verl_overrides never silently replace a key topl renders from a spec
field (issue 27's leftover: per_request_seed in the shipped "off" recipes, the seed's data files)."""

import glob
from pathlib import Path

import pytest
from paths import ROOT

from topl.launcher.contract import check
from topl.launcher.render.command import build
from topl.launcher.render.invocation import render

ARR = "actor_rollout_ref"
OFF = "recipe=qwen3_4b_grpo_a3_off"
RECIPES = sorted(Path(p).stem for p in glob.glob(str(ROOT / "recipes/*.yaml")))


def rule(compose, overrides):
    return next((v for v in check(compose(overrides)) if v.rule == "TOP-VERL-003"), None)


def argv(compose, overrides):
    return render(compose(overrides).to_object(), environ={"HOME": "/home/u"}).overrides


@pytest.mark.parametrize("name", RECIPES)
def test_no_shipped_recipe_overrides_a_key_topl_renders_from_a_field(compose, name):
    """The key sets, not only the values: a user who sets the field must reach verl."""
    cmd = build(compose([f"recipe={name}"]).to_object())
    clash = [e.key for e in cmd.user if e.by == "verl_overrides" and e.key in cmd.own]
    assert clash == ["trainer.logger"], clash  # a topl constant, from no field


def test_the_off_recipes_follow_rollout_per_request_seed(compose):
    """Before: the recipe's verl_overrides said false and beat the field, silently."""
    assert f"{ARR}.rollout.per_request_seed=false" in argv(compose, [OFF])  # as the seed's script
    assert f"{ARR}.rollout.per_request_seed=true" in argv(
        compose, [OFF, "rollout.per_request_seed=true"]
    )
    assert rule(compose, [OFF, "rollout.per_request_seed=true"]) is None


def test_the_recipes_data_files_are_fields_data_dir_still_works_without_them(compose):
    assert "data.train_files=[/home/u/data/gsm8k/train.parquet]" in argv(compose, [OFF])
    assert "data.train_files=[/d/a.parquet]" in argv(compose, [OFF, "train_files=[/d/a.parquet]"])
    plain = argv(compose, ["data_dir=/d"])
    assert (
        "data.train_files=/d/train.parquet" in plain and "data.val_files=/d/test.parquet" in plain
    )


def test_an_override_beating_a_field_that_was_set_is_an_error(compose):
    bad = [
        OFF,
        "rollout.per_request_seed=true",
        f"+verl_overrides.{ARR}.rollout.per_request_seed=false",
    ]
    v = rule(compose, bad)
    assert v is not None and v.severity == "error"
    assert (
        "rollout.per_request_seed=true (set)" in v.message and "verl would run false" in v.message
    )
    key = f"verl_overrides.{ARR}.rollout.per_request_seed"  # both sources named
    assert v.keys[key]["source"].startswith("command line")
    assert (
        v.keys["rollout.per_request_seed"]["source"]
        == "command line `rollout.per_request_seed=true`"
    )
    assert "set the spec field" in v.fix


def test_an_override_beating_a_field_at_its_default_is_a_warning(compose):
    """Nobody chose topl's value, but the contract checked it: said, not refused."""
    v = rule(compose, [OFF, f"+verl_overrides.{ARR}.rollout.tensor_model_parallel_size=2"])
    assert v is not None and v.severity == "warning" and "rollout.tp=1 (its default)" in v.message
    v = rule(
        compose, [OFF, "data_dir=/d", "train_files=null", "+verl_overrides.data.train_files=/x"]
    )
    assert v.severity == "error" and "data_dir=/d (set)" in v.message


def test_the_same_value_is_no_violation(compose):
    assert (
        rule(compose, [OFF, f"+verl_overrides.{ARR}.rollout.tensor_model_parallel_size=1"]) is None
    )


def test_the_refs_copy_of_an_actor_key_counts_where_the_ref_runs(compose):
    """verl's ref config copies the actor's sizes (oc.select); the recipe's ref key beats them."""
    key = f"+verl_overrides.{ARR}.ref.megatron.tensor_model_parallel_size=1"
    base = [OFF, "train.tp=2", "rollout.tp=2", key]
    assert rule(compose, base) is None  # no KL: verl builds no reference policy
    v = rule(compose, [*base, "algorithm.use_kl_loss=true"])
    assert v is not None and v.severity == "error" and "train.tp=2 (set)" in v.message


def test_strict_log_prob_keys_stay_top_verl_002s(compose):
    from helpers import STRICT_A3

    bad = [*STRICT_A3, f"+verl_overrides.{ARR}.rollout.tensor_model_parallel_size=2"]
    got = {v.rule for v in check(compose(bad))}
    assert "TOP-VERL-002" in got and "TOP-VERL-003" not in got
