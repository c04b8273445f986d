"""Sweeps: Hydra's expansion, a verdict per point, invalid points never start."""

import csv
import json

import pytest
from helpers import run_topl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.sources import loader_for
from topl.launcher.contract import check, errors
from topl.launcher.plan.sweep import expand, plan

SWEEP = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "train.tp=1,2,4",
    "train.pp=4,8",
    "train.ep=1,2",
    "rollout.tp=1,2",
    "rollout.pp=1,2",
]

# without the seed's offload, train PP=4 does not fit (TOP-MEM-001): a sweep with an invalid point
NO_OFFLOAD = [
    "train.param_offload=false",
    "train.optimizer_offload=false",
    "train.grad_offload=false",
]


def test_expansion_is_hydras():
    sweep = SWEEP + ["train.cp=range(1,3)", "model=glob(qwen3_30*)"]
    ours = expand(sweep)
    parser = OverridesParser.create(config_loader=loader_for(None))
    hydra = BasicSweeper.split_arguments(parser.parse_overrides(sweep), None)[0]
    assert ours == hydra and len(ours) == 3 * 2 * 2 * 2 * 2 * 2


def test_valid_set_equals_validating_each_point_alone(compose):
    verdicts = plan(SWEEP)
    alone = {tuple(p): {x.rule for x in errors(check(compose(p)))} for p in expand(SWEEP)}
    fast = {tuple(v.overrides) for v in verdicts if v.valid}
    assert fast == {p for p, rules in alone.items() if not rules} and 0 < len(fast) < len(verdicts)
    for v in verdicts:  # the same rule ids, not just the same yes/no
        assert set(v.rules) == alone[tuple(v.overrides)], v.overrides


def test_interpolations_follow_swept_values():
    v = plan(["rollout.block_size=8,16", "alignment.kv_tile=16"])
    assert [x.valid for x in v] == [True, True]
    bad = plan(
        ["rollout.block_size=8,32"]
    )  # kv_tile follows block_size: no TOP-ATTN-004 either way
    assert all(x.valid for x in bad)
    mixed = plan(["rollout.block_size=32", "alignment.kv_tile=16,64"])
    assert [x.valid for x in mixed] == [False, True] and mixed[0].rules == ["TOP-ATTN-004"]


def test_a_node_past_its_hardware_is_an_invalid_point():
    """TOP-RES-010 in a sweep: 32 per A3 node is refused, fewer than 16 are not."""
    v = plan(["recipe=qwen3_4b_grpo_a3_strict", "cluster.devices_per_node=8,16,32"])
    assert [(x.valid, x.rules) for x in v] == [(True, []), (True, []), (False, ["TOP-RES-010"])]


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["train.tp=1,2,["], "train.tp=1,2,["),
        (["train.tpp=1,2"], "train.tpp"),
        (["train.tp=a,b"], "train.tp"),
    ],
)
def test_sweep_errors_name_the_override(bad, needle):
    with pytest.raises(ToplError) as e:
        plan(bad)
    assert needle in e.value.render()


def test_plan_cli_json():
    r = run_topl("plan", *SWEEP[:3], "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["points"] == 6 and out["valid"] == sum(v["valid"] for v in out["verdicts"])
    assert {"overrides", "valid", "rules", "train_gb", "rollout_gb", "devices"} <= set(
        out["verdicts"][0]
    )


def test_sweeper_launches_only_valid_points(tmp_path):
    r = run_topl(
        "launch",
        "-m",
        "--dry-run",
        "recipe=qwen3_30b_a3b_grpo_a3_strict",
        *NO_OFFLOAD,
        "train.pp=4,8",
        "rollout.tp=1,2",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()
    rows = list(csv.DictReader((sweep / "sweep_report.csv").open()))
    assert [row["valid"] for row in rows] == ["False", "False", "True", "False"]
    assert "TOP-TP-001" in rows[1]["rules"]
    report = json.loads((sweep / "sweep_report.json").read_text())
    assert report["points"] == 4 and report["valid"] == 1
    jobs = [d for d in sweep.iterdir() if d.is_dir()]
    assert len(jobs) == 1  # invalid points never start
    assert "train.pp=8" in (jobs[0] / ".hydra" / "overrides.yaml").read_text()
    assert (jobs[0] / "spec.yaml").exists() and (jobs[0] / "command.sh").exists()
    assert "dropped point 1" in r.stderr + r.stdout


def test_sweeper_on_invalid_fail_starts_nothing(tmp_path):
    r = run_topl(
        "launch",
        "-m",
        "--dry-run",
        "recipe=qwen3_30b_a3b_grpo_a3_strict",
        *NO_OFFLOAD,
        "train.pp=4,8",
        "hydra.sweeper.on_invalid=fail",
        cwd=tmp_path,
    )
    assert r.returncode != 0
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()
    assert not [d for d in sweep.iterdir() if d.is_dir()]
    assert "on_invalid=fail" in r.stderr + r.stdout
