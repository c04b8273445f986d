"""`topl doctor` on this machine and on simulated installed stacks (per Ray node: test_doctor_ray.py)."""

import json
import sys

import pytest
import yaml
from helpers import STRICT_A3, no_site_python, run_topl, run_topl_inproc
from paths import ROOT

from topl.launcher import facts

CONF = ROOT / "conf"

VERSIONS = ["cluster.versions.torch=2.13.0", "cluster.versions.torch_npu=2.13.0"]


def ids(out, severity="error"):
    return {f["id"] for n in out["nodes"] for f in n["findings"] if f["severity"] == severity}


def test_local_spec_passes_here():
    r = run_topl("doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["ok"] is True


def test_strict_ascend_spec_reports_each_missing_piece_here(verl_imports_here):
    r = run_topl_inproc("doctor", *STRICT_A3, "--json")
    assert r.returncode == 2
    got = ids(json.loads(r.stdout))
    assert {
        "TOP-DOC-ACC-001",
        "TOP-DOC-NPU-001",
        "TOP-DOC-CANN-001",
        "TOP-DOC-VLLMA-001",
        "TOP-DOC-BIO-001",
        "TOP-DOC-FA3-001",
        "TOP-DOC-VERL-003",
    } <= got
    human = run_topl_inproc("doctor", *STRICT_A3, env={"COLUMNS": "250"})
    assert "batch_invariant_ops" in human.stdout and "FAILED" in human.stdout


def dist(site, name, version, files, requires=()):
    """A tiny installed package: its modules plus dist-info metadata pip would write."""
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    req = "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{req}"
    )


NO_DEVICE_TORCH = "class cuda:\n    is_available = staticmethod(lambda: False)\n"
PROFILES = {p.stem: yaml.safe_load(p.read_text()) for p in (CONF / "stack").glob("*.yaml")}


def stock(profile: str, fid: str) -> bool:
    """Whether the released package (no source patch) has the fact on this profile."""
    v = {**PROFILES[profile]["versions"], "verl_patches": [], "vllm_ascend_patches": []}
    return facts.holds(fid, v)


def layout(profile: str) -> dict[str, tuple[str, dict[str, str], tuple]]:
    """dist name -> (version, files, requires) as the profile's released packages lay them out:
    every file and symbol the doctor looks for is where the fact table says that release has it
    (scripts/check_facts.py proves those citations in the real sdists / wheels)."""
    p = PROFILES[profile]
    v = p["versions"]
    out = {
        # torch's module as a stand-in that sees no device, as the real one here does: the
        # accelerator check's `import torch` is not what these tests are about (~2 s per run)
        "torch": (str(v["torch"]), {"torch/__init__.py": NO_DEVICE_TORCH}, ()),
        "torch_npu": (
            str(v["torch_npu"]),
            {"torch_npu/__init__.py": ""},
            (f"torch=={v['torch']}+cpu",),
        ),
        "vllm-ascend": (
            str(v["vllm_ascend"]),
            {"vllm_ascend/__init__.py": "", "vllm_ascend/ascend_config.py": "# config\n"},
            (),
        ),
        "verl": (
            str(v["verl"]),
            {
                "verl/__init__.py": "",
                "verl/workers/config/rollout.py": "#\n",
                "verl/workers/rollout/utils.py": "#\n",
            },
            (),
        ),
        "mindspeed": ("0.16.0", {"mindspeed/__init__.py": ""}, ()),
        "batch-invariant-ops": ("1.0.0", {"batch_invariant_ops/__init__.py": ""}, ()),
        "flash-attn-npu": (
            "3.0.0",
            {"flash_attn_npu_v3/__init__.py": "", "flash_attn_npu/__init__.py": ""},
            (),
        ),
    }
    dists = {
        "vllm_ascend": "vllm-ascend",
        "verl": "verl",
        "torch_npu": "torch_npu",
        "mindspeed": "mindspeed",
    }
    for f in facts.FACTS:
        if f.detect and stock(profile, f.id):
            module, rel, needle = f.detect
            files = out[dists[module]][1]
            files[f"{module}/{rel}"] = files.get(f"{module}/{rel}", "") + needle + "\n"
    if p.get("external_modules"):
        mod = p["external_modules"].replace(".", "/")
        out["verl-ascend-recipe"] = (
            "0.1.0",
            {
                "verl_ascend_recipe/__init__.py": "",
                "verl_ascend_recipe/true_on_policy/__init__.py": "",
                f"{mod}/__init__.py": "",
            },
            (),
        )
    return out


