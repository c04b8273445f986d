"""Regenerate every generated table and reference in the docs (the tests check each one):
docs/reference.md (rule catalog, doctor checks, supported stacks, field constraints); the
release table of docs/stacks.md;
docs/fields.md; the recipe matrix.

    python scripts/regen_docs.py
"""

import subprocess
import sys
from pathlib import Path

from topl.launcher.cli.rules import rules_markdown
from topl.launcher.doctor.report import checks_markdown
from topl.launcher.facts.stacks import releases_markdown, stacks_markdown
from topl.launcher.spec.constraints import table as constraints_table
from topl.launcher.spec.fields import fields_markdown
from topl.launcher.spec.job import JobSpec

ROOT = Path(__file__).resolve().parents[1]


def splice(text: str, marker: str, table: str) -> str:
    head, rest = text.split(f"<!-- {marker}:begin -->")
    _, tail = rest.split(f"<!-- {marker}:end -->")
    return f"{head}<!-- {marker}:begin -->\n{table.strip()}\n<!-- {marker}:end -->{tail}"


reference = ROOT / "docs" / "reference.md"
text = reference.read_text()
for marker, table in (
    ("rules", rules_markdown()),
    ("doctor", checks_markdown()),
    ("constraints", constraints_table(JobSpec)),
    ("stacks", stacks_markdown()),
):
    text = splice(text, marker, table)
reference.write_text(text)
stacks = ROOT / "docs" / "stacks.md"
stacks.write_text(splice(stacks.read_text(), "releases", releases_markdown()))
(ROOT / "docs" / "fields.md").write_text(fields_markdown())
subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_recipes.py")], check=True)
