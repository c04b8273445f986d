"""Errors that lead somewhere (issue 49, items 4 and 5): a verl key typed on the command line names
the topl field that renders it (the renderer's own table, reversed) or verl's passthrough; a value
of the wrong type names the field, its type and the value; a group option that does not exist
names the nearest options. Each fix printed is applied here and accepted."""

import json
import re

import pytest
from helpers import run_topl_inproc as run

from topl.launcher.compose.did_you_mean import topl_fields_of, verl_key_fix
from topl.launcher.facts.verl_tables import FSDP_KEYS, MEGATRON_KEYS, VERL_KEYS

RECIPE = "recipe=qwen3_4b_grpo_a2_release_strict"  # two devices: tp=2 fits


def _error(*args) -> tuple[str, dict]:
    r = run("check", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    j = run("check", *args, "--json")
    assert j.returncode == 2
    return r.stderr, json.loads(j.stdout)["error"]


def _fix_applied(fix: str) -> list[str]:
    """The `write K=V` / `e.g. K=V` / `did you mean K=V` of a fix, as overrides."""
    m = re.search(r"(?:write|e\.g\.|did you mean) (\S+=[^\s,?]+)", fix)
    assert m, fix
    return [m[1]]


def _accepted(*args) -> None:
    r = run("check", *args)
    assert r.returncode == 0 and "OK:" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("plus", ["", "+"])
def test_verl_key_names_the_topl_field_and_the_fix_is_accepted(plus):
    overrides = []
    for verl, field in (
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "rollout.tp"),
        ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size", "train.tp"),
    ):
        err, e = _error(RECIPE, f"{plus}{verl}=2")
        assert f"this is `{field}` in topl: write {field}=2" in err
        assert "check the spelling" not in err and e["fix"].startswith(f"this is `{field}`")
        overrides += _fix_applied(e["fix"])
    assert overrides == ["rollout.tp=2", "train.tp=2"]
    _accepted(RECIPE, *overrides)


def test_every_row_of_the_render_tables_is_named_backwards():
    for table in (VERL_KEYS, MEGATRON_KEYS, FSDP_KEYS):
        for field, verl in table.items():
            assert field in topl_fields_of(verl)
            assert f"this is `{topl_fields_of(verl)[0]}` in topl" in verl_key_fix(verl, "1")


def test_a_verl_key_no_field_renders_goes_through_extra_overrides():
    key = "actor_rollout_ref.rollout.free_cache_engine"
    err, e = _error(f"+{key}=false")
    assert f"+algorithm.extra_overrides.{key}=false" in e["fix"]
    _accepted(f"+algorithm.extra_overrides.{key}=false")
    assert verl_key_fix("foo.bar", "1") is None  # not verl's: the spelling hint stays


@pytest.mark.parametrize(
    "bad,words", [("train.tp=two", "an integer"), ("rollout.temperature=hot", "a number")]
)
def test_a_value_of_the_wrong_type_names_field_type_and_value(bad, words):
    key, _, value = bad.partition("=")
    err, e = _error(bad)
    assert f"{key} takes {words}" in e["message"] and f"not '{value}'" in e["message"]
    assert e["where"] == f"command line `{bad}`"
    assert "launcher/spec" not in err and "could not be converted" not in err
    _accepted(*_fix_applied(e["fix"]))


def test_a_wrong_type_inside_a_recipe_names_the_recipe(tmp_path):
    f = tmp_path / "typed.yaml"
    f.write_text("# @package _global_\ntrain:\n  tp: two\n")
    err, e = _error(f"recipe={f}")
    assert "train.tp takes an integer" in e["message"]
    assert e["where"] == f"recipe {f}, key train.tp"
    assert "e.g. `tp: 1` under `train:`" in e["fix"]  # the recipe composes first: fixed there
    f.write_text("# @package _global_\ntrain:\n  tp: 1\n")
    _accepted(f"recipe={f}")


def test_a_missing_group_option_names_the_nearest_options():
    err, e = _error("model=tiny_Moe")
    assert "`model` has no option 'tiny_Moe'" in e["message"]
    assert e["fix"].startswith("did you mean model=tiny_moe")
    assert "qwen3_4b" in e["fix"] and "Config search path" not in err
    _accepted(*_fix_applied(e["fix"]))
    assert "did you mean model=qwen3_4b" in _error("model=qwen3_4B")[1]["fix"]
