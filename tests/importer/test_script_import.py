"""`topl recipes import`: bash launch scripts read as data, mapped onto the spec, rendered back."""

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import run_topl
from paths import ROOT, TESTS

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job
from topl.launcher.importer.read import read_script
from topl.launcher.importer.recipe import build_recipe
from topl.launcher.importer.report import recipe_text, same
from topl.launcher.importer.resolve import resolve
from topl.launcher.render.invocation import render

SCRIPTS = TESTS / "data" / "scripts"
# (script, env the caller sets, script arguments): every shape the scripts take
CASES = [
    ("grpo_arrays.sh", {}, []),
    (
        "grpo_arrays.sh",
        {"ENABLE_TRUE_ON_POLICY": "0", "ACTOR_PP": "4"},
        ["trainer.val_before_train=False"],
    ),
    ("grpo_arrays.sh", {"ENABLE_TRUE_ON_POLICY": "0", "ROLLOUT_PER_REQUEST_SEED": "true"}, []),
    ("fsdp_inline.sh", {}, ["trainer.total_epochs=2"]),
    ("fsdp_inline.sh", {"ENGINE": "fsdp2", "GPUS": "16"}, []),
    ("dapo_unknown.sh", {"MAX_RESP": "8192"}, []),
]
IDS = [f"{s}-{i}" for i, (s, _, _) in enumerate(CASES)]


def real_bash(script: Path, env: dict, args: list, tmp: Path):
    """What bash itself passes to python (a stub python3 records argv and env; test scripts only)."""
    stub = tmp / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$ARGV_OUT"\nenv > "$ENV_OUT"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    (tmp / "logs").mkdir()
    base = {
        "PATH": f"{stub.parent}:/usr/bin:/bin",
        "HOME": "$HOME",
        "ARGV_OUT": str(tmp / "argv"),
        "ENV_OUT": str(tmp / "env"),
    }
    subprocess.run(
        ["bash", str(script), *args], env={**base, **env}, cwd=tmp, capture_output=True, check=True
    )
    argv = (tmp / "argv").read_text().splitlines()
    penv = dict(
        line.split("=", 1) for line in (tmp / "env").read_text().splitlines() if "=" in line
    )
    return argv, {
        k: v
        for k, v in penv.items()
        if k not in base and k not in env and k not in ("PWD", "SHLVL", "_", "OLDPWD")
    }


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script,env,args", CASES, ids=IDS)
def test_the_reader_agrees_with_bash(script, env, args, tmp_path):
    argv, penv = real_bash(SCRIPTS / script, env, args, tmp_path)
    launch = resolve((SCRIPTS / script).read_text(), env, args).launch
    mine = [it.text for it in launch.args]
    assert argv[:2] == ["-m", launch.entrypoint]
    # $(nproc) is the one thing the reader leaves unresolved (it never runs commands)
    assert [a for a in argv[2:] if "num_workers" not in a] == [
        a for a in mine if "num_workers" not in a
    ]
    assert penv == {k: it.text for k, it in launch.env.items()}


