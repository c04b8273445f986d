"""`plan`'s fourth round of per-sweep reuse (docs/performance.md): the rules that list the
command (TOP-SCHEMA-001 / 004) and TOP-ENV-001 are traced instead of run per point, the traced
rules' answers are looked up together, and an interpolation that reads no swept key keeps the
base's value. Each test compares with the whole contract (or Hydra) and shows that a reuse which
forgot one of its inputs gives other verdicts."""

from __future__ import annotations

from topl.launcher.contract import check, errors
from topl.launcher.plan.sweep import Planner, expand_items

VAR = "TOPL_TEST_PLAN_TRACE_UNSET"
# a string swept into one command entry (model.hf_path is render's actor_rollout_ref.model.path):
# one value names an unset variable (TOP-SCHEMA-004), the other keys are ints TOP-SCHEMA-004 skips
UNSET_SWEEP = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    f"model.hf_path=/models/q,${VAR}/q",
    "train.tp=1,2",
    # a key no command-reading rule reads (rollout.max_num_seqs is read by TOP-INIT-014 now)
    "rollout.gpu_memory_utilization=0.5,0.6",
]


def _verdicts(planner: Planner, points: list) -> list[dict]:
    return [planner.verdict(p).to_dict() for p in points]


def test_rules_listing_the_command_run_once_per_value_they_read(monkeypatch):
    """TOP-SCHEMA-001 reads the command's keys, TOP-SCHEMA-004 its string values, TOP-ENV-001 no
    entry (the recipe's cluster.env sets no owned variable): each keeps one answer per distinct
    swept value it read (they ran for every point before), and the verdicts stand."""
    monkeypatch.delenv(VAR, raising=False)
    points = expand_items(UNSET_SWEEP)
    want = _verdicts(Planner(memo=False), points)
    assert {"TOP-SCHEMA-004" in v["rules"] for v in want} == {True, False}
    fast = Planner()
    assert _verdicts(fast, points) == want
    (memo,) = fast._memos.values()
    traced = {r.id: t for _, r, t in memo.traced}
    kept = {
        rid: {k: len(a) for k, a in traced[rid].traces.items()}
        for rid in ("TOP-SCHEMA-001", "TOP-SCHEMA-004", "TOP-ENV-001")
    }
    assert not any(traced[rid].every for rid in kept)
    assert kept == {
        "TOP-SCHEMA-001": {(): 1},
        "TOP-SCHEMA-004": {("model.hf_path",): 2},
        "TOP-ENV-001": {(): 1},
    }


def test_a_trace_that_forgot_a_selection_by_type_gives_other_verdicts(monkeypatch):
    from topl.launcher.plan import trace as sweep_trace

    monkeypatch.delenv(VAR, raising=False)
    points = expand_items(UNSET_SWEEP)
    want = _verdicts(Planner(memo=False), points)

    def forgets(self, by, types):  # the same entries, their keys not logged
        return [e for e in dict.values(self.entries) if e.by in by and isinstance(e.value, types)]

    monkeypatch.setattr(sweep_trace._RecCommand, "typed", forgets)
    assert _verdicts(Planner(), points) != want


def test_traced_answers_are_looked_up_by_every_key_their_traces_read(monkeypatch):
    """The traced rules' answers are kept per group of rules whose traces read the same keys
    (together here model.hf_path and train.tp: not gpu_memory_utilization); groups that left a
    key out reuse one point's answers at another."""
    from topl.launcher.plan import memo as sweep_memo

    monkeypatch.delenv(VAR, raising=False)
    points = expand_items(UNSET_SWEEP)
    want = _verdicts(Planner(memo=False), points)
    fast = Planner()
    assert _verdicts(fast, points) == want
    (memo,) = fast._memos.values()
    read = {k for keys, _ in memo.parts for k in keys}
    assert read == {"model.hf_path", "train.tp"}
    assert max(len(memo.joint[keys]) for keys, _ in memo.parts) <= 4
    real = sweep_memo.BaseMemo._parts

    def forgets(self):  # each group keyed without its first key
        got = real(self)
        return got and tuple((keys[1:], members) for keys, members in got)

    monkeypatch.setattr(sweep_memo.BaseMemo, "_parts", forgets)
    assert _verdicts(Planner(), points) != want


