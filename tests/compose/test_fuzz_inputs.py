"""Property-based fuzz over the spec schema and Hydra's override grammar (fixed, derandomized
budget for CI): every input ends in exit 0 or exit 2 with one message, never a traceback or a
hang, and `--json` always prints JSON."""

import contextlib
import dataclasses
import io
import json
import signal
import typing

from hypothesis import given, settings
from hypothesis import strategies as st

from topl.launcher.cli import main
from topl.launcher.spec.job import JobSpec

# the budget is the loaded hypothesis profile (tests/conftest.py): `ci` 150 fixed examples, `dev` 30
BUDGET = settings()
HANG_S = 60  # one composition takes well under a second; this catches a hang, not slowness


def _leaves(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _leaves(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


KEYS = sorted(_leaves(JobSpec)) + [
    "train.nope",
    "nope",
    "cluster.env.HCCL_DETERMINISTIC",
    "cluster.env.X",
    "algorithm.extra_overrides.trainer.total_epochs",
    "algorithm.extra_overrides.a.b",
    "hydra.job.name",
    "train",
    "recipe",
]
GROUPS = ["model", "algorithm", "train", "rollout", "alignment", "collective", "cluster", "recipe"]
OPTIONS = [
    "tiny_dense",
    "qwen3_30b_a3b",
    "megatron",
    "fsdp",
    "vllm_ascend",
    "strict",
    "mitigated",
    "off",
    "hccl_strict",
    "atlas_a3",
    "qwen3_4b_grpo_a2_strict",
    "bogus",
    "null",
    "../conf/config",
    "",
]
ATOMS = st.one_of(
    st.integers(-3, 70000).map(str),
    st.sampled_from(["0", "-1", "1e309", "nan", "inf", "-inf", "0x10"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "null", "~"]),
    st.sampled_from(
        [
            "'2'",
            '"2"',
            "'a b'",
            '"x,y"',
            "''",
            "\\'",
            "'",
            '"',
            "${train.tp}",
            "${nope}",
            "${oc.env:HOME}",
            "${",
            "}",
            "{a:1}",
            "{}",
            "[1,2]",
            "[]",
            "[",
            "a=b",
            "a:b",
            "a b",
            "é",
            "\x00",
            "\\",
            "$",
            "@",
            "#c",
        ]
    ),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
)
SWEEPS = st.sampled_from(
    [
        "1,2",
        "1,2,4",
        "range(1,3)",
        "range(0,5,2)",
        "choice(1,2)",
        "interval(0,1)",
        "glob(*)",
        "shuffle(1,2)",
        "shuffle(range(1,3))",
        "sort(2,1)",
        "tag(x,1,2)",
        "choice()",
        "range(1)",
        "1,",
        ",",
        "a,b",
    ]
)
VALUES = st.one_of(ATOMS, SWEEPS)


@st.composite
def override(draw):
    if draw(st.integers(0, 5)) == 0:
        return f"{draw(st.sampled_from(GROUPS))}={draw(st.sampled_from(OPTIONS))}"
    prefix = draw(st.sampled_from(["", "", "", "+", "++", "~"]))
    key = draw(st.sampled_from(KEYS))
    if prefix == "~" and draw(st.booleans()):
        return f"~{key}"
    return f"{prefix}{key}={draw(VALUES)}"


def run(args):
    out, err = io.StringIO(), io.StringIO()

    def hang(*_):
        raise TimeoutError(f"no answer in {HANG_S}s: {args}")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


@BUDGET
@given(st.lists(override(), min_size=1, max_size=3))
def test_check_answers_every_input(overrides):
    rc, out, err = run(["check", *overrides])  # an uncaught exception fails the test here
    assert rc in (0, 2), (overrides, rc, err)
    assert "Traceback" not in out + err
    if rc == 2:
        assert (out + err).strip(), overrides  # a message, not silence


@BUDGET
@given(st.lists(override(), min_size=1, max_size=3))
def test_check_json_is_always_json(overrides):
    rc, out, err = run(["check", "--json", *overrides])
    assert rc in (0, 2), (overrides, rc, err)
    doc = json.loads(out)
    assert doc["ok"] is (rc == 0)
    if "error" in doc:
        assert doc["error"]["message"]


@settings(BUDGET, max_examples=min(40, BUDGET.max_examples))
@given(st.lists(override(), min_size=1, max_size=2))
def test_plan_json_is_always_json(overrides):
    rc, out, err = run(["plan", "--json", "recipe=qwen3_4b_grpo_a3_strict", *overrides])
    assert rc in (0, 2), (overrides, rc, err)
    doc = json.loads(out)
    assert ("error" in doc) is (rc == 2)
