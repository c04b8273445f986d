"""The run directory: everything needed to reproduce a launch, written before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from topl.launcher import __version__
from topl.launcher.base import redact as _redact
from topl.launcher.base.errors import ToplError
from topl.launcher.run import watch_io

if TYPE_CHECKING:
    from topl.launcher.compose.composed import Composed
    from topl.launcher.contract.core import Violation
    from topl.launcher.render.invocation import Invocation

PACKAGES = (
    "topl",
    "torch",
    "torch_npu",
    "hydra-core",
    "omegaconf",
    "verl",
    "vllm",
    "vllm-ascend",
    "ray",
    "deepspeed",
    "transformers",
    "triton",
)
# status.json's states. dry_run: written, nothing started (command.sh has the command); submitted:
# handed to a Ray head (or Slurm) without --follow, its job status is the truth (`topl watch` follows it and
# records the end); running: topl follows the job (its pid and host recorded); the rest are ends.
STATES = ("dry_run", "submitted", "running", "succeeded", "failed", "interrupted")
ENDS = ("dry_run", "succeeded", "failed", "interrupted")


def redact(env: dict[str, str]) -> dict[str, str]:
    """An environment with secret-named values (and known secret values) redacted."""
    return _redact.current().env(env)


def write_file(path: Path, text: str) -> None:
    """Create a new file (never overwrite one), mode 0600, with secrets redacted."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(_redact.text(text))


def create(run_dir: Path) -> Path:
    """Make the run directory atomically and exclusively (mode 0700) before anything is written."""
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run_dir.mkdir(mode=0o700)
    except FileExistsError:
        if run_dir.parent.is_dir():
            raise ToplError(
                f"run directory {run_dir} already exists; refusing to overwrite it",
                where="hydra.run.dir / hydra.sweep.dir",
                fix="let topl pick a new directory (leave hydra.run.dir unset) or give a new path",
            ) from None
        raise _unwritable(run_dir, "a file is in the way") from None
    except OSError as e:
        raise _unwritable(run_dir, e.strerror or str(e)) from None
    return run_dir


def _unwritable(path: Path, why: str) -> ToplError:
    """A folder topl cannot write (read-only, full, not a folder): one message, exit 2."""
    return ToplError(
        f"cannot write the run directory {path}: {why}",
        where="run_root / hydra.run.dir / hydra.sweep.dir",
        fix="give a writable folder with free space (run_root=PATH)",
    )


def set_status(run_dir: Path, state: str, **details: Any) -> None:
    """status.json: one of STATES (failed: exit_code or signal or error), replaced atomically."""
    assert state in STATES, state
    body = json.dumps(
        {"state": state, **details, "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1
    )
    watch_io.replace_file(run_dir / "status.json", (body + "\n").encode())


def seal(run_dir: Path, max_bytes: int = 16 << 20) -> None:
    """Redact the files Hydra wrote itself (.hydra/, its log) and make everything owner-only."""
    for path in [run_dir, *run_dir.rglob("*")]:
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o700)
            continue
        path.chmod(0o600)
        if (
            path.parent.name == ".hydra" or path.suffix == ".log"
        ) and path.stat().st_size <= max_bytes:
            text = path.read_text(errors="replace")
            clean = _redact.text(text)
            if clean != text:
                path.write_text(clean)


def git_sha() -> str | None:
    for where in (Path.cwd(), Path(__file__).resolve().parent):
        try:
            out = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def spec_text(composed: Composed) -> str:
    """spec.yaml's text: the composed spec, resolved, secrets redacted (its sha256 is the run's
    spec hash, launcher/run/identity.py)."""
    return _redact.text(OmegaConf.to_yaml(composed.cfg, resolve=True))


def write_command(run_dir: Path, invocation: Invocation, python: str) -> None:
    """command.sh, invocation.json and env.json: what one attempt runs (a resumed run writes them
    again, launcher/run/resume.py)."""
    r = _redact.current()
    write_file(run_dir / "command.sh", "#!/usr/bin/env bash\n" + invocation.command(python) + "\n")
    write_file(run_dir / "invocation.json", json.dumps(r.obj(invocation.to_dict(python)), indent=1))
    write_file(
        run_dir / "env.json",
        json.dumps(
            {"rendered": redact(invocation.env), "launching_process": redact(dict(os.environ))},
            indent=1,
        ),
    )


def write(
    run_dir: Path, composed: Composed, invocation: Invocation, violations: list[Violation]
) -> None:
    """Write spec, sources, command, env and versions (secrets redacted, mode 0600). Refuses to
    reuse a run directory; a folder that cannot take them (full, read-only) is one message."""
    try:
        _write(run_dir, composed, invocation, violations)
    except OSError as e:
        raise _unwritable(run_dir, e.strerror or str(e)) from None


def _write(
    run_dir: Path, composed: Composed, invocation: Invocation, violations: list[Violation]
) -> None:
    marker = run_dir / "topl.json"
    if marker.exists():
        raise ToplError(
            f"run directory {run_dir} already holds a run; refusing to overwrite it",
            where="hydra.run.dir",
            fix="leave hydra.run.dir unset or give a new path",
        )
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    r = _redact.current()
    python = composed.cfg.cluster.python
    write_file(run_dir / "spec.yaml", spec_text(composed))
    write_file(
        run_dir / "sources.json", json.dumps(r.obj(composed.sources), indent=1, sort_keys=True)
    )
    write_command(run_dir, invocation, python)
    write_file(
        marker,
        json.dumps(
            r.obj(
                {
                    "topl_version": __version__,
                    "git_sha": git_sha(),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "argv": sys.argv,
                    "cwd": os.getcwd(),  # verl's relative checkpoint dir (launcher/run/resume.py)
                    "overrides": composed.overrides,
                    "recipe": composed.recipe,
                    "choices": composed.choices,
                    "packages": versions(),
                    "violations": [v.to_dict() for v in violations],
                }
            ),
            indent=1,
            default=str,
        ),
    )
