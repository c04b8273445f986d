"""Install the alignments into a running vLLM-Ascend process, all or nothing: every target of the
installed version is resolved and its parameters compared first (`resolve`); only when all are
as `targets` declares them is anything replaced (`apply`). Runs on NPU hosts only (torch_npu);
the maths lives in `ops` and is tested on CPU. The MoE replacements live here, those every
model runs through in `dense`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from importlib import metadata
from typing import Any

from topl.launcher.align import dense, ops
from topl.launcher.align.targets import TARGETS, Target, covered, version_key


class AlignError(RuntimeError):
    """A target is missing or changed in this process: nothing was patched."""


def _lookup(t: Target) -> tuple[Any, str, Any]:
    """(owner, name, current value) for a target; raises LookupError with what is missing."""
    try:
        owner: Any = importlib.import_module(t.module)
    except Exception as e:  # noqa: BLE001 - any import failure means the target is not there
        raise LookupError(f"cannot import {t.module}: {type(e).__name__}: {e}") from None
    *path, name = t.attr.split(".")
    for p in path:
        owner = getattr(owner, p, None)
        if owner is None:
            raise LookupError(f"{t.module} has no {p}")
    if name not in vars(owner) and not hasattr(owner, name):
        raise LookupError(f"{t.module}:{t.attr} does not exist")
    return owner, name, inspect.getattr_static(owner, name)


def _params(value: Any) -> tuple[str, ...]:
    fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
    return tuple(inspect.signature(fn).parameters)


def resolve(version: str) -> tuple[list[tuple[Target, object, str, object]], list[str]]:
    """([(target, owner, name, original)], [problems]) for an installed vllm-ascend version."""
    key = version_key(version)
    if not key:
        return [], [f"vllm-ascend {version}: topl's alignment module covers {covered()}"]
    found, problems = [], []
    for t in TARGETS[key]:
        try:
            owner, name, value = _lookup(t)
        except LookupError as e:
            problems.append(f"{t.alignment}: {e} (fact {t.fact})")
            continue
        got = _params(value)
        if got != t.params:
            problems.append(
                f"{t.alignment}: {t.module}:{t.attr} takes {got}, topl's replacement was written "
                f"for {t.params} (fact {t.fact})"
            )
            continue
        found.append((t, owner, name, value))
    return found, problems


def apply(version: str | None = None) -> list[str]:
    """Patch every target of the installed vllm-ascend, or raise AlignError and patch nothing."""
    if version is None:
        try:
            version = metadata.version("vllm-ascend")
        except metadata.PackageNotFoundError:
            raise AlignError(
                "topl.launcher.align: vllm-ascend is not installed in this Python "
                f"({sys.executable}); nothing patched\n  fix: install the vllm-ascend version the "
                "stack profile declares (cluster.versions.vllm_ascend; topl covers "
                f"{covered()}) where verl runs, or drop topl.launcher.align.load from "
                "VERL_USE_EXTERNAL_MODULES (topl adds it only for strict runs on NPU stacks)"
            ) from None
    found, problems = resolve(version)
    if problems:
        raise AlignError(
            f"topl.launcher.align: refusing to patch vllm-ascend {version} (nothing patched):\n  "
            + "\n  ".join(problems)
            + "\n  fix: install the vllm-ascend version the stack profile declares (topl covers "
            f"{covered()}); `topl check` names what is aligned"
        )
    for t, owner, name, original in found:
        new = REPLACEMENTS[t.impl or t.alignment](original)
        setattr(owner, name, staticmethod(new) if isinstance(original, staticmethod) else new)
        if "." not in t.attr:
            _rebind(original, new, name)
    return [f"{t.module}:{t.attr}" for t, *_ in found]


def _rebind(original: Any, new: Any, name: str) -> None:
    """A module function is also held by modules that imported it by name before the patch
    (vllm_ascend/worker/model_runner_v1.py: `from vllm_ascend.ascend_forward_context import
    select_moe_comm_method`): rebind those too, or they keep calling the original."""
    for mod in list(sys.modules.values()):
        modname = getattr(mod, "__name__", "") or ""
        if modname.split(".")[0] in ("vllm", "vllm_ascend", "verl"):
            if vars(mod).get(name) is original:
                setattr(mod, name, new)


def _fn(original: Any) -> Any:
    return original.__func__ if isinstance(original, (staticmethod, classmethod)) else original


# ---- replacements: each takes the original and returns the new callable


def _moe_mlp(original: Any) -> Any:
    """moe_mlp.unquant_apply_mlp, 0.20.2rc1-0.27.1rc1: 10, 14, 16 or 18 parameters by group
    (targets.GROUPS), which unified_apply_mlp passes as keywords, so the replacement reads them
    by name. Like the original it returns (hidden_states, None): MoECommMethod.fused_experts
    unpacks `mlp_output, before_gmm2_evt = self._apply_mlp(...)` (fact align_moe_mlp)."""
    orig = _fn(original)
    sig = inspect.signature(orig)

    def unquant_apply_mlp(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        name = getattr(a["activation"], "value", a["activation"])
        if a.get("lora_context") is not None or a.get("swiglu_limit") or name not in (None, "silu"):
            # LoRA, clamped SwiGLU and other activations: vllm-ascend's own path (topl aligns
            # the plain SwiGLU that Megatron's GroupedMLP runs)
            return orig(*args, **kwargs)
        import torch
        import torch_npu

        w1, w2, group_list_type = a["w1"], a["w2"], a["group_list_type"]
        if a["need_trans"]:
            w1, w2 = w1.transpose(1, 2), w2.transpose(1, 2)

        def gmm(x: Any, w: Any, b: Any) -> Any:
            return torch_npu.npu_grouped_matmul(
                x=[x],
                weight=[w],
                bias=[b.to(dtype=torch.float32)] if b is not None else None,
                split_item=2,
                group_list_type=group_list_type,
                group_type=0,
                group_list=a["group_list"],
            )[0]

        act = ops.silu_mul(gmm(a["hidden_states"], w1, a["w1_bias"]))
        if a["topk_scales"] is not None:  # Megatron's experts: (act * probs).to(act dtype)
            act = (act * a["topk_scales"]).to(act.dtype)
        return gmm(act, w2, a["w2_bias"]), None

    return unquant_apply_mlp


def _expert_select(original: Any) -> Any:
    orig = _fn(original)

    def _select_experts_with_fusion_ops(hidden_states, router_logits, top_k, use_grouped_topk,
                                        renormalize, e_score_correction_bias, topk_group,
                                        num_expert_group, scoring_func="softmax",
                                        routed_scaling_factor=1.0, tid2eid=None, input_ids=None):  # fmt: skip
        import torch

        if scoring_func != "softmax" or e_score_correction_bias is not None or tid2eid is not None:
            # sigmoid / bias-corrected / hash routing: not the softmax top-k topl aligns
            return orig(hidden_states, router_logits, top_k, use_grouped_topk, renormalize,
                        e_score_correction_bias, topk_group, num_expert_group, scoring_func,
                        routed_scaling_factor, tid2eid, input_ids)  # fmt: skip
        weights, ids = _softmax_topk(router_logits, top_k, use_grouped_topk, renormalize,
                                     topk_group, num_expert_group, routed_scaling_factor)  # fmt: skip
        return weights, ids.to(torch.int32)

    return _select_experts_with_fusion_ops


def _softmax_topk(
    logits: Any,
    top_k: int,
    use_grouped: bool,
    renormalize: bool,
    topk_group: Any,
    num_groups: Any,
    scale: float,
) -> Any:
    grouped = use_grouped and topk_group is not None and num_groups is not None
    return ops.select_experts(
        logits,
        top_k,
        num_groups=num_groups if grouped else None,
        group_topk=topk_group if grouped else None,
        scaling_factor=scale if scale != 1.0 else None,
        pre_softmax=not renormalize,  # softmax over all experts, no renormalisation
    )


def _router(original: Any) -> Any:
    """0.30.0rc2's routers (AscendFusedTopKRouter / AscendGroupedTopKRouter._compute_routing):
    the softmax top-k as Megatron computes it, in place of npu_moe_gating_top_k and of the
    native softmax-then-top-k."""
    orig = _fn(original)

    def _compute_routing(self, hidden_states, router_logits, indices_type, *, input_ids=None):
        import torch

        if (
            self.scoring_func != "softmax"
            or self.e_score_correction_bias is not None
            or getattr(self, "tid2eid", None) is not None
            or getattr(self, "bias_vl", None) is not None
        ):  # sigmoid / bias-corrected / hash routing: not the softmax top-k topl aligns
            return orig(self, hidden_states, router_logits, indices_type, input_ids=input_ids)
        weights, ids = _softmax_topk(router_logits, self.top_k, self.use_grouped_topk,
                                     self.renormalize, self.topk_group, self.num_expert_group,
                                     self.routed_scaling_factor)  # fmt: skip
        return weights, ids.to(torch.int32 if indices_type is None else indices_type)

    return _compute_routing


def _moe_mlp_hooks(original: Any) -> Any:
    """0.30.0rc2's apply_moe_mlp(mlp_compute_input, quant_method): for the unquantised method,
    its own grouped matmuls (apply_gmm1 / apply_gmm2) around the plain SwiGLU, the routing
    weights applied after it as Megatron's experts do, (act * probs).to(act dtype)."""
    orig = _fn(original)

    def apply_moe_mlp(mlp_compute_input, quant_method):
        m = mlp_compute_input
        name = getattr(m.activation, "value", m.activation)
        if (
            m.quant.is_quant
            or m.lora_context is not None
            or m.swiglu_limit
            or name != "silu"
            or quant_method.supports_fused_activation(m.activation)
        ):  # quantised, LoRA, clamped or other activations: vllm-ascend's own path
            return orig(m, quant_method)
        import torch

        act = ops.silu_mul(quant_method.apply_gmm1(m))
        if m.topk_scales is not None:
            act = (act * m.topk_scales).to(act.dtype)
        before_gmm2 = torch.npu.current_stream().record_event()
        return quant_method.apply_gmm2(m, act, None), before_gmm2

    return apply_moe_mlp


