"""A recipe says what to train, never which program runs (launcher/compose/meaning.py): every setting that
chooses code, at every nesting level, is refused in a recipe and accepted from the command line,
where `topl check` names its source."""

import json
import os

import pytest
from helpers import run_topl

from topl.launcher.base.errors import ToplError
from topl.launcher.cli import main as topl
from topl.launcher.compose import meaning, overrides_guard, untrusted

P = "# @package _global_\n"
# Each would run or load code (or redirect topl's own writes) if a recipe could set it.
ATTACKS = {
    "sweep_params_job_logging": P + "hydra:\n  sweeper:\n    params:\n"
    "      hydra.job_logging.formatters.f.class: os.system\n",
    "sweep_params_file_handler": P + "hydra:\n  sweeper:\n    params:\n"
    "      hydra.job_logging.handlers.h.filename: /tmp/x\n",
    "sweep_params_python": P + "hydra:\n  sweeper:\n    params:\n      cluster.python: a,b\n",
    "sweep_params_env": P + "hydra:\n  sweeper:\n    params:\n      +cluster.env.LD_PRELOAD: a,b\n",
    "verl_overrides_hydra": P + "verl_overrides:\n  hydra.job_logging.formatters.f.class: x\n",
    "verl_overrides_hydra_nested": P + "verl_overrides:\n  hydra:\n    job_logging: {x: 1}\n",
    "verl_overrides_plus_hydra": P + "verl_overrides:\n  +hydra.run.dir: /tmp\n",
    "extra_overrides_hydra": P + "algorithm:\n  extra_overrides:\n    hydra.output_subdir: /x\n",
    "verl_external_lib": P + "verl_overrides:\n  actor_rollout_ref.model.external_lib: evil\n",
    "verl_custom_reward": P + "verl_overrides:\n  custom_reward_function.path: /tmp/r.py\n",
    "verl_runtime_env": P + "verl_overrides:\n  +ray_kwargs.ray_init.runtime_env.py_modules: [x]\n",
    "verl_runtime_env_guard": P
    + "verl_overrides:\n  +ray_kwargs.ray_init.runtime_env.env_vars.TOPL_GUARD_DIR: /tmp\n",
    "cluster_python": P + "cluster:\n  python: /tmp/evil\n",
    "external_modules": P + "cluster:\n  external_modules: evil\n",
    "entrypoint": P + "algorithm:\n  entrypoint: evil\n",
    "pythonpath": P + "cluster:\n  env:\n    PYTHONPATH: /tmp\n",
    "ld_preload": P + "cluster:\n  env:\n    LD_PRELOAD: /tmp/x.so\n",
    "bash_env": P + "cluster:\n  env:\n    BASH_ENV: /tmp/x\n",
    "topl_guard": P + "cluster:\n  env:\n    TOPL_GUARD: '1'\n",
    "topl_guard_dir": P + "cluster:\n  env:\n    TOPL_GUARD_DIR: /tmp/x\n",
    "nested_resolver": P + "project: ${${k}:MY_API_KEY}\n",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_recipe_cannot_choose_what_runs(name):
    data = untrusted.load_yaml(ATTACKS[name].encode(), "r.yaml")
    with pytest.raises(ToplError) as e:
        untrusted.check_recipe(data, "r.yaml", untrusted.spec_fields())
    assert "resolver" in e.value.message or "may not choose what runs" in e.value.message


def test_shipped_settings_stay_data():
    ok = {"cluster": {"env": {"PYTHONUNBUFFERED": "1", "HCCL_ASYNC_ERROR_HANDLING": "0"}}}
    untrusted.check_recipe(ok, "r.yaml", untrusted.spec_fields())
    assert meaning.command_line_only("verl_overrides.actor_rollout_ref.model.path") is None
    assert meaning.command_line_only("verl_overrides.trainer.project_name") is None


def test_command_line_may_set_them_and_check_names_the_source(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = topl(
        ["check", "cluster.python=/opt/py/bin/python3", "+cluster.env.LD_PRELOAD=x.so", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    chosen = {s["key"]: s["source"] for s in out["command_line_only"]}
    assert chosen["cluster.python"] == "command line `cluster.python=/opt/py/bin/python3`"
    assert chosen["cluster.env.LD_PRELOAD"].startswith("command line")


def test_command_line_sweep_params_of_hydra_need_the_flag():
    with pytest.raises(ToplError, match="configures Hydra itself"):
        overrides_guard.guard_overrides(["hydra.sweeper.params.hydra.job_logging.root.level=a,b"])
    assert overrides_guard.guard_overrides(["hydra.sweeper.params.seed=1,2"])


CANARY_PY = '#!/bin/sh\ntouch {canary}\nexec python3 "$@"\n'


def test_doctor_and_launch_never_run_a_recipes_interpreter(tmp_path, capsys, monkeypatch):
    """Nothing runs before the contract: a recipe's cluster.python is refused before the doctor."""
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil.sh"
    evil.write_text(CANARY_PY.format(canary=tmp_path / "CANARY"))
    evil.chmod(0o755)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(P + f"cluster:\n  backend: subprocess\n  python: {evil}\n")
    for cmd in (["doctor"], ["launch"], ["check"]):
        assert topl([*cmd, f"recipe={recipe}"]) == 2
        assert "may not choose what runs" in capsys.readouterr().err
    assert not (tmp_path / "CANARY").exists()
    assert not (tmp_path / "runs").exists()


def test_multirun_dry_run_does_not_build_hydra_logging_from_sweep_params(tmp_path):
    """The real path: Hydra would build a file handler from the recipe's sweep parameters."""
    canary = tmp_path / "CANARY"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        P + "hydra:\n  sweeper:\n    params:\n"
        f"      hydra.job_logging.handlers.file.filename: {canary}\n      seed: 1,2\n"
    )
    r = run_topl("launch", "-m", "--dry-run", f"recipe={recipe}", cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("error:") == 1 and "Traceback" not in r.stderr
    assert not canary.exists()
    assert os.listdir(tmp_path) == ["r.yaml"]
