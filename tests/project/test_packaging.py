"""The wheel and the installs users make: launcher-only (core dependencies, no torch, no
DeepSpeed), and editable installs, which must either run sweeps or say how to fix them."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from paths import ROOT

A3 = "recipe=qwen3_30b_a3b_grpo_a3_strict"


def sh(*args, cwd=None, env=None, timeout=600):
    e = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **(env or {})}
    for k in ("PYTHONPATH", "PYTHONSAFEPATH", "VIRTUAL_ENV"):
        e.pop(k, None)
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout
    )


def new_venv(venv: Path, *flags: str):
    """A venv without its own pip: ensurepip costs ~4.5 s of CPU per venv; `pip_in` installs
    into it with this Python's pip, run by the venv's interpreter (pip's --python re-runs pip
    there: the venv's own paths and Python, as a pip inside it would)."""
    return sh(sys.executable, "-m", "venv", "--without-pip", *flags, venv)


def pip_in(py: Path, *args):
    return sh(sys.executable, "-m", "pip", "--python", py, *args)


def venv_seeing_these_packages(venv: Path) -> Path:
    """A venv that sees the packages this test runs with. `--system-site-packages` covers a system
    Python only: from inside a virtualenv (as the README runs the suite) it names the base
    interpreter's site-packages, not the outer venv's, so those are added explicitly (a .pth of
    plain paths: the outer .pth hooks, e.g. an editable topl's finder, stay out)."""
    import site
    import sysconfig

    r = new_venv(venv, "--system-site-packages")
    assert r.returncode == 0, r.stderr
    # the nested venv's own site-packages, named as it names it (same Python version)
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    (venv / rel / "zz_outer_site_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def source_copy(dest: Path) -> Path:
    """The checkout's files without build outputs (pip builds inside the source folder)."""
    skip = shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", "outputs", "runs"
    )
    shutil.copytree(ROOT, dest, ignore=skip)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    r = sh(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "-w",
        tmp / "dist",
        source_copy(tmp / "src"),
    )
    assert r.returncode == 0, r.stderr
    return next((tmp / "dist").glob("topl-*.whl"))


def test_wheel_carries_configs_recipes_plugin_and_every_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, package in (("conf", "topl/conf"), ("recipes", "topl/recipes")):
        for f in (ROOT / folder).rglob("*.yaml"):
            assert f"{package}/{f.relative_to(ROOT / folder)}" in names, f
    assert "hydra_plugins/topl_sweeper/topl_sweeper.py" in names
    # PEP 561 markers: mypy ([tool.mypy], .ci/run) reads the installed topl only with them
    assert {"topl/launcher/py.typed", "topl/kernels/py.typed"} <= names
    for top in ("launcher", "kernels"):  # a new subpackage must be listed in pyproject's packages
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            want = (
                ("hydra_plugins/" + rel.split("hydra_plugins/")[1])
                if "hydra_plugins" in rel
                else f"topl/{rel}"
            )
            assert want in names, f"{rel} is not in the wheel: add its package to pyproject.toml"


def core_requirements(wheel) -> list[str]:
    """Requires-Dist of the wheel without an extra: the core dependencies."""
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    lines = zipfile.ZipFile(wheel).read(meta).decode().splitlines()
    return [
        l.split(":", 1)[1].strip()
        for l in lines
        if l.startswith("Requires-Dist:") and "extra ==" not in l
    ]


def test_launcher_only_install_runs_without_torch(wheel, tmp_path):
    core = core_requirements(wheel)
    assert not any(
        r.split(";")[0].lower().startswith(("torch", "deepspeed", "triton")) for r in core
    )
    venv = tmp_path / "venv"
    assert new_venv(venv).returncode == 0
    py, topl = venv / "bin" / "python", venv / "bin" / "topl"
    r = pip_in(py, "install", "-q", "--no-deps", wheel)
    assert r.returncode == 0, r.stderr
    r = pip_in(py, "install", "-q", *core)
    assert r.returncode == 0, r.stderr
    assert sh(py, "-c", "import torch").returncode != 0
    assert sh(py, "-c", "import deepspeed").returncode != 0
    work = tmp_path / "work"
    work.mkdir()
    for args in (
        ["check", A3],
        ["render", A3, "--json"],
        ["plan", A3, "train.pp=4,8"],
        ["recipes"],
        ["rules"],
        ["check", "recipe=qwen3_4b_grpo_a3_strict", "train=fsdp"],
        ["launch", A3, "--dry-run"],
        ["launch", "-m", A3, "train.pp=4,8", "--dry-run"],
    ):
        r = sh(topl, *args, cwd=work)
        if "train=fsdp" in args:  # the FSDP memory rule runs without DeepSpeed; the recipe's own
            # Megatron verl_overrides are refused under FSDP (TOP-SCHEMA-005), nothing else
            errs = [l for l in r.stdout.splitlines() if l.startswith("ERROR ")]
            assert [e.split(":")[0] for e in errs] == ["ERROR TOP-SCHEMA-005"], r.stdout[-2000:]
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
            continue
        assert r.returncode == 0 and "Traceback" not in r.stderr, (
            args,
            r.stdout[-2000:],
            r.stderr[-2000:],
        )
    assert sh(topl, "render", A3, "--json", cwd=work).stdout.lstrip().startswith("{")
    r = sh(topl, "doctor", A3, "--json", cwd=work)  # runs; this host lacks the NPU stack
    assert r.returncode == 2 and '"TOP-DOC-TORCH-001"' in r.stdout
    before = sorted((work / "runs").iterdir())
    r = sh(topl, "launch", cwd=work)  # the embedded default needs the `local` extra: say so,
    # as a pip command over what this topl was installed from (topl is not on an index)
    assert r.returncode == 2 and "needs torch" in r.stderr, r.stderr
    assert f"pip install '{wheel}[local]'" in r.stderr and "topl[local]" not in r.stderr
    assert "Traceback" not in r.stderr and sorted((work / "runs").iterdir()) == before


def test_nested_venvs_see_the_outer_environment(tmp_path):
    """From a virtualenv (the README's way) the nested venvs below need the outer venv's packages
    (omegaconf, hydra...): `--system-site-packages` alone gives them the base Python's only."""
    import json
    import site

    py = venv_seeing_these_packages(tmp_path / "venv") / "bin" / "python"
    r = sh(py, "-c", "import sys, json, omegaconf, hydra, rich; print(json.dumps(sys.path))")
    assert r.returncode == 0, r.stderr
    assert set(site.getsitepackages()) <= set(json.loads(r.stdout))


@pytest.mark.parametrize("mode", ["strict", "default"])
def test_editable_install_runs_sweeps_or_says_how(mode, tmp_path):
    src = source_copy(tmp_path / "src")
    venv = venv_seeing_these_packages(tmp_path / "venv")
    py, topl = venv / "bin" / "python", venv / "bin" / "topl"
    extra = ["--config-settings", "editable_mode=strict"] if mode == "strict" else []
    r = pip_in(py, "install", "-q", "--no-deps", "-e", src, *extra)
    assert r.returncode == 0, r.stderr
    no_offload = [f"train.{k}_offload=false" for k in ("param", "grad", "optimizer")]
    r = sh(topl, "launch", "-m", A3, *no_offload, "train.pp=4,8", "--dry-run", cwd=tmp_path)
    if mode == "strict":
        assert r.returncode == 0, r.stderr[-2000:]
        sweep = tmp_path / "runs" / "multirun"
        assert list(sweep.glob("*/sweep_report.json"))  # topl's sweeper ran: it writes the report
        # without the seed's offload pp=4 does not fit and was dropped
        assert len(list(sweep.glob("*/*/command.sh"))) == 1
        return
    # Default mode: Hydra walks the `hydra_plugins` folders on disk and never sees the sweeper
    # through setuptools' editable finder. Where another (non-editable) topl install is on the
    # path, as on CI's system python, Hydra finds that copy's sweeper and the sweep runs.
    probe = "import hydra_plugins, os; print(any(os.path.isdir(os.path.join(p, 'topl_sweeper')) for p in hydra_plugins.__path__))"
    elsewhere = sh(py, "-c", probe, cwd=tmp_path).stdout.strip() == "True"
    if elsewhere:
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    else:
        assert (
            r.returncode == 2 and "editable_mode=strict" in r.stderr and "Traceback" not in r.stderr
        ), r.stderr[-2000:]
