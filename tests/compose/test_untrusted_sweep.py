"""A recipe's sweep parameters (`hydra.sweeper.params`) are recipe data: every value a parameter
may take is checked as if the recipe set it (no group option that is a path, nothing that chooses
what runs, no resolver), and a point's sources.json names the recipe, not the command line.
Command-line group options are names too (issue 48)."""

import json

import pytest
from helpers import run_topl
from test_untrusted import CANARY_MODULE, LOGGING_FACTORY  # the attack files, once

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job

PARAMS = {
    "group_escape": "model: qwen3_4b,../../../../../../../../{tmp}/x/evil_model",
    "interpreter": "cluster.python: /usr/bin/python3,{tmp}/python",
    "loader_variable": 'cluster.env: "{{PYTHONPATH: {tmp}}}"',
    "loader_variable_dotted": "cluster.env.PYTHONPATH: /a,{tmp}",
    "reward_code": 'verl_overrides: "{{reward.custom_reward_function.path: {tmp}/r.py}}"',
    "reward_code_added": "+verl_overrides.reward.custom_reward_function.path: {tmp}/r.py",
    "resolver": 'experiment: "a,${{oc.env:HOME}}"',
    "not_a_group": "hydra/job_logging: evil",
    "recipe_path": "recipe: ../../{tmp}/x/evil_model",
}


def _recipe(tmp_path, params: str):
    r = tmp_path / "sweep.yaml"
    body = params.format(tmp=tmp_path)
    r.write_text(f"# @package _global_\nhydra:\n  sweeper:\n    params:\n      {body}\n")
    return r


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_a_recipes_sweep_parameter_is_checked_like_a_recipe_value(tmp_path, name):
    with pytest.raises(ToplError) as e:
        compose_job([f"recipe={_recipe(tmp_path, PARAMS[name])}"])
    assert "hydra.sweeper.params" in e.value.render() or "choose what runs" in e.value.message


def test_a_sweep_parameter_naming_a_yaml_outside_conf_runs_nothing(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "evil_model.yaml").write_text(LOGGING_FACTORY)
    (tmp_path / "canary.py").write_text(CANARY_MODULE)
    r = _recipe(tmp_path, PARAMS["group_escape"])
    canary = tmp_path / "ran"
    env = {"PYTHONPATH": str(tmp_path), "CANARY": str(canary)}
    for args in (("launch", "-m", f"recipe={r}", "--dry-run"), ("plan", f"recipe={r}")):
        p = run_topl(*args, cwd=tmp_path, env=env)
        assert p.returncode == 2 and "not names" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and not canary.exists()


def test_a_glob_sweep_parameter_is_names_and_a_huge_one_is_refused(tmp_path):
    """glob() needed Hydra's config loader (a traceback); range(1,100000000) was listed whole
    (a hang in `check`) (issue 48 probes)."""
    for bad, said in (
        ("model: glob(../../x/*)", "not names"),
        ("train.steps: range(1,100000000)", "more than 10,000 values"),
    ):
        with pytest.raises(ToplError, match=said):
            compose_job([f"recipe={_recipe(tmp_path, bad)}"])
    compose_job([f"recipe={_recipe(tmp_path, 'model: glob(qwen3_4*,exclude=x?)')}"])


@pytest.mark.parametrize(
    "override", ["model=../../x/evil", "model=qwen3_4b,../x", "hydra.sweeper.params.model=/x/y"]
)
def test_a_command_line_group_option_is_a_name(override):
    with pytest.raises(ToplError, match="never a path"):
        compose_job([override])


def test_sources_json_names_the_recipe_that_swept_a_key(tmp_path):
    r = _recipe(tmp_path, "train.steps: 3,4")
    p = run_topl("launch", "-m", f"recipe={r}", "model=tiny_dense", "--dry-run", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()
    for i in (0, 1):
        sources = json.loads((sweep / str(i) / "sources.json").read_text())
        assert sources["train.steps"] == f"{r} (hydra.sweeper.params `train.steps={3 + i}`)"


@pytest.mark.parametrize(
    "body",
    [
        'experiment: "x\\e]0;owned\\ay"\n',  # a terminal escape check / render would print
        'verl_overrides:\n  trainer.project_name: "p\\e[2Jq"\n',
        'experiment: "a\\0b"\n',  # a NUL: a run dir name no file system takes
        'hydra:\n  sweeper:\n    params:\n      experiment: "a,\\e[2J"\n',
    ],
)
def test_a_recipe_value_holds_no_control_character(tmp_path, body):
    r = tmp_path / "esc.yaml"
    r.write_text("# @package _global_\n" + body)
    with pytest.raises(ToplError, match="control character") as e:
        compose_job([f"recipe={r}"])
    assert "\x1b" not in e.value.render() and "\0" not in e.value.render()
