"""Facts about the targets of topl's alignment module (`topl.launcher.align.targets`): each
target read in the sdist / wheel of every release the module covers (its definition and the code
that calls it), and what the newer releases do themselves. The parameter lists are compared too,
by AST (tests/align/test_align_targets.py::test_targets_match_each_release_by_ast, tier
facts_sources); `scripts/check_vllm_ascend.py` reads a release not covered yet.
"""

from __future__ import annotations

from topl.launcher.align.targets import GROUPS, TARGETS
from topl.launcher.facts.evidence import Evidence, Fact, seed, va, verl

REL, PRE = "0.23.0.post1", "0.30.0rc2"
SEED_PATCH = "patch/npu_true_on_policy_patch.py"
# a target is a place, not a feature with a start: it is read in each release the module knows
TARGET_NOTE = (
    "a target of topl's alignment module: read in each vllm-ascend release the module covers "
    "(targets.GROUPS) and in the vLLM each pins; the module refuses any other release, so "
    "there is no edge to read"
)
MLP = "ops/fused_moe/moe_mlp.py"
SEL = "ops/fused_moe/experts_selector.py"
ROUTER = "ops/fused_moe/router/"
ROUTED = "ops/fused_moe/routed_experts.py"
VU = "workers/rollout/vllm_rollout/utils.py"
TD = "ops/fused_moe/token_dispatcher.py"
COMM = "ops/fused_moe/moe_comm_method.py"
ALL = ("G3", "G4", "G5", "G6", "G7", "G8")
UNQUANT = ("G3", "G4", "G5", "G6", "G7")  # moe_mlp.unquant_apply_mlp
SELECTOR = ("G3", "G4", "G5", "G6")  # experts_selector._select_experts_with_fusion_ops
ROUTERS = ("G7", "G8")  # the router classes


def vllm(v: str, path: str, needle: str, present: bool = True) -> Evidence:
    return Evidence("vllm", v, f"vllm/{path}", needle, present)


def each(
    groups: tuple[str, ...], path: str, needle: str, present: bool = True
) -> tuple[Evidence, ...]:
    """The same needle read in every vllm-ascend release of these groups."""
    return tuple(
        va(v, path, needle, present) for g in GROUPS if g.name in groups for v in g.releases
    )


def vllm_pins(groups: tuple[str, ...] = ALL) -> list[str]:
    """The vLLM releases the releases of these groups pin, once each."""
    return list(dict.fromkeys(g.vllm[v] for g in GROUPS if g.name in groups for v in g.releases))


def pins(path: str, needle: str, groups: tuple[str, ...] = ALL) -> tuple[Evidence, ...]:
    """The same needle read in every vLLM release the releases of these groups pin."""
    return tuple(vllm(v, path, needle) for v in vllm_pins(groups))


def _target(
    fid: str, package: str, text: str, evidence: tuple[Evidence, ...], seed_needle: str
) -> Fact:
    on = TARGETS if package == "vllm_ascend" else vllm_pins()
    return Fact(
        fid,
        package,
        text,
        " || ".join(f"=={v}" for v in on),
        evidence=(*evidence, seed(SEED_PATCH, seed_needle)),
        range_note=TARGET_NOTE,
    )


