"""What a new user meets first: help, version, no silent cluster target, Ray missing/unreachable,
thread count of the local job, the doctor's accelerator and verl-import checks."""

import json
import os
import subprocess
import sys

import pytest
from conftest import _free_port
from helpers import STRICT_A3, run_topl, run_topl_inproc
from paths import ROOT

from topl.launcher.cli import COMMANDS
from topl.launcher.spec.memory import zero3_gpu_bytes

A3_NO_ADDRESS = ["recipe=qwen3_4b_grpo_a3_strict"]


def _help_run(cmd: str):
    """Help and flag refusals are text, not the process boundary: in this process, except
    `launch`, whose help is Hydra's own (it runs Hydra's app machinery)."""
    return run_topl if cmd == "launch" else run_topl_inproc


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_on_every_command(cmd):
    r = _help_run(cmd)(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: topl {cmd}") and "examples:" in r.stdout, r.stdout
    takes_overrides = cmd not in ("rules", "recipes", "diagnose", "watch", "compare", "runs")
    assert ("override_grammar" in r.stdout and "key=value" in r.stdout) == takes_overrides
    if cmd == "launch":  # topl's own flags, then Hydra's help (the config groups)
        for flag in ("--dry-run", "--follow", "--skip-doctor", "-m, --multirun"):
            assert flag in r.stdout
        assert "Configuration groups" in r.stdout
    assert "Traceback" not in r.stderr and "token recognition" not in r.stderr


def test_help_into_a_closed_pipe_is_quiet():
    """`topl watch --help | true`: the reader is gone before topl writes (python starts in far
    longer than `true` exits); no BrokenPipeError traceback, exit 0."""
    import shlex

    cmd = f"{shlex.quote(sys.executable)} -m topl.launcher.cli watch --help | true"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True)
    assert r.returncode == 0, r
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_version_names_the_checkout():
    import topl.launcher

    r = run_topl("--version")
    assert r.returncode == 0 and r.stdout.startswith("topl 0.")
    repo = str(ROOT)
    head = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=repo
    )
    installed = os.path.dirname(os.path.realpath(topl.launcher.__file__))  # strict editable: links
    if head.returncode == 0 and installed == os.path.join(repo, "launcher"):
        assert f"(git {head.stdout.strip()})" in r.stdout  # editable: this checkout's SHA
    else:  # a wheel install names no SHA, even inside another git repository (pyenv's own)
        assert "(git " not in r.stdout, r.stdout


def test_version_ignores_a_foreign_git_repository(tmp_path):
    """A wheel installed under some other git work tree prints no SHA of that tree."""
    import shutil

    import topl.launcher

    pkg = tmp_path / "site" / "topl"
    shutil.copytree(os.path.dirname(topl.launcher.__file__), pkg / "launcher")
    (pkg / "__init__.py").write_text("")
    assert subprocess.run(["git", "init", "-q", str(tmp_path)]).returncode == 0
    code = "from topl.launcher.cli.help import version; print(version())"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.startswith("topl 0.") and "(git" not in r.stdout, r


def test_remote_launch_without_address_refuses_and_check_warns(tmp_path):
    r = run_topl("check", *A3_NO_ADDRESS, "--json")
    assert r.returncode == 0  # validating a shared recipe still passes
    got = {v["rule"]: v["severity"] for v in json.loads(r.stdout)["violations"]}
    # nothing but warnings and notes (info: what the seed measured at logdiff 0)
    assert got["TOP-CLUS-001"] == "warning" and set(got.values()) <= {"warning", "info"}
    r = run_topl("launch", *A3_NO_ADDRESS, cwd=tmp_path)
    assert r.returncode == 2 and "cluster.ray_address" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory left behind
    r = run_topl("launch", *A3_NO_ADDRESS, "--dry-run", f"run_root={tmp_path}/runs", cwd=tmp_path)
    assert r.returncode == 0, r.stderr  # a dry run needs no cluster


def test_shipped_cluster_presets_name_no_ray_head(compose):
    for cluster in ("atlas_a2", "atlas_a3"):
        assert compose([f"cluster={cluster}"]).cfg.cluster.ray_address is None


def test_ray_missing_is_one_message_and_no_run_dir(tmp_path):
    fake = tmp_path / "site" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray (simulated)')\n")
    work = tmp_path / "work"
    work.mkdir()
    r = run_topl(
        "launch",
        *STRICT_A3,
        "cluster.ray_address=http://127.0.0.1:8265",
        cwd=work,
        env={"PYTHONPATH": str(tmp_path / "site")},
    )
    assert r.returncode == 2, r.stderr
    assert "needs Ray" in r.stderr and "pip install" in r.stderr and "Traceback" not in r.stderr
    assert list(work.iterdir()) == []


