"""What `topl watch` may trust in a run directory, which it did not write itself and may be old,
copied from another machine or edited: it reads only regular files, never more than a cap; it
prints nothing a terminal would execute; and it signals a process only when it can prove that
process is the topl that recorded the run (same host, same boot, same pid, start time and
executable as recorded at launch).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import stat
from pathlib import Path

STATUS_CAP = 64 << 10  # status.json: a few fields
RECORD_CAP = 1 << 20  # a guard record, spec.yaml, invocation.json
CHUNK_CAP = 4 << 20  # new log bytes read per poll (the rest next time)
LINE_CAP = 64 << 10  # a longer log line is cut (a 10 MB line is not a metric)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 (but \t \n), DEL, C1 (CSI, OSC)
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def clean(text: object) -> str:
    """Text safe to print on a terminal: control characters (escape sequences) shown as `?`."""
    return _CONTROL.sub("?", str(text))


def open_regular(path: Path):
    """A binary file object for a regular file (no FIFO, device or symlink: those could hang or
    point anywhere), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except OSError:
        os.close(fd)
        return None


def replace_file(path: Path, data: bytes) -> None:
    """Write `path` as a new file of our own (mode 0600), never through what is there: the bytes go
    to a fresh temporary file (O_EXCL: never a planted name or link) renamed over `path` (a rename
    replaces a link, it does not follow it)."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_text(path: Path, cap: int = RECORD_CAP) -> str | None:
    """A regular file's text when it is at most `cap` bytes; None otherwise."""
    f = open_regular(path)
    if f is None:
        return None
    with f:
        data = f.read(cap + 1)
    return None if len(data) > cap else data.decode("utf-8", errors="replace")


def _proc(pid: int) -> dict | None:
    """This host's facts about a live process: its start time (clock ticks after boot) and its
    executable; None when there is no such process (or no /proc)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        start = int(raw[raw.rindex(")") + 2 :].split()[19])  # field 22 (starttime)
    except (OSError, ValueError, IndexError):
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    return {"start": start, "exe": exe}


def boot_id() -> str | None:
    try:
        return Path(_BOOT_ID).read_text().strip()
    except OSError:
        return None


def identity(pid: int | None = None) -> dict:
    """What status.json records about topl at launch, to recognise it later."""
    pid = os.getpid() if pid is None else pid
    p = _proc(pid) or {}
    return {
        "pid": pid,
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid_start": p.get("start"),
        "exe": p.get("exe"),
    }


def valid_pid(pid: object) -> int | None:
    """A positive int pid (never 0 or negative: os.kill would signal a whole process group)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or pid > 1 << 22:
        return None
    return pid


def prove(status: dict) -> tuple[str, str]:
    """('same', why) when status.json's process is alive and provably the recorded topl;
    ('gone', why) when it provably is not running any more (no such process on this host and
    boot, or the pid now belongs to another process); ('unknown', why) when it cannot be told
    (another host, a status without identity, no /proc)."""
    pid = valid_pid(status.get("pid"))
    if pid is None:
        return "unknown", f"status.json names no valid pid ({clean(status.get('pid'))!s:.40})"
    host = status.get("host")
    if host != socket.gethostname():
        return "unknown", f"the run was launched on {clean(host)!s:.80}, not on this host"
    recorded_boot, start = status.get("boot_id"), status.get("pid_start")
    if recorded_boot is None or start is None:
        return "unknown", "status.json does not record topl's boot and start time"
    if recorded_boot != boot_id():
        return "gone", "this host was restarted since the launch"
    now = _proc(pid)
    if now is None:
        return "gone", f"no process {pid}"
    if now["start"] != start or (status.get("exe") and now["exe"] != status.get("exe")):
        return "gone", f"process {pid} is another program now (pid reused)"
    return "same", f"topl (pid {pid})"


def read_status(run_dir: Path) -> dict:
    """status.json as a dict ({} when missing, not a regular file, too large or not JSON)."""
    try:
        st = json.loads(read_text(run_dir / "status.json", STATUS_CAP) or "{}")
    except (ValueError, RecursionError):
        return {}
    return st if isinstance(st, dict) else {}
