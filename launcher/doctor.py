"""`topl doctor`: check the target stack where the job will run, before launch.

Declared versions are not enough: a missing `batch_invariant_ops` only logs a warning and the run
goes silently off-policy; a verl without the PP patch accepts the key and then raises. Each check
here looks at what is really installed (package metadata, importable modules, source markers,
CANN's version file, environment as the job's processes see it: launcher/installed.py reads them).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass

from topl.launcher import __version__, facts
from topl.launcher.errors import ERROR, OK, WARNING
from topl.launcher.installed import (  # noqa: F401  (public names stay importable from here)
    _import_error,
    _importable,
    _pkg_file,
    _version,
    accelerator,
    cann_version,
    detected,
    soc,
    torch_pin,
)
from topl.launcher.spec import is_strict, on_npu
from topl.launcher.versions import parse as _v


@dataclass
class Finding:
    id: str  # stable id, e.g. TOP-DOC-NPU-001
    severity: str  # error | warning | ok
    what: str  # what was checked
    found: str  # what is there
    needed: str  # what the spec needs
    fix: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def worker_env(spec) -> dict[str, str]:
    """The environment a Ray worker of this job sees: the node's, plus what the rendered
    invocation forwards through `+ray_kwargs.ray_init.runtime_env.env_vars.*`."""
    from topl.launcher.render import ray_worker_env

    return {**os.environ, **ray_worker_env(spec)}


def run_checks(spec, env: dict[str, str] | None = None, node: bool = False) -> list[Finding]:
    """Every check for this spec; `env` is the environment the job's processes get (default: a
    Ray worker's, see `worker_env`); `node`: running inside a Ray task on a node of the cluster."""
    from topl.launcher.render import env_vars

    env = worker_env(spec) if env is None else dict(env)
    npu, strict = on_npu(spec), is_strict(spec)
    v = spec.cluster.versions
    out: list[Finding] = []

    def add(id_, ok, what, found, needed, fix, sev=ERROR):
        out.append(Finding(id_, OK if ok else sev, what, found, needed, "" if ok else fix))

    py = platform.python_version()
    add(
        "TOP-DOC-PY-001",
        sys.version_info >= (3, 10),
        "Python",
        py,
        ">= 3.10",
        "use Python 3.10 or newer",
    )
    torch_v = _version("torch")
    add(
        "TOP-DOC-TORCH-001",
        torch_v is not None,
        "torch installed",
        torch_v or "missing",
        "torch",
        "pip install torch (the build your accelerator needs)",
    )
    acc = accelerator()
    add(
        "TOP-DOC-ACC-001",
        acc == spec.cluster.device or (spec.cluster.device == "cpu"),
        "accelerator visible",
        acc,
        spec.cluster.device,
        f"run on a host with {spec.cluster.device} devices (CANN/driver installed)",
    )
    if spec.cluster.backend != "local":
        verl_v = _version("verl")
        add(
            "TOP-DOC-VERL-001",
            verl_v is not None,
            "verl installed",
            verl_v or "missing",
            v.verl,
            f"pip install verl=={v.verl}",
        )
        # the subprocess backend starts verl with cluster.python: import it there, not here
        job_python = (
            spec.cluster.python if spec.cluster.backend == "subprocess" and not node else None
        )
        if verl_v or job_python:  # the guard has its own check (TOP-DOC-GUARD-001)
            err = _import_error("verl", job_python, env=_without_guard(os.environ))
            add(
                "TOP-DOC-VERL-004",
                err is None,
                f"verl imports with {job_python}" if job_python else "verl imports",
                err or "yes",
                "yes",
                f"install verl=={v.verl} with its dependencies into "
                f"{job_python or 'this Python'} (not --no-deps)",
            )
        if verl_v and _v(verl_v) != _v(v.verl):
            add(
                "TOP-DOC-VERL-002",
                False,
                "verl version",
                verl_v,
                v.verl,
                "install the declared verl or update cluster.versions.verl",
                WARNING,
            )
        if spec.rollout.pp > 1:
            patch_check(
                add,
                "TOP-DOC-VERL-003",
                "vllm_pp_npu",
                "vllm_pp",
                spec,
                installed=verl_v,
                what="verl sizes vLLM pipeline-parallel replicas (the PP patch)",
                fix="apply the seed's PP patch to verl (stack=seed), or set rollout.pp=1",
            )
        if (
            spec.rollout.per_request_seed is not False
            and facts.supports("per_request_seed", v)
            and strict
        ):
            patch_check(
                add,
                "TOP-DOC-VERL-005",
                "per_request_seed",
                "per_request_seed",
                spec,
                installed=verl_v,
                what="verl has the per-request sampling seed",
                fix="apply the seed's per-request seed patch to verl",
            )
    if npu:
        npu_v = _version("torch_npu")
        add(
            "TOP-DOC-NPU-001",
            npu_v is not None,
            "torch_npu installed",
            npu_v or "missing",
            v.torch_npu,
            "install torch_npu matching your torch and CANN",
        )
        if npu_v and torch_v:
            pin = torch_pin() or ".".join(map(str, facts.version("torch_npu", npu_v).release))
            t = facts.version("torch", torch_v)
            add(
                "TOP-DOC-NPU-002",
                t is not None and t.release == facts.version("torch", pin).release,
                "torch is the release torch_npu requires",
                f"torch {torch_v}, torch_npu {npu_v}",
                f"torch=={pin} (torch_npu's Requires-Dist)",
                f"pip install torch=={pin.split('+')[0]}",
            )
        cann = cann_version()
        add(
            "TOP-DOC-CANN-001",
            cann is not None,
            "CANN toolkit",
            cann or "not found (ASCEND_HOME_PATH unset?)",
            v.cann,
            "source CANN's set_env.sh (sets ASCEND_HOME_PATH)",
        )
        va = _version("vllm-ascend") or _version("vllm_ascend")
        add(
            "TOP-DOC-VLLMA-001",
            va is not None
            and facts.version("vllm_ascend", va) == facts.version("vllm_ascend", v.vllm_ascend),
            "vllm-ascend version",
            va or "missing",
            v.vllm_ascend,
            f"pip install vllm-ascend=={v.vllm_ascend} (and vllm=={v.vllm}), or "
            "pick the stack profile that matches what is installed",
            ERROR if va is None else WARNING,
        )
        if strict:
            patch_check(
                add,
                "TOP-DOC-VLLMA-002",
                "fa3_backend",
                "true_on_policy",
                spec,
                installed=va,
                what="vllm-ascend has the FA3 backend (attention/fa3_v1.py)",
                fix="install vllm-ascend >= 0.23.0, or 0.18.0 from source with the seed's "
                "patch module (stack=seed)",
            )
            if va:  # FA3 is selected the way the rendered command asks for it
                want, have = facts.supports("rl_config", v), detected("rl_config")
                how = {True: "additional_config.rl_config", False: "attention_backend=FLASH_ATTN"}
                add(
                    "TOP-DOC-VLLMA-003",
                    want == have,
                    "vllm-ascend selects FA3 the way topl renders it",
                    how[have],
                    how[want],
                    "declare the installed vllm-ascend in cluster.versions "
                    "(or pick its stack profile) so the command selects FA3 the way it reads it",
                )
            add(
                "TOP-DOC-BIO-001",
                _importable("batch_invariant_ops"),
                "batch_invariant_ops importable",
                "yes" if _importable("batch_invariant_ops") else "no",
                "yes",
                "install CANN's batch_invariant_ops (without it the patch only warns and the run is off-policy)",
            )
            add(
                "TOP-DOC-FA3-001",
                _importable("flash_attn_npu_v3"),
                "flash_attn_npu_v3 importable",
                "yes" if _importable("flash_attn_npu_v3") else "no",
                "yes",
                "install flash-attention-npu",
            )
            if spec.train.engine == "megatron":
                ms = detected("mindspeed_bi_switches")
                add(
                    "TOP-DOC-MS-001",
                    ms,
                    "MindSpeed has --use-batch-invariant-ops",
                    "yes" if ms else ("no" if _importable("mindspeed") else "MindSpeed missing"),
                    "MindSpeed core_r0.16.0",
                    "install MindSpeed core_r0.16.0",
                )
                fa = _importable("flash_attn_npu")
                add(
                    "TOP-DOC-FA3-002",
                    fa,
                    "flash_attn_npu importable (MindSpeed's FA3 path)",
                    "yes" if fa else "no",
                    "yes",
                    "install flash-attention-npu (its flash_attn_npu module)",
                )
            if spec.cluster.external_modules:
                mod = spec.cluster.external_modules
                add(
                    "TOP-DOC-PATCH-001",
                    _importable(mod),
                    f"patch module {mod} importable",
                    "yes" if _importable(mod) else "no",
                    "yes",
                    "install the true on-policy patch package",
                )
        found_soc = soc()
        if found_soc and spec.cluster.soc:
            add(
                "TOP-DOC-SOC-001",
                found_soc == spec.cluster.soc,
                "SoC type",
                found_soc,
                spec.cluster.soc,
                "pick the cluster config that matches the hardware (cluster=atlas_a2 / atlas_a3)",
            )
    guard_check(add, spec, env, node)
    for k, want in env_vars(spec).items():
        seen = env.get(k)
        add(
            "TOP-DOC-ENV-001",
            seen == want,
            f"env {k} as the job's processes see it",
            seen or "unset",
            want,
            f"forward {k}={want} to every worker (runtime_env env_vars)",
        )
    return out