@pytest.fixture
def stack(tmp_path):
    """A simulated installed stack for a profile; `drop` / `change` break one piece."""

    def make(profile="seed", drop=(), change=None, args=(), installed_cann=None):
        site = tmp_path / "site"
        for name, (version, files, requires) in layout(profile).items():
            if name in drop:
                continue
            changed = (change or {}).get(name)  # (version, files[, requires])
            if changed:
                version, files, requires = (*changed, requires)[:3]
            dist(site, name, version, files, requires)
        cann = tmp_path / "cann"
        cann.mkdir(exist_ok=True)
        (cann / "ascend_toolkit_install.info").write_text(
            f"package_name=Ascend-cann-toolkit\n"
            f"version={installed_cann or PROFILES[profile]['versions']['cann']}\n"
        )
        env = {"PYTHONPATH": str(site), "ASCEND_HOME_PATH": str(cann)}
        r = run_topl(
            "doctor", "recipe=qwen3_4b_grpo_a3_strict", f"stack={profile}", *args, "--json", env=env
        )
        return r.returncode, json.loads(r.stdout)

    return make


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_profile_stack_passes_but_for_the_missing_device(stack, profile):
    rc, out = stack(profile)
    assert ids(out) == {
        "TOP-DOC-ACC-001"
    }  # this machine has no NPU; every installed piece checks out
    assert {
        "TOP-DOC-NPU-002",
        "TOP-DOC-CANN-001",
        "TOP-DOC-BIO-001",
        "TOP-DOC-MS-001",
        "TOP-DOC-VLLMA-001",
    } <= ids(out, "ok")


@pytest.mark.parametrize(
    "installed,args,severity",
    [
        ("9.0.0.B160", (), "ok"),  # the seed's README: CANN 9.0.0.B160 (CANN900B160)
        ("9.0.0", (), "warning"),  # a build is not its release
        ("9.0.0.B170", (), "warning"),
        ("8.5.RC1", (), "warning"),
        ("CANN900B160", (), "warning"),  # not a form CANN writes: said, not matched
        ("9.0.0", ("cluster.versions.cann=9.0",), "ok"),  # 9.0 is 9.0.0
    ],
)
def test_cann_is_compared_as_cann_orders_versions(stack, installed, args, severity):
    """Installed vs declared CANN, read as CANN orders versions (was: any CANN passed)."""
    _, out = stack("seed", args=args, installed_cann=installed)
    assert "TOP-DOC-CANN-001" in ids(out, severity)


def test_seed_stack_is_patched_at_import_not_an_error(stack):
    _, out = stack("seed", args=("rollout.pp=2", "cluster.versions.verl_patches=[vllm_pp]"))
    warn = ids(out, "warning")
    assert {"TOP-DOC-VLLMA-002", "TOP-DOC-VERL-003"} <= warn  # the seed git-applies at import
    assert ids(out) == {"TOP-DOC-ACC-001"}


def test_seed_stack_without_its_patch_module_misses_fa3(stack):
    _, out = stack("seed", drop=("verl-ascend-recipe",))
    assert {"TOP-DOC-VLLMA-002", "TOP-DOC-PATCH-001"} <= ids(out)


def test_release_stack_without_fa3_names_it(stack):
    va = layout("release")["vllm-ascend"]
    files = {k: v for k, v in va[1].items() if "fa3" not in k}
    _, out = stack("release", change={"vllm-ascend": (va[0], files)})
    assert "TOP-DOC-VLLMA-002" in ids(out)


