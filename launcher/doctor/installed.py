"""What is really installed here, read without importing it where possible: package metadata,
importable modules, files and symbols inside packages, CANN's version file, the accelerator.

The doctor's checks (launcher/doctor/registry.py) compare these readings with what the spec needs. NPU
packages import CANN at import time, so source files are read as text, never imported.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from topl.launcher import facts
from topl.launcher.base import children


def dist_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def import_error(
    module: str, python: str | None = None, env: dict[str, str] | None = None
) -> str | None:
    """None when `import module` works in a fresh interpreter (`python`, default this one, with
    `env`, default ours), else its last error line: installed is not importable when a dependency
    is missing, and a child keeps our process clean."""
    # '' is a setting (cluster.python=''), which no launch can run: not this interpreter
    cmd = [sys.executable if python is None else python, "-c", f"import {module}"]
    try:
        r = children.run(cmd, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        return "import did not finish in 300 s"
    except OSError as e:  # the interpreter itself is missing or not executable
        return f"cannot run {cmd[0]}: {e.strerror or e}"
    lines = r.stderr.strip().splitlines()
    return None if r.returncode == 0 else (lines[-1] if lines else f"exit code {r.returncode}")


def pkg_file(module: str, rel: str) -> str | None:
    """Text of a file inside an installed package, without importing it; None when absent."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    for root in list(spec.submodule_search_locations or []) if spec else []:
        f = Path(root) / rel
        if f.is_file():
            return f.read_text(errors="replace")
    return None


def detected(fid: str) -> bool:
    """Whether the installed package has fact `fid`, found the way that package gates it (the
    file and symbol the fact's `detect` names, e.g. attention/fa3_v1.py: class AscendFABackend)."""
    module, rel, needle = facts.fact(fid).detect
    return needle in (pkg_file(module, rel) or "")


def torch_pin(dist: str = "torch_npu") -> str | None:
    """The exact torch release an installed torch_npu requires (Requires-Dist torch==X)."""
    try:
        reqs = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None
    for r in reqs:
        m = re.match(r"^torch\s*==\s*([0-9][^;,\s]*)", r)
        if m:
            return m.group(1)
    return None


def cann_version() -> str | None:
    """CANN toolkit version from its install info (ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME)."""
    keys = ("version", "toolkit_version", "runtime_running_version")
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        root = os.environ.get(var)
        if not root:
            continue
        for name in ("ascend_toolkit_install.info", "version.cfg", "version.info"):
            for f in [Path(root) / name, *Path(root).glob(f"*/{name}")]:
                if f.is_file():
                    for line in f.read_text(errors="replace").splitlines():
                        key, _, val = line.partition("=")
                        if key.strip().lower() in keys:
                            return val.strip().strip('"[]').split(":")[0]
    return None


def accelerator() -> str:
    """npu | cuda | cpu: what torch (with torch_npu for NPUs) sees here; without torch, the device
    nodes the drivers create (/dev/davinci* for Ascend, /dev/nvidia* for NVIDIA)."""
    if importable("torch"):
        try:
            import torch

            if importable("torch_npu"):
                import torch_npu  # noqa: F401  (registers torch.npu)

                if torch.npu.is_available():
                    return "npu"
            if torch.cuda.is_available():
                return "cuda"
            return "cpu"
        except Exception:  # noqa: BLE001 - a broken stack must not crash the doctor
            pass
    dev = Path("/dev")
    if any(dev.glob("davinci[0-9]*")):
        return "npu"
    if any(dev.glob("nvidia[0-9]*")):
        return "cuda"
    return "cpu"


def soc() -> str | None:
    """A2 / A3 from the NPU's name, when torch_npu and a device are visible."""
    if not importable("torch_npu"):
        return None
    try:
        import torch_npu  # noqa: F401

        name = __import__("torch").npu.get_device_name(0)
    except Exception:  # noqa: BLE001 - no device or driver: not visible
        return None
    return "A3" if "93" in name else "A2" if "910B" in name else name
