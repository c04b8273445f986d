"""A real one-node Slurm for the tests: munged, slurmctld and slurmd (Debian's slurm-wlm and munge,
22.05 on bookworm; .ci/run installs them) started from a folder of their own with a minimal
slurm.conf: no cgroups, no accounting database, no systemd, every daemon and socket under that
folder, ports free at start. Root only (slurmd starts each job as its user).

`start()` returns a Cluster whose `env` points Slurm's commands at it (SLURM_CONF), or raises
Unavailable with why: the caller skips on it (and CI, which installs Slurm, fails)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
NODE = "topl1"
WAIT_S = 30.0  # for the node to come up idle


class Unavailable(Exception):
    """This machine cannot run the test Slurm (why in the message)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _find(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


CONF = """\
ClusterName=topl
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_interval=1
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
KillWait=2
MinJobAge=600
NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} RealMemory=1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=60 State=UP
"""


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # os.environ plus SLURM_CONF

    def run(self, *argv: str) -> str:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=True
        ).stdout

    def stop(self) -> None:
        """Cancel every job and wait (bounded) until the queue is empty: a step daemon whose
        slurmd went first would wait for it forever. Then SIGTERM to each daemon this helper
        started (by its pid file), SIGKILL to a step daemon of this cluster still there (its
        environment names this SLURM_CONF), and the folder."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.run("scancel", "--user=root")
            deadline = time.monotonic() + 15
            while self.run("squeue", "-h", "-o", "%i").strip() and time.monotonic() < deadline:
                time.sleep(0.3)
        for name in reversed(DAEMONS):
            try:
                pid = int((self.folder / f"{name}.pid").read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.5)
        mark = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                if (proc / "comm").read_text().strip() == "slurmstepd" and mark in (
                    proc / "environ"
                ).read_bytes().split(b"\0"):
                    os.kill(int(proc.name), signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)


def start() -> Cluster:
    if os.geteuid() != 0:
        raise Unavailable("the test Slurm runs its daemons as root (slurmd starts jobs as users)")
    missing = [n for n in (*DAEMONS, *CLIENTS) if _find(n) is None]
    if missing:
        raise Unavailable(
            f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge: .ci/run does)"
        )
    d = Path(tempfile.mkdtemp(prefix="topl-slurm-", dir="/tmp"))
    d.chmod(0o755)  # munged's socket must be reachable through its folder
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = CONF.format(
        d=d, ctld_port=_free_port(), d_port=_free_port(), node=NODE, cpus=os.cpu_count() or 1
    )
    (d / "slurm.conf").write_text(conf)
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    cluster = Cluster(d, env)
    steps = [
        [
            _find("munged"),
            "--force",
            f"--socket={d}/munge.sock",
            f"--key-file={key}",
            f"--log-file={d}/munged.log",
            f"--pid-file={d}/munged.pid",
            f"--seed-file={d}/seed",
        ],
        [_find("slurmctld"), "-i"],
        [_find("slurmd"), "-N", NODE],
    ]
    try:
        for argv in steps:  # each daemonizes: the call returns once it runs
            out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                raise Unavailable(
                    f"{Path(argv[0]).name} did not start: {out.stderr.strip()[-400:]}"
                )
        deadline, state = time.monotonic() + WAIT_S, ""
        while time.monotonic() < deadline:
            state = subprocess.run(
                ["sinfo", "-h", "-n", NODE, "-o", "%t"], env=env, capture_output=True, text=True
            ).stdout.strip()
            if state == "idle":
                return cluster
            time.sleep(0.3)
        logs = "".join(
            (d / f).read_text(errors="replace")[-600:]
            for f in ("slurmctld.log", "slurmd.log")
            if (d / f).exists()
        )
        raise Unavailable(f"node {NODE} not idle after {WAIT_S:g} s (state {state!r}): {logs}")
    except BaseException:
        cluster.stop()
        raise
