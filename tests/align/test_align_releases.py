"""topl's replacements called the way each covered vllm-ascend release calls the original, on
CPU: the callers are stand-ins shaped like the release's own code (cited per release in the
facts align_moe_mlp / silu_weight_prefetch), torch_npu's kernels are CPU stand-ins.

- moe_mlp (0.20.2rc1-0.27.1rc1): unified_apply_mlp passes keywords, MoECommMethod.fused_experts
  unpacks `mlp_output, before_gmm2_evt = self._apply_mlp(...)` (bug B1: a bare tensor there).
- silu_mul: from 0.24.0rc1 vllm_ascend.utils has no get_weight_prefetch_method (bug B2: the
  replacement imported it on every release).
"""

from __future__ import annotations

import sys
import types

import pytest
from test_align_moe import _gmm

from topl.launcher import facts
from topl.launcher.align import ops, patches, targets

torch = pytest.importorskip("torch")

# what each parameter of unquant_apply_mlp defaults to in the releases (moe_mlp.py)
DEFAULTS = {"w1_bias": None, "w2_bias": None, "activation": None, "group_list_type": 1,
            "topk_scales": None, "need_trans": True, "swiglu_limit": 0.0, "swiglu_alpha": 1.0,
            "swiglu_beta": 0.0, "activation_situ_beta": None, "activation_situ_linear_beta": None,
            "lora_context": None, "expanded_row_idx": None, "topk_ids": None}  # fmt: skip


def _target(version, alignment, attr=None):
    return next(
        t
        for t in targets.TARGETS[version]
        if t.alignment == alignment and (attr is None or t.attr == attr)
    )


UNQUANT = [v for v, ts in targets.TARGETS.items() if any(t.attr == "unquant_apply_mlp" for t in ts)]


def _torch_npu():
    """npu_grouped_matmul (group_list_type=1) and npu_swiglu on CPU."""

    def npu_grouped_matmul(x, weight, bias, split_item, group_list_type, group_type, group_list):
        assert bias is None and split_item == 2 and group_list_type == 1 and group_type == 0
        return [_gmm(x[0], weight[0], group_list)]

    return types.SimpleNamespace(npu_grouped_matmul=npu_grouped_matmul, npu_swiglu=ops.silu_mul)


def _release_mlp(params):
    """A release's moe_mlp module: unquant_apply_mlp with its parameter names (returning a
    marker pair, as the original returns (hidden_states, None)), unified_apply_mlp passing
    them by keyword, and MoECommMethod whose fused_experts unpacks two values."""
    mod = types.ModuleType("moe_mlp")
    sig = ", ".join(p if p in ("hidden_states", "w1", "w2", "group_list") else f"{p}={p}_"
                    for p in params)  # fmt: skip
    ns = {f"{p}_": DEFAULTS.get(p) for p in params}
    exec(f"def unquant_apply_mlp({sig}): return 'original', None", ns)
    mod.unquant_apply_mlp = ns["unquant_apply_mlp"]

    def unified_apply_mlp(*, mlp_compute_input):
        m = mlp_compute_input
        return mod.unquant_apply_mlp(**{p: getattr(m, p) for p in params if hasattr(m, p)})

    class MoECommMethod:
        def _apply_mlp(self, mlp_compute_input):
            return unified_apply_mlp(mlp_compute_input=mlp_compute_input)

        def fused_experts(self, mlp_compute_input):
            mlp_output, before_gmm2_evt = self._apply_mlp(mlp_compute_input)
            return mlp_output, before_gmm2_evt

    return mod, MoECommMethod()


@pytest.mark.parametrize("version", UNQUANT)
@pytest.mark.parametrize("rows", [10, 2])  # 2 rows: a bare tensor would unpack silently
def test_moe_mlp_replacement_returns_the_pair_each_release_unpacks(monkeypatch, version, rows):
    t = _target(version, "moe_mlp")
    monkeypatch.setitem(sys.modules, "torch_npu", _torch_npu())
    mod, comm = _release_mlp(t.params)
    mod.unquant_apply_mlp = patches.REPLACEMENTS[t.impl or t.alignment](mod.unquant_apply_mlp)
    g = torch.Generator().manual_seed(3)
    w1, w2 = torch.randn(2, 8, 12, generator=g), torch.randn(2, 6, 8, generator=g)
    m = types.SimpleNamespace(**DEFAULTS)
    vars(m).update(
        hidden_states=torch.randn(rows, 8, generator=g),
        w1=w1,
        w2=w2,
        group_list=torch.tensor([rows // 2, rows - rows // 2]),
        need_trans=False,
        activation=types.SimpleNamespace(value="silu"),
        topk_scales=torch.rand(rows, 1, generator=g),
    )
    out, event = comm.fused_experts(m)
    act = ops.silu_mul(_gmm(m.hidden_states, w1, m.group_list))
    assert event is None
    assert torch.equal(out, _gmm((act * m.topk_scales).to(act.dtype), w2, m.group_list))
    # what topl does not align runs the release's own path, which returns its own pair
    for other in (dict(lora_context=object()), dict(activation="gelu")):
        if set(other) - set(t.params):  # 0.20.2rc1-0.22.1rc1 have no LoRA
            continue
        assert comm.fused_experts(types.SimpleNamespace(**{**vars(m), **other})) == (
            "original",
            None,
        )


def test_the_releases_return_a_pair_from_unquant_apply_mlp():
    """The tuple contract is cited in each release the target covers (and read there by the
    facts_sources tier): no covered release returns a bare tensor."""
    cited = {
        e.version
        for e in facts.fact("align_moe_mlp").evidence
        if e.present and "return hidden_states, None" in e.needle
    }
    assert cited == set(UNQUANT)
    callers = {
        e.version
        for e in facts.fact("align_moe_mlp").evidence
        if "mlp_output, before_gmm2_evt = self._apply_mlp(" in e.needle
    }
    assert callers == set(targets.TARGETS)


def _utils(monkeypatch, prefetch):
    mod = types.ModuleType("vllm_ascend.utils")
    if prefetch is not None:
        mod.get_weight_prefetch_method = lambda: prefetch
    monkeypatch.setitem(sys.modules, "vllm_ascend", types.ModuleType("vllm_ascend"))
    monkeypatch.setitem(sys.modules, "vllm_ascend.utils", mod)


class _Prefetch:
    MLP_DOWN = "mlp_down"

    def __init__(self):
        self.calls = []

    def maybe_prefetch_mlp_weight_preprocess(self, kind, x):
        self.calls.append(("pre", kind))

    def maybe_prefetch_mlp_weight_postprocess(self, out):
        self.calls.append(("post",))


@pytest.mark.parametrize("version", list(targets.TARGETS))
def test_silu_replacement_runs_where_the_release_has_no_prefetch(monkeypatch, version):
    """The release's own vllm_ascend.utils: with get_weight_prefetch_method up to 0.23.0.post1,
    without it from 0.24.0rc1 (fact silu_weight_prefetch). The replacement runs on both, keeps
    the prefetch where the release has it, and computes Megatron's SwiGLU."""
    has = facts.supports("silu_weight_prefetch", {"vllm_ascend": version})
    prefetch = _Prefetch() if has else None
    _utils(monkeypatch, prefetch)
    t = _target(version, "silu_mul")
    fn = patches.REPLACEMENTS[t.impl or t.alignment](None)
    x = torch.randn(5, 16)
    assert torch.equal(fn(None, x), ops.silu_mul(x))
    if has:
        assert prefetch.calls == [("pre", "mlp_down"), ("post",)]
