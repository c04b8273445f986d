"""The declared target stack supports what the spec asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.launcher import facts
from topl.launcher.align import targets as align_targets
from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.facts.stacks import shipped_version
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_moe, is_strict, on_npu

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec

SEED_MODULE = "verl_ascend_recipe.true_on_policy.patch"
# the vllm-ascend releases topl knows (issue 47's range, 0.18.0 on) that ship FA3 themselves
FA3_RELEASES = ", ".join(
    v for v in align_targets.KNOWN if facts.supports("fa3_backend", {"vllm_ascend": v})
)


@rule(
    "TOP-STACK-001",
    ERROR,
    "vLLM pipeline parallel needs verl's PP patch",
    ("rollout.pp", "cluster.versions.verl", "cluster.versions.verl_patches"),
    "add vllm_pp to cluster.versions.verl_patches (stack=seed applies it), or set rollout.pp=1",
    facts=("vllm_pp_npu",),
)
def vllm_pp(s: JobSpec) -> Outcome:
    """No verl release sizes vLLM replicas by engine_kwargs pipeline parallel on NPU: a replica
    gets tp*dp devices while vLLM wants tp*pp. The seed's verl patch adds it."""
    if s.rollout.pp > 1 and not facts.supports("vllm_pp_npu", s.cluster.versions):
        return f"rollout.pp={s.rollout.pp} on verl {s.cluster.versions.verl} without the PP patch"


@rule(
    "TOP-STACK-002",
    ERROR,
    "the stack has the FA3 attention backend for strict runs on NPU",
    (
        "alignment.mode",
        "cluster.device",
        "cluster.versions.vllm_ascend",
        "cluster.versions.vllm_ascend_patches",
        "cluster.versions.flash_attn_npu",
    ),
    f"declare a vllm-ascend that ships FA3 ({FA3_RELEASES}; stack=release and stack=prerelease "
    "pin 0.23.0.post1 and 0.30.0rc2), or use stack=seed (0.18.0 + the seed's FA3 patch), with "
    "flash-attention-npu installed",
    facts=("fa3_backend", "seed_fa3_patch_applies", "rl_config"),
)
def fa3_available(s: JobSpec) -> Outcome:
    """FA3 (attention/fa3_v1.py, num_splits=1) first ships in vllm-ascend 0.20.2rc1 (final 0.23.0);
    0.18.0 has it only with the seed's source patch, which no later tree takes (0.19.1rc1 has
    neither). rl_config selects it from 0.27.1rc1 only."""
    if is_strict(s) and on_npu(s):
        v = s.cluster.versions
        if not facts.supports("fa3_backend", v):
            patchable = facts.supports("seed_fa3_patch_applies", v)
            return f"vllm-ascend {v.vllm_ascend} has no FA3 backend, " + (
                "and the true_on_policy patch that adds it is not declared"
                if patchable
                else "and the seed's FA3 patch (true_on_policy) does not apply to its tree"
            )
        if not v.flash_attn_npu:
            return "flash-attention-npu (FA3 kernels) not declared"


@rule(
    "TOP-STACK-003",
    ERROR,
    "torch_npu is the build for the declared torch",
    ("cluster.device", "cluster.versions.torch", "cluster.versions.torch_npu"),
    "install the torch release torch_npu requires (torch_npu X.Y.Z[.postN] needs torch X.Y.Z)",
    facts=("torch_npu_pins_torch",),
)
def torch_match(s: JobSpec) -> Outcome:
    """torch_npu requires one exact torch release (Requires-Dist torch==X.Y.Z), not a minor line."""
    t = facts.version("torch", s.cluster.versions.torch)
    n = facts.version("torch_npu", s.cluster.versions.torch_npu)
    if on_npu(s) and (t is None or n is None or t.release != n.release):
        return f"torch {s.cluster.versions.torch} with torch_npu {s.cluster.versions.torch_npu}"


@rule(
    "TOP-STACK-004",
    ERROR,
    "batch-invariant ops installed for strict runs on NPU",
    ("alignment.mode", "cluster.device", "cluster.versions.batch_invariant_ops"),
    "install CANN batch_invariant_ops and declare it",
    facts=("mindspeed_bi_switches",),
)
def bi_ops(s: JobSpec) -> Outcome:
    """Without the package vllm-ascend falls back to Triton batch-invariant ops or only warns, and
    MindSpeed's --use-batch-invariant-ops raises at start-up: the run is off-policy or fails."""
    if is_strict(s) and on_npu(s) and not s.cluster.versions.batch_invariant_ops:
        return "batch_invariant_ops not declared in cluster.versions"


