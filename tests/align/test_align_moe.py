"""topl's alignment module: the replacements for vllm-ascend 0.30.0rc2's MoE MLP and routers and
for verl 0.9.1's monkey_patch_compute_logits, run on CPU against megatron-core 0.16.1 (skipped
without it) and, for compute_logits, against verl's own function. torch_npu is not run here: the
grouped matmul and the NPU stream are CPU stand-ins.
"""

from __future__ import annotations

import ast
import os
import types

import pytest
from test_align import _logits, _megatron

from topl.launcher.facts.sources import definition

torch = pytest.importorskip("torch")


class _Router:
    """A 0.30.0rc2 router's attributes (vllm_ascend/ops/fused_moe/router/
    grouped_topk_router.py:AscendGroupedTopKRouter.__init__), no NPU."""

    def __init__(self, **kw):
        self.top_k, self.use_grouped_topk, self.renormalize = 4, False, True
        self.topk_group = self.num_expert_group = self.e_score_correction_bias = None
        self.scoring_func, self.routed_scaling_factor = "softmax", 1.0
        vars(self).update(kw)


@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("groups", [None, (4, 2)])
@pytest.mark.parametrize("indices_type", [None, torch.int64])
def test_router_replacement_is_megatrons_routing(renormalize, groups, indices_type):
    """0.30.0rc2's routers replaced: renormalize=True routes as Megatron's top-k then softmax,
    renormalize=False as its use_pre_softmax; ids in the dtype the router contract asks."""
    mu = _megatron()
    from topl.launcher.align import patches

    ng, gk = groups or (None, None)
    router = _Router(
        renormalize=renormalize,
        use_grouped_topk=groups is not None,
        num_expert_group=ng,
        topk_group=gk,
        routed_scaling_factor=2.5,
    )
    calls = []
    fn = patches.REPLACEMENTS["router"](lambda *a, **k: calls.append(a))
    logits = _logits()
    w, ids = fn(router, None, logits, indices_type, input_ids=None)
    assert not calls and ids.dtype == (indices_type or torch.int32)
    probs, routing_map = mu.topk_routing_with_score_function(
        logits, 4, not renormalize, ng, gk, scaling_factor=2.5, score_function="softmax"
    )
    assert torch.equal(torch.zeros_like(logits).scatter(1, ids.long(), w), probs)
    assert torch.equal(torch.zeros_like(routing_map).scatter(1, ids.long(), True), routing_map)
    # sigmoid / bias-corrected routing is not what topl aligns: the original runs
    fn(_Router(scoring_func="sigmoid"), None, logits, None, input_ids=None)
    fn(_Router(e_score_correction_bias=torch.zeros(16)), None, logits, None, input_ids=None)
    assert len(calls) == 2


def _gmm(x, w, group_list):
    """npu_grouped_matmul's maths on CPU (group_list_type=1: tokens per expert)."""
    out, start = [], 0
    for e, n in enumerate(group_list.tolist()):
        out.append(x[start : start + n] @ w[e])
        start += n
    return torch.cat(out)


class _Unquant:
    """The hooks of 0.30.0rc2's AscendUnquantizedFusedMoEMethod (routed_experts.py) with the
    grouped matmuls on CPU; apply_act_quant as that release has it."""

    def __init__(self, w1, w2):
        self.w1, self.w2 = w1, w2

    def supports_fused_activation(self, activation):
        return False

    def apply_gmm1(self, m):
        return _gmm(m.hidden_states, self.w1, m.group_list)

    def apply_act_quant(self, m, hidden_states):
        return (hidden_states * m.topk_scales if m.topk_scales is not None else hidden_states), None

    def apply_gmm2(self, m, hidden_states, act_out_scale):
        assert act_out_scale is None
        return _gmm(hidden_states, self.w2, m.group_list)


