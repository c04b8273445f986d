"""The run directory: everything needed to reproduce a launch, written before anything starts."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from omegaconf import OmegaConf

from topl.launcher import __version__

SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)
PACKAGES = ("topl", "torch", "torch_npu", "hydra-core", "omegaconf", "verl", "vllm", "vllm-ascend", "ray",
            "deepspeed", "transformers", "triton")


def redact(env: dict[str, str]) -> dict[str, str]:
    return {k: ("<redacted>" if SECRET.search(k) else v) for k, v in sorted(env.items())}


def git_sha() -> str | None:
    for where in (Path.cwd(), Path(__file__).resolve().parent):
        try:
            out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def versions() -> dict[str, str | None]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def write(run_dir: Path, composed, invocation, violations) -> None:
    """Write spec, sources, command, env and versions. Refuses to reuse a run directory."""
    run_dir.mkdir(parents=True, exist_ok=True)
    marker = run_dir / "topl.json"
    if marker.exists():
        raise FileExistsError(f"run directory {run_dir} already holds a run; refusing to overwrite it")
    (run_dir / "spec.yaml").write_text(OmegaConf.to_yaml(composed.cfg, resolve=True))
    (run_dir / "sources.json").write_text(json.dumps(composed.sources, indent=1, sort_keys=True))
    (run_dir / "command.sh").write_text("#!/usr/bin/env bash\n" + invocation.command(composed.cfg.cluster.python) + "\n")
    (run_dir / "invocation.json").write_text(json.dumps(invocation.to_dict(composed.cfg.cluster.python), indent=1))
    (run_dir / "env.json").write_text(json.dumps({"rendered": redact(invocation.env),
                                                  "launching_process": redact(dict(os.environ))}, indent=1))
    marker.write_text(json.dumps({
        "topl_version": __version__, "git_sha": git_sha(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv, "overrides": composed.overrides, "recipe": composed.recipe, "choices": composed.choices,
        "packages": versions(), "violations": [v.to_dict() for v in violations],
    }, indent=1, default=str))