@rule(
    "TOP-STACK-005",
    ERROR,
    "every alignment the model needs is provided on the declared stack",
    (
        "alignment.mode",
        "cluster.device",
        "cluster.external_modules",
        "cluster.versions.vllm_ascend",
        "cluster.versions.vllm_ascend_patches",
        "cluster.versions.verl_patches",
        "model.num_experts",
    ),
    "declare a vllm-ascend topl's alignment module covers "
    f"({align_targets.covered()}; stack=release and stack=prerelease pin 0.23.0.post1 and "
    "0.30.0rc2), or use stack=seed (the seed's module and its versions together)",
    facts=(
        "seed_patch_module",
        "fa3_backend",
        "seed_fa3_patch_applies",
        "verl_external_modules",
        "align_logits_vocab",
        "training_consistency_only_selects_fa3",
    ),
)
def patch_module(s: JobSpec) -> Outcome:
    """Rollout must compute what Megatron computes: plain SwiGLU, softmax-after-top-k routing,
    Megatron's dispatch / combine order, its log-softmax and padded row-parallel reduction
    (topl.launcher.align.targets.ALIGNMENTS). Three things can provide them: the seed's module
    (vllm-ascend 0.18.0 only: it git-applies a 0.18.0 patch and raises on other trees), topl's
    alignment module (added by the renderer on the releases it has targets for: 0.20.2rc1 to
    0.30.0rc2), or the version itself (none does: rl_config.enable_training_consistency only
    selects FA3). 0.18.0 without the seed's module and 0.19.1rc1 cannot be aligned (no FA3:
    targets.UNALIGNABLE says why, with the facts); an alignment nothing provides is an error;
    a dense model needs no MoE alignment."""
    if not (is_strict(s) and on_npu(s)):
        return None
    v, mod = s.cluster.versions, s.cluster.external_modules
    patches = [*v.verl_patches, *v.vllm_ascend_patches]
    seed_stack = str(v.vllm_ascend).startswith("0.18.")
    if mod == SEED_MODULE and not seed_stack:
        return (
            f"the seed's patch module applies a vllm-ascend 0.18.0 patch; declared {v.vllm_ascend}"
        )
    if patches and not mod:
        return f"patches {patches} declared but no module (VERL_USE_EXTERNAL_MODULES) applies them"
    if mod == SEED_MODULE:
        return None
    if str(v.vllm_ascend) in align_targets.UNALIGNABLE:
        why, fids = align_targets.UNALIGNABLE[str(v.vllm_ascend)]
        return f"vllm-ascend {v.vllm_ascend} cannot be aligned: {why} ({_cites(fids, v)})"
    if not align_targets.version_key(v.vllm_ascend):
        return next(iter(align_targets.missing(v.vllm_ascend).values()))
    gaps = {
        a: why
        for a, why in align_targets.missing(v.vllm_ascend).items()
        if is_moe(s) or a not in align_targets.MOE_ONLY
    }
    if gaps:
        return f"vllm-ascend {v.vllm_ascend}: nothing provides the alignment of " + "; ".join(
            f"{a} ({why})" for a, why in gaps.items()
        )


def _cites(fids: tuple[str, ...], v: object) -> str:
    """The citations of these facts read in the declared release (and the seed's patch)."""
    declared = str(getattr(v, "vllm_ascend", ""))
    return "; ".join(
        e.cite
        for f in fids
        for e in facts.fact(f).evidence
        if e.version == declared or e.package.startswith("github:")
    )


@rule(
    "TOP-STACK-006",
    WARNING,
    "HCCL strict determinism keeps its order on this CANN and SoC",
    (
        "alignment.mode",
        "cluster.device",
        "cluster.versions.cann",
        "cluster.soc",
        "collective.hccl_deterministic",
    ),
    "use CANN 9.0.0-beta.2 or later on A3 (a final 9.0.0 or newer: stack=release)",
    facts=("hccl_strict_orders_on_a3",),
)
def cann_version(s: JobSpec) -> Outcome:
    """On A3, CANN 8.5 and 9.0.0-beta.1 run HCCL_DETERMINISTIC=strict as `true` (deterministic
    but without a fixed reduction order); from 9.0.0-beta.2 strict keeps the order (sum, rank
    size >= 3). A build such as 9.0.0.B160 counts as older than 9.0.0's betas (no public mapping
    from build numbers to betas), except the seed's own build, on which the seed measured logdiff 0."""
    strict_hccl = s.collective.hccl_deterministic == "strict"
    if (
        is_strict(s)
        and on_npu(s)
        and strict_hccl
        and s.cluster.soc == "A3"
        and not facts.supports("hccl_strict_orders_on_a3", s.cluster.versions)
    ):
        cann = str(s.cluster.versions.cann)
        if cann == shipped_version("seed", "cann"):
            # seed evidence outranks the docs' rule: the seed measured logdiff 0 on A3 on this very
            # build (psyloy/verl-ascend-recipe@6823af18:true_on_policy/README.md:版本配套)
            return None
        if (
            ".B" in cann
        ):  # a build: topl.launcher.base.versions orders it before the betas, unproven
            return (
                f"CANN {cann} on A3: a build with no public order against 9.0.0-beta.2, where "
                "strict starts keeping its order; strict may behave as true"
            )
        return f"CANN {cann} on A3: strict behaves as true"


