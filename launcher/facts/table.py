"""Stack facts as data. Each fact says what holds, for which versions of one package, and where
that was read. `Evidence` is re-checked in the real packages by `scripts/check_facts.py`:
the `needle` (a substring, or a regex after `re:`) is in `path` (or absent, present=False) in
that release's sdist / wheel (`METADATA` is the wheel's metadata file) or at that GitHub commit.

`package` is the `cluster.versions` key whose version decides (`profile`: the profile name);
`when` is a PEP 440 specifier over it ("" always, None: in no release); `patch` names an entry
of a declared patch list (`verl_patches:vllm_pp`) that makes the fact hold on any version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# GitHub sources, pinned: a branch or short name as the user declares it -> the commit read.
COMMITS = {
    "Ascend/MindSpeed": {
        "core_r0.16.0": "e4772499f7eb9fa9a68919dd1eaddef00e915b2d",
        "master": "028de58c",
    },
    "psyloy/verl-ascend-recipe": {"6823af18": "6823af180b31b3b83dee4098281169ad2bac8693"},
}
SEED = "psyloy/verl-ascend-recipe"
SEED_AT = "6823af18"
TOP = "true_on_policy"


@dataclass(frozen=True)
class Evidence:
    package: str  # PyPI name (vllm-ascend, verl, torch-npu, vllm) or github:owner/name
    version: str  # release, or the branch / short commit for github sources (see COMMITS)
    path: str  # file inside the package (sdist paths without the top folder)
    needle: str  # substring, or `re:` + a regex (DOTALL) for an order of statements
    present: bool = True  # False: the file lacks the needle (or does not exist)

    @property
    def cite(self) -> str:
        pkg = self.package.removeprefix("github:")
        sym = self.needle.removeprefix("re:")
        return f"{pkg}@{self.version}:{self.path}:{sym}" + ("" if self.present else " (absent)")


@dataclass(frozen=True)
class Fact:
    id: str
    package: (
        str  # cluster.versions key that decides: vllm_ascend, verl, torch_npu, mindspeed, cann ...
    )
    text: str  # what holds, one line, for people
    when: str | None  # PEP 440 specifier where it holds; "" always; None in no release
    evidence: tuple[Evidence, ...] = ()
    patch: str = ""  # "<versions list>:<name>" that makes it hold on any version
    source: str = ""  # a source that is not a package file (docs, announcement)
    unchecked: str = ""  # why the checker cannot re-read it, when it cannot
    # how an installed package shows it, for `topl doctor`: (module, file in it, needle); the
    # same needle is cited in `evidence` for a real release
    detect: tuple[str, str, str] = ()
    value: Any = True
    otherwise: Any = False


def va(v, path, needle, present=True):
    return Evidence("vllm-ascend", v, f"vllm_ascend/{path}", needle, present)


def verl(v, path, needle, present=True):
    return Evidence("verl", v, f"verl/{path}", needle, present)


def seed(path, needle, present=True):
    return Evidence(f"github:{SEED}", SEED_AT, f"{TOP}/{path}", needle, present)


FA3_PATCH = "patch/vllm_ascend_patches/vllm_ascend_true_on_policy.patch"
# raw_logprobs are computed in forward() before self.sample(), which applies the temperature
RAW_BEFORE_T = (
    're:logprobs_mode == "raw_logprobs":\\s+raw_logprobs = self\\.compute_logprobs\\(logits\\)'
    ".*self\\.sample\\(logits, sampling_metadata.*def sample\\(.*logits = self\\.apply_temperature\\("
)
FA3_DOC = "docs/source/user_guide/feature_guide/flash_attention.md"
FA3_PIECEWISE = 'Please use `compilation_config={"cudagraph_mode": "PIECEWISE"}` when enabling FA3.'
BI_DOC = "docs/source/user_guide/feature_guide/batch_invariance.md"
SEED_SCRIPT = "scripts/grpo/run_grpo_qwen3_30b_megatron_npu.sh"

FACTS: tuple[Fact, ...] = (
    # ---- vllm-ascend: the FA3 backend and how it is chosen
    Fact(
        "fa3_backend",
        "vllm_ascend",
        "the FA3 attention backend (AscendFABackend, num_splits=1) is in vllm-ascend",
        ">=0.20.2rc1",
        patch="vllm_ascend_patches:true_on_policy",
        evidence=(
            va("0.18.0", "attention/fa3_v1.py", "AscendFABackend", present=False),
            va("0.23.0.post1", "attention/fa3_v1.py", "class AscendFABackend"),
            va("0.23.0.post1", "attention/fa3_v1.py", "num_splits=1"),
            va("0.30.0rc2", "attention/fa3_v1.py", "num_splits=1"),
            seed(FA3_PATCH, "+class AscendFABackend(AttentionBackend)"),
        ),
        detect=("vllm_ascend", "attention/fa3_v1.py", "class AscendFABackend"),
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
        "fa3_docs_piecewise_only",
        "vllm_ascend",
        "vllm-ascend's FA3 docs: no ACL graph capture, use cudagraph_mode PIECEWISE with FA3",
        ">=0.20.2rc1",
        patch="vllm_ascend_patches:true_on_policy",
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
        ">=0.18.0",
        evidence=(
            va("0.18.0", "batch_invariant.py", 'os.environ["HCCL_DETERMINISTIC"] = "strict"'),
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
    # ---- verl
    Fact(
        "full_determinism_fixes_replica_seed",
        "verl",
        "rollout.full_determinism gives every request of a replica the same seed "
        "(replica_rank + seed): the n samples of a prompt on one replica are identical",
        ">=0.9.0",
        evidence=(
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "full_determinism", present=False),
            verl(
                "0.9.1",
                "workers/rollout/vllm_rollout/vllm_async_server.py",
                'sampling_params.setdefault("seed", self.replica_rank + self.config.seed)',
            ),
            verl("0.9.1", "workers/engine/utils.py", 'os.environ["HCCL_DETERMINISTIC"] = "true"'),
        ),
    ),
    Fact(
        "per_request_seed",
        "verl",
        "rollout.per_request_seed gives each request its own seed (the seed's verl patch)",
        None,
        patch="verl_patches:per_request_seed",
        evidence=(
            verl("0.9.1", "trainer/config/rollout/rollout.yaml", "per_request_seed", present=False),
            seed(
                "patch/verl_patches/verl_per_request_seed_v0.8.0.patch",
                "actor_rollout_ref.rollout.per_request_seed",
            ),
            seed(
                "patch/verl_patch_selector.py",
                '_PER_REQUEST_SEED_MARKER = "maybe_apply_per_request_seed"',
            ),
            seed(
                "patch/verl_patches/verl_npu_pp_per_request_seed_v0.8.0.patch",
                "+def maybe_apply_per_request_seed",
            ),
        ),
        detect=("verl", "workers/rollout/utils.py", "maybe_apply_per_request_seed"),
    ),
    Fact(
        "vllm_pp_npu",
        "verl",
        "vLLM pipeline parallel on NPU (engine_kwargs PP counted in the replica; the seed's patch"
        " adds ensure_rollout_config)",
        None,
        patch="verl_patches:vllm_pp",
        evidence=(
            verl("0.9.1", "workers/config/rollout.py", "def ensure_rollout_config", present=False),
            seed("patch/verl_patch_selector.py", '_PP_MARKER = "ensure_rollout_config"'),
            seed(
                "patch/verl_patches/verl_npu_pp_per_request_seed_v0.8.0.patch",
                "def ensure_rollout_config",
            ),
        ),
        detect=("verl", "workers/config/rollout.py", "def ensure_rollout_config"),
    ),
    Fact(
        "verl_default_full_and_piecewise",
        "verl",
        "verl asks vLLM for cudagraph_mode FULL_AND_PIECEWISE unless "
        "engine_kwargs.vllm.compilation_config sets it",
        ">=0.8.0",
        evidence=(
            verl(
                "0.8.0",
                "workers/rollout/vllm_rollout/vllm_async_server.py",
                'compilation_config.setdefault("cudagraph_mode", "FULL_AND_PIECEWISE")',
            ),
            verl(
                "0.9.1",
                "workers/rollout/vllm_rollout/vllm_async_server.py",
                'compilation_config.setdefault("cudagraph_mode", "FULL_AND_PIECEWISE")',
            ),
        ),
    ),
    Fact(
        "verl_external_modules",
        "verl",
        "every module in VERL_USE_EXTERNAL_MODULES is imported at `import verl` (a missing one "
        "raises)",
        ">=0.8.0",
        evidence=(
            verl("0.8.0", "__init__.py", 'os.getenv("VERL_USE_EXTERNAL_MODULES", "")'),
            verl("0.9.1", "__init__.py", 'os.getenv("VERL_USE_EXTERNAL_MODULES", "")'),
        ),
    ),
    Fact(
        "verl_defaults_cache_and_chunking_on",
        "verl",
        "verl turns chunked prefill and prefix caching on by default",
        ">=0.8.0",
        evidence=(
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "enable_chunked_prefill: True"),
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "enable_prefix_caching: True"),
            verl("0.9.1", "trainer/config/rollout/rollout.yaml", "enable_prefix_caching: True"),
        ),
    ),
    # ---- torch_npu
    Fact(
        "set_deterministic_level",
        "torch_npu",
        "torch_npu.npu.set_deterministic_level exists",
        ">=2.8.0.post5,!=2.9.0,!=2.10.0rc1",
        evidence=(
            Evidence(
                "torch-npu",
                "2.9.0",
                "torch_npu/npu/__init__.py",
                "set_deterministic_level",
                present=False,
            ),
            Evidence(
                "torch-npu",
                "2.10.0.post4",
                "torch_npu/npu/__init__.py",
                "def set_deterministic_level",
            ),
        ),
        detect=("torch_npu", "npu/__init__.py", "def set_deterministic_level"),
    ),
    Fact(
        "torch_npu_pins_torch",
        "torch_npu",
        "a torch_npu release requires one exact torch release (its own version without .postN)",
        "",
        evidence=(
            Evidence("torch-npu", "2.9.0", "METADATA", "re:Requires-Dist: torch ?==2\\.9\\.0"),
            Evidence(
                "torch-npu", "2.10.0.post4", "METADATA", "re:Requires-Dist: torch ?==2\\.10\\.0"
            ),
        ),
    ),
    # ---- MindSpeed
    Fact(
        "mindspeed_bi_switches",
        "mindspeed",
        "MindSpeed has --use-batch-invariant-ops and --use-flash-attn-npu-batch-invariant",
        "==0.16.0",
        evidence=(
            Evidence(
                "github:Ascend/MindSpeed",
                "core_r0.16.0",
                "mindspeed/features_manager/batch_invariant/batch_invariant.py",
                '"--use-flash-attn-npu-batch-invariant"',
            ),
            Evidence(
                "github:Ascend/MindSpeed",
                "core_r0.16.0",
                "mindspeed/features_manager/batch_invariant/batch_invariant.py",
                '"--use-batch-invariant-ops"',
            ),
            Evidence(
                "github:Ascend/MindSpeed",
                "core_r0.16.0",
                "mindspeed/features_manager/batch_invariant/batch_invariant.py",
                'importlib.util.find_spec("flash_attn_npu") is None',
            ),
            Evidence(
                "github:Ascend/MindSpeed",
                "master",
                "mindspeed/features_manager/batch_invariant/batch_invariant.py",
                "--use-batch-invariant-ops",
                present=False,
            ),
        ),
        detect=(
            "mindspeed",
            "features_manager/batch_invariant/batch_invariant.py",
            '"--use-batch-invariant-ops"',
        ),
    ),
    # ---- CANN (not on PyPI: from its documentation)
    Fact(
        "hccl_strict_orders_on_a3",
        "cann",
        "on A3, HCCL_DETERMINISTIC=strict fixes the reduction order (CANN 8.5: same as true)",
        ">=9.0",
        source="CANN 8.5.0 and 9.0 docs, env HCCL_DETERMINISTIC (hiascend envref_07_0099)",
        unchecked="CANN is not distributed through PyPI; read from its environment-variable docs",
    ),
    Fact(
        "deterministic_level_2",
        "cann",
        "deterministic level 2 (strong matmul consistency) is supported",
        ">=8.5.1",
        source="CANN 8.5.0 ATC docs, --deterministic_level: 'applies only to 8.5.1 and later'",
        unchecked="CANN is not distributed through PyPI; read from its ATC docs",
    ),
    # ---- the seed's evidence
    Fact(
        "seed_logdiff0_with_cache_and_chunking",
        "profile",
        "the seed reported logdiff 0 on Qwen3-30B-A3B with verl's defaults: prefix caching and "
        "chunked prefill on",
        "seed",
        evidence=(
            seed(SEED_SCRIPT, "enable_prefix_caching", present=False),
            seed(SEED_SCRIPT, "enable_chunked_prefill", present=False),
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "enable_chunked_prefill: True"),
        ),
        source="seed announcement (Huawei Ascend, 5 Aug): logdiff = 0 on Qwen3-30B-A3B",
    ),
    Fact(
        "seed_logdiff0_with_dynamic_bsz",
        "profile",
        "the seed reported logdiff 0 on Qwen3-30B-A3B with token-budget (dynamic) micro-batching "
        "in both the update and the log-prob recompute",
        "seed",
        evidence=(
            seed(SEED_SCRIPT, "actor_rollout_ref.actor.use_dynamic_bsz=True"),
            seed(SEED_SCRIPT, "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True"),
        ),
        source="seed announcement (Huawei Ascend, 5 Aug): logdiff = 0 on Qwen3-30B-A3B",
    ),
    Fact(
        "seed_patch_module",
        "profile",
        "the seed's patch module git-applies its vllm-ascend 0.18.0 patch at `import verl` and "
        "raises where it does not apply",
        "seed",
        evidence=(
            seed("patch/__init__.py", "apply_vllm_ascend_source_patches()"),
            seed("patch/apply_vllm_ascend_source_patches.py", "does not apply cleanly"),
            seed(
                "scripts/grpo/run_grpo_qwen3_4b_megatron_npu.sh",
                "VERL_USE_EXTERNAL_MODULES=verl_ascend_recipe.true_on_policy.patch",
            ),
        ),
    ),
)
