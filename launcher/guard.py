"""topl's guard: imported in every verl process, it records what the process really has and, in a
strict run, refuses to go on when something the rendered spec requires is absent.

How it gets loaded (verl@0.9.1:verl/__init__.py, at `import verl`, in the driver and every Ray
worker): each module named in `VERL_USE_EXTERNAL_MODULES` (comma-separated, in order) through
`verl.utils.import_utils.import_external_libs` -> `importlib.import_module`, where an exception
propagates and stops the process; then every `verl.plugins` entry point, where an exception is
only logged at debug level. So the renderer puts `topl.launcher.guard` in
`VERL_USE_EXTERNAL_MODULES` *after* the patch module for strict runs (a refusal stops the
process), and pyproject registers the same module as a `verl.plugins` entry point, which records
but can never break a job.

What it reads (never secrets): `TOPL_GUARD`, a small JSON manifest the renderer writes
(`{"strict": bool, "env": {NAME: [value, rule]}, "modules": {name: [loaded|importable, rule]}}`),
and `TOPL_GUARD_DIR`, the run directory's `guard/` folder when the backend shares it. Without
either it does nothing. Standard library only: it runs before anything else is known to work.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import time
from importlib import metadata
from typing import Any, Mapping

MANIFEST_ENV = "TOPL_GUARD"
DIR_ENV = "TOPL_GUARD_DIR"
PREFIX = "TOPL-GUARD"  # the log-line prefix `topl watch` recognises
MODULE = "topl.launcher.guard"
# env vars that decide determinism on some stack (recorded whether required or not)
DETERMINISM_ENV = (
    "VLLM_BATCH_INVARIANT",
    "HCCL_DETERMINISTIC",
    "LCCL_DETERMINISTIC",
    "HCCL_ALGO",
    "HCCL_OP_EXPANSION_MODE",
    "VLLM_ASCEND_ENABLE_NZ",
    "CLOSE_MATMUL_K_SHIFT",
    "ATB_MATMUL_SHUFFLE_K_ENABLE",
    "ATB_LLM_LCOC_ENABLE",
    "CUBLAS_WORKSPACE_CONFIG",
    "PYTHONHASHSEED",
    "VERL_USE_EXTERNAL_MODULES",
)
PACKAGES = (
    "topl",
    "verl",
    "torch",
    "torch_npu",
    "vllm",
    "vllm-ascend",
    "ray",
    "batch_invariant_ops",
)


class GuardError(RuntimeError):
    """A strict run's process lacks something the rendered spec requires."""


def role() -> str:
    """Ray starts workers as `python .../ray/_private/workers/default_worker.py`
    (ray@2.60.0:python/ray/_private/workers/default_worker.py); anything else is the driver."""
    argv0 = sys.argv[0] if sys.argv else ""
    return "ray_worker" if argv0.endswith("default_worker.py") else "driver"


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def accelerator() -> dict[str, Any]:
    """What this process sees; torch is only asked if verl already imported it (no new imports)."""
    out = {
        k: os.environ[k]
        for k in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")
        if k in os.environ
    }
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            out.update(kind="cuda", count=torch.cuda.device_count())
        elif torch is not None and "torch_npu" in sys.modules and torch.npu.is_available():
            out.update(kind="npu", count=torch.npu.device_count())
        else:
            out["kind"] = "cpu"
    except Exception as e:  # noqa: BLE001 - a broken driver is itself worth recording
        out["error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def check(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """What the manifest requires and this process lacks: [{rule, what, needed, found}]."""
    missing = []
    for name, (value, rule) in manifest.get("env", {}).items():
        if os.environ.get(name) != value:
            missing.append(
                {
                    "rule": rule,
                    "what": f"env {name}",
                    "needed": value,
                    "found": os.environ.get(name),
                }
            )
    for name, (how, rule) in manifest.get("modules", {}).items():
        found = (
            "loaded" if name in sys.modules else ("importable" if _importable(name) else "absent")
        )
        if found == "absent" or (how == "loaded" and found != "loaded"):
            missing.append({"rule": rule, "what": f"module {name}", "needed": how, "found": found})
    return missing


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package missing
        return False


def record(manifest: dict[str, Any]) -> dict[str, Any]:
    """What this process really has."""
    mods = set(manifest.get("modules", {})) | {"batch_invariant_ops"}
    ext = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    return {
        "role": role(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "strict": bool(manifest.get("strict")),
        "versions": {p: _version(p) for p in PACKAGES},
        "env": {k: os.environ[k] for k in DETERMINISM_ENV if k in os.environ},
        "modules": {m: m in sys.modules for m in sorted(mods | set(ext))},
        "accelerator": accelerator(),
    }


def write(rec: dict[str, Any], folder: str | None) -> str:
    """A file per process under the shared run dir; else one prefixed line on stderr."""
    if folder:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            path = os.path.join(folder, f"{rec['host']}-{rec['pid']}.json")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(rec, f, indent=1)
            return path
        except OSError:
            pass  # not shared with this node: fall back to the log
    print(f"{PREFIX} {json.dumps(rec, sort_keys=True)}", file=sys.stderr, flush=True)
    return "stderr"


def _check_shape(manifest: Any) -> None:
    """The renderer's shape, or ValueError: {"strict": bool, "env": {NAME: [value, rule]},
    "modules": {name: [how, rule]}} (JSON that parses but is not this is tampering too)."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("strict", False), bool):
        raise ValueError(manifest)
    for part in ("env", "modules"):
        entries = manifest.get(part, {})
        if not isinstance(entries, dict):
            raise ValueError(part)
        for name, pair in entries.items():
            if not (
                isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
            ):
                raise ValueError(name)


def run(environ: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """Record this process; raise GuardError in a strict run when a requirement is missing."""
    raw, folder = environ.get(MANIFEST_ENV), environ.get(DIR_ENV)
    if not raw and not folder:
        return None
    try:
        manifest = json.loads(raw) if raw else {}
        _check_shape(manifest)
    except (ValueError, TypeError, RecursionError):
        manifest = {"strict": True}  # the renderer wrote it: garbage means tampering
        bad = [  # a run-time rule: in the catalog through launcher/contract/runtime.py
            {
                "rule": "TOP-GUARD-001",
                "what": f"env {MANIFEST_ENV}",
                "needed": "JSON",
                "found": (raw or "")[:80],
            }
        ]
    else:
        bad = []
    rec = record(manifest)
    rec["missing"] = bad + check(manifest)
    write(rec, folder)
    if manifest.get("strict") and rec["missing"]:
        lines = [
            f"{m['rule']}: {m['what']}: needed {m['needed']!r}, found {m['found']!r}"
            for m in rec["missing"]
        ]
        raise GuardError(
            f"{PREFIX}: alignment=strict, but this {rec['role']} (pid {rec['pid']} on "
            f"{rec['host']}) lacks what the rendered spec requires:\n  "
            + "\n  ".join(lines)
            + "\n  fix: pass the env var to every worker "
            "(ray_kwargs.ray_init.runtime_env.env_vars) / install the module on every "
            "node; `topl doctor --ray ADDRESS` checks every node"
        )
    return rec


RECORD = run()
