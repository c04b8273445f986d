"""A recipe hands a secret to the job as `cluster.env.NAME: ${oc.env:NAME}` (what `topl recipes
import` writes for a script's secret, docs/security.md): accepted there, read from the launching
shell at launch, never printed or written; every other resolver call stays refused (review #2)."""

import pytest
from helpers import run_topl_inproc

SECRET = "hf_" + "q7" * 17  # a Hugging Face token's shape
HEAD = "# @package _global_\ndefaults:\n  - override /model: tiny_dense\n  - _self_\n"


def _recipe(tmp_path, body):
    path = tmp_path / "r.yaml"
    path.write_text(HEAD + body)
    return f"recipe={path}"


def test_env_reference_is_accepted_and_the_value_stays_out_of_output_and_files(tmp_path):
    recipe = _recipe(tmp_path, "cluster:\n  env:\n    HF_TOKEN: ${oc.env:HF_TOKEN}\n")
    env = {"HF_TOKEN": SECRET}
    r = run_topl_inproc("check", recipe, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    runs = tmp_path / "runs"
    d = run_topl_inproc("launch", "--dry-run", recipe, f"run_root={runs}", cwd=tmp_path, env=env)
    assert d.returncode == 0, d.stderr
    for out in (r.stdout + r.stderr, d.stdout + d.stderr):
        assert SECRET not in out
    files = [p for p in runs.rglob("*") if p.is_file()]
    assert files and not [p for p in files if SECRET in p.read_text(errors="replace")]
    # the launch script reads it from the launching shell, at launch
    (cmd,) = runs.rglob("command.sh")
    assert "HF_TOKEN=${HF_TOKEN:?" in cmd.read_text()


def test_env_reference_to_an_unset_variable_names_it(tmp_path, monkeypatch):
    """`check` and `render` never pass the secret on: they say it is unset and go on (issue 49);
    a launch needs its value and refuses, naming it."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    recipe = _recipe(tmp_path, "cluster:\n  env:\n    HF_TOKEN: ${oc.env:HF_TOKEN}\n")
    r = run_topl_inproc("check", recipe, cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "export HF_TOKEN before `topl launch`" in r.stdout, r.stdout
    runs = tmp_path / "runs"
    d = run_topl_inproc("launch", "--dry-run", recipe, f"run_root={runs}", cwd=tmp_path)
    assert d.returncode == 2 and "Traceback" not in d.stderr
    assert "HF_TOKEN is not set here" in d.stderr and "export HF_TOKEN" in d.stderr, d.stderr


@pytest.mark.parametrize(
    "body,where",
    [
        ("project: ${oc.env:HF_TOKEN}\n", "project"),  # outside cluster.env: a printed key
        ("cluster:\n  env:\n    HF_TOKEN: ${oc.env:OTHER}\n", "cluster.env.HF_TOKEN"),  # renamed
        ("cluster:\n  env:\n    HF_TOKEN: ${oc.env:HF_TOKEN,x}\n", "cluster.env.HF_TOKEN"),
        ("cluster:\n  env:\n    HF_TOKEN: ${oc.env:${x}}\n", "cluster.env.HF_TOKEN"),  # nested
        ("cluster:\n  env:\n    HF_TOKEN: a${oc.env:HF_TOKEN}\n", "cluster.env.HF_TOKEN"),
        ("cluster:\n  env:\n    HF_TOKEN: ${oc.decode:HF_TOKEN}\n", "cluster.env.HF_TOKEN"),
    ],
)
def test_every_other_resolver_call_is_refused_with_a_readable_message(tmp_path, body, where):
    r = run_topl_inproc("check", _recipe(tmp_path, body), cwd=tmp_path, env={"HF_TOKEN": SECRET})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"resolver call (`${{name:...}}`) at {where} (a recipe may" in r.stderr, r.stderr
    assert "<redacted>" not in r.stderr and SECRET not in r.stderr
    assert "${oc.env:NAME}" in r.stderr  # the fix names the accepted form
