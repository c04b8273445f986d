"""A sweep's size is bounded before it is expanded: `train.tp=range(1,100000000)` was listed value
by value and hung `topl plan` and `topl launch -m` (issue 48 probe); now one message, exit 2."""

import time

import pytest
from helpers import run_topl_inproc

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.untrusted_options import MAX_SWEEP_VALUES
from topl.launcher.plan.sweep import MAX_POINTS, expand


@pytest.mark.parametrize(
    "sweep, said",
    [
        (["train.tp=range(1,100000000)"], f"more than {MAX_SWEEP_VALUES:,} values for train.tp"),
        (["train.steps=range(1,2000)", "rollout.n=range(1,1000)"], f"at most {MAX_POINTS:,}"),
    ],
)
def test_a_huge_sweep_is_refused_before_it_is_expanded(sweep, said, tmp_path):
    t = time.perf_counter()
    with pytest.raises(ToplError, match=said):
        expand(sweep)
    for args in (("plan", *sweep), ("launch", "-m", "--dry-run", *sweep)):
        r = run_topl_inproc(*args, cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert said in r.stderr + r.stdout  # launch -m: the sweeper logs it (Hydra logging)
    assert time.perf_counter() - t < 30
    assert (
        len(expand(["train.steps=range(1,10001)"])) == MAX_SWEEP_VALUES
    )  # the bound itself passes