def test_rl_config_vllm_ascend_under_a_release_declaration(stack):
    pre = layout("prerelease")["vllm-ascend"]
    _, out = stack("release", change={"vllm-ascend": pre[:2]})  # 0.30.0rc2 installed, 0.23 declared
    assert "TOP-DOC-VLLMA-003" in ids(out) and "TOP-DOC-VLLMA-001" in ids(out, "warning")


def test_missing_batch_invariant_ops(stack):
    rc, out = stack(drop=("batch-invariant-ops",))
    assert rc == 2 and "TOP-DOC-BIO-001" in ids(out)


def test_torch_other_than_torch_npu_pins(stack):
    _, out = stack("release", change={"torch": ("2.10.1", layout("release")["torch"][1])})
    assert "TOP-DOC-NPU-002" in ids(out)


def test_an_unreadable_torch_npu_version_without_a_torch_pin_is_a_finding(stack):
    """No Requires-Dist pin and a version PEP 440 cannot read: one finding, not a traceback."""
    rc, out = stack("release", change={"torch_npu": ("2.7.1-custom-build", {}, ())})
    (f,) = [f for n in out["nodes"] for f in n["findings"] if f["id"] == "TOP-DOC-NPU-002"]
    assert rc == 2 and f["severity"] == "error" and "2.7.1-custom-build" in f["found"]


def test_mindspeed_without_batch_invariant_switches(stack):
    _, out = stack("seed", change={"mindspeed": ("0.17.0", {"mindspeed/__init__.py": ""})})
    assert "TOP-DOC-MS-001" in ids(out)


def guard_findings(*args):
    r = run_topl_inproc("doctor", *args, "--json")
    found = [f for n in json.loads(r.stdout)["nodes"] for f in n["findings"]]
    return r.returncode, {f["id"]: f for f in found if "GUARD" in f["id"]}


def test_guard_import_is_checked_with_the_python_that_runs_verl(tmp_path, verl_imports_here):
    sub = ("cluster.backend=subprocess",)
    rc, got = guard_findings(*sub, f"cluster.python={no_site_python(tmp_path)}")
    f = got["TOP-DOC-GUARD-001"]
    assert rc == 2 and f["severity"] == "error" and "No module named 'topl'" in f["found"]
    assert "install topl" in f["fix"] and "python-without-topl" in f["fix"]
    assert "alignment=mitigated|off" in f["fix"]  # how to run without the guard
    rc, got = guard_findings(*sub, f"cluster.python={sys.executable}")
    assert got["TOP-DOC-GUARD-001"]["severity"] == "ok"
    _, got = guard_findings(*sub, "alignment=off", f"cluster.python={no_site_python(tmp_path)}")
    assert got == {}  # no guard in a non-strict run: nothing to import


def test_ray_job_spec_checked_here_says_every_node_needs_topl(verl_imports_here):
    args = ("doctor", "cluster.backend=ray_job", "cluster.ray_address=http://head:8265", "--json")
    found = [f for n in json.loads(run_topl_inproc(*args).stdout)["nodes"] for f in n["findings"]]
    got = {f["id"]: f for f in found if "GUARD" in f["id"]}
    f = got["TOP-DOC-GUARD-002"]
    assert f["severity"] == "warning" and "every node" in f["fix"] and "--ray" in f["fix"]


def test_launch_refuses_on_doctor_error_unless_skipped(tmp_path, verl_imports_here):
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text("print('fake verl ran')\n")
    args = [
        "launch",
        "cluster.backend=subprocess",
        "algorithm.entrypoint=fake_verl",
        f"cluster.python={sys.executable}",
        f"+cluster.env.PYTHONPATH={pkg}",
        "rollout.pp=2",
        "cluster.devices_per_node=2",
        "cluster.versions.verl_patches=[vllm_pp]",
        "--skip-deep",  # the subject is the doctor: the dry run (stock verl lacks the patch) has its own tests
    ]
    # in this process (exit code, stdout and stderr as the CLI's; the job child's output streams
    # through them): the subject is the refusal, not the process boundary
    r = run_topl_inproc(*args, cwd=tmp_path)  # installed verl is stock: vLLM PP would raise
    assert r.returncode == 2 and "TOP-DOC-VERL-003" in r.stderr and "fake verl ran" not in r.stdout
    r = run_topl_inproc(*args, "--skip-doctor", cwd=tmp_path)
    assert r.returncode == 0 and "fake verl ran" in r.stdout and "--skip-doctor" in r.stderr


