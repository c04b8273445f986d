"""One Slurm client for topl: sbatch, squeue, scontrol, sacct and scancel as commands, each bounded
by a deadline and turned into one ToplError that names the command. The slurm backend and
`topl watch` (launcher/run/watch.py) talk to Slurm through this module only.

A job's state comes from the controller while it remembers the job (`squeue --states=all`, then
`scontrol show job`: slurm-wlm 22.05 keeps an ended job MinJobAge seconds, 300 by default), then
from accounting (`sacct`, where slurmdbd runs: a cluster without it answers "Slurm accounting
storage is disabled"), and the job's exit code from the file the sbatch script writes last
(EXIT_FILE): a cluster without accounting still tells how a job ended."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from topl.launcher.base.errors import ToplError
from topl.launcher.run import watch_io

JOB_ID_FILE = "slurm_job_id"  # in the run directory: the Slurm job's id (`topl watch` reads it)
EXIT_FILE = "slurm_exit"  # written by the sbatch script: the job's own exit code
TIMEOUT_S = 30.0  # one Slurm command; a controller that does not answer in this is down
# Slurm's job states (slurm-wlm 22.05 squeue(1) "JOB STATE CODES") -> status.json's; the rest
# (PENDING, RUNNING, CONFIGURING, COMPLETING, SUSPENDED, REQUEUED, RESIZING, ...) have not ended
ENDS = {
    "COMPLETED": "succeeded",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed",
    "BOOT_FAIL": "failed",
    "DEADLINE": "failed",
    "CANCELLED": "interrupted",
    "PREEMPTED": "interrupted",
    "REVOKED": "interrupted",
}
_JOB_ID = re.compile(r"^(\d+)(?:;\S+)?$")  # sbatch --parsable: ID or ID;CLUSTER


def slurm(*argv: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run one Slurm command; its stdout, or one ToplError naming it (never a traceback)."""
    if shutil.which(argv[0], path=(env or os.environ).get("PATH")) is None:
        raise ToplError(
            f"backend=slurm needs Slurm's `{argv[0]}`, which is not on PATH here",
            where="cluster.backend=slurm",
            fix="run topl on a Slurm login node (where sbatch, squeue and scancel work)",
        )
    try:
        out = subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ToplError(
            f"`{' '.join(argv)}`: no answer within {TIMEOUT_S:g} s",
            fix="check that the Slurm controller answers (`sinfo`)",
        ) from None
    if check and out.returncode != 0:
        raise ToplError(
            f"`{' '.join(argv[:3])} ...` failed (exit {out.returncode}): "
            f"{out.stderr.strip()[-600:] or out.stdout.strip()[-600:]}",
            where="cluster.slurm",
            fix="fix what Slurm says above (partition, account, qos, time limit), then launch again",
        )
    return out.stdout if check or out.returncode == 0 else ""


def submit(script: Path, env: dict[str, str]) -> str:
    """`sbatch --parsable SCRIPT` with `env` as its environment (sbatch's default --export=ALL
    hands it to the job: secrets reach the job without being written anywhere); the job id."""
    out = slurm("sbatch", "--parsable", str(script), env=env).strip()
    m = _JOB_ID.match(out.splitlines()[-1] if out else "")
    if m is None:
        raise ToplError(f"sbatch answered {out[:200]!r}, not a job id", where=str(script))
    return m.group(1)


def cancel(job_id: str) -> None:
    """scancel: Slurm sends SIGTERM to every step and the batch script, SIGKILL after KillWait."""
    slurm("scancel", job_id)


@dataclass
class State:
    slurm: str  # Slurm's state (COMPLETED, CANCELLED, ...); UNKNOWN when Slurm forgot the job
    exit_code: int | None = None
    reason: str = ""

    @property
    def ended(self) -> bool:
        return self.slurm in ENDS or self.slurm == "UNKNOWN"

    @property
    def status(self) -> str:
        """status.json's state for an ended job."""
        if self.slurm == "UNKNOWN":
            return "succeeded" if self.exit_code == 0 else "failed"
        return ENDS[self.slurm]


def _reason(text: str) -> str:
    return "" if text.strip() in ("None", "(null)", "") else text.strip()


def _exit_code(text: str) -> int | None:
    """Slurm's `EXIT:SIGNAL` (a signal N counts as 128 + N, as a shell reports it)."""
    m = re.match(r"^(\d+):(\d+)$", text.strip())
    if not m:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    return 128 + sig if sig else code


def state(job_id: str, run_dir: Path | None = None) -> State:
    """The job's state: the controller's, else accounting's, else the exit file's (UNKNOWN)."""
    words = slurm("squeue", "-h", "--states=all", "-j", job_id, "-o", "%T|%r", check=False)
    now, _, reason = (words.strip().splitlines() or [""])[0].partition("|")
    now = now.split()[0] if now.strip() else ""
    if now and now not in ENDS:
        return State(now, None, _reason(reason))
    show = slurm("scontrol", "show", "job", "-o", job_id, check=False)
    fields = dict(re.findall(r"(\w+)=(\S*)", show))
    if fields.get("JobState"):
        why = fields.get("Reason", "")
        return State(fields["JobState"], _exit_code(fields.get("ExitCode", "")), _reason(why))
    acct = slurm("sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode", check=False)
    line = (acct.strip().splitlines() or [""])[0]
    if "|" in line:
        st, code = line.split("|", 1)
        return State(st.split()[0], _exit_code(code))
    written = watch_io.read_text(run_dir / EXIT_FILE, 64) if run_dir else None
    code = (
        int(written)
        if written and written.strip().isascii() and written.strip().isdigit()
        else None
    )
    why = "" if code is not None else "Slurm no longer knows the job and it left no exit code"
    return State("UNKNOWN", code, why)


def job_id_of(run_dir: Path) -> str | None:
    """The run's Slurm job id (a small regular file of digits), or None."""
    text = watch_io.read_text(run_dir / JOB_ID_FILE, 64)
    return text.strip() if text and text.strip().isascii() and text.strip().isdigit() else None
