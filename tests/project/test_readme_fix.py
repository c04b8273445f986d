"""The README's `check --fix` example is what `topl check --fix` prints for it today."""

import re

import pytest
from helpers import run_topl_inproc as run
from paths import ROOT

README = ROOT / "README.md"


@pytest.mark.slow  # one fix search (~260 candidate sets, a second)
def test_the_readme_fix_example_is_current():
    block = re.search(r"```\n\$ topl check (.*--fix)\n\.\.\.\n(.*?)```", README.read_text(), re.S)
    assert block, "the README's --fix example"
    args, shown = block[1].split(), block[2].strip().splitlines()
    out = run("check", *args).stdout.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("fix: "))
    assert out[start : start + len(shown)] == shown