def test_verl_import_is_checked_with_the_python_the_subprocess_backend_runs(tmp_path):
    """cluster.python starts verl on the subprocess backend: a verl that imports here proves
    nothing about it."""

    def verl_finding(python):  # in this process: the subject is the doctor's child, not the CLI's
        r = run_topl_inproc(
            "doctor", "cluster.backend=subprocess", f"cluster.python={python}", "--json"
        )
        found = [f for n in json.loads(r.stdout)["nodes"] for f in n["findings"]]
        return next(f for f in found if f["id"] == "TOP-DOC-VERL-004")

    f = verl_finding(no_site_python(tmp_path))
    assert f["severity"] == "error" and "No module named 'verl'" in f["found"], f
    assert "python-without-topl" in f["fix"] and "python-without-topl" in f["what"]
    assert verl_finding(sys.executable)["severity"] == "ok"


# --- the declared profile, the registry, the output -----------------------------------------------


def test_a_verl_other_than_the_profiles_is_a_wrong_version_error(stack):
    rc, out = stack("seed", change={"verl": layout("release")["verl"][:2]})  # 0.9.1 on stack=seed
    f = next(f for n in out["nodes"] for f in n["findings"] if f["id"] == "TOP-DOC-VERL-002")
    assert rc == 2 and f["severity"] == "error" and "wrong version" in f["found"]
    assert "0.8.0" in f["needed"] and "stack=seed" in f["needed"]
    assert "release/v0.8.0" in f["fix"] and "docs/install.md" in f["fix"]


def test_doctor_checks_are_a_registry_listed_with_id_what_when_fix():
    import re

    from topl.launcher.doctor.report import catalog

    checks = catalog()
    assert len({c.id for c in checks}) == len(checks) >= 20
    assert all(c.what and c.when and c.fix for c in checks)
    # every doctor id the code can emit is a registered check
    root = CONF.parent / "launcher"
    emitted = {
        m for p in root.rglob("*.py") for m in re.findall(r"TOP-DOC-[A-Z0-9]+-\d{3}", p.read_text())
    }
    assert emitted <= {c.id for c in checks}, emitted - {c.id for c in checks}
    for args in (["rules", "--doctor", "--json"], ["doctor", "--list", "--json"]):
        listed = json.loads(run_topl(*args).stdout)
        assert [c["id"] for c in listed] == [c.id for c in checks]
        assert set(listed[0]) == {"id", "what", "when", "fix"}


def test_every_finding_comes_from_a_registered_check(compose, verl_imports_here):
    from topl.launcher.doctor.report import catalog, run_checks

    known = {c.id for c in catalog()}
    for args in ([], STRICT_A3, [*STRICT_A3, "cluster.backend=subprocess"]):
        assert {f.id for f in run_checks(compose(list(args)).to_object())} <= known


def test_doctor_prints_a_summary_first_and_details_on_request(tmp_path, verl_imports_here):
    r = run_topl_inproc("doctor", *STRICT_A3, cwd=tmp_path)  # piped: not a terminal
    lines = r.stdout.splitlines()
    assert r.returncode == 2 and lines[0].startswith("topl doctor: FAILED: ")
    assert "error(s)" in lines[0] and "stack=seed" in lines[0]
    assert len(lines) < 50 and max(map(len, lines)) <= 200  # it was 170 lines, up to 1,324 chars
    assert "TOP-DOC-BIO-001" in r.stdout and "TOP-DOC-PY-001" not in r.stdout  # passed: hidden
    verbose = run_topl_inproc("doctor", *STRICT_A3, "--verbose", cwd=tmp_path).stdout
    assert "TOP-DOC-PY-001" in verbose and max(map(len, verbose.splitlines())) <= 200