@rule(
    "TOP-STACK-007",
    ERROR,
    "MindSpeed has the batch-invariant switches topl renders",
    ("alignment.mode", "cluster.device", "cluster.versions.mindspeed", "train.engine"),
    "use MindSpeed core_r0.16.0",
    facts=("mindspeed_bi_switches",),
)
def mindspeed_switches(s: JobSpec) -> Outcome:
    """use_batch_invariant_ops and use_flash_attn_npu_batch_invariant exist only on MindSpeed
    core_r0.16.0; other branches do not know them and the training side stays unaligned."""
    if (
        is_strict(s)
        and on_npu(s)
        and s.train.engine == "megatron"
        and not facts.supports("mindspeed_bi_switches", s.cluster.versions)
    ):
        return f"MindSpeed {s.cluster.versions.mindspeed} has no batch-invariant switches"


@rule(
    "TOP-SEED-001",
    ERROR,
    "a per-request sampling seed needs the verl patch that adds it",
    ("rollout.per_request_seed", "cluster.versions.verl", "cluster.versions.verl_patches"),
    "unset rollout.per_request_seed, or use stack=seed (verl_patches has per_request_seed)",
    facts=("per_request_seed", "full_determinism_fixes_replica_seed"),
)
def per_request_seed(s: JobSpec) -> Outcome:
    """No verl release has rollout.per_request_seed (the seed's patch adds it). verl's
    full_determinism is no substitute: it gives all n samples of a prompt on one replica the same
    seed, so a GRPO group collapses to one answer; topl never renders it."""
    if s.rollout.per_request_seed and not facts.supports("per_request_seed", s.cluster.versions):
        return f"rollout.per_request_seed=true on verl {s.cluster.versions.verl} without the patch"


@rule(
    "TOP-CLUS-001",
    WARNING,
    "a remote backend has somewhere to go",
    ("cluster.backend", "cluster.ray_address"),
    "set cluster.ray_address=http://HEAD:8265",
)
def ray_address(s: JobSpec) -> Outcome:
    """The Ray Job API needs the dashboard address of the cluster head. Shipped presets carry none
    (no silent target): `check` warns, so a shared recipe still validates; `launch` refuses."""
    if backend_traits.of(s).addressed and not s.cluster.ray_address:
        return f"backend={s.cluster.backend} without cluster.ray_address"


@rule(
    "TOP-GRAPH-002",
    ERROR,
    "FA3 runs eager where vllm-ascend's FA3 docs ask for it",
    ("alignment.mode", "cluster.device", "rollout.graph_mode", "cluster.versions.vllm_ascend"),
    "set rollout.graph_mode=eager, or use vllm-ascend 0.22.1rc1 or later (stack=release), whose "
    "FA3 docs allow cudagraph_mode PIECEWISE",
    facts=("fa3_docs_eager_only", "fa3_docs_piecewise_only"),
)
def fa3_eager(s: JobSpec) -> Outcome:
    """vllm-ascend 0.20.2rc1 and 0.21.0rc1 document FA3 without ACL graph capture and ask for
    enforce_eager=True; the same page asks for cudagraph_mode PIECEWISE only from 0.22.1rc1."""
    v = s.cluster.versions
    if (
        is_strict(s)
        and on_npu(s)
        and s.rollout.graph_mode != "eager"
        and facts.supports("fa3_docs_eager_only", v)
    ):
        return (
            f"graph_mode={s.rollout.graph_mode} on vllm-ascend {v.vllm_ascend}: its FA3 docs ask "
            "for enforce_eager=True"
        )


@rule(
    "TOP-VER-001",
    ERROR,
    "every declared version is one topl can order",
    tuple(f"cluster.versions.{k}" for k in facts.VERSION_KEYS),
    "declare each version as its vendor writes it: vllm_ascend=0.23.0.post1, "
    "torch_npu=2.8.0.post4, cann=9.0.0-beta.2 / 8.5.RC1 / 9.0.0.B160, mindspeed=core_r0.16.0",
)
def readable_versions(s: JobSpec) -> Outcome:
    """A version topl cannot read would make every fact about that package silently false; the
    parser (topl.launcher.base.versions) refuses unknown forms instead of truncating them."""
    bad = facts.unreadable(s.cluster.versions)
    if bad:
        return "; ".join(bad.values())