def _mlp_input(**kw):
    g = torch.Generator().manual_seed(7)
    base = dict(
        hidden_states=torch.randn(10, 8, generator=g).bfloat16(),
        group_list=torch.tensor([3, 0, 7]),
        topk_scales=torch.rand(10, 1, generator=g),  # float32, as a float32 router gives them
        quant=types.SimpleNamespace(is_quant=False),
        lora_context=None,
        swiglu_limit=0.0,
        activation=types.SimpleNamespace(value="silu"),
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_moe_mlp_replacement_applies_weights_as_megatrons_experts(monkeypatch):
    """0.30.0rc2's unquantised MoE MLP replaced: plain SwiGLU (Megatron's eager swiglu), then
    (act * probs).to(act dtype) as Megatron's activation_func_with_probs
    (megatron-core@0.16.1:megatron/core/transformer/moe/experts.py), between the release's own
    grouped matmuls. The release's apply_act_quant keeps the float32 product instead."""
    pytest.importorskip("megatron.core")
    from megatron.core.fusions.fused_bias_swiglu import swiglu

    from topl.launcher.align import patches

    eager = getattr(swiglu, "_torchdynamo_orig_callable", swiglu)
    stream = types.SimpleNamespace(record_event=lambda: "event")
    monkeypatch.setattr(
        torch, "npu", types.SimpleNamespace(current_stream=lambda: stream), raising=False
    )
    g = torch.Generator().manual_seed(8)
    q = _Unquant(
        torch.randn(3, 8, 12, generator=g).bfloat16(), torch.randn(3, 6, 8, generator=g).bfloat16()
    )
    calls = []
    fn = patches.REPLACEMENTS["moe_mlp_hooks"](lambda m, qm: calls.append(m) or ("orig", None))
    m = _mlp_input()
    out, event = fn(m, q)
    fc1 = q.apply_gmm1(m)
    act = (eager(fc1) * m.topk_scales).to(fc1.dtype)
    assert event == "event" and not calls
    assert torch.equal(out, _gmm(act, q.w2, m.group_list))
    release_act, _ = q.apply_act_quant(m, eager(fc1))
    assert release_act.dtype == torch.float32  # the release would feed gmm2 another dtype
    for other in (
        dict(quant=types.SimpleNamespace(is_quant=True)),
        dict(lora_context=object()),
        dict(swiglu_limit=7.0),
        dict(activation=types.SimpleNamespace(value="gelu")),
    ):
        assert fn(_mlp_input(**other), q)[0] == "orig"
    assert len(calls) == 4


def _verl_monkey_patch_compute_logits():
    """verl's own monkey_patch_compute_logits, read from the installed verl (its module imports
    vLLM, so the one function is compiled alone)."""
    import importlib.util
    from types import MethodType
    from typing import Optional

    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl not installed")
    path = os.path.join(os.path.dirname(spec.origin), "workers/rollout/vllm_rollout/utils.py")
    src = open(path).read()
    fn = definition(src, "monkey_patch_compute_logits")
    ns = {"torch": torch, "MethodType": MethodType, "Optional": Optional}
    exec(compile(ast.Module([fn], []), path, "exec"), ns)
    return ns["monkey_patch_compute_logits"]


class _Model:
    def __init__(self, logits):
        self.logits = logits

    def compute_logits(self, hidden):
        return self.logits.clone()


def test_rollout_logits_keep_the_vocabulary_megatron_sums_over():
    """verl 0.9.1 masks logits past len(tokenizer) (Qwen3: 151669 of 151936 rows): the
    rollout's log-probs then differ from Megatron's cross entropy over every row. With topl's
    replacement they are its bits; vision placeholders verl bans stay banned."""
    pytest.importorskip("megatron.core")
    from megatron.core.tensor_parallel.cross_entropy import VocabParallelCrossEntropy as CE

    from topl.launcher.align import ops, patches

    verl_fn = _verl_monkey_patch_compute_logits()
    logits = _logits(6, 1000, 9, torch.float32)
    target = torch.randint(0, 990, (6,), generator=torch.Generator().manual_seed(2))
    x, m = CE.calculate_logits_max(logits.clone())
    _, _, predicted, sum_exp, exp = CE.calculate_predicted_logits(x, target, m, 0, 1000)
    megatron = -CE.calculate_cross_entropy_loss(exp, predicted, sum_exp)[1]

    def rollout_lp(patch, *args):
        model = _Model(logits)
        patch(model, 990, *args)
        out = model.compute_logits(None)
        return ops.log_softmax(out).gather(-1, target.unsqueeze(-1)).squeeze(-1), out

    mine = patches.REPLACEMENTS["logits_vocab"](verl_fn)
    assert torch.equal(rollout_lp(mine)[0], megatron)
    assert not torch.equal(rollout_lp(verl_fn)[0], megatron)
    _, banned = rollout_lp(mine, [995, 3])
    assert torch.isinf(banned[:, [995, 3]]).all() and torch.isfinite(banned[:, 990:995]).all()


@pytest.mark.parametrize("renormalize", [True, False])
def test_0_23_selector_follows_renormalize_as_megatron(renormalize):
    """0.23.0.post1's _select_experts_with_fusion_ops replacement: renormalize=False is
    Megatron's use_pre_softmax (softmax over all experts, no renormalisation), not top-k then
    softmax."""
    mu = _megatron()
    from topl.launcher.align import patches

    fn = patches.REPLACEMENTS["expert_select"](lambda *a: None)
    logits = _logits()
    w, ids = fn(None, logits, 4, False, renormalize, None, None, None)
    probs, _ = mu.topk_routing_with_score_function(
        logits, 4, not renormalize, score_function="softmax"
    )
    assert ids.dtype == torch.int32
    assert torch.equal(torch.zeros_like(logits).scatter(1, ids.long(), w), probs)
