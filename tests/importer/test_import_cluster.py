"""A script that does not say it runs on Ascend (a GPU script: no trainer.device=npu, no Ascend
env) is placed on the Ascend cluster group whose nodes hold its trainer.n_gpus_per_node
(conf/cluster/*.yaml, importer/groups.py:cluster_choice), or keeps cluster=local with the layout
that would fit; the report says which, from which keys and lines, and how to change it; `topl
check` agrees."""

import json
import re
import shlex

import pytest
from helpers import run_topl_inproc as run

from topl.launcher.importer.groups import CLUSTER_KIND, ascend_clusters, cluster_choice
from topl.launcher.importer.read import read_script
from topl.launcher.importer.recipe import build_recipe

GPU = """#!/bin/bash
set -x
NGPUS=${NGPUS:-8}
NNODES=${NNODES:-1}
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_files=$HOME/data/gsm8k/train.parquet \\
    data.val_files=$HOME/data/gsm8k/test.parquet \\
    data.train_batch_size=512 \\
    data.max_prompt_length=1024 \\
    data.max_response_length=1024 \\
    actor_rollout_ref.model.path=Qwen/Qwen3-4B \\
    actor_rollout_ref.actor.ppo_mini_batch_size=256 \\
    actor_rollout_ref.actor.use_dynamic_bsz=True \\
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=3000 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=2 \\
    actor_rollout_ref.rollout.name=vllm \\
    actor_rollout_ref.rollout.n=5 \\
    trainer.n_gpus_per_node=$NGPUS \\
    trainer.nnodes=$NNODES \\
    trainer.total_epochs=15
"""


def _row(report):
    rows = [r for r in report if r["kind"] == CLUSTER_KIND]
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def test_the_groups_are_what_conf_cluster_declares():
    assert ascend_clusters() == {
        "atlas_a2": (8, "ray_job"),
        "atlas_a3": (16, "ray_job"),
        "slurm_a3": (16, "slurm"),
    }


def test_a_group_holds_what_its_node_hardware_holds(tmp_path, monkeypatch):
    """max_devices_per_node (what TOP-RES-010 checks), not the devices a group uses by default;
    a group of your own that does not state it: its devices_per_node."""
    (tmp_path / "cluster").mkdir()
    npu = "device: npu\nbackend: ray_job\n"
    (tmp_path / "cluster" / "part.yaml").write_text(
        npu + "devices_per_node: 4\nmax_devices_per_node: 16\n"
    )
    (tmp_path / "cluster" / "own.yaml").write_text(npu + "devices_per_node: 8\n")
    monkeypatch.setattr("topl.launcher.compose.sources.conf_dir", lambda: tmp_path)
    assert ascend_clusters() == {"own": (8, "ray_job"), "part": (16, "ray_job")}


def test_eight_gpus_per_node_land_on_atlas_a2_and_round_trip():
    imp = build_recipe(read_script(GPU))
    assert imp.defaults["cluster"] == "atlas_a2" and imp.round_trip == [] and not imp.dropped
    row = _row(imp.report)
    assert row["line"] == 19 and row["cluster"] == "atlas_a2", row
    d = row["detail"]
    assert d.startswith(
        "cluster=atlas_a2 chosen for a script that does not say it runs on Ascend (no "
        "trainer.device=npu, no ASCEND_* / HCCL_* env): "
    ), d
    # the keys, values and lines read (the value's own line: the variable that holds it)
    assert "trainer.n_gpus_per_node=8 (line 19, its value from line 3)" in d, d
    assert "trainer.nnodes=1 (line 20, its value from line 4)" in d, d
    assert "conf/cluster/atlas_a2.yaml: 8 NPUs per node." in d, d
    assert "To change it: `topl recipes import SCRIPT cluster=NAME -o OUT --force` (atlas_a3" in d
    assert imp.recipe["cluster"] == {"devices_per_node": 8, "nodes": 1}
    # asked for: the user's group, no row
    mine = build_recipe(read_script(GPU), {"cluster": "atlas_a3"})
    assert mine.defaults["cluster"] == "atlas_a3" and _row(mine.report) is None


@pytest.mark.parametrize(
    "gpus, group, uses",
    [("16", "atlas_a3", None), ("4", "atlas_a2", "4"), ("12", "atlas_a3", "12")],
)
def test_the_smallest_group_whose_nodes_hold_the_count(gpus, group, uses):
    got, row = cluster_choice(read_script(GPU, {"NGPUS": gpus}))
    assert got == group and row["cluster"] == group
    size = ascend_clusters()[group][0]
    assert f"conf/cluster/{group}.yaml: {size} NPUs per node" in row["detail"]
    part = f", the run uses {uses} of them" if uses else None
    assert (part in row["detail"]) if part else "the run uses" not in row["detail"]


