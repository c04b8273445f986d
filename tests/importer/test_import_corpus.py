"""`topl recipes import` over public verl launch scripts (tests/data/scripts/verl, see its
README): the right program, the script's model, every setting bash passes is in the rendered
recipe with its value or named in the report, nothing added that changes the run, nothing runs."""

import copy
import functools
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import verl_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from paths import TESTS

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job
from topl.launcher.importer.read import read_script
from topl.launcher.importer.recipe import build_recipe
from topl.launcher.importer.report import recipe_text, same, same_run
from topl.launcher.render.invocation import render

CORPUS = TESTS / "data" / "scripts" / "verl"
MANIFEST = [line.split("\t") for line in (CORPUS / "manifest.tsv").read_text().splitlines()]
NAMES = [m[0] for m in MANIFEST]
# file -> (trainer module, line of the launch, model group or None when topl ships none)
EXPECT = {
    "grpo_trainer__run_gptoss_20b.sh": ("verl.trainer.main_ppo", 37, None),
    "ppo_trainer__run_qwen1.5_moe_a2.7b-gsm8k_megatron.sh": ("verl.trainer.main_ppo", 27, None),
    "grpo_trainer__run_qwen3-8b_npu.sh": ("verl.trainer.main_ppo", 12, "qwen3_8b"),
    "grpo_trainer__run_qwen2_5_7b_grpo_npu.sh": ("verl.trainer.main_ppo", 3, None),
    "gspo_trainer__run_qwen3_32b_gspo_npu.sh": ("verl.trainer.main_ppo", 191, None),
    "ppo_trainer__run_qwen3-8b_npu.sh": ("verl.trainer.main_ppo", 5, "qwen3_8b"),
    "grpo_trainer__run_qwen3_4b_grpo_vllm_1k_npu.sh": ("verl.trainer.main_ppo", 35, "qwen3_4b"),
    "grpo_trainer__run_qwen3moe-30b_megatron_96gb.sh": (
        "verl.trainer.main_ppo",
        95,
        "qwen3_30b_a3b",
    ),
    "ppo_trainer__run_deepseek7b_llm.sh": ("verl.trainer.main_ppo", 3, None),
    "grpo_trainer__run_qwen3-32b_npu.sh": ("verl.trainer.main_ppo", 11, None),
    "gspo_trainer__test_gspo_qwen30b_a3b_ep.sh": ("verl.trainer.main_ppo", 80, "qwen3_30b_a3b"),
    "dapo__run_dapo_qwen2.5_32b.sh": ("recipe.dapo.main_dapo", 61, None),
    "dapo__run_dapo_qwen2.5_7b_npu.sh": ("recipe.dapo.main_dapo", 61, None),
    "dapo__test_dapo_gptoss_20b_megatron.sh": ("verl.trainer.main_ppo", 236, None),
}
# the cluster group, and the line of the report's cluster row (None: the script says it runs on
# Ascend, no row): a script that does not is placed by its trainer.n_gpus_per_node
# (importer/groups.py:cluster_choice), the npu-named ones without an Ascend marker included
CLUSTER = {
    "grpo_trainer__run_gptoss_20b.sh": ("atlas_a2", 75),
    "ppo_trainer__run_qwen1.5_moe_a2.7b-gsm8k_megatron.sh": ("atlas_a2", 68),
    "grpo_trainer__run_qwen3-8b_npu.sh": ("atlas_a2", 47),
    "grpo_trainer__run_qwen2_5_7b_grpo_npu.sh": ("atlas_a3", 37),
    "gspo_trainer__run_qwen3_32b_gspo_npu.sh": ("atlas_a3", None),
    "ppo_trainer__run_qwen3-8b_npu.sh": ("atlas_a2", 47),
    "grpo_trainer__run_qwen3_4b_grpo_vllm_1k_npu.sh": ("atlas_a3", None),
    "grpo_trainer__run_qwen3moe-30b_megatron_96gb.sh": ("atlas_a2", 188),
    "ppo_trainer__run_deepseek7b_llm.sh": ("atlas_a2", 37),
    "grpo_trainer__run_qwen3-32b_npu.sh": ("atlas_a2", 53),
    "gspo_trainer__test_gspo_qwen30b_a3b_ep.sh": ("atlas_a2", 161),
    "dapo__run_dapo_qwen2.5_32b.sh": ("atlas_a2", 124),
    "dapo__run_dapo_qwen2.5_7b_npu.sh": ("atlas_a3", 129),
    "dapo__test_dapo_gptoss_20b_megatron.sh": ("atlas_a2", 205),
}
# variables the caller's environment sets (given to bash and to the importer alike): the script
# reads them under `set -u` (sp_size is used on line 66 before line 72 sets it: as published,
# bash stops there)
ENV = {
    "gspo_trainer__run_qwen3_32b_gspo_npu.sh": {"sp_size": "4"},
    "gspo_trainer__test_gspo_qwen30b_a3b_ep.sh": {"HDFS_ROOT": "/hdfs", "DATA_ROOT": "/data"},
}
MEGATRON_CONFIG = {"algorithm.config_name": "ppo_megatron_trainer"}
# the trainer config each script's launch loads, where topl's group would load another: the
# report prints it for the command line (a recipe may not choose what runs)
CMDLINE = {
    "ppo_trainer__run_qwen1.5_moe_a2.7b-gsm8k_megatron.sh": MEGATRON_CONFIG,
    "grpo_trainer__run_qwen3moe-30b_megatron_96gb.sh": MEGATRON_CONFIG,
    "gspo_trainer__test_gspo_qwen30b_a3b_ep.sh": MEGATRON_CONFIG,  # written `...trainer.yaml`
    "dapo__test_dapo_gptoss_20b_megatron.sh": MEGATRON_CONFIG,
    # no --config-name: recipe.dapo.main_dapo's own default (verl v0.7.0)
    "dapo__run_dapo_qwen2.5_32b.sh": {"algorithm.config_name": "dapo_trainer"},
    "dapo__run_dapo_qwen2.5_7b_npu.sh": {"algorithm.config_name": "dapo_trainer"},
}
# variables a value reads that the script never sets (HOME aside): (name, key, line) in the
# report; the user exports them before launching (LAUNCH_ENV, bash gets the same)
UNSET = {
    "grpo_trainer__run_gptoss_20b.sh": {
        ("gsm8k_train_path", "data.train_files", 39),
        ("gsm8k_test_path", "data.val_files", 40),
    },
    "grpo_trainer__run_qwen3moe-30b_megatron_96gb.sh": {("aime24_test_path", "data.val_files", 97)},
}
LAUNCH_ENV = {
    "grpo_trainer__run_gptoss_20b.sh": {
        "gsm8k_train_path": "/data/gsm8k/train.parquet",
        "gsm8k_test_path": "/data/gsm8k/test.parquet",
    },
    "grpo_trainer__run_qwen3moe-30b_megatron_96gb.sh": {"aime24_test_path": "/data/aime24.parquet"},
}
# keys no verl whose schema topl ships (0.8.0, 0.9.0, 0.9.1) has: the scripts target verl main
# (0.8.0.dev) and v0.7.0's DAPO recipe. Named in the report, kept, refused by the contract.
_CRITIC = {f"critic.model.fsdp_config.{k}_offload" for k in ("param", "optimizer")}
_MP = "actor_rollout_ref.actor.fsdp_config.mixed_precision."
_OVERLONG = {f"reward_model.overlong_buffer.{k}" for k in ("enable", "len", "penalty_factor")}
REFUSED = {
    "ppo_trainer__run_qwen3-8b_npu.sh": _CRITIC,
    "ppo_trainer__run_deepseek7b_llm.sh": _CRITIC | {"trainer.use_legacy_worker_impl"},
    "grpo_trainer__run_qwen3-32b_npu.sh": {
        f"{_MP}{k}_dtype" for k in ("param", "reduce", "buffer")
    },
    "dapo__run_dapo_qwen2.5_32b.sh": _OVERLONG,
    "dapo__run_dapo_qwen2.5_7b_npu.sh": _OVERLONG,
}
# grad_offload on verl 0.9.1: said by param_offload (render_version.GRAD_IN_PARAM)
RESPELLED = {
    n: {"actor_rollout_ref.actor.megatron.grad_offload"}
    for n in (
        "grpo_trainer__run_qwen3moe-30b_megatron_96gb.sh",
        "gspo_trainer__test_gspo_qwen30b_a3b_ep.sh",
        "dapo__test_dapo_gptoss_20b_megatron.sh",
    )
}
STUB = """#!/bin/bash
# records one launch: argv (NUL-separated) and the exported environment; runs nothing
n=$(ls "$REC" | wc -l)
printf '%s\\0' "$(basename "$0")" "$@" > "$REC/$n.argv"
env -0 > "$REC/$n.env"
"""


