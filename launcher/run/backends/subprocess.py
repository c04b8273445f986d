"""The subprocess backend: run the rendered verl command on this machine.

Secrets in the rendered env (`Invocation.secrets`) are on no command line: the child gets them in
its environment, and the Ray workers inherit them from the Ray cluster that verl's `ray.init()`
starts from that process (ray@2.60.0:python/ray/_private/services.py:start_ray_process starts
raylet with a copy of os.environ; raylet starts the workers)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.doctor.report import nodes_here
from topl.launcher.spec.backend_traits import TRAITS

if TYPE_CHECKING:
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.spec.job import JobSpec


def child_env(invocation: Invocation, run_dir: Path) -> dict[str, str]:
    env = {**os.environ, **invocation.env}
    env.setdefault("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    env.setdefault(
        "TOPL_GUARD_DIR", str(run_dir / "guard")
    )  # one record per verl process (guard.py)
    return env


def warn_unreachable_secrets(invocation: Invocation, env: dict[str, str]) -> None:
    """With RAY_ADDRESS set, verl joins that cluster, whose workers never see this environment."""
    address = env.get("RAY_ADDRESS", "")
    if invocation.secrets and address not in ("", "local"):
        print(
            f"topl: WARNING: RAY_ADDRESS={address}: verl joins an existing Ray cluster, whose "
            f"workers do not inherit {', '.join(invocation.secrets)} from this process (secrets "
            "never go on the command line); use cluster.backend=ray_job (the job's runtime_env "
            "carries them) or unset RAY_ADDRESS",
            file=sys.stderr,
        )


def run_subprocess(invocation: Invocation, run_dir: Path, python: str = "python3") -> int:
    """Run the verl entrypoint; stream output (redacted) to the console and run_dir/verl.log.

    Returns its return code (negative N: killed by signal N). The child gets its own process group:
    when topl is interrupted (SIGINT / SIGTERM) the whole group (Ray, vLLM) is stopped."""
    cmd = [python, *invocation.argv]
    env = child_env(invocation, run_dir)
    warn_unreachable_secrets(invocation, env)
    fd = os.open(run_dir / "verl.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with contextlib.closing(JobLog(fd)) as log:
        # SIGINT/SIGTERM wait (blocked) until `proc` is known, so an interrupt always finds the child
        # to stop; the child starts with them unblocked, in its own session (setsid before exec).
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        try:
            try:
                proc = subprocess.Popen(
                    cmd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    bufsize=1,
                    start_new_session=True,
                    preexec_fn=lambda: _child_setup(stop),
                )
            except OSError as e:  # gone or made unrunnable since preflight: said, not raised
                raise not_runnable(python, e.strerror or str(e)) from None
        except BaseException:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
            raise
        try:
            signal.pthread_sigmask(
                signal.SIG_UNBLOCK, stop
            )  # a pending interrupt lands in this `try`
            assert proc.stdout is not None  # stdout=PIPE
            lines = redact.Lines()  # a private key printed over many lines goes whole
            for line in proc.stdout:
                line = lines(line)
                sys.stdout.write(line)
                log.write(line)
            return proc.wait()
        except (
            BaseException
        ):  # Interrupted, KeyboardInterrupt, a broken console: stop the job first
            _stop_group(proc)
            raise


class JobLog:
    """verl.log, written unbuffered: a full disk stops the log (said once), never the job."""

    def __init__(self, fd: int):
        self.fd: int | None = fd

    def write(self, line: str) -> None:
        if self.fd is None:
            return
        try:
            data = line.encode()
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError as e:
            self.close()
            print(
                f"topl: verl.log stops here ({e.strerror or e}); the console has the rest",
                file=sys.stderr,
            )

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def not_runnable(python: str, why: str) -> ToplError:
    return ToplError(
        f"cluster.python={python!r} cannot be run here: {why}; nothing started",
        where="cluster.python",
        fix="set cluster.python to the interpreter that has verl installed (a path, or a name on "
        "PATH such as python3); `topl doctor cluster.python=...` checks it",
    )


def _child_setup(stop: set[signal.Signals]) -> None:
    """In the child before exec: signals unblocked; on Linux, SIGTERM when topl dies (even SIGKILL)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (linux/prctl.h) = 1


def _stop_group(proc: subprocess.Popen[str], grace: float = 10.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


class SubprocessBackend:
    """verl's entrypoint as a child of topl on this machine, with cluster.python."""

    traits = TRAITS["subprocess"]

    def preflight(self, spec: JobSpec) -> None:
        """cluster.python runs here (what it imports is the doctor's, which runs before start):
        one message before a run directory is written, even with --skip-doctor."""
        python = spec.cluster.python
        if not python or shutil.which(python) is None:
            why = "empty" if not python else "no such executable file (as a path or on PATH)"
            raise not_runnable(python, why)

    def doctor(self, spec: JobSpec) -> list[dict[str, Any]]:

        return nodes_here(spec)

    def start(self, spec: JobSpec, inv: Invocation, run_dir: Path, follow: bool) -> int:
        return run_subprocess(inv, run_dir, spec.cluster.python)

    def detached(self, follow: bool) -> bool:
        return False

    def handle(self, run_dir: Path) -> str | None:
        return None

    def driver_dir(self, spec: JobSpec, launched_in: str) -> str | None:
        return launched_in  # topl's child, started without a cwd of its own


BACKEND = SubprocessBackend()
