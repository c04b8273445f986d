"""`topl plan` gives every point the verdict `topl check` gives it, for every override form
Hydra accepts in a sweep (shuffle, quoted values, +/++, choice/range/glob, dict entries)."""

import pytest
from helpers import STRICT_A3

from topl.launcher.base.errors import ToplError
from topl.launcher.contract import check, errors
from topl.launcher.plan.sweep import expand, plan

FORMS = [
    ["train.tp=shuffle(1,2,4)", "rollout.tp=2"],
    ["train.tp=shuffle(range(1,5))", "rollout.tp=shuffle(1,2)"],
    ["train.tp='2',\"4\"", "rollout.tp=2"],
    ["++train.tp=2,4", "rollout.tp=2"],
    ["++rollout.n=1,8"],
    ["+cluster.env.HCCL_DETERMINISTIC=true,strict"],
    ["+cluster.env.VLLM_BATCH_INVARIANT=0,1", "alignment=strict,off"],
    ["+algorithm.extra_overrides.trainer.total_epochs=1,2"],
    ["train.tp=choice(1,2)", "rollout.tp=choice(2)"],
    ["train.pp=range(2,9,2)", "train.cp=1,2"],
    ["model=glob(qwen3_30*)", "rollout.pp=1,2"],
    ["collective.hccl_algo='level0:pipeline','level0:ring'"],
    ["train.dtype=bfloat16,fp7", "rollout.top_p=0.5,1.0"],
    ["alignment.rollout_correction.rollout_rs=token,token_k1", "alignment=mitigated"],
    ["experiment=${model.name}_x,plain"],
]


def _agree(compose, sweep):
    for v in plan(sweep):
        want = {x.rule for x in errors(check(compose(v.overrides)))}
        assert set(v.rules) == want, v.overrides
        assert v.valid is (not want)


@pytest.mark.parametrize("form", FORMS, ids=[" ".join(f) for f in FORMS])
def test_plan_agrees_with_check(compose, form):
    _agree(compose, STRICT_A3 + form)


def test_multi_recipe_sweep(compose):
    sweep = ["recipe=qwen3_4b_grpo_a2_strict,qwen3_30b_a3b_grpo_a3_strict", "rollout.tp=1,2"]
    assert len(expand(sweep)) == 4
    _agree(compose, sweep)


def test_shuffle_keeps_each_value_with_its_text():
    """shuffle() reorders every iterator afresh; a point's text and value must stay one pair."""
    for v in plan(STRICT_A3 + ["train.tp=shuffle(1,2,4,8)", "rollout.tp=1"]):
        tp = int(next(o for o in v.overrides if o.startswith("train.tp=")).split("=")[1])
        assert ("TOP-TP-001" in v.rules) is (tp != 1), v.overrides


@pytest.mark.parametrize("bad", [["+train.tp=2,4"], ["cluster.env.X=1,2"], ["train.tp=a,1"]])
def test_points_check_rejects_as_input_errors_are_plan_errors(compose, bad):
    with pytest.raises(ToplError):
        compose(STRICT_A3 + [bad[0].split("=")[0] + "=" + bad[0].split("=")[1].split(",")[0]])
    with pytest.raises(ToplError):
        plan(STRICT_A3 + bad)


def test_glob_over_recipes(compose):
    sweep = ["recipe=glob(qwen3_4b_grpo_a3*)"]
    assert [p[0] for p in expand(sweep)] == [
        "recipe=qwen3_4b_grpo_a3_mitigated",
        "recipe=qwen3_4b_grpo_a3_off",
        "recipe=qwen3_4b_grpo_a3_prerelease_strict",
        "recipe=qwen3_4b_grpo_a3_release_strict",
        "recipe=qwen3_4b_grpo_a3_strict",
    ]
    _agree(compose, sweep)
