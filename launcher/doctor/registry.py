"""`topl doctor`: check the target stack where the job will run, before launch.

Declared versions are not enough: a missing `batch_invariant_ops` only logs a warning and the run
goes silently off-policy; a verl without the PP patch accepts the key and then raises. Each check
looks at what is really installed (package metadata, importable modules, source markers, CANN's
version file, environment as the job's processes see it: launcher/doctor/installed.py reads them).

Checks are a registry like the contract's rules: `@check(id, what, when, fix, applies)` registers
one; `topl rules --doctor` and docs/reference.md list them (id, what, when, fix). The checks
themselves are in launcher/doctor/stack_checks.py and job_checks.py; launcher/doctor/report.py runs
them. This module imports no check.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable

from topl.launcher.base.errors import ERROR, OK, WARNING
from topl.launcher.base.versions import parse
from topl.launcher.doctor.installed import (
    detected,
    dist_version,
    importable,
)
from topl.launcher.render.env import ray_worker_env
from topl.launcher.spec import backend_traits
from topl.launcher.spec.job import is_strict, on_npu

if TYPE_CHECKING:
    pass


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


@dataclass(frozen=True)
class Check:
    id: str  # stable id users meet in doctor.json
    what: str  # what is checked, in one line
    when: str  # when it runs, in words (`applies` is the same condition in code)
    fix: str  # the usual fix (a finding may name a more precise one)
    applies: Callable[[Ctx], bool]
    run: Callable[[Ctx], None]


CHECKS: list[Check] = []


def check(id: str, what: str, when: str, fix: str, applies: Callable | None = None):
    """Register `fn(ctx)` as the doctor check `id`; it reports through `ctx.add(...)`."""

    def deco(fn):
        if any(c.id == id for c in CHECKS):
            raise ValueError(f"duplicate doctor check id {id}")
        CHECKS.append(Check(id, what, when, fix, applies or (lambda c: True), fn))
        return fn

    return deco


class Ctx:
    """What every check reads: the spec, the job's environment, where the doctor runs; and the
    findings so far (`add` files one under the check that is running)."""

    def __init__(self, spec, env: dict[str, str], node: bool):
        self.spec, self.env, self.node = spec, env, node
        self.v = spec.cluster.versions
        self.npu, self.strict = on_npu(spec), is_strict(spec)
        self.backend = backend_traits.of(spec)
        self.remote = self.backend.remote  # verl runs (not the reference engines)
        self.torch_v = dist_version("torch")
        self.verl_v = dist_version("verl")
        self.va = dist_version("vllm-ascend") or dist_version("vllm_ascend")
        self.npu_v = dist_version("torch_npu")
        self.out: list[Finding] = []
        self.current: Check | None = None

    def add(self, ok, found, needed, what=None, fix=None, sev=ERROR, id=None) -> None:
        c = self.current
        fix = c.fix if fix is None else fix
        f = Finding(id or c.id, OK if ok else sev, what or c.what, found, needed, "" if ok else fix)
        self.out.append(f)


def worker_env(spec) -> dict[str, str]:
    """The environment a Ray worker of this job sees: the node's, plus what the rendered
    invocation forwards through `+ray_kwargs.ray_init.runtime_env.env_vars.*`."""

    return {**os.environ, **ray_worker_env(spec)}


def install_hint(v) -> str:
    """How to get the verl the profile declares (docs/install.md has the whole stack)."""
    if v.profile == "seed":
        return (
            f"install verl release/v{v.verl} from git with the seed's true_on_policy folder as "
            "verl_ascend_recipe (docs/install.md, stack=seed); not topl[ascend], which is verl 0.9.1"
        )
    return f"pip install verl=={v.verl} (docs/install.md, stack={v.profile})"


def verl_mismatch(spec) -> tuple[str, str] | None:
    """(installed, declared) when this Python's verl (package metadata, never imported) is not the
    version the spec's stack declares; None when it is, or when none is installed here."""

    have, want = dist_version("verl"), spec.cluster.versions.verl
    if have is None or parse(have) == parse(want):
        return None
    return have, want


def patch_check(c, fid, patch, installed, what, fix):
    """The installed package has fact `fid`; where a declared source patch provides it and the
    patch module is importable, the patch lands at `import verl` (the seed git-applies it then):
    a warning that the tree is still unpatched, not an error."""
    if installed is None:
        c.add(False, "package missing", "installed", what=what, fix=fix)
        return
    if detected(fid):
        c.add(True, "present", "present", what=what)
        return
    v, mod = c.v, c.spec.cluster.external_modules
    declared = patch in [*v.verl_patches, *v.vllm_ascend_patches]
    at_import = declared and bool(mod) and importable(mod)
    found = f"absent; {mod} applies patch {patch} at import" if at_import else "absent"
    c.add(False, found, "present", what=what, fix=fix, sev=WARNING if at_import else ERROR)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == ERROR]
