"""The contract reads the command verl will receive (issue 27, item 3): recipe `verl_overrides`,
`algorithm.extra_overrides` and topl's own keys, each value with its source."""

import pytest
from helpers import STRICT_A3, verl_config_dir

from topl.launcher.contract import check, evaluate
from topl.launcher.render.invocation import render

ARR = "actor_rollout_ref"
OTC = f"{ARR}.actor.megatron.override_transformer_config"


def user_recipe(tmp_path, body: str) -> str:
    """A three-line user recipe that includes the strict 30B recipe."""
    p = tmp_path / "mine.yaml"
    p.write_text(
        "# @package _global_\ndefaults:\n  - qwen3_30b_a3b_grpo_a3_strict\n  - _self_\n" + body
    )
    return str(p)


def errors_of(composed):
    return {v.rule: v for v in check(composed) if v.severity == "error"}


def test_rollout_tp_through_verl_overrides_is_refused_naming_the_file(compose, tmp_path):
    path = user_recipe(
        tmp_path, f"verl_overrides:\n  {ARR}.rollout.tensor_model_parallel_size: 2\n"
    )
    c = compose([f"recipe={path}", *STRICT_A3[1:]])
    assert f"{ARR}.rollout.tensor_model_parallel_size=2" in render(c.to_object()).overrides
    v = errors_of(c)["TOP-VERL-002"]
    key = f"verl_overrides.{ARR}.rollout.tensor_model_parallel_size"
    assert v.keys[key] == {"value": 2, "source": path}  # the offending value and its file
    assert v.keys["rollout.tp"]["value"] == 1  # what strict mode checked, and where it came from
    assert "rendered by topl from rollout.tp" in v.message


@pytest.mark.parametrize(
    "switch",
    ["use_batch_invariant_ops", "use_flash_attn_npu_batch_invariant", "batch_invariant_mode"],
)
def test_mindspeed_batch_invariance_off_through_verl_overrides_is_refused(
    compose, tmp_path, switch
):
    path = user_recipe(tmp_path, f"verl_overrides:\n  +{OTC}.{switch}: false\n")
    v = errors_of(compose([f"recipe={path}", *STRICT_A3[1:]]))["TOP-VERL-002"]
    assert v.keys[f"verl_overrides.+{OTC}.{switch}"]["source"] == path


def test_verl_overrides_restating_topls_value_pass(compose, tmp_path):
    """The seed's recipes restate some of topl's keys (same value): not a violation."""
    path = user_recipe(
        tmp_path,
        f"verl_overrides:\n  {ARR}.rollout.tensor_model_parallel_size: 1\n"
        f"  {ARR}.ref.megatron.pipeline_model_parallel_size: 8\n",
    )
    assert "TOP-VERL-002" not in errors_of(compose([f"recipe={path}", *STRICT_A3[1:]]))


def test_ref_layout_apart_from_the_actor_is_refused_in_strict(compose):
    ref = f"+verl_overrides.{ARR}.ref.megatron.tensor_model_parallel_size=2"
    assert "TOP-VERL-002" not in errors_of(compose(STRICT_A3 + [ref]))  # no reference policy
    c = compose(STRICT_A3 + [ref, "algorithm.use_kl_loss=true"])
    v = errors_of(c)["TOP-VERL-002"]
    assert f"{ARR}.actor.megatron.tensor_model_parallel_size=1" in v.message


@pytest.mark.parametrize(
    "override",
    [
        f"+algorithm.extra_overrides.{ARR}.rollout.dtype=float16",
        f"+algorithm.extra_overrides.{ARR}.rollout.quantization=fp8",
        f"+algorithm.extra_overrides.{ARR}.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8",
        f"+algorithm.extra_overrides.{ARR}.actor.megatron.dtype=float16",
    ],
)
def test_rollout_precision_through_extra_overrides_fails_strict(compose, override):
    c = compose(STRICT_A3 + [override])
    v = errors_of(c)["TOP-VERL-002"]
    assert any(k.startswith("algorithm.extra_overrides.") for k in v.keys)
    assert (
        "command line"
        in v.keys[next(k for k in v.keys if k.startswith("algorithm.extra"))]["source"]
    )
    # outside strict mode a key topl does not render is the user's to choose; a dtype is rendered
    # from train.dtype, which is where to set it in any mode
    off = errors_of(compose(STRICT_A3 + [override, "alignment=off"]))
    if ".dtype=" in override:
        assert "rendered by topl" in off["TOP-VERL-002"].message
        assert "train.dtype" in off["TOP-VERL-002"].keys
    else:
        assert "TOP-VERL-002" not in off


def test_restating_verls_default_passes_strict(compose):
    c = compose(STRICT_A3 + [f"+algorithm.extra_overrides.{ARR}.rollout.quantization=null"])
    assert "TOP-VERL-002" not in errors_of(c)


def test_nested_verl_overrides_on_the_command_line_are_flattened(compose):
    c = compose(STRICT_A3 + ["+verl_overrides.trainer.log_val_generations=3"])
    argv = render(c.to_object()).overrides
    assert "trainer.log_val_generations=3" in argv
    assert not [o for o in argv if o.startswith("trainer=")]  # no whole node replaced by a string


