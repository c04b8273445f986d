"""A full output disk (ENOSPC) is one message and exit 2, never a traceback, and leaves no file
half-written as if complete (issue 48). The disk is made full by making the write raise."""

import errno
import json
import os
from collections import namedtuple

import pytest
from helpers import run_topl_inproc

from topl.launcher.base.errors import ToplError
from topl.launcher.run import lifecycle, rundir

FULL = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


class Os:
    """`os` for one module, with some functions replaced."""

    def __init__(self, **replaced):
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(os, name)


def fill_after(monkeypatch, n: int):
    """rundir.write_file writes n files, then the disk is full (part of the n+1-th is written)."""
    real, count = os.fdopen, [0]

    class Half:
        def __init__(self, f):
            self.f = f

        def write(self, text):
            self.f.write(text[: len(text) // 2])
            self.f.flush()
            raise FULL

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fdopen(fd, *a, **k):
        count[0] += 1
        f = real(fd, *a, **k)
        return f if count[0] <= n else Half(f)

    monkeypatch.setattr(rundir, "os", Os(fdopen=fdopen))


@pytest.mark.parametrize("n", [0, 3])
def test_a_full_disk_while_writing_the_run_dir(tmp_path, monkeypatch, n):
    fill_after(monkeypatch, n)
    r = run_topl_inproc("launch", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "No space left on device" in r.stderr
    (run,) = (tmp_path / "runs").iterdir()
    written = [p.name for p in files(run) if p.parent == run]
    assert "topl.json" not in written  # the marker of a complete run dir
    assert len([w for w in written if w != "launch.log"]) == n  # the (n+1)-th left no half file
    for p in files(run):
        assert p.name == "launch.log" or p.stat().st_size > 0, p


def test_no_room_is_refused_before_hydra_writes(tmp_path, monkeypatch):
    vfs = namedtuple("vfs", "f_bavail f_frsize")
    monkeypatch.setattr(rundir, "os", Os(statvfs=lambda p: vfs(3, 4096)))  # 12 KB free
    r = run_topl_inproc("launch", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "12,288 bytes free" in r.stderr
    assert list((tmp_path / "runs").iterdir()) == []  # the empty run dir is taken back


def test_a_full_disk_during_the_job_and_at_its_end(tmp_path, monkeypatch, capsys):
    def start():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "metrics.jsonl"))

    with pytest.raises(ToplError, match="No space left") as e:
        lifecycle.run_recorded(tmp_path, start)
    assert e.value.where == str(tmp_path / "metrics.jsonl")
    assert '"failed"' in (tmp_path / "status.json").read_text()

    real = rundir.set_status

    def no_status(run_dir, state, **k):
        if state != "running":  # the disk filled while the job ran
            raise FULL
        real(run_dir, state, **k)

    monkeypatch.setattr(rundir, "set_status", no_status)
    assert lifecycle.run_recorded(tmp_path, lambda: 0) == 0  # the job's code, not a traceback
    assert "status.json cannot be written" in capsys.readouterr().err


@pytest.mark.parametrize("force", [False, True])
def test_a_full_disk_under_any_command_is_one_message(tmp_path, monkeypatch, force):
    """`recipes import -o`: no half recipe, and --force keeps the old one whole."""
    import tempfile

    real = tempfile.mkstemp

    def mkstemp(*a, **k):
        fd, name = real(*a, **k)
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), name  # every write to it: ENOSPC

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-8B\n"
    )
    if force:
        (tmp_path / "r.yaml").write_text("old: 1\n")
    args = ["recipes", "import", str(script), "model=qwen3_8b", "-o", "r.yaml"]
    r = run_topl_inproc(*args, *(["--force"] if force else []), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "No space left on device" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml", "run.sh"][1 - force :]
    if force:
        assert (tmp_path / "r.yaml").read_text() == "old: 1\n"  # not truncated


def test_the_job_log_stops_not_the_job(tmp_path, monkeypatch, capsys):
    from topl.launcher.run.backends import subprocess as sub

    fd = os.open(tmp_path / "verl.log", os.O_WRONLY | os.O_CREAT, 0o600)
    log = sub.JobLog(fd)

    def write(fd, data):
        raise FULL

    monkeypatch.setattr(sub, "os", Os(write=write))
    log.write("step 1\n")
    log.write("step 2\n")  # no second message, no raise
    assert capsys.readouterr().err.count("verl.log stops here") == 1


def test_a_full_disk_leaves_no_half_sweep_report(tmp_path):
    """The sweeper's report files are written under hidden names and renamed whole at the end:
    a disk that fills on the last write leaves neither file nor a temporary behind."""
    from hydra_plugins.topl_sweeper.topl_sweeper import ReportWriter

    class Verdict:
        def to_dict(self):
            return dict(
                overrides=["train.tp=2"], valid=True, rules=[], warnings=[], devices=8
            ) | dict(train_gb=1.0, rollout_gb=1.0)

    done = tmp_path / "ok"
    w = ReportWriter(done)
    w.add(Verdict())
    assert not (done / "sweep_report.json").exists()  # not in place before it is whole
    w.close()
    assert json.loads((done / "sweep_report.json").read_text())["points"] == 1
    assert sorted(p.name for p in done.iterdir()) == ["sweep_report.csv", "sweep_report.json"]

    full = tmp_path / "full"
    w = ReportWriter(full)
    w.add(Verdict())
    real = w._json

    class Full:
        def write(self, text):
            raise FULL

        def close(self):
            real.close()

    w._json = Full()
    with pytest.raises(OSError):
        w.close()
    assert list(full.iterdir()) == []