def test_ray_unreachable_is_one_message_and_no_run_dir(tmp_path):
    pytest.importorskip("ray")
    address = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    r = run_topl("launch", *STRICT_A3, f"cluster.ray_address={address}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"the Ray head at {address}" in r.stderr and "Traceback" not in r.stderr
    assert "topl: dry run:" not in r.stderr  # the head is reached first (the dry run takes seconds)
    assert len(r.stderr.strip().splitlines()) <= 4, r.stderr
    assert list(tmp_path.iterdir()) == []
    r = run_topl("doctor", *STRICT_A3, "--ray", address)
    assert r.returncode == 2 and address in r.stderr and "Traceback" not in r.stderr
    r = run_topl("doctor", *STRICT_A3, "--ray")  # no address anywhere: refused, none guessed
    assert r.returncode == 2 and "cluster.ray_address" in r.stderr


def test_remote_launch_reaches_the_head_before_the_dry_run(tmp_path, monkeypatch):
    """A head that does not answer is said at once: verl's dry run (seconds) is not started."""
    pytest.importorskip("ray")
    from topl.launcher.cli import launch

    ran = []
    monkeypatch.setattr(launch, "deep", lambda *a, **k: ran.append(a) or ([], ""))
    address = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    r = run_topl_inproc(
        "launch",
        *STRICT_A3,
        f"cluster.ray_address={address}",
        "cluster.ray_timeout_s=2",
        cwd=tmp_path,
    )
    assert r.returncode == 2 and f"the Ray head at {address}" in r.stderr, r.stderr
    assert ran == [] and list(tmp_path.iterdir()) == []


def test_thread_count_follows_field_env_and_model_size(compose, monkeypatch):
    from topl.launcher.run.backends.local import threads_for

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_for(compose([]).to_object()) == 1  # hidden 64: one thread
    cores = len(os.sched_getaffinity(0))
    assert threads_for(compose(["model=qwen3_4b"]).to_object()) == min(cores, 2560 // 256)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads_for(compose([]).to_object()) == 3
    assert threads_for(compose(["local.threads=2"]).to_object()) == 2


def test_local_job_metrics_identical_at_1_and_2_threads(compose, tmp_path, monkeypatch):
    import torch

    from topl.kernels import rl_loop
    from topl.launcher.run.backends.local import run_local

    seen, real_run = [], rl_loop.run

    def spy(cfg):
        seen.append(torch.get_num_threads())
        yield from real_run(cfg)

    monkeypatch.setattr(rl_loop, "run", spy)
    runs = []
    for n in (1, 2):
        spec = compose(["train.steps=2", "local.plot=false", f"local.threads={n}"]).to_object()
        d = tmp_path / str(n)
        d.mkdir()
        assert run_local(spec, d, quiet=True) == 0
        lines = [json.loads(l)["data"] for l in (d / "metrics.jsonl").read_text().splitlines()]
        runs.append([{k: v for k, v in m.items() if not k.startswith("timing_s/")} for m in lines])
    assert seen == [1, 2]  # the job really ran at each count
    assert runs[0] == runs[1] and len(runs[0]) == 2


def test_zero3_closed_form_is_deepspeeds_estimator():
    ds = pytest.importorskip("deepspeed.runtime.zero.stage3")
    import logging

    logging.disable(logging.WARNING)
    for offload, params in ((False, False), (True, False), (True, True)):
        kw = dict(
            total_params=30_500_000_000,
            largest_layer_params=622_329_856,
            num_gpus_per_node=16,
            num_nodes=2,
            cpu_offload=offload,
            cpu_offload_params=params,
        )
        assert ds.estimate_zero3_model_states_mem_needs(**kw)[1] == zero3_gpu_bytes(**kw)
    logging.disable(logging.NOTSET)


def _accelerator_with(tmp_path, files: dict) -> str:
    site = tmp_path / "site"
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    code = "from topl.launcher.doctor.installed import accelerator; print(accelerator())"
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


FAKE_TORCH = (
    "class cuda:\n    is_available = staticmethod(lambda: {cuda})\n"
    "class npu:\n    is_available = staticmethod(lambda: False)\n"
)


def test_doctor_names_the_accelerator(tmp_path):
    assert (
        _accelerator_with(tmp_path / "a", {"torch/__init__.py": FAKE_TORCH.format(cuda=True)})
        == "cuda"
    )
    assert (
        _accelerator_with(tmp_path / "b", {"torch/__init__.py": FAKE_TORCH.format(cuda=False)})
        == "cpu"
    )
    npu = {
        "torch/__init__.py": FAKE_TORCH.format(cuda=False).replace("lambda: False", "lambda: True"),
        "torch_npu/__init__.py": "",
    }
    assert _accelerator_with(tmp_path / "c", npu) == "npu"


def test_doctor_reports_a_verl_that_does_not_import(tmp_path):
    site = tmp_path / "site"
    (site / "verl").mkdir(parents=True)
    (site / "verl" / "__init__.py").write_text("import tensordict_missing_for_the_test\n")
    info = site / "verl-0.9.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.9.1\n")
    r = run_topl("doctor", "cluster.backend=subprocess", "--json", env={"PYTHONPATH": str(site)})
    found = {f["id"]: f for n in json.loads(r.stdout)["nodes"] for f in n["findings"]}
    assert found["TOP-DOC-VERL-001"]["severity"] == "ok"  # installed ...
    assert found["TOP-DOC-VERL-004"]["severity"] == "error"  # ... but not importable
    assert "tensordict_missing_for_the_test" in found["TOP-DOC-VERL-004"]["found"]
    assert r.returncode == 2


# --- round two: flags, the next step (output widths: tests/cli/test_front_door_output.py) -----------


def test_a_mistyped_flag_is_refused_with_the_nearest_and_writes_nothing(tmp_path):
    r = run_topl("launch", "--dryrun", cwd=tmp_path)
    assert r.returncode == 2 and "unknown flag --dryrun" in r.stderr
    assert "did you mean --dry-run?" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists()  # it used to leave an empty run directory
    r = run_topl("plan", *STRICT_A3, "--jsn", "--json", cwd=tmp_path)
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["fix"].startswith(
        "did you mean --json"
    )


def test_launch_ray_flag_is_refused_with_the_config_key(tmp_path):
    r = run_topl("launch", *A3_NO_ADDRESS, "--ray", "http://h:8265", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "cluster.ray_address=" in r.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("cmd", COMMANDS)
def test_help_lists_every_flag_the_command_takes(cmd):
    r = _help_run(cmd)(cmd, "--no-such-flag-at-all")
    assert r.returncode == 2 and "unknown flag --no-such-flag-at-all" in r.stderr, r.stderr
    known = r.stderr.split("(flags: ")[1].split(";")[0].replace(" and the others --help lists", "")
    helptext = _help_run(cmd)(cmd, "--help").stdout
    for flag in known.split():
        assert flag in helptext, (cmd, flag)


def test_launch_help_names_watch_and_the_ray_key():
    out = run_topl("launch", "--help").stdout
    assert "--watch" in out and "--unsafe-hydra-overrides" in out
    assert "cluster.ray_address" in out


def test_the_main_job_ends_with_what_to_try_next(tmp_path):
    r = run_topl("launch", "train.steps=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = next((tmp_path / "runs").iterdir())
    nxt = [ln for ln in r.stderr.splitlines() if ln.startswith("next: ")]
    assert nxt and f"topl watch {run_dir}" in nxt[0]
    assert "topl probe" in nxt[0] and "topl recipes" in nxt[0]


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("verl") is None, reason="no verl installed"
)
def test_check_warns_when_the_installed_verl_is_not_the_declared_one():
    from importlib.metadata import version

    r = run_topl("check", "recipe=qwen3_30b_a3b_grpo_a3_strict", "--json")  # stack=seed: 0.8.0
    got = {v["rule"]: v for v in json.loads(r.stdout)["violations"]}
    if version("verl") == "0.8.0":
        assert "TOP-DOC-VERL-002" not in got
        return
    w = got["TOP-DOC-VERL-002"]
    assert w["severity"] == "warning" and version("verl") in w["message"]
    assert "release/v0.8.0" in w["fix"] and r.returncode == 0  # a warning, not a rejection
    r = run_topl("check", "recipe=qwen3_30b_a3b_grpo_a3_strict", "stack=release", "--json")
    assert "TOP-DOC-VERL-002" not in {v["rule"] for v in json.loads(r.stdout)["violations"]}


def test_top_level_help_lists_every_rules_flag():
    """`topl --help`'s rules line names the flags `rules` takes (--doctor was missing; review #10)."""
    line = next(x for x in run_topl("--help").stdout.splitlines() if x.startswith("  rules "))
    r = run_topl("rules", "--no-such-flag-at-all")
    known = r.stderr.split("(flags: ")[1].split(";")[0].replace(" and the others --help lists", "")
    for flag in known.split():
        assert flag in line, flag
