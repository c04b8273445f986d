"""`topl doctor` on this machine, on simulated installed stacks, and on a real local Ray head."""
import json
import sys

import pytest
from helpers import STRICT_A3, run_topl

VERSIONS = ["cluster.versions.torch=2.13.0", "cluster.versions.torch_npu=2.13.0"]


def ids(out, severity="error"):
    return {f["id"] for n in out["nodes"] for f in n["findings"] if f["severity"] == severity}


def test_local_spec_passes_here():
    r = run_topl("doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["ok"] is True


def test_strict_ascend_spec_reports_each_missing_piece_here():
    r = run_topl("doctor", *STRICT_A3, "--json")
    assert r.returncode == 2
    got = ids(json.loads(r.stdout))
    assert {"TOP-DOC-ACC-001", "TOP-DOC-NPU-001", "TOP-DOC-CANN-001", "TOP-DOC-VLLMA-001", "TOP-DOC-BIO-001",
            "TOP-DOC-FA3-001", "TOP-DOC-VERL-003"} <= got
    human = run_topl("doctor", *STRICT_A3, env={"COLUMNS": "250"})
    assert "batch_invariant_ops" in human.stdout and "FAILED" in human.stdout


def dist(site, name, version, files):
    """A tiny installed package: its modules plus dist-info metadata pip would write."""
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.fixture
def stack(tmp_path):
    """A complete simulated Ascend stack; each test breaks one piece."""

    def make(torch_npu="2.13.0", vllm_ascend="0.18.0", bio=True):
        site = tmp_path / "site"
        dist(site, "torch_npu", torch_npu, {"torch_npu/__init__.py": f"__version__ = '{torch_npu}'\n"})
        dist(site, "vllm-ascend", vllm_ascend, {"vllm_ascend/__init__.py": "",
             "vllm_ascend/rl.py": "class RLConfig:\n    enable_training_consistency: bool = False\n"})
        dist(site, "verl", "0.9.1", {"verl/__init__.py": "", "verl/workers/__init__.py": "",
             "verl/workers/config/__init__.py": "",
             "verl/workers/config/rollout.py": "# PP patch applied: vLLM pipeline parallel supported\n"})
        if bio:
            dist(site, "batch-invariant-ops", "1.0.0", {"batch_invariant_ops/__init__.py": ""})
        dist(site, "flash-attn-npu", "3.0.0", {"flash_attn_npu_v3/__init__.py": ""})
        dist(site, "verl-ascend-recipe", "0.1.0", {"verl_ascend_recipe/__init__.py": "",
             "verl_ascend_recipe/true_on_policy/__init__.py": "", "verl_ascend_recipe/true_on_policy/patches.py": ""})
        cann = tmp_path / "cann"
        cann.mkdir(exist_ok=True)
        (cann / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=9.0.0\n")
        env = {"PYTHONPATH": str(site), "ASCEND_HOME_PATH": str(cann)}
        r = run_topl("doctor", *STRICT_A3, *VERSIONS, "--json", env=env)
        return r.returncode, json.loads(r.stdout)

    return make


def test_complete_stack_passes_but_for_the_missing_device(stack):
    rc, out = stack()
    assert ids(out) == {"TOP-DOC-ACC-001"}  # this machine has no NPU; every installed piece checks out
    oks = ids(out, "ok")
    assert {"TOP-DOC-NPU-002", "TOP-DOC-CANN-001", "TOP-DOC-VLLMA-002", "TOP-DOC-BIO-001", "TOP-DOC-VERL-003"} <= oks


def test_missing_batch_invariant_ops(stack):
    rc, out = stack(bio=False)
    assert rc == 2 and "TOP-DOC-BIO-001" in ids(out)


def test_mismatched_torch_and_torch_npu(stack):
    _, out = stack(torch_npu="2.9.0")
    assert "TOP-DOC-NPU-002" in ids(out)


def test_old_vllm_ascend(stack):
    _, out = stack(vllm_ascend="0.11.0")
    assert "TOP-DOC-VLLMA-001" in ids(out) and "TOP-DOC-NPU-002" not in ids(out)


def test_per_node_doctor_on_a_real_ray_head(ray_head):
    r = run_topl("doctor", "--ray", ray_head, "--json", timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert len(out["nodes"]) == 1 and "(local)" not in out["nodes"][0]["node"]  # reported by the node itself
    env = [f for f in out["nodes"][0]["findings"] if f["id"] == "TOP-DOC-ENV-001"]
    assert env and all(f["severity"] == "ok" for f in env)  # the job's runtime_env reached the node's task


def test_launch_refuses_on_doctor_error_unless_skipped(tmp_path):
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text("print('fake verl ran')\n")
    args = ["launch", "cluster.backend=subprocess", "algorithm.entrypoint=fake_verl", f"cluster.python={sys.executable}",
            f"+cluster.env.PYTHONPATH={pkg}", "rollout.pp=2", "cluster.devices_per_node=2",
            "cluster.versions.verl_patches=[vllm_pp]"]
    r = run_topl(*args, cwd=tmp_path)  # installed verl is stock: vLLM PP would raise at start-up
    assert r.returncode == 2 and "TOP-DOC-VERL-003" in r.stderr and "fake verl ran" not in r.stdout
    r = run_topl(*args, "--skip-doctor", cwd=tmp_path)
    assert r.returncode == 0 and "fake verl ran" in r.stdout and "--skip-doctor" in r.stderr