def test_an_interpolation_reading_no_swept_key_keeps_the_bases_value(compose, monkeypatch):
    """alignment.kv_tile is `${rollout.block_size}`: a sweep of other keys leaves it the base's
    (it is no varying key), a sweep of the block size resolves it again at every point, as Hydra
    does; without that the verdicts differ from Hydra's."""
    from topl.launcher.plan import sweep as P

    fast = Planner()
    for p in expand_items(["train.tp=1,2", "rollout.max_num_seqs=16,32"]):
        fast.verdict(p)
    (memo,) = fast._memos.values()
    assert memo.varying == ("train.tp", "rollout.max_num_seqs")

    sweep = ["alignment=strict", "rollout.block_size=16,128", "rollout.tp=1,2"]
    got = P.plan(sweep)
    want = [sorted(x.rule for x in errors(check(compose(v.overrides)))) for v in got]
    assert [sorted(v.rules) for v in got] == want
    assert len({tuple(w) for w in want}) > 1  # the block size moves the verdict
    monkeypatch.setattr(P, "stale", lambda interp, swept: [])
    assert [sorted(v.rules) for v in P.plan(sweep)] != want


def test_stale_follows_chains_and_forms_it_cannot_read():
    from topl.launcher.plan.interp import parse, stale

    interp = [
        parse("a.w", "${a.z}/w"),  # reads a later stale one: comes after it
        parse("a.x", "${b.y}"),
        parse("a.z", "${.x}_run"),  # relative: a.x, another stale one
        parse("c.k", "${oc.env:HOME}"),  # a resolver reading no key: the base's value stays
        parse("c.n", "${oc.env:${b.y}}"),  # nested: not read here, always stale, never replayed
        parse("d.k", "${model.name}"),  # reads nothing swept
    ]
    assert [i.key for i in stale(interp, ["b.y"])] == ["a.x", "a.z", "c.n", "a.w"]
    assert [i.key for i in stale(interp, ["b"])] == ["a.x", "a.z", "c.n", "a.w"]  # a section above
    assert [i.key for i in stale(interp, ["a.x"])] == ["a.z", "c.n", "a.w"]  # set, not resolved
    assert [i.replay for i in interp] == [True, True, True, False, False, True]
    assert parse("t.a", "${..top}").refs == {"top"} and parse("t", "${..top}").refs is None


def test_a_point_answered_from_memos_makes_no_spec(monkeypatch):
    """The spec (and its patched command) is made only where a rule, a trace or the estimate
    runs; the world size is the base's unless a swept key is one it reads."""
    from topl.launcher.plan import sweep as P

    made = []
    real = P.copy_on_write
    monkeypatch.setattr(P, "copy_on_write", lambda *a: made.append(1) or real(*a))
    recipe = "recipe=qwen3_30b_a3b_grpo_a3_strict"
    points = expand_items(
        [recipe, "train.tp=1,2", "rollout.gpu_memory_utilization=0.5,0.6", "rollout.tp=1,2"]
    )
    want = _verdicts(Planner(memo=False), points)
    fast = Planner()
    assert _verdicts(fast, points) == want
    made.clear()
    assert _verdicts(fast, points) == want  # again: every answer is in a memo now
    assert made == []
    (memo,) = fast._memos.values()
    assert memo.world == 16
    nodes = expand_items([recipe, "cluster.nodes=1,2", "rollout.tp=1,2"])
    fast = Planner()
    got = _verdicts(fast, nodes)
    assert got == _verdicts(Planner(memo=False), nodes)
    assert {v["devices"] for v in got} == {16, 32}
    (memo,) = fast._memos.values()
    assert memo.world is None


