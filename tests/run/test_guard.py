"""topl's guard: a real `import verl` in Ray worker processes records each process and refuses a
strict run that lacks a required env var (with the contract's rule id)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import STRICT_A3, run_topl

from topl.launcher.compose.hydra import compose_job
from topl.launcher.render import env as render_env
from topl.launcher.render.invocation import render

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


# One child imports what verl's own import pulls in first (verl@0.9.1:verl/protocol.py imports
# numpy, ray, tensordict, torch and, through verl.utils, transformers: ~5 s of the ~5.5 s), never
# verl itself; then it forks a fresh process per case, which runs the real `import verl` with the
# case's env (0.1 s): each case still imports verl from scratch, runs the guard inside verl's
# import and exits through it, in a process of its own. A child per case cost ~5.5 s each.
FORK_IMPORT_VERL = r"""
import importlib, json, os, sys, traceback
for name in ("numpy", "ray", "tensordict", "torch", "transformers"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass  # then verl's own import below reports it, in each case's process
assert not [m for m in sys.modules if m.split(".")[0] == "verl"]
out = []
for env in json.loads(sys.argv[1]):
    r, w = os.pipe()
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the case's process: its stderr into the pipe, its env, then `import verl`
        os.close(r)
        os.dup2(w, 2)
        os.environ.update(env)
        rc = 0
        try:
            import verl  # noqa: F401
        except BaseException:  # what the interpreter does with an uncaught exception
            traceback.print_exc()
            rc = 1
        sys.stderr.flush()
        os._exit(rc)
    os.close(w)
    with os.fdopen(r) as f:
        err = f.read()
    out.append([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), err])
print(json.dumps(out))
"""


def _needs(*modules: str) -> None:
    """Skip without them; found, not imported (`import verl` here would cost ~5 s, for nothing)."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} is not installed")


def _import_verl_each(*envs: dict) -> list[subprocess.CompletedProcess]:
    """`import verl` in a fresh process per env (the test's environment plus that env)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOPL_GUARD", "VERL_"))}
    out = subprocess.run(
        [sys.executable, "-c", FORK_IMPORT_VERL, json.dumps(envs)],
        capture_output=True,
        text=True,
        env=clean,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.splitlines()[-1])
    return [subprocess.CompletedProcess("import verl", rc, "", err) for rc, err in results]


@pytest.fixture(scope="module")
def driver_imports(tmp_path_factory):
    """The three driver cases of this module in one child: strict with the env var wrong, strict
    with it right (both recording into `guard`), and the guard module without a manifest."""
    _needs("verl")
    folder = tmp_path_factory.mktemp("guard")
    env = {
        "TOPL_GUARD": json.dumps(STRICT),
        "TOPL_GUARD_DIR": str(folder),
        "VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard",
    }
    bad, ok, bare = _import_verl_each(
        {**env, "VLLM_BATCH_INVARIANT": "0"},
        {**env, "VLLM_BATCH_INVARIANT": "1"},
        {"VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard"},
    )
    return {"bad": bad, "ok": ok, "bare": bare, "folder": folder}


def test_guard_in_a_driver_records_and_refuses(driver_imports):
    bad, ok = driver_imports["bad"], driver_imports["ok"]
    assert bad.returncode != 0 and "TOP-ALN-001: env VLLM_BATCH_INVARIANT" in bad.stderr
    assert ok.returncode == 0, ok.stderr
    recs = [json.loads(p.read_text()) for p in driver_imports["folder"].glob("*.json")]
    assert sorted(r["missing"] == [] for r in recs) == [False, True]
    assert all(r["role"] == "driver" and r["versions"]["verl"] for r in recs)


def test_guard_without_manifest_never_breaks_a_job(driver_imports):
    out = driver_imports["bare"]
    assert out.returncode == 0 and "TOPL-GUARD" not in out.stderr, out.stderr


# One local Ray for both cases (a start is ~6 s): the job's runtime_env carries the manifest and
# the right value to two workers, as verl's ray.init(runtime_env=...) does; then one task whose
# own runtime_env carries the whole env with the wrong value runs in a fresh worker (another
# runtime_env is never served by a worker of the first), where the guard must refuse.
RAY_SCRIPT = r"""
import json, sys, ray
ok, bad = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
         _node_ip_address="127.0.0.1", runtime_env={"env_vars": ok})

