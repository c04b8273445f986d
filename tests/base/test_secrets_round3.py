"""Secrets, round three (issue 48): no `$SECRET` from a recipe expanded onto verl's argv, no value
built to become `${oc.env:...}` in verl's Hydra, a secret typed in a sweep out of the sweep's files,
`user:pass@host` without a scheme, a lower-case secret name in an environment map, and a private
key printed over many lines by the job: each redacted or refused by the one redactor."""

import os

import pytest
from helpers import run_topl

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError
from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check
from topl.launcher.render.invocation import Invocation, render
from topl.launcher.run.backends.subprocess import run_subprocess

SECRET = "wandbsecret123456"


def _recipe(tmp_path, body: str):
    r = tmp_path / "r.yaml"
    r.write_text("# @package _global_\n" + body)
    return r


ENVIRON = {"WANDB_API_KEY": SECRET, "MY_VAR": "hf_" + "a" * 34, "HOME": "/h", "PLAIN": "p"}


@pytest.mark.parametrize("ref", ["team-$WANDB_API_KEY", "$wandb_api_key/x", "x-$MY_VAR"])
def test_a_secret_variable_is_never_expanded_onto_argv(tmp_path, ref, monkeypatch):
    r = _recipe(tmp_path, f"verl_overrides:\n  trainer.project_name: {ref}\n")
    composed = compose_job([f"recipe={r}", "model=tiny_dense", "cluster.backend=subprocess"])
    with pytest.raises(ToplError, match="a secret") as e:
        render(composed.to_object(), {**ENVIRON, "wandb_api_key": SECRET})
    assert SECRET not in e.value.render() and "hf_aaa" not in e.value.render()
    with monkeypatch.context() as m:  # `topl check` says so before launch (TOP-SCHEMA-004)
        m.setattr(os, "environ", {**os.environ, **ENVIRON, "wandb_api_key": SECRET})
        (v,) = [v for v in check(composed) if v.rule == "TOP-SCHEMA-004"]
        assert "a secret" in v.message and SECRET not in v.message


def test_a_plain_variable_still_expands(tmp_path):
    r = _recipe(tmp_path, "verl_overrides:\n  trainer.project_name: $HOME/$PLAIN\n")
    spec = compose_job([f"recipe={r}", "model=tiny_dense"]).to_object()
    assert "trainer.project_name=/h/p" in render(spec, ENVIRON).overrides


def test_a_value_built_into_a_resolver_call_for_verl_is_refused(tmp_path):
    r = _recipe(
        tmp_path,
        'experiment: "{oc.env:HF_TOKEN}"\nverl_overrides:\n  trainer.project_name: $${experiment}\n',
    )
    with pytest.raises(ToplError, match="resolver call"):
        compose_job([f"recipe={r}", "model=tiny_dense"])


def test_secrets_typed_in_a_sweep_stay_out_of_its_files(tmp_path):
    p = run_topl(
        "launch",
        "-m",
        "--dry-run",
        "model=tiny_dense",
        "+cluster.env.wandb_api_key=sweepsecret111,sweepsecret222",
        "+cluster.env.MY_TOKEN=tokval333333",
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    (sweep,) = (tmp_path / "runs" / "multirun").iterdir()
    names = {f.name for f in sweep.iterdir()}
    assert {"multirun.yaml", "sweep_report.csv", "sweep_report.json"} <= names
    for f in sweep.rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert "sweepsecret" not in text and "tokval333" not in text, f
    assert "sweepsecret" not in p.stdout + p.stderr


@pytest.mark.parametrize(
    "text, secret",
    [
        ("cluster.ray_address=alice:hunter2pw@head.example:6379", "hunter2pw"),
        ("RAY_ADDRESS is bob:s3cr3tpass@10.0.0.1:10001 now", "s3cr3tpass"),
        ("cluster.env.hf_token=abcdefgh123 next", "abcdefgh123"),
        ('env_vars.my_api_key: "zz9988xx"', "zz9988xx"),
        ("+cluster.env.wandb_api_key=sweepsecret111", "sweepsecret111"),
    ],
)
def test_credential_shapes_without_a_scheme_or_in_lower_case(text, secret):
    assert secret not in redact.Redactor().text(text)


@pytest.mark.parametrize(
    "text", ["git@github.com:org/repo.git", "at 12:30@noon", "cluster.env.model_dir=/data/x"]
)
def test_what_is_not_a_credential_stays(text):
    assert redact.Redactor().text(text) == text


KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    + "".join(f"b3BlbnNzaC1rZXktdjEAAAAABG5vbmU{i:04d}\n" for i in range(20))
    + "-----END OPENSSH PRIVATE KEY-----\n"
)


def test_a_private_key_printed_line_by_line_is_redacted_whole():
    lines = redact.Lines()
    out = "".join(lines(ln) for ln in f"before\n{KEY}after\n".splitlines(keepends=True))
    assert out == f"before\n{redact.REDACTED}\nafter\n"


def test_the_jobs_console_and_log_never_show_a_private_key(tmp_path, capsys):
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\nstep:1\n{KEY}done\nEOF\n")
    fake.chmod(0o755)
    run = tmp_path / "run"
    run.mkdir()
    assert run_subprocess(Invocation("m", "c", []), run, python=str(fake)) == 0
    shown = capsys.readouterr().out + (run / "verl.log").read_text()
    assert "b3BlbnNzaC1rZXkt" not in shown and "done" in shown and "step:1" in shown
