"""Secrets by side doors: quoted forms, URL userinfo, free-form verl values on argv, recipes that
copy a secret by reference. Each is removed from what topl writes, or refused before argv."""

import json
import shlex

import pytest

from topl.launcher.base import redact
from topl.launcher.base.redact import REDACTED, Redactor
from topl.launcher.cli import main as topl

QUOTED = "p'a\"ss w0rd!\\x"


@pytest.mark.parametrize(
    "form",
    [
        shlex.quote(QUOTED),  # command.sh
        json.dumps(QUOTED),  # invocation.json
        shlex.quote("trainer.project_name=" + json.dumps(QUOTED)),  # a Hydra value in a shell
        json.dumps(shlex.quote("k=" + json.dumps(QUOTED))),  # that command inside JSON
        "k='" + QUOTED.replace("\\", "\\\\").replace("'", "\\'") + "'",  # Hydra's own quoting
    ],
)
def test_a_password_with_quotes_is_redacted_in_every_quoting(form):
    out = Redactor([QUOTED]).text(form)
    assert "w0rd" not in out and REDACTED in out, out


@pytest.mark.parametrize(
    "text,gone",
    [
        ("postgres://u:pa/ss@h:5/db", "pa/ss"),
        ("https://:tok3n-value@host/x", "tok3n-value"),
        ("redis://u:p@ss-word@h", "ss-word"),
    ],
)
def test_url_userinfo_is_redacted_whatever_it_holds(text, gone):
    assert gone not in Redactor().text(text)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(redact, "_current", None)
    yield tmp_path
    redact._current = None


@pytest.mark.parametrize(
    "override",
    [
        "project=ghp_" + "a" * 36,  # a token in a free-form value: trainer.project_name on argv
        "+verl_overrides.trainer.experiment_name=postgres://u:db-pass-42@h/x",
        "project=${cluster.env.MY_PASSWORD}",  # a reference copying a secret to argv
    ],
)
def test_a_secret_never_goes_on_argv(in_tmp, monkeypatch, capsys, override):
    monkeypatch.setenv("MY_PASSWORD", QUOTED)
    args = ["check", "+cluster.env.MY_PASSWORD=${oc.env:MY_PASSWORD}", override]
    assert topl(args) == 2
    err = capsys.readouterr().err
    assert "would be on verl's command line" in err and "w0rd" not in err
    assert topl(["launch", "--dry-run", *args[1:]]) == 2
    assert not (in_tmp / "runs").exists()


def test_a_recipe_copying_a_secret_by_reference_is_refused(in_tmp, monkeypatch, capsys):
    monkeypatch.setenv("MY_PASSWORD", QUOTED)
    recipe = in_tmp / "r.yaml"
    recipe.write_text("# @package _global_\nproject: ${cluster.env.MY_PASSWORD}\n")
    rc = topl(["check", f"recipe={recipe}", "+cluster.env.MY_PASSWORD=${oc.env:MY_PASSWORD}"])
    assert rc == 2 and "w0rd" not in capsys.readouterr().err
