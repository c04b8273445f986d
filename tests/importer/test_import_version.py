"""`topl recipes import` and the verl the recipe declares: keys read in that verl's vocabulary,
the script's trainer config on the printed command line, unset shell variables named."""

import json

import pytest
from helpers import run_topl

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job
from topl.launcher.importer.read import read_script
from topl.launcher.importer.recipe import build_recipe
from topl.launcher.importer.report import recipe_text
from topl.launcher.render.invocation import render

MEG = "actor_rollout_ref.actor.megatron"


def megatron_script(param: bool, grad: bool, head: str = "", extra: str = "") -> str:
    return (
        f"{head}python3 -m verl.trainer.main_ppo --config-name='ppo_megatron_trainer.yaml' \\\n"
        "    actor_rollout_ref.model.path=Qwen/Qwen3-4B \\\n"
        "    trainer.n_gpus_per_node=8 trainer.nnodes=1 \\\n"
        f"    {MEG}.param_offload={param} \\\n"
        f"    {MEG}.grad_offload={grad} \\\n"
        f"    {MEG}.optimizer_offload=False {extra}\n"
    )


def _rendered(imp, tmp_path, *more, environ=None):
    path = tmp_path / "r.yaml"
    path.write_text(recipe_text(imp, "x.sh"))
    inv = render(compose_job([f"recipe={path}", *imp.command_args(), *more]).to_object(), environ)
    return inv, {k.lstrip("+"): v for k, v in (o.split("=", 1) for o in inv.overrides)}


def test_grad_offload_is_compared_as_the_declared_verl_spells_it(tmp_path):
    imp = build_recipe(read_script(megatron_script(True, True)))
    assert imp.round_trip == [] and imp.verl == "0.9.1"
    assert imp.respelled == {f"{MEG}.grad_offload": f"{MEG}.param_offload"}
    row = next(r for r in imp.report if r["kind"] == "spelled for the declared verl")
    assert row["line"] == 5 and "McoreEngineConfig.param_offload" in row["detail"]
    inv, got = _rendered(imp, tmp_path)
    assert got[f"{MEG}.param_offload"] == "true" and f"{MEG}.grad_offload" not in got
    # the recipe keeps the script's key: on a verl that has it, it is rendered as written
    _, older = _rendered(imp, tmp_path, "cluster.versions.verl=0.9.0")
    assert older[f"{MEG}.grad_offload"] == "true"


def test_a_key_the_declared_verl_cannot_say_is_named_with_the_verl_that_can(tmp_path):
    imp = build_recipe(read_script(megatron_script(True, False)))
    assert imp.respelled == {}
    row = next(r for r in imp.report if r["kind"] == "unknown to verl")
    assert row["key"] == f"{MEG}.grad_offload" and row["line"] == 5
    assert "verl 0.9.1" in row["detail"] and "verl 0.8.0, verl 0.9.0" in row["detail"]
    with pytest.raises(ToplError, match="grad_offload"):  # never rendered into a failing command
        _rendered(imp, tmp_path)
    _, got = _rendered(imp, tmp_path, "cluster.versions.verl=0.9.0")  # the fix it names
    assert got[f"{MEG}.grad_offload"] == "false" and got[f"{MEG}.param_offload"] == "true"


def test_the_trainer_config_goes_on_the_command_line_not_into_the_recipe(tmp_path):
    imp = build_recipe(read_script(megatron_script(False, False)))
    assert imp.command_line == {"algorithm.config_name": "ppo_megatron_trainer"}
    assert "config_name" not in recipe_text(imp, "x.sh")
    row = next(r for r in imp.report if r["kind"].startswith("command line"))
    assert row["line"] == 1 and row["key"] == "algorithm.config_name"
    inv, _ = _rendered(imp, tmp_path)
    assert inv.config_name == "ppo_megatron_trainer"
    script = tmp_path / "meg.sh"
    script.write_text(megatron_script(False, False))
    r = run_topl("recipes", "import", str(script), "-o", str(tmp_path / "o.yaml"), "--json")
    d = json.loads(r.stdout)
    assert d["command_line"] == ["algorithm.config_name=ppo_megatron_trainer"]
    assert d["launch_command"].endswith("o.yaml algorithm.config_name=ppo_megatron_trainer")
    assert d["verl"] == "0.9.1" and d["groups"]["train"] == "megatron"
    report = (tmp_path / "o.import.txt").read_text().splitlines()
    assert report[-2].startswith("declared verl: 0.9.1; run it as: topl launch recipe=")