def test_an_unset_count_is_verls_default():
    text = GPU.replace("    trainer.n_gpus_per_node=$NGPUS \\\n", "")
    got, row = cluster_choice(read_script(text))
    assert got == "atlas_a2" and row["line"] == 5  # the launch's line
    assert "trainer.n_gpus_per_node not set (verl's default 8)" in row["detail"]


def test_an_ascend_script_keeps_its_group_without_a_row():
    for gpus, group in (("16", "atlas_a3"), ("8", "atlas_a2"), ("32", "atlas_a2")):
        npu = GPU.replace("trainer.total_epochs=15", "trainer.total_epochs=15 trainer.device=npu")
        assert cluster_choice(read_script(npu, {"NGPUS": gpus})) == (group, None)


def test_no_group_holds_the_count_local_stays_with_the_layout_that_fits():
    got, row = cluster_choice(read_script(GPU, {"NGPUS": "32"}))
    assert got == "local" and row["line"] == 19
    assert row["fix"] == (
        "`topl recipes import SCRIPT cluster=atlas_a3 -o ASCEND.yaml`, then run it as 2 node(s) "
        "x 16 (the script's 32 devices): `topl launch recipe=ASCEND.yaml cluster.nodes=2 "
        "cluster.devices_per_node=16`"
    )
    assert "no Ascend cluster group has 32 devices per node" in row["detail"]
    got, row = cluster_choice(read_script(GPU, {"NGPUS": "24", "NNODES": "1"}))
    assert "cluster.nodes=2 cluster.devices_per_node=12" in row["fix"] and "atlas_a3" in row["fix"]
    got, row = cluster_choice(read_script(GPU, {"NGPUS": "$N"}))  # bash left it unresolved
    assert got == "local" and "trainer.n_gpus_per_node is not a device count" in row["detail"]
    got, row = cluster_choice(read_script(GPU, {"NGPUS": "1000003"}))  # no layout search
    assert got == "local" and "cluster.nodes=N cluster.devices_per_node=M" in row["fix"]


def test_the_report_and_check_agree(tmp_path):
    """8 per node: atlas_a2, accepted by `topl check`. 32 per node: local, refused by exactly
    TOP-RES-009 / TOP-ENG-009 for this model, which the report names; its fix, typed as printed,
    is accepted (the re-import alone keeps 32 per node, which TOP-RES-010 refuses, naming the same
    layout as the report)."""
    script = tmp_path / "gpu.sh"
    script.write_text(GPU)
    r = run("recipes", "import", str(script), "-o", "g8.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cluster=atlas_a2 chosen for" in r.stdout
    assert f"`topl recipes import {script} cluster=NAME -o g8.yaml --force`" in r.stdout
    assert r.stdout.strip().endswith("round trip: exact; contract: accepted"), r.stdout
    assert run("check", f"recipe={tmp_path / 'g8.yaml'}", "-q").returncode == 0

    args = ("recipes", "import", str(script), "-o", "g32.yaml", "--json", "--env", "NGPUS=32")
    r = run(*args, cwd=tmp_path)
    out = json.loads(r.stdout)
    row = _row(out["report"])
    assert out["groups"]["cluster"] == "local" and out["round_trip"] == []
    assert out["contract"]["rejected_by"] == ["TOP-ENG-009", "TOP-RES-009"] == row["refused_by"]
    assert "the contract refuses this recipe (TOP-ENG-009: cluster.backend=local" in row["detail"]
    assert "TOP-RES-009: qwen3_4b has 4.0B parameters" in row["detail"], row["detail"]
    text = (tmp_path / "g32.import.txt").read_text()  # the report file: each refusal, by message
    assert "the contract refuses it (topl check recipe=g32.yaml):\n    -  TOP-ENG-009: " in text
    assert "\n    -  TOP-RES-009: qwen3_4b has 4.0B parameters; the local backend" in text, text
    c = run("check", f"recipe={tmp_path / 'g32.yaml'}", "--json")
    assert {v["rule"] for v in json.loads(c.stdout)["violations"] if v["severity"] == "error"} == {
        "TOP-ENG-009",
        "TOP-RES-009",
    }
    # the fix, as the report prints it
    reimport, launch = re.findall(r"`topl ([^`]*)`", row["detail"])
    words = shlex.split(reimport)  # with the import's own --env, next to the local recipe
    assert words == [*args[:3], "--env", "NGPUS=32", "cluster=atlas_a3", "-o", "g32_ascend.yaml"]
    a3 = run(*words, cwd=tmp_path)  # the script's 32 per node, as it is: no A3 node holds them
    assert a3.stdout.strip().endswith("contract: rejected (TOP-RES-010)"), a3.stdout
    words = shlex.split(launch)
    assert words[:2] == ["launch", "recipe=g32_ascend.yaml"], words
    assert " ".join(words[2:]) in a3.stdout  # TOP-RES-010 names the layout the report names
    c = run("check", *words[1:], "-q", cwd=tmp_path)
    assert c.returncode == 0, c.stdout + c.stderr
