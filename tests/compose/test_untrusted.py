"""Recipes and overrides are data: every attack is refused with one message (exit 2) and runs nothing.

Each attack would run `canary.make` (a module on the child's PYTHONPATH that creates a file) if
topl let it through; the tests check the refusal and that the canary file was never created, for
every command that reads a recipe or overrides.
"""

import time

import pytest
from helpers import run_topl, run_topl_inproc

from topl.launcher.base.errors import ToplError
from topl.launcher.compose import overrides_guard, untrusted, untrusted_yaml

CANARY_MODULE = """
import logging, os
def make(*args, **kwargs):
    open(os.environ["CANARY"], "w").write("ran")
    return logging.NullHandler()
class Callback:
    def __init__(self, *a, **k):
        make()
"""

LOGGING_FACTORY = """# @package _global_
hydra:
  job_logging:
    version: 1
    handlers:
      x: {"()": canary.make}
    root: {handlers: [x]}
"""
CALLBACK = """# @package _global_
hydra:
  callbacks:
    x: {_target_: canary.Callback}
"""


def laughs(levels: int) -> str:
    """A billion-laughs YAML: each level is nine aliases of the one before (9**levels values)."""
    return "# @package _global_\na: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join(f"*{chr(97 + i)}" for _ in range(9)) + "]\n"
        for i in range(levels)
    )


LAUGHS = laughs(8)  # 400-odd bytes, 9**9 values
ATTACKS = {
    "logging_factory": (LOGGING_FACTORY, []),
    "hydra_callback_in_recipe": (CALLBACK, []),
    "defaults_path_escape": (
        "# @package _global_\ndefaults:\n  - /../../../../../../{tmp}/evil\n  - _self_\n",
        [],
    ),
    "output_subdir": ("# @package _global_\nhydra:\n  output_subdir: /tmp\n", []),
    "env_set": ("# @package _global_\nhydra:\n  job:\n    env_set: {LD_PRELOAD: /x.so}\n", []),
    "target_in_extra_overrides": (
        (
            "# @package _global_\nalgorithm:\n  extra_overrides:\n"
            "    actor_rollout_ref.model._target_: canary.make\n"
        ),
        [],
    ),
    "nested_target": (
        (
            "# @package _global_\nalgorithm:\n  extra_overrides:\n"
            "    actor_rollout_ref.model: {_target_: canary.make}\n"
        ),
        [],
    ),
    "secret_copy_resolver": ("# @package _global_\nproject: ${oc.env:MY_API_KEY}\n", []),
    "billion_laughs": (LAUGHS, []),
    "cli_hydra_callback": (None, ["+hydra.callbacks.x._target_=canary.Callback"]),
    "cli_logging_group": (None, ["hydra/job_logging=disabled"]),
    "cli_searchpath": (None, ["hydra.searchpath=[file:///tmp]"]),
    "cli_target_in_extra": (
        None,
        ["+algorithm.extra_overrides.actor_rollout_ref.model._target_=canary.make"],
    ),
}
COMMANDS = {
    "check": ["check"],
    "render": ["render"],
    "plan": ["plan"],
    "launch_dry_run": ["launch", "--dry-run"],
    "launch": ["launch"],
    "multirun": ["launch", "-m", "seed=1,2"],
}


@pytest.fixture
def attack_env(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "canary.py").write_text(CANARY_MODULE)
    (tmp_path / "evil.yaml").write_text(CALLBACK)
    return {
        "PYTHONPATH": str(tmp_path / "pkg"),
        "CANARY": str(tmp_path / "CANARY"),
        "MY_API_KEY": "s3cr3t-value",
    }


def _args(tmp_path, name):
    text, overrides = ATTACKS[name]
    if text is None:
        return overrides
    recipe = tmp_path / "recipes" / f"{name}.yaml"
    recipe.parent.mkdir(exist_ok=True)
    recipe.write_text(text.replace("{tmp}", str(tmp_path).lstrip("/")))
    return [f"recipe={recipe}"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_is_refused_and_runs_nothing(tmp_path, attack_env, attack, command):
    start = time.monotonic()
    r = run_topl_inproc(
        *COMMANDS[command], *_args(tmp_path, attack), cwd=tmp_path, env=attack_env, timeout=120
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert [line.startswith("error:") for line in r.stderr.splitlines()].count(True) == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "CANARY").exists()
    assert not (tmp_path / "runs").exists()  # refused before any run directory
    assert "s3cr3t-value" not in r.stdout + r.stderr
    assert time.monotonic() - start < 60


def test_recipe_by_name_through_topl_recipe_path_is_checked_too(tmp_path, attack_env):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "friendly.yaml").write_text(LOGGING_FACTORY)
    env = {**attack_env, "TOPL_RECIPE_PATH": str(tmp_path / "mine")}
    for cmd in (["check"], ["launch", "--dry-run"]):
        r = run_topl_inproc(*cmd, "recipe=friendly", cwd=tmp_path, env=env)
        assert r.returncode == 2 and "names code" in r.stderr, r.stderr
    assert not (tmp_path / "CANARY").exists()