ALIGN_FACTS: tuple[Fact, ...] = (
    _target(
        "align_silu_mul",
        "vllm_ascend",
        "AscendSiluAndMul.forward_oot(self, x) runs the fused torch_npu.npu_swiglu; vLLM's "
        "CustomOp.dispatch_forward runs it on the out-of-tree platform",
        each(
            ALL,
            "ops/activation.py",
            "re:class AscendSiluAndMul\\(SiluAndMul\\):\\s+def forward_oot\\(self, x",
        )
        + each(ALL, "utils.py", '"SiluAndMul": AscendSiluAndMul')
        + pins("model_executor/custom_op.py", "return self.forward_oot")
        + (va(REL, "ops/activation.py", "out = torch_npu.npu_swiglu(x)"),),
        "AscendSiluAndMul.forward_oot = ",
    ),
    _target(
        "align_moe_mlp",
        "vllm_ascend",
        "the unquantised MoE MLP runs the fused npu_swiglu between its grouped matmuls: "
        "0.20.2rc1-0.27.1rc1 in moe_mlp.unquant_apply_mlp, which returns (hidden_states, None) "
        "to MoECommMethod.fused_experts (it unpacks two values); 0.28.0rc1 on in "
        "moe_mlp.apply_moe_mlp over the method's gmm1 / act_quant / gmm2 hooks (act_quant "
        "multiplies the routing weights in)",
        each(
            UNQUANT,
            MLP,
            "re:def unquant_apply_mlp\\(.*?return hidden_states, None\\s+def unified_apply_mlp",
        )
        + each(UNQUANT, MLP, "return unquant_apply_mlp(")
        + each(ALL, COMM, "mlp_output, before_gmm2_evt = self._apply_mlp(")
        + each(UNQUANT, COMM, "return unified_apply_mlp(mlp_compute_input=mlp_compute_input)")
        + each(("G8",), MLP, "def apply_moe_mlp(")
        + (
            va(REL, MLP, "gate_up_out = torch_npu.npu_swiglu(gate_up_out)"),
            va(REL, MLP, "re:if topk_scales is not None:\\s+gate_up_out \\*= topk_scales"),
            va(PRE, MLP, "def unquant_apply_mlp(", present=False),
            va(
                PRE,
                MLP,
                "re:def apply_moe_mlp\\(\\s+mlp_compute_input: MoEMlpComputeInput,\\s+quant_method,"
                ".*?hidden_states = quant_method.apply_gmm1\\(mlp_compute_input\\)"
                ".*?hidden_states = _unified_apply_activation\\(.*?"
                "hidden_states = quant_method.apply_gmm2\\(mlp_compute_input, hidden_states, "
                "act_out_scale\\)\\s+return hidden_states, before_gmm2_evt",
            ),
            va(PRE, MLP, "hidden_states = torch_npu.npu_swiglu(hidden_states)"),
            va(
                PRE,
                ROUTED,
                "re:class AscendUnquantizedFusedMoEMethod\\(UnquantizedFusedMoEMethod\\):.*?"
                "def supports_fused_activation\\(self, activation\\) -> bool:\\s+return False.*?"
                "def apply_gmm1\\(self, mlp_compute_input: MoEMlpComputeInput\\):.*?"
                "hidden_states = hidden_states \\* mlp_compute_input.topk_scales.*?"
                "def apply_gmm2\\(self, mlp_compute_input: MoEMlpComputeInput, hidden_states, "
                "act_out_scale\\):",
            ),
            va(PRE, "ops/fused_moe/dataclass/moe_quant.py", "def is_quant(self) -> bool:"),
            va(PRE, COMM, "from vllm_ascend.ops.fused_moe.moe_mlp import apply_moe_mlp"),
        ),
        "moe_mlp.unquant_apply_mlp = ",
    ),
    _target(
        "align_expert_select",
        "vllm_ascend",
        "softmax expert selection: up to 0.26.0rc1 in experts_selector."
        "_select_experts_with_fusion_ops (fused gating kernel); 0.27.1rc1 on in the router "
        "classes: AscendFusedTopKRouter._compute_routing (npu_moe_gating_top_k) falling back to "
        "AscendGroupedTopKRouter._compute_routing (softmax over all experts, top-k, renormalise), "
        "called by vLLM's BaseRouter",
        each(SELECTOR, SEL, "def _select_experts_with_fusion_ops(")
        + each(SELECTOR, SEL, "= _select_experts_with_fusion_ops(")
        + each(ROUTERS, ROUTER + "fused_topk_router.py", "class AscendFusedTopKRouter(")
        + each(ROUTERS, ROUTER + "grouped_topk_router.py", "class AscendGroupedTopKRouter(")
        + pins(
            "model_executor/layers/fused_moe/router/base_router.py",
            "self._compute_routing(",
            ROUTERS,
        )
        + (
            va(PRE, SEL, "def _select_experts_with_fusion_ops(", present=False),
            va(
                PRE,
                ROUTER + "fused_topk_router.py",
                "re:class AscendFusedTopKRouter\\(AscendGroupedTopKRouter\\):.*?"
                "def _compute_routing\\(\\s+self,\\s+hidden_states: torch.Tensor,\\s+"
                "router_logits: torch.Tensor,\\s+indices_type: torch.dtype \\| None,\\s+\\*,\\s+"
                "input_ids: torch.Tensor \\| None = None,\\s+\\)"
                ".*?DeviceOperator.moe_gating_top_k\\(",
            ),
            va(
                PRE,
                ROUTER + "grouped_topk_router.py",
                "re:def _compute_routing\\(\\s+self,\\s+hidden_states: torch.Tensor,\\s+"
                "router_logits: torch.Tensor,.*?topk_weights = router_logits.softmax\\(dim=-1\\)"
                ".*?topk_weights, topk_ids = topk_weights.topk\\(self.top_k, dim=-1\\)",
            ),
            va(PRE, ROUTER + "router_factory.py", "return AscendFusedMoERouter("),
        ),
        "experts_selector._select_experts_with_fusion_ops = ",
    ),
    _target(
        "align_dispatch",
        "vllm_ascend",
        "TokenDispatcherWithAll2AllV.token_dispatch keeps the routing weights for combine (the "
        "weights are applied at unpermute, not in the expert MLP)",
        each(ALL, TD, "class TokenDispatcherWithAll2AllV(")
        + each(ALL, COMM, "self.token_dispatcher.token_dispatch(")
        # async_all_to_all moved from comm_utils to moe_utils in 0.27.1rc1 (a module global
        # of token_dispatcher either way: the replacement reads it there)
        + each(UNQUANT[:4], TD, "from vllm_ascend.ops.fused_moe.comm_utils import async_all_to_all")
        + each(ROUTERS, TD, "from vllm_ascend.ops.fused_moe.moe_utils import async_all_to_all"),
        "TokenDispatcherWithAll2AllV.token_dispatch = ",
    ),
    _target(
        "align_combine",
        "vllm_ascend",
        "TokenDispatcherWithAll2AllV._combine_postprocess unpermutes with the weights in the "
        "fused npu_moe_token_unpermute",
        each(
            ALL,
            TD,
            "re:def _combine_postprocess\\(\\s+self,\\s+permutated_local_input_tokens.*?"
            "npu_moe_token_unpermute\\(.*?probs=combine_metadata\\.topk_weights",
        )
        + each(ALL, TD, "self._combine_postprocess("),
        "TokenDispatcherWithAll2AllV._combine_postprocess = ",
    ),
    _target(
        "align_comm_alltoall",
        "vllm_ascend",
        "ascend_forward_context.select_moe_comm_method picks the MoE communication method "
        "(0.25.1rc1 and 0.27.1rc1 drop is_draft_model; 0.28.0rc1 on add draft_moe_quant_type); "
        "the forward context and the model runner (which imports it by name) call it",
        each(ALL, "ascend_forward_context.py", "def select_moe_comm_method(")
        + each(ALL, "ascend_forward_context.py", "= select_moe_comm_method(")
        + each(ALL, "worker/model_runner_v1.py", "select_moe_comm_method(")
        + (
            va(
                PRE, "ascend_forward_context.py", "draft_moe_quant_type: QuantType = QuantType.NONE"
            ),
            va(PRE, "ascend_forward_context.py", "def select_moe_comm_method("),
        ),
        "ascend_forward_context.select_moe_comm_method = ",
    ),
    _target(
        "align_logprobs",
        "vllm",
        "vLLM's Sampler.compute_logprobs (a staticmethod) is logits.log_softmax in float32; "
        "Sampler.forward calls it",
        pins(
            "v1/sample/sampler.py",
            "re:@staticmethod\\s+def compute_logprobs\\(logits: torch.Tensor\\) -> torch.Tensor:"
            "\\s+return logits.log_softmax\\(dim=-1, dtype=torch.float32\\)",
        )
        + pins("v1/sample/sampler.py", "self.compute_logprobs(logits)"),
        "Sampler.compute_logprobs = ",
    ),
    _target(
        "align_row_parallel",
        "vllm",
        "vLLM's RowParallelLinear.forward(self, input_) all-reduces; vllm-ascend's "
        "AscendRowParallelLinear falls back to it without a custom op",
        pins(
            "model_executor/layers/linear.py",
            "re:class RowParallelLinear\\(LinearBase\\):.*?def forward\\(\\s+self,\\s+input_,\\s+\\)",
        )
        + each(ALL, "ops/linear.py", "return super().forward(input_)"),
        "RowParallelLinear.forward = ",
    ),
    Fact(
        "align_logits_vocab",
        "verl",
        "verl's monkey_patch_compute_logits(model, vocab_size, banned_token_ids) sets the rollout "
        "logits past len(tokenizer) to -inf (0.9.1 also bans vision placeholders); the seed's "
        "module replaces it by a pass-through on verl 0.8.0, where it takes (model, vocab_size)",
        "==0.9.1",
        evidence=(
            verl(
                "0.9.1",
                VU,
                "def monkey_patch_compute_logits(model, vocab_size: int, banned_token_ids: "
                "Optional[list[int]] = None):",
            ),
            verl("0.9.1", VU, 'logits[..., vocab_size:] = float("-inf")'),
            verl("0.9.1", VU, "monkey_patch_compute_logits(model, vocab_size, banned_token_ids)"),
            verl(
                "0.9.1",
                "workers/rollout/vllm_rollout/vllm_async_server.py",
                '"vocab_size": len(self.model_config.tokenizer),',
            ),
            verl("0.8.0", VU, "def monkey_patch_compute_logits(model, vocab_size: int):"),
            seed(SEED_PATCH, "utils.monkey_patch_compute_logits = "),
        ),
        range_note="a target of topl's alignment module: read in verl 0.9.1, the verl of both "
        "stock stacks, and in the seed's 0.8.0 (the seed's module patches it there)",
    ),
    Fact(
        "training_consistency_only_selects_fa3",
        "vllm_ascend",
        "rl_config.enable_training_consistency only lets FA3 be chosen: the fused MoE, routing, "
        "SwiGLU, log-prob and row-parallel paths do not read it (the alignments stay topl's)",
        ">=0.27.1rc1",
        evidence=each(
            ROUTERS,
            "platform.py",
            "if not (rl_config.enabled and rl_config.enable_training_consistency):",
        )
        + tuple(
            e
            for path in (
                "ops/activation.py",
                MLP,
                TD,
                ROUTER + "grouped_topk_router.py",
                "ops/linear.py",
            )  # fmt: skip
            for e in each(ROUTERS, path, "rl_config", present=False)
        )
        + each(ROUTERS, "ascend_forward_context.py", "training_consistency", present=False),
        # the edge is rl_config's own (fact rl_config); the absences hold in every release
        probe=(("vllm_ascend/platform.py", "rl_config.enable_training_consistency"),),
    ),
    Fact(
        "silu_weight_prefetch",
        "vllm_ascend",
        "AscendSiluAndMul.forward_oot prefetches the MLP down-projection weight around "
        "npu_swiglu (vllm_ascend.utils.get_weight_prefetch_method); from 0.24.0rc1 it is "
        "npu_swiglu alone and the prefetch module is gone (topl's replacement: impl "
        "silu_mul_no_prefetch there)",
        "<0.24.0rc1",
        evidence=(
            va(REL, "utils.py", "def get_weight_prefetch_method"),
            va(
                REL,
                "ops/activation.py",
                "weight_prefetch_method.maybe_prefetch_mlp_weight_preprocess",
            ),
            va("0.24.0rc1", "utils.py", "get_weight_prefetch_method", present=False),
            va("0.24.0rc1", "ops/activation.py", "weight_prefetch", present=False),
            va(PRE, "utils.py", "get_weight_prefetch_method", present=False),
            va(
                PRE,
                "ops/activation.py",
                "re:class AscendSiluAndMul\\(SiluAndMul\\):\\s+def forward_oot\\(self, x: "
                "torch.Tensor\\) -> torch.Tensor:\\s+out = torch_npu.npu_swiglu\\(x\\)\\s+return out",
            ),
        ),
        probe=(("vllm_ascend/utils.py", "def get_weight_prefetch_method"),),
    ),
)
