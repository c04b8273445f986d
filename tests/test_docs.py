"""The README is the front door: its rule table is the code's catalog."""

from pathlib import Path

from topl.launcher.cli.rules import rules_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_rule_table_matches_the_code():
    text = README.read_text()
    table = text.split("<!-- rules:begin -->")[1].split("<!-- rules:end -->")[0].strip()
    assert table == rules_markdown().strip(), "regenerate: topl rules --markdown"


def test_readme_has_the_two_setup_commands():
    text = README.read_text()
    assert 'pip install torch==2.13.0 && pip install ".[local]" && topl launch' in text
    assert "```bash\npip install .\n```" in text  # the launcher-only line
    assert "download.pytorch.org/whl/cpu" in text  # the CPU build where no local wheel exists
    assert 'pip install ".[test]"' in text and "pytest" in text
