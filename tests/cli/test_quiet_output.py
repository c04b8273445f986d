"""Noise (issue 49, item 7): what the seed measured at logdiff 0 is info, one line each, not a
warning; TOP-MEM-003 sums up the model's keys; `render`'s environment wraps; `-q/--quiet` prints
errors only for check, render and plan; `--json` keeps its fields."""

import json

import pytest
from helpers import run_topl_inproc as run

from topl.launcher.compose import recipes

SEED = sorted(n for n in recipes.available() if n.startswith("seed_"))
MEASURED = {"TOP-CACHE-001", "TOP-CACHE-002", "TOP-LOGP-004"}  # the seed's logdiff 0 with them on


def test_what_the_seed_measured_is_info_on_every_seed_recipe():
    for name in SEED:
        d = json.loads(run("check", f"recipe={name}", "--json").stdout)
        assert d["ok"] and set(d) == {"ok", "violations", "command_line_only"}
        by = {v["rule"]: v["severity"] for v in d["violations"]}
        if name.endswith("_on"):  # the seed's strict runs: each ran one of them on
            assert MEASURED & set(by), name
        assert all(by[r] == "info" for r in MEASURED & set(by)), (name, by)
        assert set(d["violations"][0]) == {"rule", "severity", "message", "keys", "fix"}
        out = run("check", f"recipe={name}").stdout
        for r in MEASURED & set(by):  # one line each, no key block
            line = next(x for x in out.splitlines() if r in x)
            assert line.startswith(f"INFO {r}: ") and "logdiff 0" in line
        warnings = sum(s == "warning" for s in by.values())
        info = f", {len(MEASURED & set(by))} info" if MEASURED & set(by) else ""
        assert f"{warnings} warning(s){info}" in out
        here = {"TOP-DOC-VERL-002"}  # the verl installed in this Python, not the recipe
        assert sum(s == "warning" for r, s in by.items() if r not in here) <= 3, by  # was 5-6


def test_check_fix_warnings_leaves_the_measured_settings_alone():
    r = run("check", "recipe=seed_qwen3_4b_grpo_on", "--fix=warnings", "--json")
    changed = {c["key"] for c in json.loads(r.stdout)["fix"]["changes"]}
    assert changed  # it did clear the warnings (the Ray head, max_num_seqs)
    assert not changed & {"rollout.prefix_caching", "rollout.chunked_prefill"}, changed


def test_the_memory_warning_sums_up_the_model():
    out = run("check", "recipe=seed_qwen3_4b_grpo_on").stdout
    block = out[out.index("WARNING TOP-MEM-003") :].split("\n  fix:")[0].splitlines()
    assert len(block) <= 15, block  # 21 before: one line per model key
    assert any(
        "model.{hidden_size=2560, head_dim=128" in x and "conf/model/qwen3_4b.yaml" in x
        for x in block
    )
    d = json.loads(run("check", "recipe=seed_qwen3_4b_grpo_on", "--json").stdout)
    mem = next(v for v in d["violations"] if v["rule"] == "TOP-MEM-003")
    assert mem["keys"]["model.num_layers"]["value"] == 36  # --json keeps every key


def test_render_wraps_the_environment_and_the_command_still_runs():
    import subprocess

    out = run("render", "recipe=seed_qwen3_4b_grpo_on").stdout
    lines = out.splitlines()
    assert len(lines[0]) <= 100 and lines[0].endswith(" \\")  # was 937 characters
    assert "TOPL_GUARD=" in out  # one value, on its own line however long
    python_at = next(i for i, x in enumerate(lines) if x.lstrip().startswith("python3 -m "))
    assert all(len(x) <= 100 for x in lines[:python_at] if "TOPL_GUARD=" not in x)
    env_script = "\n".join([*lines[:python_at], "  env"])  # the same assignments, then `env`
    shown = subprocess.run(["bash", "-c", env_script], capture_output=True, text=True).stdout
    assert "HCCL_DETERMINISTIC=strict" in shown and "VLLM_BATCH_INVARIANT=1" in shown


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_prints_errors_only(flag):
    ok = run("check", "recipe=seed_qwen3_4b_grpo_on", flag)
    assert ok.returncode == 0 and ok.stdout == "" and ok.stderr == ""
    bad = run("check", "recipe=seed_qwen3_4b_grpo_on", "rollout.tp=3", flag)
    assert bad.returncode == 2 and "ERROR TOP-" in bad.stdout
    assert "WARNING" not in bad.stdout and "INFO" not in bad.stdout and "note:" not in bad.stdout
    assert bad.stdout.splitlines()[-1].startswith("REJECTED: ")
    r = run("render", "recipe=seed_qwen3_4b_grpo_on", "rollout.tp=3", flag)
    assert r.returncode == 2 and "ERROR TOP-" in r.stderr and "WARNING" not in r.stderr
    assert run("plan", "train.epochs=1,2", flag).stdout == ""  # every point valid
    p = run("plan", "train.tp=1,2", flag).stdout
    assert "invalid" in p and "valid " not in p.replace("invalid", "")
    j = json.loads(run("check", "recipe=seed_qwen3_4b_grpo_on", flag, "--json").stdout)
    assert j["ok"] and j["violations"]  # --json is for machines: everything, as before
