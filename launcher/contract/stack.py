"""The declared target stack supports what the spec asks for."""
from packaging.version import Version

from topl.launcher.contract.core import ERROR, WARNING, is_strict, on_npu, rule
from topl.launcher.versions import UNKNOWN, parse


def _v(text: str) -> Version:
    return parse(text) or UNKNOWN


@rule("TOP-STACK-001", ERROR, "vLLM pipeline parallel needs verl's PP patch",
      ("rollout.pp", "cluster.versions.verl", "cluster.versions.verl_patches"),
      "add vllm_pp to cluster.versions.verl_patches (apply the PP patch), or set rollout.pp=1")
def vllm_pp(s):
    """Stock verl 0.9.1 raises NotImplementedError for vLLM pipeline_model_parallel_size > 1."""
    if s.rollout.pp > 1 and "vllm_pp" not in s.cluster.versions.verl_patches:
        return f"rollout.pp={s.rollout.pp} on verl {s.cluster.versions.verl} without the PP patch"


@rule("TOP-STACK-002", ERROR, "vllm-ascend new enough for rl_config and the FA3 backend",
      ("cluster.versions.vllm_ascend", "cluster.versions.flash_attn_npu"),
      "use vllm-ascend >= 0.18.0 with flash-attention-npu installed")
def vllm_ascend_version(s):
    """rl_config.enable_training_consistency (FA3, num_splits=1) arrived with vllm-ascend 0.18."""
    if is_strict(s) and on_npu(s):
        if _v(s.cluster.versions.vllm_ascend) < Version("0.18.0"):
            return f"vllm-ascend {s.cluster.versions.vllm_ascend} < 0.18.0"
        if not s.cluster.versions.flash_attn_npu:
            return "flash-attention-npu (FA3 backend) not declared"


@rule("TOP-STACK-003", ERROR, "torch and torch_npu versions match",
      ("cluster.versions.torch", "cluster.versions.torch_npu"), "install the torch_npu release built for your torch")
def torch_match(s):
    """torch_npu is built against one torch minor version; a mismatch fails or misbehaves at import."""
    t, n = _v(s.cluster.versions.torch), _v(s.cluster.versions.torch_npu)
    if on_npu(s) and (t.major, t.minor) != (n.major, n.minor):
        return f"torch {t} with torch_npu {n}"


@rule("TOP-STACK-004", ERROR, "batch-invariant ops installed for strict runs on NPU",
      ("cluster.versions.batch_invariant_ops",), "install CANN batch_invariant_ops and declare it")
def bi_ops(s):
    """Without the package the patch only logs a warning and training silently runs off-policy."""
    if is_strict(s) and on_npu(s) and not s.cluster.versions.batch_invariant_ops:
        return "batch_invariant_ops not declared in cluster.versions"


@rule("TOP-STACK-005", ERROR, "the alignment patch module is set for strict runs on NPU",
      ("cluster.external_modules",), "set cluster.external_modules to the true on-policy patch module")
def patch_module(s):
    """vLLM-Ascend follows Megatron's op choices only through the runtime patches (VERL_USE_EXTERNAL_MODULES)."""
    if is_strict(s) and on_npu(s) and not s.cluster.external_modules:
        return "no VERL_USE_EXTERNAL_MODULES module: fused ops stay mismatched"


@rule("TOP-STACK-006", WARNING, "CANN new enough for strong matmul consistency",
      ("cluster.versions.cann",), "use CANN >= 8.5 (set_deterministic_level(2))")
def cann_version(s):
    """torch_npu.npu.set_deterministic_level(2) needs CANN >= 8.5."""
    if is_strict(s) and on_npu(s) and _v(s.cluster.versions.cann) < Version("8.5"):
        return f"CANN {s.cluster.versions.cann}"


@rule("TOP-CLUS-001", WARNING, "a remote backend has somewhere to go",
      ("cluster.backend", "cluster.ray_address"), "set cluster.ray_address=http://HEAD:8265")
def ray_address(s):
    """The Ray Job API needs the dashboard address of the cluster head. Shipped presets carry none
    (no silent target): `check` warns, so a shared recipe still validates; `launch` refuses."""
    if s.cluster.backend == "ray_job" and not s.cluster.ray_address:
        return "backend=ray_job without cluster.ray_address"


@rule("TOP-CLUS-002", ERROR, "a known backend", ("cluster.backend",),
      "set cluster.backend to local, subprocess or ray_job")
def known_backend(s):
    """topl starts jobs in three ways: the embedded engines, a child process, a Ray job."""
    if s.cluster.backend not in ("local", "subprocess", "ray_job"):
        return f"unknown backend {s.cluster.backend!r} (local | subprocess | ray_job)"
