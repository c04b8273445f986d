"""kernels/algorithms.py against hand-computed values and, where importable, verl 0.9.1 itself."""

import numpy as np
import pytest
import torch

from topl.kernels import algorithms as A


def batch(seed=0, b=6, t=5):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 1, 4, 5, 2])[:b]
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    old = -torch.rand(b, t, generator=g) * 2
    new = old + 0.3 * torch.randn(b, t, generator=g)  # ratios well inside and outside the clip
    adv = torch.randn(b, t, generator=g)
    return old, new, adv, mask


def verl_algos():
    return pytest.importorskip("verl.trainer.ppo.core_algos")


def actor_config(**kw):
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=1, **kw)


def test_pad_and_outcome_rewards_by_hand():
    x, mask = A.pad([torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0])])
    assert x.tolist() == [[1, 2, 3], [4, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    r = A.outcome_token_rewards(torch.tensor([0.5, -1.0]), mask)
    assert r.tolist() == [[0, 0, 0.5], [-1, 0, 0]]


def test_gae_by_hand_gamma_lambda_one():
    # one response of 3 tokens, reward 1 on the last: raw advantage_t = 1 - V_t, return_t = 1
    v = torch.tensor([[0.2, 0.5, 0.9]])
    mask = torch.ones(1, 3)
    adv, ret = A.gae(A.outcome_token_rewards(torch.tensor([1.0]), mask), v, mask, 1.0, 1.0)
    assert torch.allclose(ret, torch.ones(1, 3))
    raw = torch.tensor([0.8, 0.5, 0.1])
    assert torch.allclose(adv[0], (raw - raw.mean()) / raw.std())


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95)])
def test_gae_matches_verl(gamma, lam):
    ca = verl_algos()
    _, _, _, mask = batch()
    g = torch.Generator().manual_seed(3)
    rewards = A.outcome_token_rewards(torch.randn(6, generator=g), mask)
    values = torch.randn(6, 5, generator=g) * mask
    ours = A.gae(rewards, values, mask, gamma, lam)
    theirs = ca.compute_gae_advantage_return(
        rewards, values, mask, torch.tensor(gamma), torch.tensor(lam)
    )
    for a, b in zip(ours, theirs):
        assert torch.allclose(a * mask, b * mask, atol=1e-6)


def test_grpo_advantages_match_verl_and_hand():
    ca = verl_algos()
    scores = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.2])
    ours = A.grpo_advantages(scores, 4)
    assert ours[4:].abs().max() == 0  # a group with equal rewards carries no signal
    mask = torch.ones(8, 1)
    theirs, _ = ca.compute_grpo_outcome_advantage(scores[:, None], mask, np.repeat(np.arange(2), 4))
    assert torch.allclose(ours, theirs[:, 0])


@pytest.mark.parametrize(
    "mode",
    [
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "token-sum",
        "seq-mean-token-sum-norm",
    ],
)
def test_agg_loss_matches_verl(mode):
    ca = verl_algos()
    _, new, _, mask = batch()
    assert torch.allclose(A.agg_loss(new, mask, mode), ca.agg_loss(new, mask, mode))


def test_agg_loss_by_hand():
    x = torch.tensor([[1.0, 3.0], [5.0, 0.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert A.agg_loss(x, m, "token-mean") == 3.0  # (1+3+5)/3
    assert A.agg_loss(x, m, "seq-mean-token-mean") == 3.5  # (2+5)/2


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_vanilla_loss_and_metrics_match_verl(mode):
    ca = verl_algos()
    old, new, adv, mask = batch()
    cfg = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    new.requires_grad_(True)
    loss, m = A.vanilla_policy_loss(old, new, adv, mask, 0.2, 0.28, 3.0, mode)
    (g_ours,) = torch.autograd.grad(loss, new)
    vloss, vm = ca.compute_policy_loss_vanilla(old, new, adv, mask, mode, cfg)
    (g_verl,) = torch.autograd.grad(vloss, new)
    assert torch.allclose(loss, vloss) and torch.allclose(g_ours, g_verl)
    assert 0 < m["actor/pg_clipfrac"] < 1  # the batch really exercises the clip
    for k, v in vm.items():
        assert m[k] == pytest.approx(v, abs=1e-6), k


def test_gspo_loss_and_gradient_match_verl():
    ca = verl_algos()
    old, new, adv, mask = batch(1)
    cfg = actor_config(clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    new.requires_grad_(True)
    loss, m = A.gspo_policy_loss(old, new, adv, mask, 3e-4, 4e-4, "seq-mean-token-mean")
    (g_ours,) = torch.autograd.grad(loss, new)
    vloss, vm = ca.compute_policy_loss_gspo(old, new, adv, mask, "seq-mean-token-mean", cfg)
    (g_verl,) = torch.autograd.grad(vloss, new)
    assert torch.allclose(loss, vloss) and torch.allclose(g_ours, g_verl)
    for k, v in vm.items():
        assert m[k] == pytest.approx(v, abs=1e-6), k


def test_gspo_ratio_is_one_per_sequence():
    """Every token of a sequence sees the sequence's geometric-mean ratio."""
    old = torch.zeros(1, 2)
    new = torch.tensor([[0.2, -0.1]])
    _, m = A.gspo_policy_loss(old, new, torch.ones(1, 2), torch.ones(1, 2), 1.0, 1.0, "token-mean")
    assert m["actor/ratio_mean"] == pytest.approx(float(np.exp(0.05)))


def test_on_policy_ratio_is_exactly_one():
    old, _, adv, mask = batch()
    for fn in (
        lambda: A.vanilla_policy_loss(old, old.clone(), adv, mask, 0.2, 0.28, 10.0, "token-mean"),
        lambda: A.gspo_policy_loss(old, old.clone(), adv, mask, 3e-4, 4e-4, "seq-mean-token-mean"),
    ):
        _, m = fn()
        assert m["actor/ratio_max_abs_dev"] == 0.0 and m["actor/pg_clipfrac"] == 0.0


def test_value_loss_matches_verl_and_hand():
    ca = verl_algos()
    _, vpreds, returns, mask = batch(2)
    values = vpreds + 0.8 * torch.randn(vpreds.shape, generator=torch.Generator().manual_seed(5))
    ours = A.value_loss(vpreds, returns, values, mask, 0.5, "token-mean")
    theirs = ca.compute_value_loss(vpreds, returns, values, mask, 0.5, "token-mean")
    assert torch.allclose(ours[0], theirs[0]) and torch.allclose(ours[1], theirs[1])
    # by hand: v=1, old v=0, return 2 -> clipped v=0.5: max(1, 2.25) / 2
    one = torch.ones(1, 1)
    loss, frac = A.value_loss(one, 2 * one, 0 * one, one, 0.5, "token-mean")
    assert loss == 1.125 and frac == 1.0


def test_overlong_penalty_by_hand():
    # max 8, buffer 4: free up to 4 tokens, then -factor * (len - 4) / 4
    p = A.overlong_penalty(torch.tensor([3, 4, 5, 8]), 8, 4, 1.0)
    assert p.tolist() == [0.0, 0.0, -0.25, -1.0]


def test_kept_groups_drops_equal_reward_groups():
    m = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 1.0, 0.5, 0.5, 0.5])
    assert A.kept_groups(m, 3).tolist() == [False, True, False]
    assert A.kept_groups(torch.tensor([1.0, 1.0]), 1).tolist() == [True, True]


def test_low_var_kl_matches_verl():
    ca = verl_algos()
    old, new, _, _ = batch()
    assert torch.allclose(A.low_var_kl(new, old), ca.kl_penalty_forward(new, old, "low_var_kl"))
