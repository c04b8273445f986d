"""What topl's alignment module replaces, per vllm-ascend version. Data only (no torch, no
vllm): `topl.launcher.contract.stack` (TOP-STACK-005) and the facts read it.

Each `Target` is one attribute topl replaces at run time: the module, the attribute path in it,
and the parameter names the replacement was written for. The same target is a stack fact
(`fact`, in `topl.launcher.facts.align_facts`) cited in that release's sdist, so a target renamed
in a new release fails `scripts/check_facts.py`; in a process whose installed vllm-ascend lacks
a target or changed its parameters, `patches.resolve` refuses before anything is patched.

The nine alignments are those the seed's module performs on vllm-ascend 0.18.0 and verl 0.8.0
(psyloy/verl-ascend-recipe@6823af18:true_on_policy/patch/README.md §5 lists eight;
patch/npu_true_on_policy_patch.py:apply_batch_consistency_patches also replaces verl's
monkey_patch_compute_logits), a description of what to
align; the code here is topl's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

LOAD_MODULE = "topl.launcher.align.load"  # what the renderer adds to VERL_USE_EXTERNAL_MODULES

# alignment id -> what it makes the rollout do (as Megatron does in training)
ALIGNMENTS = {
    "silu_mul": "dense MLP activation: F.silu(gate) * up instead of the fused npu_swiglu",
    "moe_mlp": "unquantised MoE MLP: grouped matmul, plain F.silu(gate) * up, routing weights "
    "applied after the activation",
    "expert_select": "expert selection with torch.topk + softmax over the top-k logits instead of "
    "the fused gating kernel",
    "dispatch": "all-to-all dispatch carries the routing weights to the experts (Megatron applies "
    "them in the expert MLP, not at combine)",
    "combine": "combine as Megatron's unpermute: a plain scatter-add in expert-major order",
    "logprobs": "rollout log-probs by the stable log-softmax (x - max) - log(sum(exp(x - max)))",
    "row_parallel": "RowParallelLinear reduces by reduce-scatter + all-gather of rows padded to a "
    "multiple of TP instead of all-reduce",
    "comm_alltoall": "the MoE communication method is always all-to-all",
    "logits_vocab": "rollout logits keep the whole vocabulary Megatron's log-softmax sums over: "
    "verl's compute_logits patch no longer sets the tail past len(tokenizer) to -inf",
}

# the alignments only a MoE model runs through (a dense model needs none of them)
MOE_ONLY = frozenset({"moe_mlp", "expert_select", "dispatch", "combine", "comm_alltoall"})


@dataclass(frozen=True)
class Target:
    alignment: str
    module: str  # importable module
    attr: str  # attribute path inside it: "Class.method" or "function"
    params: tuple[str, ...]  # the parameter names the replacement was written for, in order
    fact: str  # the stack fact that cites it (topl.launcher.facts.align_facts)
    impl: str = ""  # the replacement (patches.REPLACEMENTS key) when not the alignment's own


def _t(
    alignment: str, module: str, attr: str, params: Iterable[str], fact: str, impl: str = ""
) -> Target:
    return Target(alignment, module, attr, tuple(params), fact, impl)


VA = "vllm_ascend"
_SILU = _t(
    "silu_mul",
    f"{VA}.ops.activation",
    "AscendSiluAndMul.forward_oot",
    ("self", "x"),
    "align_silu_mul",
)
_DISPATCH = _t(
    "dispatch",
    f"{VA}.ops.fused_moe.token_dispatcher",
    "TokenDispatcherWithAll2AllV.token_dispatch",
    ("self", "token_dispatch_input"),
    "align_dispatch",
)
_COMBINE = _t(
    "combine",
    f"{VA}.ops.fused_moe.token_dispatcher",
    "TokenDispatcherWithAll2AllV._combine_postprocess",
    ("self", "permutated_local_input_tokens", "combine_metadata"),
    "align_combine",
)
# vLLM's own classes (vllm-ascend's AscendRowParallelLinear.forward falls back to super().forward)
_LOGPROBS = _t(
    "logprobs", "vllm.v1.sample.sampler", "Sampler.compute_logprobs", ("logits",), "align_logprobs"
)
_ROW = _t(
    "row_parallel",
    "vllm.model_executor.layers.linear",
    "RowParallelLinear.forward",
    ("self", "input_"),
    "align_row_parallel",
)

# verl's own hook (verl 0.9.1 on both stock stacks; vllm_async_server.run_server calls it)
_LOGITS = _t(
    "logits_vocab",
    "verl.workers.rollout.vllm_rollout.utils",
    "monkey_patch_compute_logits",
    ("model", "vocab_size", "banned_token_ids"),
    "align_logits_vocab",
)
_ROUTING = ("self", "hidden_states", "router_logits", "indices_type", "input_ids")
_ROUTER = f"{VA}.ops.fused_moe.router"

TARGETS: dict[str, tuple[Target, ...]] = {
    "0.23.0.post1": (
        _SILU,
        _t(
            "moe_mlp",
            f"{VA}.ops.fused_moe.moe_mlp",
            "unquant_apply_mlp",
            (
                "hidden_states",
                "w1",
                "w2",
                "group_list",
                "w1_bias",
                "w2_bias",
                "activation",
                "group_list_type",
                "topk_scales",
                "need_trans",
                "swiglu_limit",
                "lora_context",
                "expanded_row_idx",
                "topk_ids",
            ),
            "align_moe_mlp",
        ),
        _t(
            "expert_select",
            f"{VA}.ops.fused_moe.experts_selector",
            "_select_experts_with_fusion_ops",
            (
                "hidden_states",
                "router_logits",
                "top_k",
                "use_grouped_topk",
                "renormalize",
                "e_score_correction_bias",
                "topk_group",
                "num_expert_group",
                "scoring_func",
                "routed_scaling_factor",
                "tid2eid",
                "input_ids",
            ),
            "align_expert_select",
        ),
        _DISPATCH,
        _COMBINE,
        _LOGPROBS,
        _ROW,
        _t(
            "comm_alltoall",
            f"{VA}.ascend_forward_context",
            "select_moe_comm_method",
            ("num_tokens", "vllm_config", "is_draft_model"),
            "align_comm_alltoall",
        ),
        _LOGITS,
    ),
    "0.30.0rc2": (
        _SILU,
        _t(
            "moe_mlp",
            f"{VA}.ops.fused_moe.moe_mlp",
            "apply_moe_mlp",
            ("mlp_compute_input", "quant_method"),
            "align_moe_mlp",
            impl="moe_mlp_hooks",
        ),
        # the fused selector (npu_moe_gating_top_k) and its native fallback: both replaced
        _t(
            "expert_select",
            f"{_ROUTER}.fused_topk_router",
            "AscendFusedTopKRouter._compute_routing",
            _ROUTING,
            "align_expert_select",
            impl="router",
        ),
        _t(
            "expert_select",
            f"{_ROUTER}.grouped_topk_router",
            "AscendGroupedTopKRouter._compute_routing",
            _ROUTING,
            "align_expert_select",
            impl="router",
        ),
        _DISPATCH,
        _COMBINE,
        _LOGPROBS,
        _ROW,
        _t(
            "comm_alltoall",
            f"{VA}.ascend_forward_context",
            "select_moe_comm_method",
            ("num_tokens", "vllm_config", "is_draft_model", "draft_moe_quant_type"),
            "align_comm_alltoall",
        ),
        _LOGITS,
    ),
}

# alignments topl's module does not provide on a version, and why (TOP-STACK-005 names them)
NOT_PROVIDED: dict[str, dict[str, str]] = {}


def version_key(vllm_ascend: object) -> str:
    """The TARGETS key for a declared / installed vllm-ascend version ('' when unsupported)."""
    text = str(vllm_ascend or "").strip()
    return text if text in TARGETS else ""


def missing(vllm_ascend: object) -> dict[str, str]:
    """{alignment: why} that topl's module leaves unaligned on this vllm-ascend version."""
    key = version_key(vllm_ascend)
    if not key:
        supported = ", ".join(TARGETS)
        return {
            a: f"topl's alignment module has targets for vllm-ascend {supported} only"
            for a in ALIGNMENTS
        }
    done = {t.alignment for t in TARGETS[key]}
    return {a: NOT_PROVIDED.get(key, {}).get(a, "no target") for a in ALIGNMENTS if a not in done}
