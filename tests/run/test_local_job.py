"""The embedded default: true on-policy GRPO on the reference engines."""

import json

import pytest
from helpers import run_topl

from topl.launcher.base.errors import ToplError
from topl.launcher.run.backends.local import run_local


def steps_of(run_dir):
    lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(set(l) == {"step", "data"} for l in lines)  # verl's file-logger line schema
    return [l["data"] for l in lines]


def test_strict_grpo_is_exactly_on_policy_and_learns(compose, tmp_path):
    spec = compose(["train.steps=10"]).to_object()
    assert run_local(spec, tmp_path, quiet=True) == 0
    data = steps_of(tmp_path)
    assert len(data) == 10
    assert all(d["topl/max_abs_logprob_diff"] == 0.0 for d in data)
    assert all(
        d["training/rollout_probs_diff_max"] == 0.0 and d["rollout_corr/k3_kl"] == 0.0 for d in data
    )
    assert all(d["actor/ratio_max_abs_dev"] == 0.0 for d in data)  # importance ratio exactly 1
    first = sum(d["critic/rewards/mean"] for d in data[:3]) / 3
    last = sum(d["critic/rewards/mean"] for d in data[-3:]) / 3
    assert last > first, (first, last)
    assert (tmp_path / "metrics.png").stat().st_size > 1000


def test_off_reports_nonzero_diffs_and_continues(compose, tmp_path):
    spec = compose(["alignment=off", "train.steps=2"]).to_object()
    assert run_local(spec, tmp_path, quiet=True) == 0
    data = steps_of(tmp_path)
    assert len(data) == 2
    assert all(
        d["topl/max_abs_logprob_diff"] > 0 and d["training/rollout_probs_diff_max"] > 0
        for d in data
    )
    assert all(d["actor/ratio_max_abs_dev"] > 0 for d in data)


def test_strict_stops_on_the_first_nonzero_logdiff(compose, tmp_path, capsys):
    spec = compose(["train.steps=3"]).to_object()
    spec.alignment.fp32_critical_path = False  # planted: the contract would refuse this combination
    assert run_local(spec, tmp_path, quiet=False) == 1
    assert len(steps_of(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "step 1" in out and "topl/max_abs_logprob_diff" in out and "alignment=strict" in out


def test_local_backend_refuses_what_it_does_not_embed(compose, tmp_path):
    with pytest.raises(ToplError, match="does not embed algorithm.policy_loss=clip_cov"):
        run_local(compose(["algorithm.policy_loss=clip_cov"]).to_object(), tmp_path, quiet=True)


def test_cli_launch_default_short(tmp_path):
    r = run_topl("launch", "train.steps=2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "on-policy: importance ratio exactly 1" in " ".join(r.stdout.split())
