"""PPO, GSPO and DAPO on the embedded default: exactly on-policy, their own metrics, errors."""

import json
import random

import pytest
import torch
from helpers import run_topl

from topl.kernels import rl_loop
from topl.kernels.critic import Critic
from topl.kernels.model import Model, sides
from topl.launcher.run.backends.local import loop_config, run_local

CRITIC = (
    "critic/vf_loss",
    "critic/vf_clipfrac",
    "critic/values/mean",
    "critic/returns/mean",
    "critic/grad_norm",
    "timing_s/update_critic",
)
DAPO = ("train/num_gen_batches", "topl/acc/mean")


def steps_of(run_dir):
    return [
        json.loads(line)["data"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.mark.parametrize("algo", ["ppo", "gspo"])
def test_strict_run_is_exactly_on_policy_with_its_metrics(compose, tmp_path, algo):
    spec = compose([f"algorithm={algo}", "train.steps=3"]).to_object()
    assert run_local(spec, tmp_path, quiet=True) == 0
    data = steps_of(tmp_path)
    assert len(data) == 3
    on_policy_with_its_metrics(data, algo)
    assert (tmp_path / "metrics.png").stat().st_size > 1000


def on_policy_with_its_metrics(data, algo):
    for d in data:
        assert d["topl/max_abs_logprob_diff"] == 0.0 and d["training/rollout_probs_diff_max"] == 0.0
        assert d["actor/ratio_max_abs_dev"] == 0.0  # the importance ratio is exactly 1
        assert all(
            k in d
            for k in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm")
        )
        assert all((k in d) == (algo == "ppo") for k in CRITIC), sorted(d)
        assert all((k in d) == (algo == "dapo") for k in DAPO), sorted(d)
        if algo == "ppo":  # GAE advantages are whitened over the batch's tokens
            assert abs(d["critic/advantages/mean"]) < 1e-5
        # at ratio 1 the loss is -agg(A): seq-mean-token-mean weighs every sequence the same, and
        # group-normalised advantages sum to zero; DAPO's token-mean weighs them by length
        assert (abs(d["actor/pg_loss"]) < 1e-6) == (algo != "dapo"), d["actor/pg_loss"]


def test_dapo_shapes_overlong_responses_and_resamples(compose, tmp_path):
    assert (
        run_local(compose(["algorithm=dapo", "train.steps=4"]).to_object(), tmp_path, quiet=True)
        == 0
    )
    data = steps_of(tmp_path)
    # the random policy runs to max_response_length=8: beyond 8 - 4 tokens the score is docked
    assert (
        data[0]["response_length/mean"] > 4
        and data[0]["critic/score/mean"] < data[0]["topl/acc/mean"]
    )
    assert data[0]["train/num_gen_batches"] > 1  # all-zero groups were dropped and replaced
    # the penalty teaches it to stop: the shaped reward rises within a few steps
    assert sum(d["critic/rewards/mean"] for d in data[1:]) / 3 > data[0]["critic/rewards/mean"]
    on_policy_with_its_metrics(data, "dapo")


def test_dapo_out_of_generation_batches_is_one_error(tmp_path):
    r = run_topl(
        "launch", "algorithm=dapo", "algorithm.max_num_gen_batches=1", "train.steps=2", cwd=tmp_path
    )
    assert r.returncode == 2, r.stderr
    assert "error: step 1:" in r.stderr and "max_num_gen_batches" in r.stderr
    assert "HYDRA_FULL_ERROR" not in r.stderr and "Traceback" not in r.stderr


def test_unembedded_loss_via_cli_is_one_error(tmp_path):
    r = run_topl("launch", "algorithm.policy_loss=clip_cov", cwd=tmp_path)
    assert r.returncode == 2
    assert "does not embed algorithm.policy_loss=clip_cov" in r.stderr
    assert "HYDRA_FULL_ERROR" not in r.stderr and "Traceback" not in r.stderr


def test_filter_groups_gives_up_on_constant_rewards(compose):
    # 2 batches: one resample, then the give-up at the limit (each batch ~2.3 s of CPU here)
    cfg = loop_config(compose(["algorithm=dapo", "algorithm.max_num_gen_batches=2"]).to_object())

    class Constant:
        prompts = rl_loop.ReverseTask().prompts

        @staticmethod
        def reward(digits, response):
            return 0.5

    model = Model.random(cfg.model, seed=0, dtype=torch.bfloat16, std=0.1)
    rollout, _ = rl_loop._engines(cfg, model)
    with pytest.raises(
        rl_loop.FilterGroupsExhausted, match="0 of 8 groups .* after 2 generation batches"
    ):
        rl_loop._sample(cfg, rollout, 1, Constant(), random.Random(0))


def test_critic_fits_returns_and_leaves_the_policy_alone(compose):
    """Its own weights and optimizer: updates lower the value loss and never touch the policy's."""
    cfg = loop_config(compose(["algorithm=ppo"]).to_object())
    init = Model.random(cfg.model, seed=0, dtype=torch.float32, std=0.1)
    before = {k: v.clone() for k, v in init.w.items()}
    side, _ = sides(cfg.alignment)
    critic = Critic(cfg.model, init.w, side, 8, torch.bfloat16, lr=1e-2)
    seqs, starts = [[10, 1, 2, 11, 2, 1, 12], [10, 3, 11, 3, 12]], [4, 3]
    returns = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    losses = []
    for _ in range(6):
        v = torch.nn.utils.rnn.pad_sequence(
            critic.values(seqs, starts, grad=True), batch_first=True
        )
        losses.append(
            critic.update(v, returns, v.detach(), mask, 0.5, "token-mean")["critic/vf_loss"]
        )
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(torch.equal(before[k], init.w[k]) for k in before)
