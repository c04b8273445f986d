"""Install the alignments into a running vLLM-Ascend process, all or nothing: every target of the
installed version is resolved and its parameters compared first (`resolve`); only when all are
as `targets` declares them is anything replaced (`apply`). Runs on NPU hosts only (torch_npu);
the maths lives in `ops` and is tested on CPU.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from importlib import metadata
from typing import Any

from topl.launcher.align import ops
from topl.launcher.align.targets import TARGETS, Target, version_key


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
        return [], [f"vllm-ascend {version}: topl's alignment module knows {', '.join(TARGETS)}"]
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
                "stack profile declares (stack=release: 0.23.0.post1, stack=prerelease: "
                "0.30.0rc2) where verl runs, or drop topl.launcher.align.load from "
                "VERL_USE_EXTERNAL_MODULES (topl adds it only for strict runs on NPU stacks)"
            ) from None
    found, problems = resolve(version)
    if problems:
        raise AlignError(
            f"topl.launcher.align: refusing to patch vllm-ascend {version} (nothing patched):\n  "
            + "\n  ".join(problems)
            + "\n  fix: install the vllm-ascend version the stack profile declares (stack=release:"
            " 0.23.0.post1, stack=prerelease: 0.30.0rc2); `topl check` names what is aligned"
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


def _silu_mul(original: Any) -> Any:
    def forward_oot(self, x):
        from vllm_ascend.utils import get_weight_prefetch_method

        prefetch = get_weight_prefetch_method()
        prefetch.maybe_prefetch_mlp_weight_preprocess(prefetch.MLP_DOWN, x)
        out = ops.silu_mul(x)
        prefetch.maybe_prefetch_mlp_weight_postprocess(out)
        return out

    return forward_oot


def _moe_mlp(original: Any) -> Any:
    orig = _fn(original)

    def unquant_apply_mlp(hidden_states, w1, w2, group_list, w1_bias=None, w2_bias=None,
                          activation=None, group_list_type=1, topk_scales=None, need_trans=True,
                          swiglu_limit=0.0, lora_context=None, expanded_row_idx=None,
                          topk_ids=None):  # fmt: skip
        name = getattr(activation, "value", activation)
        if lora_context is not None or swiglu_limit or name not in (None, "silu"):
            # LoRA, clamped SwiGLU and other activations: vllm-ascend's own path (topl aligns
            # the plain SwiGLU that Megatron's GroupedMLP runs)
            return orig(hidden_states, w1, w2, group_list, w1_bias, w2_bias, activation,
                        group_list_type, topk_scales, need_trans, swiglu_limit, lora_context,
                        expanded_row_idx, topk_ids)  # fmt: skip
        import torch
        import torch_npu

        if need_trans:
            w1, w2 = w1.transpose(1, 2), w2.transpose(1, 2)

        def gmm(x: Any, w: Any, b: Any) -> Any:
            return torch_npu.npu_grouped_matmul(
                x=[x],
                weight=[w],
                bias=[b.to(dtype=torch.float32)] if b is not None else None,
                split_item=2,
                group_list_type=group_list_type,
                group_type=0,
                group_list=group_list,
            )[0]

        act = ops.silu_mul(gmm(hidden_states, w1, w1_bias))
        if topk_scales is not None:  # Megatron's experts: (act * probs).to(act dtype)
            act = (act * topk_scales).to(act.dtype)
        return gmm(act, w2, w2_bias)

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


def _logits_vocab(original: Any) -> Any:
    """verl's monkey_patch_compute_logits sets logits[..., len(tokenizer):] to -inf; Megatron's
    log-prob sums over every row of the output layer, so the rollout's must too. The vision
    placeholders verl also bans (multimodal models only) stay banned: sampling one takes the
    job down (verl@0.9.1:verl/workers/rollout/utils.py:get_vision_placeholder_token_ids)."""

    def monkey_patch_compute_logits(model, vocab_size, banned_token_ids=None):
        if not banned_token_ids:
            return  # vLLM's compute_logits as it is
        from types import MethodType

        import torch

        inner = model.compute_logits
        banned = torch.tensor(banned_token_ids, dtype=torch.long)

        def compute_logits(self, *args, **kwargs):
            nonlocal banned
            logits = inner(*args, **kwargs)
            if banned.device != logits.device:
                banned = banned.to(logits.device)
            return logits.index_fill_(-1, banned, float("-inf"))

        model.compute_logits = MethodType(compute_logits, model)

    return monkey_patch_compute_logits


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


def _logprobs(original: Any) -> Any:
    def compute_logprobs(logits):
        return ops.log_softmax(logits)

    return compute_logprobs


def _row_parallel(original: Any) -> Any:
    def forward(self, input_):
        from vllm.distributed import (
            split_tensor_along_last_dim,
            tensor_model_parallel_all_gather,
            tensor_model_parallel_reduce_scatter,
        )

        if self.input_is_parallel:
            x = input_
        else:
            x = split_tensor_along_last_dim(input_, num_partitions=self.tp_size)[
                self.tp_rank
            ].contiguous()
        bias = None if self.tp_rank > 0 or self.skip_bias_add else self.bias
        partial = self.quant_method.apply(self, x, bias)
        if self.reduce_results and self.tp_size > 1:
            out = ops.row_parallel_reduce(
                partial,
                self.tp_size,
                lambda t: tensor_model_parallel_reduce_scatter(t, dim=0),
                lambda t: tensor_model_parallel_all_gather(t, dim=0),
            )
        else:
            out = partial
        if not self.return_bias:
            return out
        return out, (self.bias if self.skip_bias_add else None)

    return forward


def _comm_alltoall(original: Any) -> Any:
    def select_moe_comm_method(num_tokens, vllm_config, *args, **kwargs):
        from vllm_ascend.ascend_forward_context import MoECommType

        return MoECommType.ALLTOALL

    return select_moe_comm_method


REPLACEMENTS = {
    "silu_mul": _silu_mul,
    "moe_mlp": _moe_mlp,
    "expert_select": _expert_select,
    "dispatch": _dispatch,
    "combine": _combine,
    "logprobs": _logprobs,
    "row_parallel": _row_parallel,
    "comm_alltoall": _comm_alltoall,
    "logits_vocab": _logits_vocab,
    "moe_mlp_hooks": _moe_mlp_hooks,
    "router": _router,
}
