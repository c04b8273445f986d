"""Facts about the targets of topl's alignment module (`topl.launcher.align.targets`): each
target read in the sdist / wheel of every release the module supports, and what the newer
releases do themselves. The parameter lists are compared too, by AST
(tests/align/test_align_targets.py::test_targets_match_each_release_by_ast, tier facts_sources).
"""

from __future__ import annotations

from topl.launcher.facts.evidence import Evidence, Fact, seed, va, verl

REL, PRE = "0.23.0.post1", "0.30.0rc2"
SEED_PATCH = "patch/npu_true_on_policy_patch.py"
# a target is a place, not a feature with a start: it is read in each release the module knows
TARGET_NOTE = (
    "a target of topl's alignment module: read in each vllm-ascend release the module supports "
    "(0.23.0.post1, 0.30.0rc2); the module refuses any other release, so there is no edge to read"
)
MLP = "ops/fused_moe/moe_mlp.py"
SEL = "ops/fused_moe/experts_selector.py"
ROUTER = "ops/fused_moe/router/"
ROUTED = "ops/fused_moe/routed_experts.py"
VU = "workers/rollout/vllm_rollout/utils.py"
TD = "ops/fused_moe/token_dispatcher.py"


def vllm(v: str, path: str, needle: str, present: bool = True) -> Evidence:
    return Evidence("vllm", v, f"vllm/{path}", needle, present)


def _target(
    fid: str, package: str, text: str, evidence: tuple[Evidence, ...], seed_needle: str
) -> Fact:
    return Fact(
        fid,
        package,
        text,
        "==0.23.0.post1 || ==0.30.0rc2" if package == "vllm_ascend" else "==0.23.0 || ==0.30.0",
        evidence=(*evidence, seed(SEED_PATCH, seed_needle)),
        range_note=TARGET_NOTE,
    )


ALIGN_FACTS: tuple[Fact, ...] = (
    _target(
        "align_silu_mul",
        "vllm_ascend",
        "AscendSiluAndMul.forward_oot(self, x) runs the fused torch_npu.npu_swiglu",
        tuple(
            va(
                v,
                "ops/activation.py",
                "re:class AscendSiluAndMul\\(SiluAndMul\\):\\s+def forward_oot\\(self, x",
            )
            for v in (REL, PRE)
        )
        + (va(REL, "ops/activation.py", "out = torch_npu.npu_swiglu(x)"),),
        "AscendSiluAndMul.forward_oot = ",
    ),
    _target(
        "align_moe_mlp",
        "vllm_ascend",
        "the unquantised MoE MLP runs the fused npu_swiglu between its grouped matmuls: "
        "0.23.0.post1 in moe_mlp.unquant_apply_mlp; 0.30.0rc2 in moe_mlp.apply_moe_mlp over the "
        "method's gmm1 / act_quant / gmm2 hooks (act_quant multiplies the routing weights in)",
        (
            va(REL, MLP, "def unquant_apply_mlp("),
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
            va(
                PRE,
                "ops/fused_moe/moe_comm_method.py",
                "from vllm_ascend.ops.fused_moe.moe_mlp import apply_moe_mlp",
            ),
        ),
        "moe_mlp.unquant_apply_mlp = ",
    ),
    _target(
        "align_expert_select",
        "vllm_ascend",
        "softmax expert selection: 0.23.0.post1 in experts_selector._select_experts_with_fusion_ops "
        "(fused gating kernel); 0.30.0rc2 in the router classes: AscendFusedTopKRouter."
        "_compute_routing (npu_moe_gating_top_k) falling back to AscendGroupedTopKRouter."
        "_compute_routing (softmax over all experts, top-k, renormalise)",
        (
            va(REL, SEL, "def _select_experts_with_fusion_ops("),
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
        tuple(va(v, TD, "class TokenDispatcherWithAll2AllV(") for v in (REL, PRE))
        + tuple(
            va(v, TD, f"from vllm_ascend.ops.fused_moe.{m} import async_all_to_all")
            for v, m in ((REL, "comm_utils"), (PRE, "moe_utils"))
        ),
        "TokenDispatcherWithAll2AllV.token_dispatch = ",
    ),
    _target(
        "align_combine",
        "vllm_ascend",
        "TokenDispatcherWithAll2AllV._combine_postprocess unpermutes with the weights in the "
        "fused npu_moe_token_unpermute",
        tuple(
            va(
                v,
                TD,
                "re:def _combine_postprocess\\(\\s+self,\\s+permutated_local_input_tokens.*?"
                "npu_moe_token_unpermute\\(.*?probs=combine_metadata\\.topk_weights",
            )
            for v in (REL, PRE)
        ),
        "TokenDispatcherWithAll2AllV._combine_postprocess = ",
    ),
    _target(
        "align_comm_alltoall",
        "vllm_ascend",
        "ascend_forward_context.select_moe_comm_method picks the MoE communication method "
        "(0.30.0rc2 adds draft_moe_quant_type)",
        (
            va(REL, "ascend_forward_context.py", "def select_moe_comm_method(num_tokens: int"),
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
        "vLLM's Sampler.compute_logprobs (a staticmethod) is logits.log_softmax in float32",
        tuple(
            vllm(
                v,
                "v1/sample/sampler.py",
                "re:@staticmethod\\s+def compute_logprobs\\(logits: torch.Tensor\\) -> torch.Tensor:"
                "\\s+return logits.log_softmax\\(dim=-1, dtype=torch.float32\\)",
            )
            for v in ("0.23.0", "0.30.0")
        ),
        "Sampler.compute_logprobs = ",
    ),
    _target(
        "align_row_parallel",
        "vllm",
        "vLLM's RowParallelLinear.forward(self, input_) all-reduces; vllm-ascend's "
        "AscendRowParallelLinear falls back to it without a custom op",
        tuple(
            vllm(
                v,
                "model_executor/layers/linear.py",
                "re:class RowParallelLinear\\(LinearBase\\):.*?def forward\\(\\s+self,\\s+input_,\\s+\\)",
            )
            for v in ("0.23.0", "0.30.0")
        )
        + tuple(va(v, "ops/linear.py", "return super().forward(input_)") for v in (REL, PRE)),
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
        "==0.30.0rc2",
        evidence=(
            va(
                PRE,
                "platform.py",
                "if not (rl_config.enabled and rl_config.enable_training_consistency):",
            ),
            va(PRE, "ops/activation.py", "rl_config", present=False),
            va(PRE, MLP, "rl_config", present=False),
            va(PRE, TD, "rl_config", present=False),
            va(PRE, "ops/fused_moe/router/grouped_topk_router.py", "rl_config", present=False),
            va(PRE, "ops/linear.py", "rl_config", present=False),
            va(PRE, "ascend_forward_context.py", "training_consistency", present=False),
        ),
        range_note="read in the newest release topl supports (0.30.0rc2); earlier rl_config "
        "releases (0.27.1rc1 on) are not supported by topl's alignment module",
    ),
)