def test_nested_verl_override_checked_against_verls_schema(compose, tmp_path):
    c = compose(STRICT_A3 + ["+verl_overrides.trainer.log_val_generation=3"])  # misspelt
    v = errors_of(c)["TOP-VERL-001"]
    assert "trainer.log_val_generation" in v.message
    assert v.keys["verl_overrides.trainer.log_val_generation"]["source"].startswith("command line")
    path = user_recipe(tmp_path, "verl_overrides:\n  trainer.no_such_key: 1\n")
    v = errors_of(compose([f"recipe={path}", *STRICT_A3[1:]]))["TOP-VERL-001"]
    assert v.keys["verl_overrides.trainer.no_such_key"]["source"] == path


def test_following_topls_own_dynamic_bsz_fix_is_checked_to_the_end(compose, tmp_path):
    """TOP-LOGP-004 says train.use_dynamic_bsz=false: the shipped recipes leave the recompute's
    switch to topl (rendered from the same field), so the fix reaches verl whole. A recipe whose
    verl_overrides still say true for the recompute, which verl asserts against at worker start,
    is refused, naming the recipe (TOP-INIT-001; TOP-VERL-002/003: the field it overrides)."""
    base = ["recipe=qwen3_30b_a3b_grpo_a3_strict", "train.use_dynamic_bsz=false"]
    fixed = compose(base)
    assert not {"TOP-INIT-001", "TOP-VERL-003"} & set(errors_of(fixed))
    argv = render(fixed.to_object()).overrides
    assert f"{ARR}.rollout.log_prob_use_dynamic_bsz=false" in argv
    assert f"{ARR}.actor.use_dynamic_bsz=false" in argv
    path = user_recipe(
        tmp_path,
        f"verl_overrides:\n  {ARR}.rollout.log_prob_use_dynamic_bsz: true\n",
    )
    v = errors_of(compose([f"recipe={path}", "train.use_dynamic_bsz=false"]))["TOP-INIT-001"]
    src = v.keys[f"verl_overrides.{ARR}.rollout.log_prob_use_dynamic_bsz"]["source"]
    assert src == path
    assert "+verl_overrides." in v.fix  # a fix that works (or drop the key from the recipe)


def test_plan_evaluate_sees_the_command_too(compose, tmp_path):
    path = user_recipe(
        tmp_path, f"verl_overrides:\n  {ARR}.rollout.tensor_model_parallel_size: 2\n"
    )
    spec = compose([f"recipe={path}", *STRICT_A3[1:]]).to_object()
    assert "TOP-VERL-002" in {r.id for r, sev, _ in evaluate(spec) if sev == "error"}


@pytest.mark.parametrize("stack", ["seed", "release"])
def test_command_map_is_the_rendered_command(compose, stack):
    """Every key of the map is on the command line with the same value and prefix (and back);
    the map keeps `$HOME` as written (the contract reads no environment), render expands it."""
    from topl.launcher.compose.recipes import available
    from topl.launcher.render.command import command
    from topl.launcher.render.invocation import fmt
    from topl.launcher.render.spelling import expand

    env = {"HOME": "/home/u"}
    for name in list(available())[::5]:
        ov = [f"recipe={name}", f"stack={stack}", "+verl_overrides.trainer.log_val_generations=1"]
        spec = compose(ov).to_object()
        mine = sorted(f"{e.prefix}{e.key}={fmt(expand(e.value, env))}" for e in command(spec))
        assert mine == sorted(render(spec, environ=env).overrides), name


def test_command_is_built_once_per_spec(compose, monkeypatch):
    """All rules that read the command share one build (plan evaluates rules per point)."""
    import topl.launcher.render.command as cm

    calls = []
    real = cm.build
    monkeypatch.setattr(cm, "build", lambda s: calls.append(1) or real(s))
    c = compose(STRICT_A3)
    check(c)
    assert len(calls) == 1
    evaluate(c.to_object())
    assert len(calls) == 2  # a new spec object, one more build


@pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed")
def test_accepted_verl_overrides_compose_in_verl(compose, tmp_path):
    """Nested and flat verl_overrides the contract accepts compose in the declared verl (release:
    0.9.1, installed) and pass its validate_config, as rendered."""
    from helpers import compose_verl, declared_config_dir, validate_on_declared

    path = user_recipe(
        tmp_path,
        "verl_overrides:\n  trainer:\n    log_val_generations: 2\n"
        f"  {ARR}.ref.megatron.pipeline_model_parallel_size: 8\n",
    )
    layout = ["rollout.pp=1", "rollout.tp=2", "train.tp=2"]  # release's vLLM has no NPU PP
    c = compose([f"recipe={path}", *STRICT_A3[1:], "stack=release", *layout])
    assert not errors_of(c)
    spec = c.to_object()
    inv = render(spec, environ={"HOME": "/home/u"})
    assert compose_verl(inv, declared_config_dir(spec, tmp_path)).trainer.log_val_generations == 2
    validate_on_declared(spec, inv, tmp_path)
