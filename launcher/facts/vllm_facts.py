"""Facts about vLLM and vllm-ascend: the FA3 backend and how it is chosen, cudagraph modes,
the NZ weight layout, batch invariance, and where vLLM takes its log-probs."""

from __future__ import annotations

from topl.launcher.facts.evidence import Evidence, Fact, seed, va

FA3_PATCH = "patch/vllm_ascend_patches/vllm_ascend_true_on_policy.patch"
# raw_logprobs are computed in forward() before self.sample(), which applies the temperature
RAW_BEFORE_T = (
    're:logprobs_mode == "raw_logprobs":\\s+raw_logprobs = self\\.compute_logprobs\\(logits\\)'
    ".*self\\.sample\\(logits, sampling_metadata.*def sample\\(.*logits = self\\.apply_temperature\\("
)
FA3_DOC = "docs/source/user_guide/feature_guide/flash_attention.md"
FA3_PIECEWISE = 'Please use `compilation_config={"cudagraph_mode": "PIECEWISE"}` when enabling FA3.'
FA3_EAGER = (
    "Please use `enforce_eager=True` when enabling FA3."  # the same docs, 0.20.2rc1-0.21.0rc1
)
BI_DOC = "docs/source/user_guide/feature_guide/batch_invariance.md"
BI_IMPORT = "from vllm.model_executor.layers.batch_invariant import vllm_is_batch_invariant"