def test_opt_in_flag_lets_a_trusted_hydra_override_through(tmp_path):
    r = run_topl("check", "+hydra.job.env_set.TOPL_T=1", cwd=tmp_path)
    assert r.returncode == 2 and overrides_guard.UNSAFE_FLAG in r.stderr
    r = run_topl("check", "+hydra.job.env_set.TOPL_T=1", overrides_guard.UNSAFE_FLAG, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_recipes_include_recipes_by_name_and_allowed_hydra_keys(tmp_path, compose, monkeypatch):
    (tmp_path / "base.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: qwen3_4b\n  - _self_\nseed: 7\n"
    )
    (tmp_path / "top.yaml").write_text(
        "# @package _global_\ndefaults:\n  - base\n  - _self_\nproject: p\n"
        "hydra:\n  sweeper:\n    params: {seed: '1,2'}\n"
    )
    monkeypatch.setenv("TOPL_RECIPE_PATH", str(tmp_path))
    c = compose(["recipe=top"])
    assert (c.value("model.name"), c.value("seed"), c.value("project")) == ("qwen3_4b", 7, "p")
    assert c.source("seed") == str(tmp_path / "base.yaml")
    (tmp_path / "loop.yaml").write_text("# @package _global_\ndefaults:\n  - loop\n")
    with pytest.raises(ToplError, match="loop"):
        compose(["recipe=loop"])


def test_the_validated_bytes_are_what_hydra_loads(tmp_path, compose, monkeypatch):
    """Swapping the file after it was read changes nothing: Hydra reads topl's private copy."""
    from topl.launcher.compose import hydra as compose_mod
    from topl.launcher.compose import recipes

    path = tmp_path / "r.yaml"
    path.write_text("# @package _global_\nseed: 5\n")
    real = recipes.RecipeRoot.__init__

    def swap_after_read(self, p):
        real(self, p)
        path.write_text(LOGGING_FACTORY)  # the attacker's swap, after topl's read

    monkeypatch.setattr(recipes.RecipeRoot, "__init__", swap_after_read)
    assert compose([f"recipe={path}"]).value("seed") == 5
    monkeypatch.undo()
    path.write_text("# @package _global_\nseed: 5\n")
    _, root = compose_mod.split_recipe([f"recipe={path}"])
    try:
        assert (root.dir / "recipe" / "r.yaml").read_text() == "# @package _global_\nseed: 5\n"
        assert (root.dir.stat().st_mode & 0o777) == 0o700
    finally:
        root.cleanup()
    assert not root.dir.exists()


@pytest.mark.parametrize(
    "text,match",
    [
        (
            "a: &a [1]\n" + "".join(f"b{i}: *a\n" for i in range(untrusted_yaml.MAX_ALIASES + 1)),
            "aliases",
        ),
        ("x: " + "y" * (untrusted.MAX_BYTES + 1), "limit"),
        (LAUGHS, "aliases"),
        (laughs(6), "expands"),  # few enough aliases, too many values
        ("a: [1\n", "YAML syntax error"),
    ],
)
def test_yaml_limits(text, match):
    with pytest.raises(ToplError, match=match):
        untrusted.load_yaml(text.encode(), "r.yaml")


def test_plain_aliases_within_limits_still_load():
    assert untrusted.load_yaml(b"a: &a {x: 1}\nb: *a\n", "r.yaml") == {"a": {"x": 1}, "b": {"x": 1}}


@pytest.mark.parametrize(
    "entry",
    [
        "/../../etc/evil",
        "override /hydra/job_logging: x",
        "/model: ../x",
        {"optional /model": "x"},
        "r.yaml",
        {"override /model": None},
    ],
)
def test_defaults_entries_outside_topl_groups_are_refused(entry):
    with pytest.raises(ToplError, match="defaults entry"):
        untrusted.check_recipe({"defaults": [entry]}, "r.yaml", untrusted.spec_fields())


def test_local_launchers_by_name_only():
    """basic / joblib run topl's jobs on this machine; any other launcher or setting needs the flag."""
    ok = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra/launcher=basic"]
    assert overrides_guard.guard_overrides(ok) == ok
    with pytest.raises(ToplError, match="sweeps on Slurm through its own backend"):
        overrides_guard.guard_overrides(
            ["hydra/launcher=submitit_slurm"]
        )  # topl's Slurm path instead
    for bad in (
        "hydra.launcher.prefer=threads",
        "hydra/launcher=ray",
    ):
        with pytest.raises(ToplError, match="configures Hydra itself"):
            overrides_guard.guard_overrides([bad])
    with pytest.raises(ToplError, match="names code"):
        overrides_guard.guard_overrides(["+hydra.launcher._target_=os.system"])
