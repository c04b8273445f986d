"""`topl check ... --fix -o FILE.yaml`: the fixed spec as a recipe file that `topl check
recipe=FILE.yaml` accepts and that composes to the very spec the fix's command line gives;
an existing file is kept without --force; no secret lands in it."""

import json

from topl.launcher.cli import main
from topl.launcher.compose.hydra import compose_job

BROKEN = ["recipe=qwen3_30b_a3b_grpo_a3_strict", "stack=release"]  # rejected; --fix finds a fix


def test_the_fix_written_as_a_recipe_is_accepted_and_is_the_same_spec(tmp_path, capsys):
    out = tmp_path / "fixed.yaml"
    assert main(["check", *BROKEN, "--fix", "-o", str(out), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["recipe_file"] == {
        "path": str(out),
        "ok": True,
        "verdict": doc["recipe_file"]["verdict"],
    }
    text = out.read_text()
    assert text.startswith("# @package _global_\n") and "qwen3_30b_a3b_grpo_a3_strict" in text
    assert main(["check", f"recipe={out}"]) == 0
    assert "OK:" in capsys.readouterr().out
    fixed = compose_job([*BROKEN, *doc["fix"]["overrides"]]).to_object()
    assert compose_job([f"recipe={out}"]).to_object() == fixed
    assert out.stat().st_mode & 0o777 == 0o600

    assert main(["check", *BROKEN, "--fix", "-o", str(out)]) == 2  # exists: kept
    assert "exists: not overwritten" in capsys.readouterr().err and out.read_text() == text
    assert main(["check", *BROKEN, "--fix", "-o", str(out), "--force"]) == 2
    assert "wrote " in capsys.readouterr().out


def test_a_recipe_given_as_a_path_is_copied_in(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "# @package _global_\ndefaults:\n  - qwen3_30b_a3b_grpo_a3_strict\n  - _self_\n"
        "rollout:\n  temperature: 0.9\n"
    )
    out = tmp_path / "out.yaml"
    args = [f"recipe={mine}", "stack=release", "--fix", "-o", str(out)]
    assert main(["check", *args]) == 2
    capsys.readouterr()
    assert main(["check", f"recipe={out}"]) == 0
    assert compose_job([f"recipe={out}"]).to_object().rollout.temperature == 0.9


def test_refusals(tmp_path, capsys):
    out = tmp_path / "x.yaml"
    assert main(["check", *BROKEN, "-o", str(out)]) == 2  # -o without --fix
    assert "there is no --fix" in capsys.readouterr().err
    secret = "+cluster.env.WANDB_API_KEY=abcdef0123456789abcdef0123456789"
    assert main(["check", *BROKEN, secret, "--fix", "-o", str(out)]) == 2
    assert "never written into a recipe file" in capsys.readouterr().err
    assert not out.exists()
