"""Composition: provenance, recipes from anywhere, and bad input as one readable message."""

import pytest
from helpers import STRICT_A3, run_topl

from topl.launcher.base.errors import ToplError


def test_sources_follow_composition_order(compose):
    c = compose(STRICT_A3 + ["rollout.tp=4"])
    assert c.source("rollout.tp") == "command line `rollout.tp=4`"
    assert c.source("train.pp") == "recipes/seed_qwen3_30b_a3b_grpo_on.yaml"  # the included one
    assert c.source("experiment") == "recipes/qwen3_30b_a3b_grpo_a3_strict.yaml"
    assert c.source("model.num_experts") == "conf/model/qwen3_30b_a3b.yaml"
    assert c.source("cluster.device_memory_gb") == "conf/cluster/atlas_a3.yaml"
    assert c.source("train.cp") == "topl schema default"  # conf/ restates no default
    assert c.source("train.dtype") == "topl schema default"
    assert c.choices["cluster"] == "atlas_a3"


def test_recipe_from_a_path_is_validated_like_a_shipped_one(compose, tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "# @package _global_\n# my tweak\ndefaults:\n  - override /model: tiny_moe\n  - _self_\n"
        "train:\n  ppo_mini_batch_size: 4\n"
    )
    c = compose([f"recipe={f}"])
    assert c.cfg.model.num_experts == 8 and c.cfg.train.ppo_mini_batch_size == 4
    assert c.source("train.ppo_mini_batch_size") == str(f)
    assert c.recipe == str(f)


def test_recipe_search_path(compose, tmp_path, monkeypatch):
    (tmp_path / "team.yaml").write_text("# @package _global_\nrollout:\n  n: 4\n")
    monkeypatch.setenv("TOPL_RECIPE_PATH", str(tmp_path))
    assert compose(["recipe=team"]).cfg.rollout.n == 4


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["train.tpp=2"], "train.tpp"),
        (["train.tp=two"], "train.tp takes an integer"),
        (["model=qwen9"], "`model` has no option 'qwen9'"),
        (["recipe=nope"], "unknown recipe 'nope'"),
        (["train.tp=[1"], "train.tp=[1"),
        (["+surprise=1"], "surprise"),
    ],
)
def test_bad_input_is_a_readable_error(compose, overrides, needle):
    with pytest.raises(ToplError) as e:
        compose(overrides)
    assert needle in e.value.render()
    assert "fix:" in e.value.render()


def test_yaml_syntax_error_names_file_and_line(compose, tmp_path):
    f = tmp_path / "broken.yaml"
    f.write_text("# @package _global_\ntrain:\n  tp: [1, 2\n")
    with pytest.raises(ToplError) as e:
        compose([f"recipe={f}"])
    assert f"{f}:" in e.value.render() and "YAML syntax error" in e.value.render()


def test_target_in_a_recipe_is_refused(compose, tmp_path):
    f = tmp_path / "evil.yaml"
    f.write_text("# @package _global_\ncluster:\n  env:\n    _target_: os.system\n")
    with pytest.raises(ToplError) as e:
        compose([f"recipe={f}"])
    assert "_target_" in e.value.message and "cluster.env._target_" in e.value.message


def test_cli_exit_code_2_and_no_traceback():
    for args in (
        ["check", "train.tpp=1"],
        ["launch", "rollout.tp=abc"],
        ["render", "recipe=missing"],
        ["check", "model=nope"],
    ):
        r = run_topl(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and "error:" in r.stderr


def test_contradictory_overrides_are_rejected_with_sources():
    r = run_topl("check", *STRICT_A3, "rollout.tp=2", "--json")
    assert r.returncode == 2
    import json

    out = json.loads(r.stdout)
    assert out["ok"] is False
    tp = next(v for v in out["violations"] if v["rule"] == "TOP-TP-001")
    assert tp["keys"]["rollout.tp"]["source"] == "command line `rollout.tp=2`"
