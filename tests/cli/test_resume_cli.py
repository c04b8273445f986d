"""`topl launch --resume RUN_DIR`: the run's own config, in its own directory, its identity kept,
verl told trainer.resume_mode=auto; the attempt before set aside; refusals that say why."""

import json
import sys
from pathlib import Path

import pytest

from topl.launcher.cli import main

FAKE_VERL = """
import sys
print("fake verl:", " ".join(sys.argv[1:]), flush=True)
"""


@pytest.fixture
def written(tmp_path, monkeypatch, capsys):
    """A run directory as `topl launch` writes it (a dry run of a subprocess job on a fake verl)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    (tmp_path / "pkgs").mkdir()
    (tmp_path / "pkgs" / "fake_verl.py").write_text(FAKE_VERL)

    def launch(*extra: str, state: str = "interrupted") -> Path:
        args = ["launch", "--dry-run", "algorithm.entrypoint=fake_verl", *extra]
        args += [f"cluster.python={sys.executable}", f"+cluster.env.PYTHONPATH={tmp_path}/pkgs"]
        assert main(args) == 0
        (run,) = [p for p in (tmp_path / "runs").iterdir() if not (p / "attempts").exists()]
        (run / "attempts").mkdir()  # marks it as taken by this test
        (run / "attempts" / ".keep").write_text("")
        (run / "verl.log").write_text("the attempt before\n")
        (run / "status.json").write_text(json.dumps({"state": state, "exit_code": 130}))
        capsys.readouterr()
        return run

    return launch


def experiment(command: str) -> str:
    return next(w for w in command.split() if w.startswith("trainer.experiment_name="))


def test_resume_keeps_the_identity_and_resumes_verl(written, capsys, tmp_path, monkeypatch):
    run = written("cluster.backend=subprocess", "collective=hccl_strict")
    before = (run / "command.sh").read_text()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # resumed from another directory
    assert main(["launch", "--resume", str(run), "--skip-doctor"]) == 0
    out = capsys.readouterr().out
    assert "trainer.resume_mode=auto" in out  # what the fake verl was given
    now = (run / "command.sh").read_text()
    assert "trainer.resume_mode=auto" in now and "resume_mode" not in before
    assert experiment(now) == experiment(before)  # the same experiment: the same checkpoints
    # verl's relative default, checkpoints/PROJECT/EXPERIMENT, where the first attempt ran
    name = experiment(now).split("=", 1)[1]
    assert f"trainer.default_local_dir={tmp_path}/checkpoints/topl/{name}" in now.replace("'", "")
    st = json.loads((run / "status.json").read_text())
    assert (st["state"], st["attempt"]) == ("succeeded", 2)
    assert (run / "attempts" / "1" / "verl.log").read_text() == "the attempt before\n"
    assert (run / "attempts" / "1" / "command.sh").read_text() == before
    assert json.loads((run / "attempts" / "1" / "status.json").read_text())["exit_code"] == 130
    capsys.readouterr()
    assert main(["watch", str(run), "--once"]) == 0  # watch and runs show the attempt
    assert "run succeeded: attempt 2, exit_code 0" in capsys.readouterr().out
    assert main(["runs", str(tmp_path / "runs"), "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["runs"] if r["run_dir"] == str(run))
    assert (row["state"], row["attempt"]) == ("succeeded", 2)
    assert main(["launch", "--resume", str(run)]) == 2  # succeeded now: not resumed again
    assert "it succeeded: there is nothing to resume" in capsys.readouterr().err


def test_resume_refuses_what_it_cannot_resume(written, capsys):
    local = written(state="interrupted")  # the embedded default: no checkpoints
    assert main(["launch", "--resume", str(local)]) == 2
    assert "write no checkpoints" in capsys.readouterr().err
    assert json.loads((local / "status.json").read_text())["state"] == "interrupted"
    slurm = ["cluster.backend=slurm", "cluster.slurm.partition=p", "cluster.slurm.time_min=5"]
    embedded = written(*slurm, "cluster.slurm.run=embedded")  # the same engines in an allocation
    assert main(["launch", "--resume", str(embedded)]) == 2
    err = capsys.readouterr().err
    assert "write no checkpoints" in err and "cluster.slurm.run=embedded" in err

    done = written("cluster.backend=subprocess", "collective=hccl_strict", state="succeeded")
    assert main(["launch", "--resume", str(done)]) == 2
    assert "it succeeded" in capsys.readouterr().err

    bad = written("cluster.backend=subprocess", "collective=hccl_strict")
    cfg = bad / ".hydra" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("  tp: 1\n", "  tp: two\n", 1))
    assert main(["launch", "--resume", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "config no longer validates" in err and "two" in err
    assert not (bad / "attempts" / "1").exists()  # refused before anything moved


def test_a_run_whose_topl_is_gone_is_resumed_a_live_one_is_not(written, capsys):
    import os
    import socket
    import subprocess

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run = written("cluster.backend=subprocess", "collective=hccl_strict")
    host = socket.gethostname()
    (run / "status.json").write_text(
        json.dumps({"state": "running", "pid": os.getpid(), "host": host})
    )
    assert main(["launch", "--resume", str(run), "--skip-doctor"]) == 2
    assert "still running" in capsys.readouterr().err
    (run / "status.json").write_text(
        json.dumps({"state": "running", "pid": dead.pid, "host": host})
    )
    assert main(["launch", "--resume", str(run), "--skip-doctor"]) == 0
    assert json.loads((run / "status.json").read_text())["state"] == "succeeded"