def test_plan_json_lines_are_json_dumps_of_each_verdict():
    """`plan --json` writes a verdict's line itself: the bytes json.dumps gives, for every type a
    field can hold (a non-float estimate, a NaN, a rank or an odd text go to json.dumps)."""
    import json

    from topl.launcher.cli.plan import _json_line
    from topl.launcher.plan.sweep import Verdict

    verdicts = [
        Verdict(["train.tp=2", 'experiment="ü\\x"\n'], False, ["TOP-TP-001"], ["W"], 1.5, None, 16),
        Verdict([], True, [], [], None, None, 0),
        Verdict(["a=1"], True, [], [], 12, 1e-07, 8),  # an int estimate
        Verdict(["a=1"], True, [], [], float("nan"), float("inf"), 8),
        Verdict(["a=1"], True, [], [], 0.1, 2.0, 8, {"step_s": 1.0}, True),
        Verdict([b"x"], True, [], [], 0.1, 2.0, 8),  # type: ignore[list-item]
    ]
    for v in verdicts:
        assert _json_line(v) == json.dumps(v.to_dict(), default=str)
    for v in expand_items(["train.tp=1,2", "rollout.tp=1,2"]):
        got = Planner().verdict(v)
        assert _json_line(got) == json.dumps(got.to_dict(), default=str)


def test_the_assignment_pattern_matches_where_its_plain_form_does():
    """redact._ASSIGN tests "not after [A-Za-z0-9_]" after the name's first letter (a faster
    search over plan's megabytes); on any text it finds what the plain leading lookbehind finds."""
    import random
    import re

    from topl.launcher.base import redact

    plain = re.compile(
        r"(?<![A-Za-z0-9_])(?P<name>[A-Z][A-Z0-9_]*)(?P<sep>\"?\s*[=:]\s*)"
        r"(?P<value>\$\{[^}\"]*\}|\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s\"',}\]]+)"
    )
    assert redact._ASSIGN.pattern != plain.pattern
    alphabet = "AKPTEYS_0a1z é\n\t\"':={}$,]\\-"
    rng = random.Random(33)
    texts = [
        "HF_TOKEN=abcdefgh",
        "x_API_KEY=1 aAPI_KEY=2 1PASSWORD=3 \nPASSWORD=4",
        'A"PASSWORD": "x\\"y" B: ${C} é_TOKEN=z',
    ] + ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60))) for _ in range(20000)]
    for t in texts:
        assert [m.span() for m in redact._ASSIGN.finditer(t)] == [
            m.span() for m in plain.finditer(t)
        ], t
        assert redact._ASSIGN.sub(redact._assign, t) == plain.sub(redact._assign, t)


def test_plan_and_fix_answer_as_check_where_interpolations_chain_or_need_hydra(
    tmp_path, monkeypatch
):
    """Relative references, chains through a stale key, resolvers and interpolations inside a
    list: every plan point's verdict is `check`'s (Hydra's compose) on that point, and `--fix`
    searches on a config holding `${oc.env:..}` (it judged nothing there before)."""
    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.plan.fix import find_fix
    from topl.launcher.plan.sweep import plan

    monkeypatch.setenv("TOPL_TEST_INTERP", "x")
    monkeypatch.delenv("TOPL_TEST_INTERP_UNSET", raising=False)
    rel = tmp_path / "rel.yaml"
    rel.write_text("# @package _global_\ntrain:\n  ppo_mini_batch_size: ${.train_batch_size}\n")
    sweeps = [
        [f"recipe={rel}", "train.train_batch_size=8,12,24"],
        ["rollout.block_size=${train.max_prompt_length}", "train.max_prompt_length=16,1024"],
        [
            "train.ppo_mini_batch_size=${train.train_batch_size}",
            "train.ppo_micro_batch_size_per_gpu=${train.ppo_mini_batch_size}",
            "train.train_batch_size=8,12,16",
        ],
        ["+cluster.env.A=${oc.env:TOPL_TEST_INTERP}", "train.tp=1,2"],
        [
            "train_files=[${data_dir}/a.parquet]",
            "val_files=[/v.parquet]",
            "data_dir=$TOPL_TEST_INTERP_UNSET/x,/ok",
            "cluster.backend=subprocess",
        ],
    ]
    for sweep in sweeps:
        got = plan(sweep)
        want = [sorted(x.rule for x in errors(check(compose_job(v.overrides)))) for v in got]
        assert [sorted(v.rules) for v in got] == want, sweep
    fixed = find_fix(
        [
            "recipe=qwen3_4b_grpo_a3_strict",
            "+cluster.env.A=${oc.env:TOPL_TEST_INTERP}",
            "rollout.block_size=64",  # TOP-ATTN-004 under strict
        ]
    )
    assert fixed.found and [c.override for c in fixed.changes] == ["rollout.block_size=128"]