def test_the_corpus_is_what_the_manifest_says():
    assert sorted(NAMES) == sorted(p.name for p in CORPUS.glob("*.sh")) and len(NAMES) >= 10
    for name, commit, path, sha in MANIFEST:
        assert hashlib.sha256((CORPUS / name).read_bytes()).hexdigest() == sha, name
        assert len(commit) == 40 and path.endswith(name.split("__")[1])
    assert set(EXPECT) == set(NAMES) == set(CLUSTER)


def bash_launches(script: Path, tmp: Path, given: dict) -> list[tuple[list[str], dict]]:
    """Every python / ray command bash itself runs, with argv and environment (stubs only)."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    for cmd in ("python", "python3", "ray", "torchrun", "nvidia-smi", "npu-smi", "hf"):
        (bin_ / cmd).write_text(STUB)
        (bin_ / cmd).chmod(stat.S_IRWXU)
    rec, work = tmp / "rec", tmp / "work"
    rec.mkdir()
    work.mkdir()
    rc = tmp / "bashrc"  # a sandbox may refuse `ulimit -n` (and `set -e` would stop there)
    rc.write_text("ulimit() { :; }\nsource() { :; }\n")  # no Ascend toolkit here either
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "HOME": "$HOME", "REC": str(rec), "BASH_ENV": str(rc)}
    env.update(given)
    subprocess.run(
        ["bash", str(script)], env=env, cwd=work, capture_output=True, timeout=60, check=False
    )
    out = []
    for f in sorted(rec.glob("*.argv"), key=lambda p: int(p.stem)):
        argv = f.read_text().split("\0")[:-1]
        penv = dict(
            e.split("=", 1) for e in f.with_suffix(".env").read_text().split("\0") if "=" in e
        )
        out.append((argv, penv))
    return out


def _trainer_argv(launches, entry):
    for argv, penv in launches:
        if entry in argv:
            k = argv.index(entry)
            if argv[k - 1] == "-m":
                return argv[k + 1 :], penv
    raise AssertionError(f"bash never launched {entry}")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed (its defaults)")
@pytest.mark.parametrize("name", NAMES)
def test_corpus_import(name, tmp_path, monkeypatch):
    entry, line, group = EXPECT[name]
    text = (CORPUS / name).read_text()
    ran = []  # canaries: the importer never starts a process
    for fn in ("system", "execv", "execve", "execvp", "posix_spawn", "fork"):
        if hasattr(os, fn):
            monkeypatch.setattr(os, fn, lambda *a, _fn=fn, **k: ran.append(_fn))
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda *a, **k: ran.append("Popen"))
    given = ENV.get(name, {})
    s = read_script(text, given)
    # the right program: the trainer, not a model download or converter written before it
    assert s.entrypoint == entry
    if line:
        assert s.line == line
    if group is None:  # a model topl ships no group for: refused, never the tiny test model
        with pytest.raises(ToplError, match="TOP-IMPORT-001") as e:
            build_recipe(s)
        assert str(s.overrides["actor_rollout_ref.model.path"].value) in str(e.value)
        imp = build_recipe(s, {"model": "qwen3_8b"})  # asked for: the architecture topl checks
    else:
        imp = build_recipe(s)
        assert imp.defaults["model"] == group
    assert ran == []
    monkeypatch.undo()
    assert imp.round_trip == [], imp.round_trip
    placed = [r["line"] for r in imp.report if r["kind"] == "cluster"]
    assert (imp.defaults["cluster"], placed) == (
        CLUSTER[name][0],
        [CLUSTER[name][1]] if CLUSTER[name][1] else [],
    )

    path = tmp_path / "imported.yaml"
    path.write_text(recipe_text(imp, name))
    # the script's trainer config goes onto the command the report prints, never the recipe
    assert "config_name" not in str(imp.recipe.get("algorithm", {}))
    assert imp.command_line == CMDLINE.get(name, {}), imp.command_line
    # variables the script reads but never sets: named, with the key and line that use them
    unset = {
        (r["variable"], r["key"], r["line"])
        for r in imp.report
        if r.get("variable") not in (None, "HOME")
    }
    assert unset == UNSET.get(name, set()), unset
    # the verl the recipe declares, and what it cannot take, named (none dropped, none rewritten)
    stack = [r["detail"] for r in imp.report if r["kind"] == "declared stack"]
    assert len(stack) == 1 and stack[0].startswith("release: verl 0.9.1"), stack
    unknown = {r["key"] for r in imp.report if r["kind"] == "unknown to verl"}
    refused = REFUSED.get(name, set())
    assert unknown == refused, unknown
    assert set(imp.respelled) == RESPELLED.get(name, set()), imp.respelled
    spec = compose_job([f"recipe={path}", *imp.command_args()]).to_object()
    # as bash ran the script (line 81): $HOME expands alike; the variables the report names are
    # exported by the user before launching (bash gets the same values below)
    environ = {**os.environ, "HOME": "$HOME", **LAUNCH_ENV.get(name, {})}
    try:
        inv = render(spec, environ)
        assert not refused, refused
        pairs = [o.split("=", 1) for o in inv.overrides]
        entrypoint, env = inv.entrypoint, inv.env
    except ToplError as e:  # keys no verl topl ships has: refused by the renderer, by name
        assert refused and all(k in e.message for k in refused), e.message
        assert {k.lstrip("+") for k in spec.verl_overrides} >= refused  # kept, as written
        from topl.launcher.render.env import argv_env, env_vars
        from topl.launcher.render.invocation import fmt, overrides
        from topl.launcher.render.spelling import expand

        everything = overrides(spec) + [(f"{FORWARD}{k}", v) for k, v in argv_env(spec).items()]
        pairs = [(k, fmt(expand(v, environ))) for k, v in everything]
        entrypoint, env = spec.algorithm.entrypoint, env_vars(spec)
    if refused:
        from topl.launcher.cli.recipes import _verdict

        ok, verdict, ids = _verdict(path, imp.command_args())
        assert not ok and "TOP-VERL-001" in ids, verdict
    got = {k.lstrip("+"): v for k, v in pairs}
    # a key the declared verl spells through another (grad_offload on 0.9.1): that one carries
    # the script's value
    for k, carrier in imp.respelled.items():
        assert carrier is None or same(parser_value(carrier, got[carrier]), s.overrides[k].value), (
            name,
            k,
        )

    assert entrypoint == entry
    # the model is the script's
    parser = OverridesParser.create()
    assert parser.parse_override(f"{MODEL}={got[MODEL]}").value() == s.overrides[MODEL].value

    # every setting bash passes is rendered with its value, or named in the report
    launched = bash_launches(CORPUS / name, tmp_path, {**given, **LAUNCH_ENV.get(name, {})})
    argv, penv = _trainer_argv(launched, entry)
    reported = {r["key"] for r in imp.report} | {r["key"] for r in imp.round_trip}
    for arg in argv:
        if arg.startswith("--config") or "=" not in arg:
            continue
        try:
            o = parser.parse_override(arg)
        except Exception:  # noqa: BLE001 - not Hydra's grammar (a stray `}`): named in the report
            assert any(arg in str(r["detail"]) for r in imp.report), (name, arg)
            continue
        key = o.key_or_group
        if key in got:
            rendered = parser.parse_override(f"{key}={got[key]}").value()
            if same_run(key, rendered, o.value()):  # as verl reads it (a file: its list)
                continue
        assert key in reported, (name, arg)
    # and nothing added that changes the run: a key the script does not set is verl's default,
    # or listed in the report's own "topl adds" section
    verl = verl_config("megatron" in got.get("model_engine", ""))
    OmegaConf.set_struct(verl, False)
    for k, st in s.overrides.items():  # verl derives some defaults from the script's own keys
        OmegaConf.update(verl, k, st.value, force_add=True)
    adds = {a["key"] for a in imp.topl_adds}
    for key, value in got.items():
        if key in s.overrides or key in adds:
            continue
        if key.startswith(FORWARD):  # the script's own environment, forwarded to Ray workers
            var = key[len(FORWARD) :]
            assert f"env {var}" in adds or env[var] == s.env[var].text, (name, var)
            continue
        mine = parser.parse_override(f"{key}={value}").value()
        want = OmegaConf.select(verl, key, default="<absent>", throw_on_missing=False)
        if key == "model_engine":
            want = "megatron" if "megatron" in (s.config_name or "") else "dp"
        if OmegaConf.is_config(want):
            want = OmegaConf.to_container(want)
        if isinstance(want, str) and want.startswith("${"):
            continue  # verl derives it from another key; the import compares the derived value
        assert same(mine, want), (name, key, mine, want)
    # the script's environment reaches the launch as bash exports it
    script_env = {
        k: v
        for k, v in penv.items()
        if k not in ("PATH", "HOME", "REC", "PWD", "BASH_ENV", *given, *LAUNCH_ENV.get(name, {}))
    }
    for k, v in script_env.items():
        if k in ("SHLVL", "_", "OLDPWD") or "$(" in v:
            continue
        assert env.get(k) == v or k in s.secrets or k in s.dropped_env, (name, k)
        if k in s.dropped_env:  # named in the report, not written
            assert any(k in str(r["detail"]) for r in imp.report) and k not in env


def parser_value(key, text):
    return OverridesParser.create().parse_override(f"{key}={text}").value()


MODEL = "actor_rollout_ref.model.path"
FORWARD = "ray_kwargs.ray_init.runtime_env.env_vars."


def verl_config(megatron: bool):
    """verl 0.9.1's generated trainer config, a fresh copy per call (the test updates it)."""
    return OmegaConf.create(copy.deepcopy(_verl_tree(megatron)))


@functools.lru_cache(maxsize=None)
def _verl_tree(megatron: bool):
    # found, not imported (`import verl` costs ~5 s: torch, ray, transformers), and parsed once
    # per process, not once per script: the file is ~1,000 lines of YAML
    f = "_generated_ppo_megatron_trainer.yaml" if megatron else "_generated_ppo_trainer.yaml"
    return OmegaConf.to_container(OmegaConf.load(verl_config_dir() / f), resolve=False)