def patch_check(add, id_, fid, patch, spec, installed, what, fix):
    """The installed package has fact `fid`; where a declared source patch provides it and the
    patch module is importable, the patch lands at `import verl` (the seed git-applies it then):
    a warning that the tree is still unpatched, not an error."""
    if installed is None:
        add(id_, False, what, "package missing", "installed", fix)
        return
    if detected(fid):
        add(id_, True, what, "present", "present", "")
        return
    v, mod = spec.cluster.versions, spec.cluster.external_modules
    declared = patch in [*v.verl_patches, *v.vllm_ascend_patches]
    at_import = declared and bool(mod) and _importable(mod)
    add(
        id_,
        False,
        what,
        f"absent; {mod} applies patch {patch} at import" if at_import else "absent",
        "present",
        fix,
        WARNING if at_import else ERROR,
    )


def _without_guard(env) -> dict[str, str]:
    """`env` without what makes topl's guard act: it imports, records nothing, raises nothing."""
    from topl.launcher.render import without_guard

    return {k: v for k, v in without_guard(dict(env)).items() if k != "TOPL_GUARD_DIR"}


def guard_check(add, spec, env: dict[str, str], node: bool) -> None:
    """Strict runs name topl's guard in VERL_USE_EXTERNAL_MODULES, and verl imports every module
    named there in the driver and every Ray worker, an exception stopping the process
    (verl@0.9.1:verl/__init__.py -> verl/utils/import_utils.py:import_external_libs): topl must
    import with the Python and environment that run verl, on every node."""
    from topl.launcher.render import GUARD_MODULE, env_vars

    if GUARD_MODULE not in env_vars(spec).get("VERL_USE_EXTERNAL_MODULES", "").split(","):
        return  # not strict: the guard is only a verl.plugins entry point, which never breaks
    python = sys.executable if node else spec.cluster.python  # a Ray worker runs this Python

    def fix(where: str) -> str:
        return (
            f"install topl {__version__} into the Python that runs verl ({where}): `pip install` "
            "this checkout or its wheel; a strict run always loads the guard (it refuses a worker "
            "that lacks a determinism switch): only alignment=mitigated|off runs without it"
        )

    if not node and spec.cluster.backend != "subprocess":
        if spec.cluster.backend == "ray_job":  # here is not where the job runs
            add(
                "TOP-DOC-GUARD-002",
                False,
                f"topl's guard ({GUARD_MODULE}) imports on every Ray node",
                "not checked from here (every verl process on every node imports it)",
                "topl installed on every node",
                "`topl doctor --ray ADDRESS` checks each node; " + fix("on every node"),
                WARNING,
            )
        return  # backend=local runs the reference engines: no verl, no guard
    err = _import_error(GUARD_MODULE, python, _without_guard(env))
    add(
        "TOP-DOC-GUARD-001",
        err is None,
        f"topl's guard ({GUARD_MODULE}) imports with {python}",
        err or "yes",
        "yes (verl imports it in every process of a strict run)",
        fix(f"{python} on every node" if node else python),
    )


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]