def test_unset_shell_variables_are_named_with_where_they_are_used(tmp_path, monkeypatch):
    monkeypatch.delenv("MY_DATA", raising=False)
    text = megatron_script(False, False, extra="\\\n    data.train_files=$MY_DATA/train.parquet")
    imp = build_recipe(read_script(text))
    rows = [r for r in imp.report if r.get("variable") == "MY_DATA"]
    assert [(r["key"], r["line"]) for r in rows] == [("data.train_files", 7)]
    assert "unset here" in rows[0]["detail"] and "export MY_DATA=" in rows[0]["detail"]
    with pytest.raises(ToplError, match="MY_DATA"):
        _rendered(imp, tmp_path)
    _, got = _rendered(imp, tmp_path, environ={"MY_DATA": "/d", "HOME": "/h"})
    assert got["data.train_files"] == "[/d/train.parquet]"  # on train_files: verl's list of it


def test_the_seed_module_declares_the_seed_stack_without_being_written(tmp_path):
    head = "export VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch\n"
    imp = build_recipe(read_script(megatron_script(True, True, head=head)))
    assert imp.defaults["stack"] == "seed" and imp.verl.startswith("0.8.0 + ")
    row = next(r for r in imp.report if r["kind"] == "declared stack")
    assert row["line"] == 1 and row["detail"].startswith("seed: verl 0.8.0")
    assert "VERL_USE_EXTERNAL_MODULES" not in recipe_text(imp, "x.sh")
    assert imp.respelled == {}  # verl 0.8.0 has grad_offload: rendered as the script wrote it
    _, got = _rendered(imp, tmp_path)
    assert got[f"{MEG}.grad_offload"] == "true"
    # a key the script leaves to verl gets the declared verl's default, not the installed one's:
    # rollout.max_num_seqs is 1024 in verl 0.8.0, 256 in 0.9.1 (facts/verl_schema/*.json)
    assert got["actor_rollout_ref.rollout.max_num_seqs"] == "1024"
    release = build_recipe(read_script(megatron_script(True, True)))
    assert release.recipe["rollout"]["max_num_seqs"] == 256  # on its field (seedregen)


def test_verl_defaults_go_on_the_fields_that_render_them(tmp_path):
    """A key the script leaves to verl is put back to verl's default on the spec field that
    renders it (the contract reads the field; strict refuses a verl override of a rendered key,
    TOP-VERL-002), as a verl override only where the field cannot hold it (null in an int)."""
    head = "export VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch\n"
    imp = build_recipe(read_script(megatron_script(True, True, head=head)), {"alignment": "strict"})
    r, vo = imp.recipe, imp.recipe.get("verl_overrides", {})
    # verl 0.8.0's rollout.yaml / McoreEngineConfig defaults; train.steps null: total_epochs bounds
    assert r["rollout"]["max_num_seqs"] == 1024 and r["rollout"]["chunked_prefill"] is True
    assert r["rollout"]["prefix_caching"] is True and r["train"]["sequence_parallel"] is True
    assert r["train"]["steps"] is None
    for key in ("rollout.max_num_seqs", "rollout.enable_prefix_caching", "trainer.total_training"):
        assert not [k for k in vo if key in k], vo
    _, got = _rendered(imp, tmp_path)
    assert "trainer.total_training_steps" not in got and got[f"{MEG}.sequence_parallel"] == "true"
    # no dynamic batch size: verl reads the micro batch, whose default (null) the field cannot hold
    assert vo[f"{MEG[:-9]}.ppo_micro_batch_size_per_gpu"] is None


