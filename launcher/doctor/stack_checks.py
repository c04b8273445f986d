"""The doctor's checks, in the order they run (launcher/doctor/registry.py: the registry and `Ctx`).

Each is `@check(id, what, when, fix, applies)`: `when` says in words what `applies` tests."""

from __future__ import annotations

import os
import platform
import sys

from topl.launcher import facts
from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.base.versions import parse as _v
from topl.launcher.base.versions import problem
from topl.launcher.doctor.installed import (
    accelerator,
    cann_version,
    detected,
    import_error,
    importable,
    soc,
    torch_pin,
)
from topl.launcher.doctor.registry import check, install_hint, patch_check
from topl.launcher.render.env import without_guard

ALWAYS = "always"
REMOTE = "backend is subprocess or ray_job (verl runs)"
NPU = "cluster.device=npu"
STRICT_NPU = "cluster.device=npu and alignment=strict"


def _remote(c) -> bool:
    return c.remote


def _strict_npu(c) -> bool:
    return c.npu and c.strict


@check("TOP-DOC-PY-001", "Python", ALWAYS, "use Python 3.10 or newer")
def python(c):
    c.add(sys.version_info >= (3, 10), platform.python_version(), ">= 3.10")


@check(
    "TOP-DOC-TORCH-001",
    "torch installed",
    ALWAYS,
    "pip install torch (the build your accelerator needs)",
)
def torch(c):
    c.add(c.torch_v is not None, c.torch_v or "missing", "torch")


@check(
    "TOP-DOC-ACC-001",
    "accelerator visible",
    ALWAYS,
    "run on a host with the cluster's devices (CANN/driver installed)",
)
def acc(c):
    d = c.spec.cluster.device
    c.add(accelerator() == d or d == "cpu", accelerator(), d, fix=f"run on a host with {d} devices")


@check(
    "TOP-DOC-VERL-001", "verl installed", REMOTE, "install the verl the profile declares", _remote
)
def verl_installed(c):
    c.add(c.verl_v is not None, c.verl_v or "missing", c.v.verl, fix=install_hint(c.v))


def _job_python(c):
    """The subprocess backend starts verl with cluster.python: import it there, not here."""
    s = c.spec
    return s.cluster.python if c.backend.here and not c.node else None


@check(
    "TOP-DOC-VERL-004",
    "verl imports (not only installed)",
    f"{REMOTE}, verl installed here or the job's own Python named",
    "install verl with its dependencies into the Python that runs it (not --no-deps)",
    lambda c: c.remote and bool(c.verl_v or _job_python(c)),
)
def verl_imports(c):

    py = _job_python(c)
    env = {k: v for k, v in without_guard(dict(os.environ)).items() if k != "TOPL_GUARD_DIR"}
    err = import_error("verl", py, env=env)  # the guard has its own check (TOP-DOC-GUARD-001)
    what = f"verl imports with {py}" if py else "verl imports"
    fix = (
        f"install verl=={c.v.verl} with its dependencies into {py or 'this Python'} (not --no-deps)"
    )
    c.add(err is None, err or "yes", "yes", what=what, fix=fix)


@check(
    "TOP-DOC-VERL-002",
    "verl is the version the stack profile declares",
    f"{REMOTE}, verl installed",
    "install the declared verl (docs/install.md), or pick the profile that matches",
    lambda c: c.remote and c.verl_v is not None,
)
def verl_version(c):
    ok = _v(c.verl_v) == _v(c.v.verl)
    found = c.verl_v if ok else f"{c.verl_v}: wrong version"
    c.add(ok, found, f"{c.v.verl} (stack={c.v.profile})", fix=install_hint(c.v))


@check(
    "TOP-DOC-VERL-003",
    "verl sizes vLLM pipeline-parallel replicas (the PP patch)",
    f"{REMOTE}, rollout.pp > 1",
    "apply the seed's PP patch to verl (stack=seed), or set rollout.pp=1",
    lambda c: c.remote and c.spec.rollout.pp > 1,
)
def verl_pp(c):
    patch_check(c, "vllm_pp_npu", "vllm_pp", c.verl_v, None, None)


@check(
    "TOP-DOC-VERL-005",
    "verl has the per-request sampling seed",
    f"{REMOTE}, alignment=strict, the stack supports it and the spec asks for it",
    "apply the seed's per-request seed patch to verl",
    lambda c: (
        c.remote
        and c.strict
        and c.spec.rollout.per_request_seed is not False
        and facts.supports("per_request_seed", c.v)
    ),
)
def verl_seed(c):
    patch_check(c, "per_request_seed", "per_request_seed", c.verl_v, None, None)


@check(
    "TOP-DOC-NPU-001",
    "torch_npu installed",
    NPU,
    "install torch_npu matching your torch and CANN",
    lambda c: c.npu,
)
def torch_npu(c):
    c.add(c.npu_v is not None, c.npu_v or "missing", c.v.torch_npu)


@check(
    "TOP-DOC-NPU-002",
    "torch is the release torch_npu requires",
    f"{NPU}, torch and torch_npu installed",
    "pip install the torch release torch_npu's Requires-Dist names",
    lambda c: c.npu and bool(c.npu_v and c.torch_v),
)
def torch_pair(c):
    npu = facts.version("torch_npu", c.npu_v)
    pin = torch_pin() or (".".join(map(str, npu.release)) if npu else None)
    if pin is None:  # no Requires-Dist pin and a version pip cannot read: say so, no traceback
        why = problem("torch_npu", c.npu_v)
        return c.add(False, f"torch_npu {c.npu_v}: {why}", "a release version")
    t, want = facts.version("torch", c.torch_v), facts.version("torch", pin)
    c.add(
        t is not None and want is not None and t.release == want.release,
        f"torch {c.torch_v}, torch_npu {c.npu_v}",
        f"torch=={pin} (torch_npu's Requires-Dist)",
        fix=f"pip install torch=={pin.split('+')[0]}",
    )


