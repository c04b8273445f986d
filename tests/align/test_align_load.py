"""`import verl` with topl's alignment module but no vllm-ascend installed stops with the module's
own AlignError and a fix, not a bare PackageNotFoundError (review #7)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from topl.launcher.align import patches


@pytest.fixture
def no_vllm_ascend(monkeypatch):
    def missing(name):
        raise patches.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(patches.metadata, "version", missing)


def test_apply_without_vllm_ascend_raises_align_error_with_a_fix(no_vllm_ascend):
    with pytest.raises(patches.AlignError) as e:
        patches.apply()
    msg = str(e.value)
    assert "vllm-ascend is not installed" in msg and "nothing patched" in msg
    assert "fix: install" in msg and "0.23.0.post1" in msg and "VERL_USE_EXTERNAL_MODULES" in msg


@pytest.mark.skipif(
    importlib.util.find_spec("verl") is None or importlib.util.find_spec("vllm_ascend") is not None,
    reason="needs verl, and no vllm-ascend",
)
def test_import_verl_with_the_module_names_the_align_error():
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "topl.launcher.align.load"}
    env["PYTHONSAFEPATH"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", "import verl"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode != 0
    assert "AlignError: topl.launcher.align: vllm-ascend is not installed" in r.stderr, r.stderr
    assert "PackageNotFoundError" not in r.stderr and "fix: install" in r.stderr
