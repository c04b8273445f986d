"""docs/numerics.md is a run's output (scripts/numerics_tables.py): the switch table re-run here,
the TP-pair grid checked cell by cell against the claims it backs."""

import importlib.util
import re

from paths import ROOT

DOC = ROOT / "docs" / "numerics.md"


def tables():
    spec = importlib.util.spec_from_file_location(
        "numerics_tables", ROOT / "scripts" / "numerics_tables.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def section(title: str) -> list[list[str]]:
    """The rows (cells) of the first table after `title`."""
    text = DOC.read_text().split(title, 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


def test_switch_table_is_a_run():
    assert tables().switch_table() in DOC.read_text()


def test_switch_table_says_which_switch_needs_which_setting():
    rows = {re.sub("`", "", r[0]): r for r in section("## Which switch shows where")}
    for switch, where in (("moe_fixed_combine", "tiny_moe"), ("tp_aligned_reduction", "tp=4")):
        assert rows[switch][1] == "0" and where in rows[switch][2] and rows[switch][3] != "0"
    assert all(r[3] != "0" for r in rows.values())  # every switch shows somewhere


def test_tp_grid_strict_is_exact_and_unaligned_is_not():
    strict, off = section("### strict"), section("### `tp_aligned_reduction` off")
    assert len(strict) == len(off) == 8
    assert all(c == "0" for r in strict for c in r[1:])
    # unaligned: every pair with a TP side differs but 2 / 2 (one addition per element, commutative)
    differs = {(int(r[0]), j) for r in off for j, c in enumerate(r[1:], 1) if c != "0"}
    tp_pairs = {(t, j) for t in range(1, 9) for j in range(1, 9) if max(t, j) > 1}
    assert differs == tp_pairs - {(2, 2)}
