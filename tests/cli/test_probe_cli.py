"""`topl probe` (issues 29 and 31): the contract first, the size guard before building, every
logprobs_mode the contract accepts, temperature 0 refused on both commands, and the same verdict
as `topl check` on layouts or a note that says why not."""

import json

import pytest
from helpers import run_topl

from topl.kernels.alignment import Alignment
from topl.kernels.model import Model
from topl.kernels.probe import make_requests, probe
from topl.kernels.rollout import SamplingParams
from topl.launcher.base.errors import ToplError
from topl.launcher.cli.probe import main
from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors

FAST = ["--prompts", "4", "--json"]


def probe_json(capsys, *overrides) -> dict:
    rc = main([*overrides, *FAST])
    out = json.loads(capsys.readouterr().out)
    out["rc"] = rc
    return out


def test_tp_that_does_not_split_the_heads_is_the_contracts_message():
    with pytest.raises(ToplError, match="TOP-RES-003"):
        main(["train.tp=3", "rollout.tp=3", *FAST])


def test_temperature_zero_is_refused_by_check_probe_and_launch(tmp_path):
    assert [v.rule for v in errors(check(compose_job(["rollout.temperature=0"])))] == [
        "TOP-SAMP-001"
    ]
    r = run_topl("probe", "rollout.temperature=0", cwd=tmp_path)
    assert r.returncode == 2 and "TOP-SAMP-001" in r.stderr and "Traceback" not in r.stderr
    r = run_topl("launch", "rollout.temperature=0", cwd=tmp_path)
    assert r.returncode == 2 and "TOP-SAMP-001" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()


def test_temperature_zero_means_different_things_to_the_two_engines():
    """What TOP-SAMP-001 guards against, in the reference engines: the rollout samples greedily and
    records log-probs at temperature 1 (vLLM), the trainer clamps T to 1e-8 (verl)."""
    from topl.launcher.compose.hydra import compose_job as cj

    model = Model.random(cj(["model=tiny_dense"]).to_object().model, seed=0)
    reqs = make_requests(3, model.arch.vocab_size, seed=1, max_len=20, max_new=5)
    out = probe(
        model, Alignment(kv_tile=8), requests=reqs, block_size=8, sampling=SamplingParams(0.0)
    )
    assert out["max_abs_logprob_diff"] > 0.1 and out["max_abs_logprob_diff"] < float("inf")


@pytest.mark.parametrize("overrides", [[], ["rollout.temperature=0.7"]])
def test_logprobs_mode_auto_runs_and_is_exact(capsys, overrides):
    out = probe_json(capsys, "rollout.logprobs_mode=auto", *overrides)
    assert out["rc"] == 0 and out["max_abs_logprob_diff"] == 0.0


def test_sampling_params_resolve_auto_as_the_renderer_does():
    assert SamplingParams(1.0, logprobs_mode="auto").mode == "raw_logprobs"
    assert SamplingParams(0.7, logprobs_mode="auto").mode == "processed_logprobs"


def test_local_backend_passes_logprobs_mode():
    from topl.launcher.run.backends.local import loop_config

    cfg = loop_config(compose_job(["rollout.logprobs_mode=auto"]).to_object())
    assert cfg.logprobs_mode == "auto"


def test_unchunked_budget_below_a_probe_sequence_is_raised_as_verl_does(capsys):
    out = probe_json(capsys, "rollout.chunked_prefill=false", "rollout.max_num_batched_tokens=16")
    assert out["rc"] == 0 and out["max_abs_logprob_diff"] == 0.0
    assert any("max_num_batched_tokens=16" in n and "verl" in n for n in out["notes"])


def test_size_guard_refuses_before_building(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the model was built")

    monkeypatch.setattr(Model, "random", boom)
    with pytest.raises(ToplError, match=r"30\.5B parameters.*TOP-RES-009"):
        main(["recipe=qwen3_30b_a3b_grpo_a3_strict", *FAST])


def test_the_same_recipe_on_a_small_model_runs(capsys):
    out = probe_json(capsys, "recipe=qwen3_30b_a3b_grpo_a3_strict", "model=tiny_moe")
    assert out["rc"] == 0 and out["max_abs_logprob_diff"] == 0.0
    assert any("train.pp=8" in n and "run as 1" in n for n in out["notes"])


def test_a_layout_check_rejects_is_named_with_why_the_probe_runs_it(capsys):
    overrides = ["train.tp=1", "rollout.tp=2"]
    assert "TOP-TP-001" in {v.rule for v in errors(check(compose_job(overrides)))}
    out = probe_json(capsys, *overrides)
    assert out["rc"] == 0 and out["contract"]["launch_ok"] is False
    tp = [p for p in out["contract"]["run_past"] if p["rule"] == "TOP-TP-001"]
    assert tp and "emulat" in tp[0]["why"]


def test_a_clean_spec_is_launch_ok_and_text_says_so(capsys):
    assert main(["--prompts", "4"]) == 0
    got = capsys.readouterr()
    assert "bitwise equal: on-policy" in got.out and "rejects" not in got.out
    assert "topl probe: building" in got.err  # progress


@pytest.mark.parametrize("n", ["²", "١٢", "1e3", "99999999999999999999", "0", "4097"])
def test_a_bad_prompt_count_is_one_message(n):
    """`²` passed `isdigit` and int() raised (issue 48); a huge count ran without end."""
    with pytest.raises(ToplError, match="expected a whole number from 1 to 4096"):
        main(["--prompts", n])


def test_a_non_ascii_thread_count_is_not_read(monkeypatch):
    from topl.launcher.run.backends.local import threads_for

    spec = compose_job([]).to_object()
    monkeypatch.setenv("OMP_NUM_THREADS", "²")
    assert threads_for(spec) >= 1  # the default count, not a traceback