@pytest.mark.parametrize("script,env,args", CASES, ids=IDS)
def test_import_round_trips(script, env, args, tmp_path):
    """render(import(script)) holds every override of the script (modulo `+`) and its env."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    s = read_script((SCRIPTS / script).read_text(), env, args)
    imp = build_recipe(s)
    # dapo_unknown.sh turns DAPO's overlong buffer on without a penalty factor: topl states one
    # (algorithm.overlong_penalty_factor) that the script leaves to its DAPO config, so the
    # import says it is not reproduced instead of adding it silently
    want = (
        {"reward.reward_kwargs.overlong_buffer_cfg.penalty_factor"} if "dapo" in script else set()
    )
    assert {r["key"] for r in imp.round_trip} == want
    path = tmp_path / "imported.yaml"
    path.write_text(recipe_text(imp, script))
    spec = compose_job([f"recipe={path}"]).to_object()
    refused = "actor_rollout_ref.actor.frobnicate_level"  # dapo_unknown.sh: verl has no such key
    if refused in spec.verl_overrides:
        with pytest.raises(ToplError, match=refused):  # never rendered into a failing command
            render(spec)
        del spec.verl_overrides[refused]
    inv = render(spec)
    got = {k.lstrip("+"): v for k, v in (o.split("=", 1) for o in inv.overrides)}
    parser = OverridesParser.create()
    assert inv.entrypoint == s.entrypoint
    from topl.launcher.render.spelling import expand

    assert all(r["line"] is None for r in imp.round_trip)  # none of the script's own keys
    for key, st in s.overrides.items():
        if key == refused:
            continue
        assert key in got, (key, st.line)
        # modulo $HOME / ~/ (bash expanded them for the script; topl's render does)
        assert same(parser.parse_override(f"{key}={got[key]}").value(), expand(st.value)), (
            key,
            st.line,
            got[key],
        )
    from topl.launcher.render.env import without_guard

    script_env = without_guard(inv.env)  # modulo topl's guard (appended to the module list)
    for name, it in s.env.items():
        assert script_env[name] == it.text, name
    assert len(s.overrides) >= 10


def test_conditionals_follow_the_switch():
    on = read_script((SCRIPTS / "grpo_arrays.sh").read_text())
    off = read_script((SCRIPTS / "grpo_arrays.sh").read_text(), {"ENABLE_TRUE_ON_POLICY": "0"})
    assert "VLLM_BATCH_INVARIANT" in on.env and "VLLM_BATCH_INVARIANT" not in off.env
    assert (
        on.overrides["actor_rollout_ref.rollout.seed"].value == 7
        and "actor_rollout_ref.rollout.seed" not in off.overrides
    )
    assert on.overrides["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"].value == 4096
    assert on.overrides["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"].deps == (
        23,
        24,
        25,
    )  # the two lengths and the sum
    with pytest.raises(ToplError, match="no `python -m"):  # `exit 1` comes first
        read_script((SCRIPTS / "fsdp_inline.sh").read_text(), {"ENGINE": "megatron"})


def test_imported_fields_land_on_the_spec():
    imp = build_recipe(read_script((SCRIPTS / "grpo_arrays.sh").read_text()))
    r = imp.recipe
    assert r["train"]["pp"] == 2 and r["train"]["use_fused_rmsnorm"] is True
    assert r["train"]["recompute_granularity"] == "full" and imp.defaults["stack"] == "seed"
    assert imp.defaults["alignment"] == "strict" and imp.defaults["model"] == "qwen3_4b"
    assert r["verl_overrides"]["trainer.logger"] == ["console"]


def test_unmapped_keys_are_reported_with_their_lines():
    imp = build_recipe(read_script((SCRIPTS / "dapo_unknown.sh").read_text()))
    rows = {
        (r["line"], r["key"]) for r in imp.report if r["kind"] == "verl override (no spec field)"
    }
    assert {(15, "actor_rollout_ref.actor.frobnicate_level"), (16, "my_team.custom_flag")} <= rows
    notes = {r["line"] for r in imp.report if r["kind"] == "not resolved"}
    assert {5, 21} <= notes  # $(nproc) assigned (line 5), then used (line 21)
    r = imp.recipe
    assert r["algorithm"]["overlong_buffer_len"] == 1024 and r["algorithm"]["gen_batch_size"] == 64
    assert imp.defaults["algorithm"] == "dapo"


def test_keys_the_declared_verl_lacks_are_named():
    """Checked against the verl the recipe declares: the seed's patched verl 0.8.0 (the script
    loads its module) has per_request_seed; on verl 0.9.1 (stack=release) it is named, with the
    stack that has it."""
    s = read_script((SCRIPTS / "grpo_arrays.sh").read_text())
    seed = build_recipe(s)
    assert not [r for r in seed.report if r["kind"] == "unknown to verl"]
    release = build_recipe(s, {"stack": "release"})
    unknown = {(r["line"], r["key"]): r for r in release.report if r["kind"] == "unknown to verl"}
    assert set(unknown) == {(48, "actor_rollout_ref.rollout.per_request_seed")}
    why = unknown[48, "actor_rollout_ref.rollout.per_request_seed"]["detail"]
    assert why.startswith("verl 0.9.1 (ppo_trainer) has no") and "stack=seed" in why


def test_the_script_is_never_run(tmp_path):
    mark = tmp_path / "ran"
    text = f"touch {mark}\nX=$(touch {mark})\npython3 -m verl.trainer.main_ppo a.b=$(touch {mark}) `touch {mark}`\n"
    s = read_script(text)
    assert not mark.exists() and s.entrypoint == "verl.trainer.main_ppo"
    assert any("command substitution" in msg for _, msg in s.notes)


def test_cli_import_writes_recipe_and_report_and_diffs(tmp_path):
    out = tmp_path / "mine.yaml"
    r = run_topl(
        "recipes",
        "import",
        str(SCRIPTS / "grpo_arrays.sh"),
        "-o",
        str(out),
        "--env",
        "ENABLE_TRUE_ON_POLICY=0",
        # the script leaves ppo_mini_batch_size to verl (256, on its field): a batch that holds
        # it, else the contract refuses it (TOP-RES-005), as it would the field set by hand
        "--env",
        "TRAIN_BATCH_SIZE=256",
        "--json",
        "--",
        "trainer.total_epochs=5",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert yaml.safe_load(out.read_text())["train"]["ppo_mini_batch_size"] == 256
    assert d["round_trip"] == [] and d["groups"]["alignment"] == "off"
    text = Path(d["report_file"]).read_text().splitlines()
    assert out.is_file() and text[-1].endswith("round trip: exact; contract: accepted")
    assert sum(line[:5].strip().isdigit() for line in text) == len(d["report"])
    shown = run_topl("check", f"recipe={out}")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    diff = run_topl(
        "recipes", "diff", "seed_qwen3_4b_grpo_on", str(SCRIPTS / "grpo_arrays.sh"), "--json"
    )
    rows = {row["key"]: row for row in json.loads(diff.stdout)["differences"]}
    assert rows["train.pp"] == {"key": "train.pp", "a": 1, "b": 2}
    assert rows["train.epochs"] == {"key": "train.epochs", "a": 10, "b": 3}
    assert "verl_overrides.actor_rollout_ref.rollout.val_kwargs.top_p" not in rows  # both 0.7
    missing = run_topl("recipes", "import", str(tmp_path / "nope.sh"))
    assert (
        missing.returncode == 2
        and "does not exist" in missing.stderr
        and "Traceback" not in missing.stderr
    )


def test_secrets_and_code_never_reach_the_recipe(tmp_path):
    text = (
        "export WANDB_API_KEY=abc123\nexport HF_TOKEN=hf_xyz\nexport TASK_QUEUE_ENABLE=2\n"
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-4B \\\n"
        "    reward.custom._target_=os.system trainer.nnodes=1\n"
    )
    s = read_script(text)
    imp = build_recipe(s)
    written = recipe_text(imp, "x.sh") + json.dumps(imp.report, default=str)
    assert "abc123" not in written and "hf_xyz" not in written and "os.system" not in written
    notes = {ln: msg for ln, msg in s.notes}
    assert "secret WANDB_API_KEY" in notes[1] and "instantiates code" in notes[5]
    bad = tmp_path / "bad.yaml"
    bad.write_text("# @package _global_\nverl_overrides:\n  reward.custom._target_: os.system\n")
    r = run_topl("render", f"recipe={bad}")
    assert r.returncode == 2 and "_target_" in r.stderr and "Traceback" not in r.stderr


def test_seed_doc_agrees_with_the_differences_file():
    """docs/seed.md's deliberate differences name every key tests/data/seed/differences.yaml lists
    (changed and added), and never claims `changed` is empty when it is not."""
    import re

    import yaml

    root = ROOT
    diff = yaml.safe_load((root / "tests/data/seed/differences.yaml").read_text())
    doc = (root / "docs/seed.md").read_text()
    section = doc.split("## Deliberate differences", 1)[1].split("\n## ", 1)[0]
    changed_part, added_part = section.split("(`added`)", 1)
    for kind, part in (("changed", changed_part), ("added", added_part)):
        for keys in (diff.get(kind) or {}).values():
            for key in keys:
                name = key.split()[-1].split(".")[-1]
                assert re.search(rf"`[\w.]*\b{re.escape(name)}\b", part), (kind, key)
    assert bool(diff.get("changed")) != ("`changed` is empty" in doc)