def _dispatch(original: Any) -> Any:
    def token_dispatch(self, token_dispatch_input):
        from vllm_ascend.ops.fused_moe import token_dispatcher as td

        if token_dispatch_input.quant.dispatch_with_quant:
            # quantised dispatch regroups by other kernels (npu_moe_init_routing_v2); topl's
            # combine no longer applies the weights, so going on would drop them: stop instead
            raise AlignError(
                "topl.launcher.align aligns unquantised MoE only: this layer dispatches with "
                "quantisation; run strict true on-policy with an unquantised model"
            )
        out = original(self, token_dispatch_input)
        meta = out.combine_metadata
        weights = ops.permute_weights(
            token_dispatch_input.topk_weights, meta.reversed_local_input_permutation_mapping
        )
        _, weights, handle = td.async_all_to_all(
            weights, meta.output_splits, meta.input_splits, self.ep_group
        )
        handle.wait()
        rev_global = meta.reversed_global_input_permutation_mapping
        if rev_global is not None:  # the local-expert regrouping the tokens got, by its mapping
            weights = ops.permute_weights(weights, rev_global)
        return dataclasses.replace(out, topk_scales=weights)

    return token_dispatch


def _combine(original: Any) -> Any:
    def _combine_postprocess(self, permutated_local_input_tokens, combine_metadata):
        k = combine_metadata.topk_weights.shape[-1]
        order = ops.order_from_permutation(
            combine_metadata.reversed_local_input_permutation_mapping, k
        )
        out = ops.unpermute(
            permutated_local_input_tokens, order, combine_metadata.hidden_shape_before_permute
        )
        return out.view(combine_metadata.hidden_shape)

    return _combine_postprocess


def _comm_alltoall(original: Any) -> Any:
    def select_moe_comm_method(num_tokens, vllm_config, *args, **kwargs):
        from vllm_ascend.ascend_forward_context import MoECommType

        return MoECommType.ALLTOALL

    return select_moe_comm_method


# patches.REPLACEMENTS keys (targets.Target.impl, else the alignment) -> replacement factory
REPLACEMENTS = {
    **dense.REPLACEMENTS,
    "moe_mlp": _moe_mlp,
    "expert_select": _expert_select,
    "dispatch": _dispatch,
    "combine": _combine,
    "comm_alltoall": _comm_alltoall,
    "moe_mlp_hooks": _moe_mlp_hooks,
    "router": _router,
}