@ray.remote(max_retries=0)
def worker():
    import os
    import verl  # noqa: F401  -- the guard runs here, inside verl's import
    return os.getpid()

for name, tasks in (
    ("OK", lambda: [worker.remote(), worker.remote()]),
    ("BAD", lambda: [worker.options(runtime_env={"env_vars": bad}).remote()]),
):
    try:
        print(name, "PIDS", json.dumps(ray.get(tasks(), timeout=240)), flush=True)
    except Exception as e:  # noqa: BLE001
        print(name, "FAILED", str(e).replace("\n", " | ")[:3000], flush=True)
ray.shutdown()
"""


def test_guard_in_ray_workers_records_each_process_and_refuses_a_missing_env_var(tmp_path):
    _needs("verl", "ray")
    base = {
        "TOPL_GUARD": json.dumps(STRICT),
        "TOPL_GUARD_DIR": str(tmp_path / "guard"),
        "VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard",
        "OMP_NUM_THREADS": "1",
    }
    # the driver itself lacks the manifest: only the workers get it, through runtime_env
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOPL_GUARD", "VERL_"))}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            RAY_SCRIPT,
            json.dumps({**base, "VLLM_BATCH_INVARIANT": "1"}),
            json.dumps({**base, "VLLM_BATCH_INVARIANT": "0"}),
        ],
        capture_output=True,
        text=True,
        env={**clean, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"},
        timeout=420,
    )
    out = run.stdout + run.stderr
    lines = {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in run.stdout.splitlines() if " " in l}
    assert lines.get("OK", "").startswith("PIDS"), out[-3000:]
    pids = set(json.loads(lines["OK"][len("PIDS") :]))
    recs = {
        r["pid"]: r
        for r in (json.loads(p.read_text()) for p in (tmp_path / "guard").glob("*.json"))
    }
    assert pids <= set(recs), (pids, recs.keys())
    for pid in pids:
        assert recs[pid]["role"] == "ray_worker" and recs[pid]["missing"] == []
        assert recs[pid]["env"]["VLLM_BATCH_INVARIANT"] == "1"

    bad = lines.get("BAD", "")
    assert bad.startswith("FAILED") and "TOP-ALN-001: env VLLM_BATCH_INVARIANT" in bad, out[-3000:]


def catalog() -> dict[str, dict]:
    r = run_topl("rules", "--json")
    assert r.returncode == 0, r.stderr
    return {row["rule"]: row for row in json.loads(r.stdout)}


def test_every_rule_id_the_guard_reports_is_in_the_catalog():
    import re

    import topl.launcher.render.invocation as R

    source = (
        Path(R.__file__).parents[1].joinpath("guard.py").read_text()
    )  # not imported: it would run
    own = set(re.findall(r'"(TOP-[A-Z]+-[0-9]+)"', source))
    manifest = json.loads(render(compose_job(STRICT_A3).to_object()).env["TOPL_GUARD"])
    from_spec = {rule for _, rule in [*manifest["env"].values(), *manifest["modules"].values()]}
    assert own == {"TOP-GUARD-001"} and {"TOP-ALN-001", "TOP-STACK-005"} <= from_spec
    rules = catalog()
    assert own | from_spec | set(render_env.GUARDED_ENV.values()) <= set(rules)
    assert rules["TOP-GUARD-001"]["checked_by"] == "guard"  # run time, every verl process
    assert {rules[r]["checked_by"] for r in from_spec} == {"check"}  # also checked before launch
    assert set(rules["TOP-GUARD-001"]) == set(rules["TOP-ALN-001"])  # same fields for every row


def test_run_time_rules_are_listed_but_never_evaluated_by_topl_check():
    from topl.launcher.cli.rules import rules_markdown
    from topl.launcher.contract.core import RULES

    assert "TOP-GUARD-001" not in {r.id for r in RULES}  # check / plan / sweeps iterate RULES
    env = {"TOPL_GUARD": "not json", "VERL_USE_EXTERNAL_MODULES": "topl.launcher.guard"}
    r = run_topl("check", "--json", env=env)
    assert r.returncode == 0 and "TOP-GUARD" not in r.stdout, r.stdout + r.stderr
    (row,) = [l for l in rules_markdown().splitlines() if "`TOP-GUARD-001`" in l]
    assert "run time" in row and "not `topl check`" in row
    human = run_topl("rules", env={"COLUMNS": "80"}).stdout
    assert "TOP-GUARD-001" in human and "1 checked at run time by topl's guard" in human