VLLM_FACTS: tuple[Fact, ...] = (
    # ---- vllm-ascend: the FA3 backend and how it is chosen
    Fact(
        "fa3_backend",
        "vllm_ascend",
        "the FA3 attention backend (AscendFABackend, num_splits=1) is in vllm-ascend",
        ">=0.20.2rc1",
        patch="vllm_ascend_patches:true_on_policy",
        evidence=(
            va("0.18.0", "attention/fa3_v1.py", "AscendFABackend", present=False),
            va("0.19.1rc1", "attention/fa3_v1.py", "AscendFABackend", present=False),
            va("0.20.2rc1", "attention/fa3_v1.py", "class AscendFABackend"),
            va("0.23.0.post1", "attention/fa3_v1.py", "class AscendFABackend"),
            va("0.23.0.post1", "attention/fa3_v1.py", "num_splits=1"),
            va("0.30.0rc2", "attention/fa3_v1.py", "num_splits=1"),
            seed(FA3_PATCH, "+class AscendFABackend(AttentionBackend)"),
        ),
        detect=("vllm_ascend", "attention/fa3_v1.py", "class AscendFABackend"),
    ),
    Fact(
        "seed_fa3_patch_applies",
        "vllm_ascend",
        "the seed's FA3 source patch (vllm_ascend_true_on_policy.patch) applies to the tree: its "
        "batch_invariant.py hunk needs 0.18.0's vllm_is_batch_invariant import, which 0.19.1rc1 "
        "replaced (`git apply --check`: patch failed: vllm_ascend/batch_invariant.py:16)",
        "==0.18.0",
        evidence=(
            va("0.18.0", "batch_invariant.py", BI_IMPORT),
            va("0.19.1rc1", "batch_invariant.py", BI_IMPORT, present=False),
            seed(FA3_PATCH, " " + BI_IMPORT),  # a context line of the hunk @@ -16,135 +16,211 @@
        ),
        range_note="the seed's patch is written for 0.18.0 (its README's 版本配套); read there and "
        "in 0.19.1rc1, the next release, where it stops applying (and later trees ship FA3)",
    ),
    Fact(
        "fa3_by_attention_backend",
        "vllm_ascend",
        "FA3 is chosen by attention_backend=FLASH_ATTN together with VLLM_BATCH_INVARIANT=1",
        ">=0.20.2rc1,<0.27.1rc1",
        patch="vllm_ascend_patches:true_on_policy",
        evidence=(
            va(
                "0.23.0.post1",
                "platform.py",
                "selected_backend == AttentionBackendEnum.FLASH_ATTN and cls._validate_fa3_backend",
            ),
            va("0.23.0.post1", "platform.py", "if not attn_selector_config.use_batch_invariant"),
            va(
                "0.30.0rc2",
                "platform.py",
                "selected_backend == AttentionBackendEnum.FLASH_ATTN",
                present=False,
            ),
            seed(
                FA3_PATCH,
                "if selected_backend == AttentionBackendEnum.FLASH_ATTN and "
                "cls._validate_fa3_backend(key)",
            ),
        ),
    ),
    Fact(
        "rl_config",
        "vllm_ascend",
        "additional_config.rl_config (enabled, enable_training_consistency, enable_batch_invariant)"
        " selects FA3; the attention_backend choice is ignored; unknown keys are rejected",
        ">=0.27.1rc1",
        evidence=(
            va("0.23.0.post1", "ascend_config.py", "class RlConfig", present=False),
            va(
                "0.30.0rc2",
                "ascend_config.py",
                "re:class RlConfig.*enable_training_consistency: bool.*enable_batch_invariant: bool",
            ),
            va(
                "0.30.0rc2",
                "platform.py",
                "if not attn_selector_config.use_pcp and _validate_fa3_backend",
            ),
        ),
        detect=("vllm_ascend", "ascend_config.py", "class RlConfig"),
    ),
    Fact(
        "fa3_rejects_full_decode_only",
        "vllm_ascend",
        "FA3 refuses cudagraph_mode FULL_DECODE_ONLY (and nothing else) when not eager",
        ">=0.20.2rc1",
        patch="vllm_ascend_patches:true_on_policy",
        evidence=(
            va(
                "0.23.0.post1",
                "attention/fa3_v1.py",
                "if cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY",
            ),
            va(
                "0.30.0rc2",
                "attention/fa3_v1.py",
                "if cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY",
            ),
            seed(FA3_PATCH, "if cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY"),
        ),
    ),
    Fact(
        "fa3_rejects_sliding_window",
        "vllm_ascend",
        "FA3 raises ValueError for sliding-window attention",
        ">=0.20.2rc1",
        patch="vllm_ascend_patches:true_on_policy",
        evidence=(
            va(
                "0.23.0.post1",
                "attention/fa3_v1.py",
                "AscendFAImpl does not support sliding window attention",
            ),
            va(
                "0.30.0rc2",
                "attention/fa3_v1.py",
                "AscendFAImpl does not support sliding window attention",
            ),
        ),
    ),
    Fact(
        "fa3_rejects_mla",
        "vllm_ascend",
        "FA3 raises ValueError for MLA and SFA attention",
        ">=0.20.2rc1",
        patch="vllm_ascend_patches:true_on_policy",
        evidence=(
            va("0.23.0.post1", "platform.py", "FA3 backend does not support MLA and SFA."),
            va("0.30.0rc2", "platform.py", "FA3 backend does not support MLA and SFA."),
        ),
    ),
    Fact(
        "fa3_docs_eager_only",
        "vllm_ascend",
        "vllm-ascend's FA3 docs: no ACL graph capture, use enforce_eager=True with FA3",
        ">=0.20.2rc1,<0.22.1rc1",
        evidence=(
            Evidence("vllm-ascend", "0.21.0rc1", FA3_DOC, FA3_EAGER),
            Evidence("vllm-ascend", "0.23.0.post1", FA3_DOC, FA3_EAGER, present=False),
        ),
    ),
    # the seed's FA3 patch ships no docs (and its scripts run enforce_eager=True): no patch here
    Fact(
        "fa3_docs_piecewise_only",
        "vllm_ascend",
        "vllm-ascend's FA3 docs: no ACL graph capture, use cudagraph_mode PIECEWISE with FA3",
        ">=0.22.1rc1",
        evidence=(
            Evidence("vllm-ascend", "0.23.0.post1", FA3_DOC, FA3_PIECEWISE),
            Evidence("vllm-ascend", "0.30.0rc2", FA3_DOC, FA3_PIECEWISE),
        ),
    ),
    Fact(
        "full_and_piecewise_downgraded",
        "vllm_ascend",
        "vllm-ascend turns cudagraph_mode FULL_AND_PIECEWISE into PIECEWISE",
        "<0.21.0rc1",
        evidence=(
            va(
                "0.18.0",
                "platform.py",
                "re:cudagraph_mode == CUDAGraphMode.FULL_AND_PIECEWISE:"
                "\\s+compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE",
            ),
            va(
                "0.23.0.post1",
                "platform.py",
                "re:cudagraph_mode == CUDAGraphMode.FULL_AND_PIECEWISE:"
                "\\s+compilation_config.cudagraph_mode = CUDAGraphMode.PIECEWISE",
                present=False,
            ),
        ),
    ),
    # ---- vllm-ascend: NZ weight layout (must be off: NZ matmuls reorder the reduction)
    Fact(
        "nz_env",
        "vllm_ascend",
        "vllm-ascend reads VLLM_ASCEND_ENABLE_NZ",
        "<0.27.1rc1",
        evidence=(
            va("0.18.0", "envs.py", '"VLLM_ASCEND_ENABLE_NZ"'),
            va("0.23.0.post1", "envs.py", '"VLLM_ASCEND_ENABLE_NZ"'),
            va("0.30.0rc2", "envs.py", '"VLLM_ASCEND_ENABLE_NZ"', present=False),
        ),
    ),
    Fact(
        "nz_config",
        "vllm_ascend",
        "additional_config.weight_nz_mode sets the NZ layout (0: off)",
        ">=0.20.2rc1",
        # the RL-config message is later (0.27.1rc1): the edge is where the key is read
        probe=(("vllm_ascend/ascend_config.py", '"weight_nz_mode",'),),
        evidence=(
            va("0.18.0", "ascend_config.py", "weight_nz_mode", present=False),
            va("0.23.0.post1", "ascend_config.py", '"weight_nz_mode",'),
            va("0.30.0rc2", "ascend_config.py", "RL config requires weight_nz_mode=0"),
        ),
    ),
    Fact(
        "bi_sets_hccl_strict",
        "vllm_ascend",
        "batch invariance sets HCCL_DETERMINISTIC=strict and LCCL_DETERMINISTIC=1 in vLLM workers",
        ">=0.15.0rc1",
        # LCCL_DETERMINISTIC=1 is older (0.13.0): the edge is where HCCL strict starts
        probe=(("vllm_ascend/batch_invariant.py", 'os.environ["HCCL_DETERMINISTIC"] = "strict"'),),
        evidence=(
            va("0.18.0", "batch_invariant.py", 'os.environ["HCCL_DETERMINISTIC"] = "strict"'),
            va("0.18.0", "batch_invariant.py", 'os.environ["LCCL_DETERMINISTIC"] = "1"'),
            va("0.30.0rc2", "batch_invariant.py", 'os.environ["LCCL_DETERMINISTIC"] = "1"'),
        ),
    ),
    Fact(
        "bi_breaks_with_chunked_prefill_prefix_cache_preemption",
        "vllm_ascend",
        "vllm-ascend's docs: chunked prefill, prefix caching and preemption are not supported "
        "with batch invariance and are not disabled automatically",
        ">=0.28.0rc1",
        evidence=(
            Evidence(
                "vllm-ascend",
                "0.30.0rc2",
                BI_DOC,
                "Chunked prefill, prefix caching, and request preemption (eviction and "
                "recomputation) are not supported with batch invariance.",
            ),
            Evidence(
                "vllm-ascend",
                "0.23.0.post1",
                BI_DOC,
                "Chunked prefill, prefix caching, and request preemption",
                present=False,
            ),
        ),
    ),
    # ---- vLLM
    Fact(
        "raw_logprobs_before_temperature",
        "vllm",
        "raw_logprobs are taken before temperature; processed_logprobs after temperature and "
        "top-k/top-p",
        "",
        evidence=(
            Evidence("vllm", "0.18.0", "vllm/v1/sample/sampler.py", RAW_BEFORE_T),
            Evidence("vllm", "0.23.0", "vllm/v1/sample/sampler.py", RAW_BEFORE_T),
        ),
    ),
)
