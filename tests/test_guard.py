"""topl's guard: a real `import verl` in Ray worker processes records each process and refuses a
strict run that lacks a required env var (with the contract's rule id)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import STRICT_A3, run_topl

from topl.launcher.compose import compose_job
from topl.launcher.render import render

STRICT = {"strict": True, "env": {"VLLM_BATCH_INVARIANT": ["1", "TOP-ALN-001"]}, "modules": {}}


def test_render_puts_the_guard_after_the_patch_module_only_in_strict_runs():
    strict = render(compose_job(["recipe=qwen3_30b_a3b_grpo_a3_strict"]).to_object()).env
    mods = strict["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert mods[-1] == "topl.launcher.guard" and len(mods) == 2  # after the patch module
    manifest = json.loads(strict["TOPL_GUARD"])
    assert manifest["env"]["VLLM_BATCH_INVARIANT"] == ["1", "TOP-ALN-001"]
    assert manifest["modules"][mods[0]] == ["loaded", "TOP-STACK-005"]
    off = render(compose_job(["alignment=off"]).to_object()).env
    assert "TOPL_GUARD" not in off and "topl.launcher.guard" not in off.get(
        "VERL_USE_EXTERNAL_MODULES", ""
    )


def _import_verl(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import verl"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_guard_in_a_driver_records_and_refuses(tmp_path):
    pytest.importorskip("verl")
    env = {
        "TOPL_GUARD": json.dumps(STRICT),
        "TOPL_GUARD_DIR": str(tmp_path),
        "VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard",
    }
    env.pop("VLLM_BATCH_INVARIANT", None)
    bad = _import_verl({**env, "VLLM_BATCH_INVARIANT": "0"})
    assert bad.returncode != 0 and "TOP-ALN-001: env VLLM_BATCH_INVARIANT" in bad.stderr
    ok = _import_verl({**env, "VLLM_BATCH_INVARIANT": "1"})
    assert ok.returncode == 0, ok.stderr
    recs = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert sorted(r["missing"] == [] for r in recs) == [False, True]
    assert all(r["role"] == "driver" and r["versions"]["verl"] for r in recs)


def test_guard_without_manifest_never_breaks_a_job():
    pytest.importorskip("verl")
    out = _import_verl({"VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard"})
    assert out.returncode == 0 and "TOPL-GUARD" not in out.stderr


RAY_SCRIPT = r"""
import json, sys, ray
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
         _node_ip_address="127.0.0.1", runtime_env={"env_vars": json.loads(sys.argv[1])})

@ray.remote(max_retries=0)
def worker():
    import os
    import verl  # noqa: F401  -- the guard runs here, inside verl's import
    return os.getpid()

try:
    print("PIDS", json.dumps(ray.get([worker.remote(), worker.remote()], timeout=240)))
except Exception as e:  # noqa: BLE001
    print("FAILED", str(e).replace("\n", " | ")[:3000])
ray.shutdown()
"""


def test_guard_in_ray_workers_records_each_process_and_refuses_a_missing_env_var(tmp_path):
    pytest.importorskip("verl")
    pytest.importorskip("ray")
    base = {
        "TOPL_GUARD": json.dumps(STRICT),
        "TOPL_GUARD_DIR": str(tmp_path / "guard"),
        "VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard",
        "OMP_NUM_THREADS": "1",
    }

    def run(env):
        # the driver itself lacks the manifest: only the workers get it, through runtime_env
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOPL_GUARD", "VERL_"))}
        out = subprocess.run(
            [sys.executable, "-c", RAY_SCRIPT, json.dumps(env)],
            capture_output=True,
            text=True,
            env={**clean, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"},
            timeout=420,
        )
        return out.stdout + out.stderr

    out = run({**base, "VLLM_BATCH_INVARIANT": "1"})
    assert "PIDS" in out, out[-3000:]
    pids = set(json.loads(out.split("PIDS", 1)[1].splitlines()[0]))
    recs = {
        r["pid"]: r
        for r in (json.loads(p.read_text()) for p in (tmp_path / "guard").glob("*.json"))
    }
    assert pids <= set(recs), (pids, recs.keys())
    for pid in pids:
        assert recs[pid]["role"] == "ray_worker" and recs[pid]["missing"] == []
        assert recs[pid]["env"]["VLLM_BATCH_INVARIANT"] == "1"

    out = run({**base, "VLLM_BATCH_INVARIANT": "0"})
    assert "FAILED" in out and "TOP-ALN-001: env VLLM_BATCH_INVARIANT" in out, out[-3000:]


def catalog() -> dict[str, dict]:
    r = run_topl("rules", "--json")
    assert r.returncode == 0, r.stderr
    return {row["rule"]: row for row in json.loads(r.stdout)}


def test_every_rule_id_the_guard_reports_is_in_the_catalog():
    import re

    import topl.launcher.render as R

    source = Path(R.__file__).with_name("guard.py").read_text()  # not imported: it would run
    own = set(re.findall(r'"(TOP-[A-Z]+-[0-9]+)"', source))
    manifest = json.loads(render(compose_job(STRICT_A3).to_object()).env["TOPL_GUARD"])
    from_spec = {rule for _, rule in [*manifest["env"].values(), *manifest["modules"].values()]}
    assert own == {"TOP-GUARD-001"} and {"TOP-ALN-001", "TOP-STACK-005"} <= from_spec
    rules = catalog()
    assert own | from_spec | set(R.GUARDED_ENV.values()) <= set(rules)
    assert rules["TOP-GUARD-001"]["checked_by"] == "guard"  # run time, every verl process
    assert {rules[r]["checked_by"] for r in from_spec} == {"check"}  # also checked before launch
    assert set(rules["TOP-GUARD-001"]) == set(rules["TOP-ALN-001"])  # same fields for every row


def test_run_time_rules_are_listed_but_never_evaluated_by_topl_check():
    from topl.launcher.cli.rules import rules_markdown
    from topl.launcher.contract import RULES

    assert "TOP-GUARD-001" not in {r.id for r in RULES}  # check / plan / sweeps iterate RULES
    env = {"TOPL_GUARD": "not json", "VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard"}
    r = run_topl("check", "--json", env=env)
    assert r.returncode == 0 and "TOP-GUARD" not in r.stdout, r.stdout + r.stderr
    (row,) = [l for l in rules_markdown().splitlines() if "`TOP-GUARD-001`" in l]
    assert "run time" in row and "not `topl check`" in row
    human = run_topl("rules", env={"COLUMNS": "80"}).stdout
    assert "TOP-GUARD-001" in human and "1 checked at run time by topl's guard" in human
