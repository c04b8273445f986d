"""Issue 46's measured set (tests/contract/startup_cases.py): every start-up failure derived from
verl 0.9.1's and 0.8.0's source that a rule can know is refused by plain `check`, in one error
violation naming the keys that produce it; every valid neighbour is accepted. The cases only verl's
own code refuses (`by="dry"`) are the dry run's: tests/contract/test_dryrun_verl.py runs them
(slow tier). One test per case, so that xdist spreads the compositions (~0.1 s each)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from startup_cases import CASES, NEIGHBOURS

from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors

STARTUP = Path(__file__).resolve().parents[2] / "docs" / "startup.md"


@pytest.mark.parametrize("case", [c for c in CASES if c.by == "rule"], ids=lambda c: c.id)
def test_refused_by_check_naming_its_keys(case):
    vs = errors(check(compose_job(case.overrides)))
    assert any(all(k in v.keys for k in case.keys) for v in vs), (
        case.id,
        case.keys,
        [(v.rule, list(v.keys)) for v in vs],
    )


@pytest.mark.parametrize("near", NEIGHBOURS, ids=lambda n: n.id)
def test_valid_neighbour_accepted(near):
    vs = errors(check(compose_job(near.overrides)))
    assert not vs, (near.id, [(v.rule, v.message) for v in vs])


def test_the_set_covers_both_releases_and_cites_each_check():
    """>= 60 failing cases and as many neighbours, on both releases; each cites the check's line in
    the release it names, and its row exists in docs/startup.md."""
    assert len(CASES) >= 60 and len(NEIGHBOURS) >= len(CASES)
    assert {c.verl for c in CASES} == {"0.8.0", "0.9.1"}
    rows = {int(m) for m in re.findall(r"^\| (\d+) \|", STARTUP.read_text(), re.M)}
    for c in CASES:
        assert c.row in rows, c.id
        assert re.fullmatch(rf"verl@{re.escape(c.verl)}:[\w/]+\.py:\d+", c.cite), c.id
    assert len({c.id for c in CASES}) == len(CASES)