@check(
    "TOP-DOC-CANN-001",
    "CANN toolkit",
    NPU,
    "source CANN's set_env.sh (sets ASCEND_HOME_PATH)",
    lambda c: c.npu,
)
def cann(c):
    """Installed vs declared, both read as CANN orders them (topl.launcher.base.versions): 9.0.0.B160
    matches a 9.0.0.B160 install only (a build is not its release); 9.0 matches 9.0.0."""
    got, want = cann_version(), c.v.cann
    if got is None:
        c.add(False, "not found (ASCEND_HOME_PATH unset?)", want)
        return
    g, w = _v(got, "cann"), _v(want, "cann")
    c.add(
        g is not None and g == w,
        got if g is not None else f"{got} (not a CANN version topl can read)",
        want,
        fix=f"install CANN {want}, or declare the installed one (cluster.versions.cann={got})",
        sev=WARNING,
    )


@check(
    "TOP-DOC-VLLMA-001",
    "vllm-ascend version",
    NPU,
    "install the declared vllm-ascend (and vllm), or pick the profile that matches",
    lambda c: c.npu,
)
def vllm_ascend(c):
    va, v = c.va, c.v
    ok = va is not None and facts.version("vllm_ascend", va) == facts.version(
        "vllm_ascend", v.vllm_ascend
    )
    fix = (
        f"pip install vllm-ascend=={v.vllm_ascend} (and vllm=={v.vllm}), or "
        "pick the stack profile that matches what is installed"
    )
    c.add(ok, va or "missing", v.vllm_ascend, fix=fix, sev=ERROR if va is None else WARNING)


@check(
    "TOP-DOC-VLLMA-002",
    "vllm-ascend has the FA3 backend (attention/fa3_v1.py)",
    STRICT_NPU,
    "install vllm-ascend >= 0.23.0, or 0.18.0 from source with the seed's patch module (stack=seed)",
    _strict_npu,
)
def fa3_backend(c):
    patch_check(c, "fa3_backend", "true_on_policy", c.va, None, None)


@check(
    "TOP-DOC-VLLMA-003",
    "vllm-ascend selects FA3 the way topl renders it",
    f"{STRICT_NPU}, vllm-ascend installed",
    "declare the installed vllm-ascend in cluster.versions (or pick its stack profile) so the "
    "command selects FA3 the way it reads it",
    lambda c: _strict_npu(c) and c.va is not None,
)
def fa3_selection(c):
    want, have = facts.supports("rl_config", c.v), detected("rl_config")
    how = {True: "additional_config.rl_config", False: "attention_backend=FLASH_ATTN"}
    c.add(want == have, how[have], how[want])


def _module_check(id_, module, what, fix, when=STRICT_NPU, applies=_strict_npu):
    @check(id_, what, when, fix, applies)
    def run(c):
        ok = importable(module)
        c.add(ok, "yes" if ok else "no", "yes")


_module_check(
    "TOP-DOC-BIO-001",
    "batch_invariant_ops",
    "batch_invariant_ops importable",
    "install CANN's batch_invariant_ops (without it the patch only warns and the run is off-policy)",
)
_module_check(
    "TOP-DOC-FA3-001",
    "flash_attn_npu_v3",
    "flash_attn_npu_v3 importable",
    "install flash-attention-npu",
)


def _megatron(c) -> bool:
    return _strict_npu(c) and c.spec.train.engine == "megatron"


@check(
    "TOP-DOC-MS-001",
    "MindSpeed has --use-batch-invariant-ops",
    f"{STRICT_NPU}, train.engine=megatron",
    "install MindSpeed core_r0.16.0",
    _megatron,
)
def mindspeed(c):
    ms = detected("mindspeed_bi_switches")
    found = "yes" if ms else ("no" if importable("mindspeed") else "MindSpeed missing")
    c.add(ms, found, "MindSpeed core_r0.16.0")


_module_check(
    "TOP-DOC-FA3-002",
    "flash_attn_npu",
    "flash_attn_npu importable (MindSpeed's FA3 path)",
    "install flash-attention-npu (its flash_attn_npu module)",
    f"{STRICT_NPU}, train.engine=megatron",
    _megatron,
)


@check(
    "TOP-DOC-PATCH-001",
    "the stack's patch module importable",
    f"{STRICT_NPU}, cluster.external_modules set",
    "install the true on-policy patch package (stack=seed: docs/install.md)",
    lambda c: _strict_npu(c) and bool(c.spec.cluster.external_modules),
)
def patch_module(c):
    mod = c.spec.cluster.external_modules
    ok = importable(mod)
    c.add(ok, "yes" if ok else "no", "yes", what=f"patch module {mod} importable")


@check(
    "TOP-DOC-SOC-001",
    "SoC type",
    f"{NPU}, the SoC visible and cluster.soc set",
    "pick the cluster config that matches the hardware (cluster=atlas_a2 / atlas_a3)",
    lambda c: c.npu and bool(soc() and c.spec.cluster.soc),
)
def soc_type(c):
    c.add(soc() == c.spec.cluster.soc, soc(), c.spec.cluster.soc)
