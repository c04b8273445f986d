"""What topl's alignment module replaces, per vllm-ascend release. Data only (no torch, no
vllm): `topl.launcher.contract.stack` (TOP-STACK-005) and the facts read it.

Releases that share code share one target set (`GROUPS`, G3-G8 as issue 47's research named
them: every release from 0.20.2rc1, the first with FA3, to 0.30.0rc2); `UNALIGNABLE` says why
0.18.0 and 0.19.1rc1 cannot be. `scripts/check_vllm_ascend.py` reads a new release against them.

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
from dataclasses import dataclass, replace

from packaging.version import Version

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
MLP = f"{VA}.ops.fused_moe.moe_mlp"
# dense MLP: the release's own forward_oot prefetches weights around npu_swiglu up to 0.23.0.post1
# (vllm_ascend.utils.get_weight_prefetch_method); from 0.24.0rc1 there is no prefetch at all
# (facts: silu_weight_prefetch), so the replacement must not import it there
_SILU = _t("silu_mul", f"{VA}.ops.activation", "AscendSiluAndMul.forward_oot", ("self", "x"),
           "align_silu_mul")  # fmt: skip
_SILU_NP = replace(_SILU, impl="silu_mul_no_prefetch")
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

# moe_mlp.unquant_apply_mlp, 0.20.2rc1-0.27.1rc1: every release returns (hidden_states, None) and
# MoECommMethod.fused_experts unpacks two values; unified_apply_mlp passes keywords only
_MLP10 = ("hidden_states", "w1", "w2", "group_list", "w1_bias", "w2_bias", "activation",
          "group_list_type", "topk_scales", "need_trans")  # fmt: skip
_LORA = ("lora_context", "expanded_row_idx", "topk_ids")
_SWIGLU = ("swiglu_limit", "swiglu_alpha", "swiglu_beta")
_MLP14 = (*_MLP10, "swiglu_limit", *_LORA)  # 0.23.0rc1-0.23.0.post1
_MLP16 = (*_MLP10, *_SWIGLU, *_LORA)  # 0.24.0rc1-0.26.0rc1
_MLP18 = (*_MLP10[:7], "activation_situ_beta", "activation_situ_linear_beta", *_MLP10[7:],
          *_SWIGLU, *_LORA)  # fmt: skip  # 0.27.1rc1


def _mlp(params: tuple[str, ...]) -> Target:
    return _t("moe_mlp", MLP, "unquant_apply_mlp", params, "align_moe_mlp")


# 0.30.0rc2's form (0.28.0rc1 on): apply_moe_mlp over the method's gmm hooks
_MLP_HOOKS = _t("moe_mlp", MLP, "apply_moe_mlp", ("mlp_compute_input", "quant_method"),
                "align_moe_mlp", impl="moe_mlp_hooks")  # fmt: skip
_SELECT = _t(
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
    ),  # fmt: skip
    "align_expert_select",
)
# the router classes (0.27.1rc1 on): the fused selector (npu_moe_gating_top_k) and its native
# fallback, both replaced
_ROUTING = ("self", "hidden_states", "router_logits", "indices_type", "input_ids")
_ROUTER = f"{VA}.ops.fused_moe.router"
_ROUTERS = tuple(
    _t(
        "expert_select",
        f"{_ROUTER}.{mod}",
        f"{cls}._compute_routing",
        _ROUTING,
        "align_expert_select",
        impl="router",
    )  # fmt: skip
    for mod, cls in (
        ("fused_topk_router", "AscendFusedTopKRouter"),
        ("grouped_topk_router", "AscendGroupedTopKRouter"),
    )
)


def _comm(*params: str) -> Target:
    return _t("comm_alltoall", f"{VA}.ascend_forward_context", "select_moe_comm_method",
              ("num_tokens", "vllm_config", *params), "align_comm_alltoall")  # fmt: skip


@dataclass(frozen=True)
class Group:
    """Releases that share one target set, and the vLLM each pins (its Dockerfile's
    `ARG VLLM_TAG`): vLLM-owned targets are read in that vLLM release."""

    name: str
    vllm: dict[str, str]  # vllm-ascend release -> the vLLM release it pins
    targets: tuple[Target, ...]

    @property
    def releases(self) -> tuple[str, ...]:
        return tuple(self.vllm)


def _group(name: str, vllm: dict[str, str], *ts: Target) -> Group:
    return Group(name, vllm, (*ts, _DISPATCH, _COMBINE, _LOGPROBS, _ROW, _LOGITS))


# Oldest first. Not a contiguous range: 0.25.1rc1 (G6) sits between 0.24.0rc1 and 0.26.0rc1 (G5)
# and drops select_moe_comm_method's is_draft_model, which 0.26.0rc1 still has.
GROUPS: tuple[Group, ...] = (
    # 0.21.0rc1's Dockerfiles pin vLLM v0.22.1 (its docs say 0.21.0: the targets are the same)
    _group(
        "G3",
        {"0.20.2rc1": "0.20.2", "0.21.0rc1": "0.22.1", "0.22.1rc1": "0.22.1"},
        _SILU,
        _mlp(_MLP10),
        _SELECT,
        _comm("is_draft_model"),
    ),  # fmt: skip
    _group(
        "G4",
        dict.fromkeys(("0.23.0rc1", "0.23.0", "0.23.0.post1"), "0.23.0"),
        _SILU,
        _mlp(_MLP14),
        _SELECT,
        _comm("is_draft_model"),
    ),  # fmt: skip
    _group(
        "G5",
        {"0.24.0rc1": "0.24.0", "0.26.0rc1": "0.26.0"},
        _SILU_NP,
        _mlp(_MLP16),
        _SELECT,
        _comm("is_draft_model"),
    ),  # fmt: skip
    _group("G6", {"0.25.1rc1": "0.25.1"}, _SILU_NP, _mlp(_MLP16), _SELECT, _comm()),
    _group("G7", {"0.27.1rc1": "0.27.1"}, _SILU_NP, _mlp(_MLP18), *_ROUTERS, _comm()),
    _group(
        "G8",
        {
            "0.28.0rc1": "0.28.0",
            "0.29.0rc1": "0.29.0",
            "0.30.0rc1": "0.30.0",
            "0.30.0rc2": "0.30.0",
        },
        _SILU_NP,
        _MLP_HOOKS,
        *_ROUTERS,
        _comm("is_draft_model", "draft_moe_quant_type"),
    ),  # fmt: skip
)
TARGETS: dict[str, tuple[Target, ...]] = {v: g.targets for g in GROUPS for v in g.releases}
# the vLLM each release pins (Dockerfile ARG VLLM_TAG), the unalignable ones too
VLLM_PIN: dict[str, str] = {
    "0.18.0": "0.18.0",
    "0.19.1rc1": "0.19.1",
    **{v: p for g in GROUPS for v, p in g.vllm.items()},
}
KNOWN = tuple(sorted(VLLM_PIN, key=Version))  # every release topl has read (issue 47's range)
NEWEST = max(TARGETS, key=Version)  # the newest covered: scripts/check_vllm_ascend.py starts here

# Releases in the range that no target set can make true on-policy, and why: each names the stack
# facts that prove it (TOP-STACK-005 quotes them). Both lack the FA3 backend (fact fa3_backend).
UNALIGNABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "0.18.0": (
        "no FA3 attention backend ships in it; only the seed's source patch adds one, and only "
        "the seed's module applies that patch (with its own alignments, written for 0.18.0)",
        ("fa3_backend", "seed_fa3_patch_applies"),
    ),
    "0.19.1rc1": (
        "no FA3 attention backend ships in it, and the seed's FA3 source patch does not apply to "
        "its tree (vllm_ascend/batch_invariant.py moved), so nothing can give it one",
        ("fa3_backend", "seed_fa3_patch_applies"),
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
        why = (
            f"topl's alignment module has no targets for vllm-ascend {vllm_ascend} (it covers "
            f"{covered()}; scripts/check_vllm_ascend.py {vllm_ascend} reads a new release)"
        )
        return dict.fromkeys(ALIGNMENTS, why)
    done = {t.alignment for t in TARGETS[key]}
    return {a: NOT_PROVIDED.get(key, {}).get(a, "no target") for a in ALIGNMENTS if a not in done}


def covered() -> str:
    """The releases topl's module covers, oldest first, for messages."""
    return ", ".join(sorted(TARGETS, key=Version))
