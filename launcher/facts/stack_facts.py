"""Facts about verl, torch_npu, MindSpeed and CANN, and the seed's own evidence."""

from __future__ import annotations

from topl.launcher.facts.evidence import Evidence, Fact, seed, verl

SEED_SCRIPT = "scripts/grpo/run_grpo_qwen3_30b_megatron_npu.sh"

STACK_FACTS: tuple[Fact, ...] = (
    # ---- verl
    Fact(
        "unchunked_batched_tokens_raised",
        "verl",
        "with chunked prefill off, verl's vLLM server raises rollout.max_num_batched_tokens to "
        "max_model_len (max_position_embeddings when unset), with only a log line",
        ">=0.9.1",
        probe=(
            (
                "verl/workers/rollout/vllm_rollout/vllm_async_server.py",
                "self.config.max_num_batched_tokens = self.config.max_model_len",
            ),
        ),
        evidence=(
            verl(
                "0.9.1",
                "workers/rollout/vllm_rollout/vllm_async_server.py",
                "self.config.max_num_batched_tokens = self.config.max_model_len",
            ),
        ),
    ),
    Fact(
        "full_determinism_fixes_replica_seed",
        "verl",
        "rollout.full_determinism gives every request of a replica the same seed "
        "(replica_rank + seed): the n samples of a prompt on one replica are identical",
        ">=0.9.0",
        # HCCL_DETERMINISTIC=true is older (0.8.0): the edge is where the replica seed starts
        probe=(
            (
                "verl/workers/rollout/vllm_rollout/vllm_async_server.py",
                'sampling_params.setdefault("seed", self.replica_rank + self.config.seed)',
            ),
        ),
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
        "verl_patch_rollout_seed_keys",
        "verl",
        "the seed's per-request-seed verl patch adds rollout.seed (default null) and "
        "rollout.per_request_seed (default false); stock verl 0.8.0 has neither (0.9.x has "
        "rollout.seed, default 42, but no release has per_request_seed)",
        None,
        patch="verl_patches:per_request_seed",
        # what no release has: read at the newest release (rollout.seed itself is stock from 0.9)
        probe=(("verl/trainer/config/rollout/rollout.yaml", "per_request_seed"),),
        evidence=(
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "per_request_seed", present=False),
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "re:(?m)^seed:", present=False),
            seed("patch/verl_patches/verl_per_request_seed_v0.8.0.patch", "+seed: null"),
            seed(
                "patch/verl_patches/verl_per_request_seed_v0.8.0.patch", "+per_request_seed: false"
            ),
            seed(
                "patch/verl_patches/verl_per_request_seed_v0.8.0.patch",
                "When false (default), rollout behaves as before",
            ),
            seed("patch/verl_patches/verl_npu_pp_per_request_seed_v0.8.0.patch", "+seed: null"),
            seed(
                "patch/verl_patches/verl_npu_pp_per_request_seed_v0.8.0.patch",
                "+    per_request_seed: bool = False",
            ),
        ),
        # verl key -> [type, default], read by topl.launcher.facts.verl_schema for a patched 0.8.0
        value={
            "actor_rollout_ref.rollout.seed": ["null", None],
            "actor_rollout_ref.rollout.per_request_seed": ["bool", False],
        },
        otherwise={},
    ),
    Fact(
        "mindspeed_bi_repatch",
        "verl",
        "verl turns MindSpeed's use_flash_attn off when use_flash_attn_npu_batch_invariant is on "
        "(else both register DotProductAttention.forward: 'the patch of forward exist')",
        ">=0.9.0",
        patch="verl_patches:mindspeed_batch_invariant",
        probe=(
            (
                "verl/workers/engine/mindspeed/transformer_impl.py",
                'if repatch_config.get("use_flash_attn_npu_batch_invariant"):',
            ),
        ),
        evidence=(
            verl(
                "0.8.0",
                "workers/engine/mindspeed/transformer_impl.py",
                "use_flash_attn_npu_batch_invariant",
                present=False,
            ),
            verl(
                "0.8.0",
                "workers/engine/mindspeed/transformer_impl.py",
                'repatch_config.setdefault("use_flash_attn", True)',
            ),
            # read in verl 0.9.0's wheel as well (same file, line 52); the checker downloads only
            # the releases a shipped profile declares
            verl(
                "0.9.1",
                "workers/engine/mindspeed/transformer_impl.py",
                'if repatch_config.get("use_flash_attn_npu_batch_invariant"):',
            ),
            seed(
                "patch/verl_patches/verl_mindspeed_batch_invariant.patch",
                'if repatch_config.get("use_flash_attn_npu_batch_invariant"):',
            ),
        ),
    ),
    Fact(
        "verl_default_full_and_piecewise",
        "verl",
        "verl asks vLLM for cudagraph_mode FULL_AND_PIECEWISE unless "
        "engine_kwargs.vllm.compilation_config sets it",
        ">=0.7.1",
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
        ">=0.6.0",
        evidence=(
            verl("0.8.0", "__init__.py", 'os.getenv("VERL_USE_EXTERNAL_MODULES", "")'),
            verl("0.9.1", "__init__.py", 'os.getenv("VERL_USE_EXTERNAL_MODULES", "")'),
        ),
    ),
    Fact(
        "verl_defaults_cache_and_chunking_on",
        "verl",
        "verl turns chunked prefill and prefix caching on by default",
        ">=0.6.0",
        # chunked prefill is on earlier (0.5.0: trainer/config/ppo_trainer.yaml); prefix caching
        # first in 0.6.0's rollout.yaml: the edge is where both are on
        probe=(("verl/trainer/config/rollout/rollout.yaml", "enable_prefix_caching: True"),),
        evidence=(
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "enable_chunked_prefill: True"),
            verl("0.8.0", "trainer/config/rollout/rollout.yaml", "enable_prefix_caching: True"),
            verl("0.9.1", "trainer/config/rollout/rollout.yaml", "enable_prefix_caching: True"),
        ),
    ),
    # ---- torch_npu
    # Back-ported per release line: read in every torch_npu wheel from 2.6.0.post5 to 2.14.0
    # (torch_npu/npu/__init__.py): absent before 2.7.1.post4, 2.8.0rc1-2.8.0.post2, 2.9.0rc1,
    # 2.9.0, 2.10.0rc1 and 2.10.0rc2; present in every other release since. The checker reads the
    # wheels on both sides of each edge.
    Fact(
        "set_deterministic_level",
        "torch_npu",
        "torch_npu.npu.set_deterministic_level exists",
        ">=2.7.1.post4,<2.8.0rc1 || >=2.8.0.post4,<2.9.0rc1 || >=2.9.0.post2,<2.10.0rc1"
        " || >=2.10.0",
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
        "on A3, HCCL_DETERMINISTIC=strict fixes the reduction order (sum, rank size >= 3); before "
        "9.0.0-beta.2 strict behaves as true there",
        ">=9.0.0b2",
        source="CANN docs, env HCCL_DETERMINISTIC (hiascend envref_07_0099): "
        "CANNCommunityEdition/900beta1 and canncommercial/850 'A3: strict = true in single-op "
        "mode'; canncommercial/900 'A3: AllReduce/ReduceScatter, sum, rank size >= 3'; the "
        "order-preserving text first in 9.0.0-beta.2 (issue 32; the beta.2 page is not in topl's "
        "document index). Betas ordered by cann/asc-devkit CHANGELOG.md (v9.0.0-beta.1 "
        "2026/02/25, v9.0.0-beta.2 2026/03/31); a B-build (9.0.0.B160) orders before the betas "
        "(topl.launcher.base.versions: no public mapping)",
        unchecked="CANN is not distributed through PyPI; read from its environment-variable docs",
        range_note="CANN has no registry the checker can list or read: the edge (9.0.0-beta.1 "
        "without, 9.0.0-beta.2 with) is from the docs named in the source",
    ),
    Fact(
        "deterministic_level_2",
        "cann",
        "deterministic level 2 (strong matmul consistency) is supported",
        ">=8.5.1",
        source="CANN 8.5.0 ATC docs, --deterministic_level: 'applies only to 8.5.1 and later'",
        unchecked="CANN is not distributed through PyPI; read from its ATC docs",
        range_note="CANN has no registry the checker can list or read: the edge is the docs' "
        "own statement",
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