def test_keys_verl_ignores_under_the_scripts_settings_keep_topls_value():
    """Under use_dynamic_bsz=true verl never reads the micro batches (prepare_micro_batches); an
    expert TP of the script's TP is what Megatron takes for verl's null, and verl turns sequence
    parallel off at TP 1 (McoreEngineConfig.__post_init__): topl's value is kept,
    listed with why, and nothing overrides the rendered key (strict mode would refuse it)."""
    dyn = f"actor_rollout_ref.actor.use_dynamic_bsz=True {MEG}.tensor_model_parallel_size=1"
    imp = build_recipe(read_script(megatron_script(True, True, extra=dyn)))
    vo = imp.recipe.get("verl_overrides", {})
    adds = {a["key"]: a["why"] for a in imp.topl_adds}
    for key in (
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        f"{MEG}.expert_tensor_parallel_size",
        f"{MEG}.sequence_parallel",  # verl turns it off at TP 1: topl's false is that run
    ):
        assert key not in vo and key in adds, (key, vo)
    assert "use_dynamic_bsz" in adds["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    assert imp.round_trip == []


def test_a_patch_switch_at_its_off_value_is_stock_verl_on_a_verl_without_it(tmp_path):
    """per_request_seed=false (the seed patch's default, stock behaviour) on verl 0.9.1: rendered
    as no key, said so; =true there is named with the stack that has it."""
    seed = "actor_rollout_ref.rollout.per_request_seed"
    off = build_recipe(read_script(megatron_script(False, False, extra=f"{seed}=false")))
    assert off.round_trip == [] and seed in off.respelled and off.respelled[seed] is None
    assert not [r for r in off.report if r["kind"] == "unknown to verl"]
    _, got = _rendered(off, tmp_path)
    assert seed not in got
    on = build_recipe(read_script(megatron_script(False, False, extra=f"{seed}=true")))
    row = next(r for r in on.report if r["kind"] == "unknown to verl")
    assert row["key"] == seed and "stack=seed" in row["detail"]


def test_data_files_and_the_sampling_seed_go_on_their_spec_fields(tmp_path):
    """data.train_files / val_files (lists) and rollout.per_request_seed: topl renders them from
    train_files / val_files / rollout.per_request_seed, so the recipe sets those fields, not a verl
    override that would replace the rendered key (TOP-VERL-003)."""
    seed = "actor_rollout_ref.rollout.per_request_seed"
    head = "export VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch\n"
    files = (
        "data.train_files=\"['/d/a.parquet']\" data.val_files=\"['/d/b.parquet','/d/c.parquet']\""
    )
    imp = build_recipe(
        read_script(megatron_script(False, False, head=head, extra=f"{files} {seed}=false"))
    )
    assert imp.defaults["stack"] == "seed" and imp.round_trip == []
    rec = imp.recipe
    assert rec["train_files"] == ["/d/a.parquet"]
    assert rec["val_files"] == ["/d/b.parquet", "/d/c.parquet"]
    assert rec["rollout"]["per_request_seed"] is False
    vo = rec.get("verl_overrides", {})
    assert not {"data.train_files", "data.val_files", seed} & set(vo), vo
    _, got = _rendered(imp, tmp_path)
    assert got["data.train_files"] == "[/d/a.parquet]" and got[seed] == "false"
    assert got["data.val_files"] == "[/d/b.parquet,/d/c.parquet]"


def test_a_value_topl_renders_anyway_is_written_neither_as_field_nor_override(tmp_path):
    """per_request_seed=true under strict alignment on the seed stack is what the groups render:
    the recipe stays silent on it; a plain-string data file goes on its list field, as the
    one-element list verl makes of it (verl@0.9.1:verl/utils/dataset/rl_dataset.py)."""
    seed = "actor_rollout_ref.rollout.per_request_seed"
    head = "export VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch\n"
    text = megatron_script(
        False, False, head=head, extra=f"{seed}=true data.train_files=/d/a.parquet"
    )
    imp = build_recipe(read_script(text), {"alignment": "strict"})
    assert imp.round_trip == []
    assert "per_request_seed" not in imp.recipe.get("rollout", {})
    vo = imp.recipe.get("verl_overrides", {})
    assert seed not in vo and "data.train_files" not in vo
    assert imp.recipe["train_files"] == ["/d/a.parquet"]
    _, got = _rendered(imp, tmp_path)
    assert got[seed] == "true" and got["data.train_files"] == "[/d/a.parquet]"


def test_the_seed_patchs_null_rollout_seed_lands_on_the_seed_field_as_0(tmp_path):
    """The seed's patched verl 0.8.0 defaults rollout.seed to null and runs it as 0: the recipe
    says `seed: 0` (topl renders rollout.seed from it), not a verl override that replaces the
    rendered key (TOP-VERL-003)."""
    head = "export VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch\n"
    imp = build_recipe(read_script(megatron_script(False, False, head=head)))
    assert imp.defaults["stack"] == "seed" and imp.recipe["seed"] == 0
    assert "actor_rollout_ref.rollout.seed" not in imp.recipe.get("verl_overrides", {})
    _, got = _rendered(imp, tmp_path)
    assert got["actor_rollout_ref.rollout.seed"] == "0"
