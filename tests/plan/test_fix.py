"""`topl check --fix`: the smallest override set that the contract accepts, or the rules that block."""

import json

import pytest
from helpers import STRICT_A3, verl_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_accepted_runs import accepted_runs
from test_contract_rules import CASES

from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors
from topl.launcher.plan.fix import AGAIN_MIN, PROTECTED, Search, find_fix

RELEASE_30B = ["recipe=qwen3_30b_a3b_grpo_a3_strict", "stack=release"]


def accepted(overrides):
    return not errors(check(compose_job(overrides)))


def test_seed_recipe_moved_to_the_release_stack_is_fixed_in_one_step():
    """The four rounds of check -> read the fix -> re-run (issue 36) as one search; the result is
    accepted by a full Hydra compose + check, not only by the search's own fast path."""
    assert not accepted(RELEASE_30B)
    fix = find_fix(RELEASE_30B)
    assert fix.found
    keys = {c.key for c in fix.changes}
    assert {"rollout.chunked_prefill", "train.use_dynamic_bsz", "rollout.pp"} <= keys
    assert not any(k.startswith(PROTECTED) for k in keys)  # never the model or the alignment
    assert accepted(RELEASE_30B + [c.override for c in fix.changes])


def test_the_search_goes_on_after_the_first_fix_as_long_again_and_keeps_the_cheaper():
    """The first accepted set is not the answer when a cheaper one follows; the search stops
    after as many sets again as it took to find the first (it spent all 3000 before)."""
    search = Search(["recipe=qwen3_30b_a3b_grpo_a2_strict", "stack=prerelease"])
    accepted_at: dict[frozenset, int] = {}
    judge = search.judge

    def recording(changes):
        got = judge(changes)
        if got[2] is not None and not got[0]:
            accepted_at.setdefault(frozenset(c.override for c in changes), search.evaluated)
        return got

    search.judge = recording  # type: ignore[method-assign]
    fix = search.run()
    first = min(accepted_at.values())
    answer = accepted_at[frozenset(c.override for c in fix.changes)]
    assert fix.found and answer > first  # a cheaper set found after the first: kept
    assert search.evaluated <= first + max(first, AGAIN_MIN) + 2  # +2: a move of a twin pair
    assert accepted(
        ["recipe=qwen3_30b_a3b_grpo_a2_strict", "stack=prerelease"]
        + [c.override for c in fix.changes]
    )


def test_a_value_the_user_typed_is_kept_when_another_fix_exists():
    ovs = STRICT_A3 + ["rollout.tp=2"]  # TOP-TP-001: rollout tp 2 against train tp 1
    assert not accepted(ovs)
    fix = find_fix(ovs)
    assert fix.found and "rollout.tp" not in {c.key for c in fix.changes}
    assert "train.tp=2" in [c.override for c in fix.changes]
    assert accepted(ovs + [c.override for c in fix.changes])


def test_a_typed_value_is_changed_only_when_nothing_else_fixes_it_and_says_so():
    ovs = STRICT_A3 + ["rollout.calculate_log_probs=false"]  # TOP-LOGP-001: only this key
    fix = find_fix(ovs)
    assert fix.found
    (c,) = fix.changes
    assert (c.key, c.value, c.user) == ("rollout.calculate_log_probs", True, True)


def test_what_cannot_be_fixed_names_the_blocking_rule():
    """The model is never changed by a fix: a model that cannot fit the local cluster blocks."""
    fix = find_fix(["model=qwen3_8b"], budget=300)
    assert not fix.found and "TOP-RES-009" in fix.blocking
    assert fix.blocking["TOP-RES-009"]  # the rule's own message


def test_an_accepted_spec_needs_no_fix():
    fix = find_fix(STRICT_A3)
    assert fix.found and fix.changes == []


@pytest.mark.slow
@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_every_rules_fixture_is_fixed_or_blocked_by_name(rule_id):
    """Each rule's own rejected fixture: the fix is accepted by `check` (full compose), or the
    search names the rules that block it (never a silent empty answer)."""
    bad, _ = CASES[rule_id]
    fix = find_fix(bad, budget=400)  # first judges `bad` as composed: no errors, no change
    if fix.found and not fix.changes:
        pytest.skip(f"{rule_id} is a warning on its fixture")
    if fix.found:
        assert accepted(bad + [c.override for c in fix.changes]), fix.to_dict()
    else:
        assert fix.blocking, rule_id


def test_a_fix_never_raises_what_a_node_holds():
    """32 devices on one A3 node: the search may not declare bigger hardware
    (cluster.max_devices_per_node=32 cleared TOP-RES-010 before it was protected). The rule reads
    only keys a fix never changes: it blocks at once, by its message, which names the layout."""
    fix = find_fix(["recipe=qwen3_4b_grpo_a3_strict", "cluster.devices_per_node=32"])
    assert (fix.found, fix.changes, fix.evaluated) == (False, [], 1), fix.to_dict()
    assert "cluster.nodes=2 cluster.devices_per_node=16" in fix.blocking["TOP-RES-010"]


def test_cli_json_gives_the_set_the_rules_each_clears_and_the_verdict_after(capsys):
    from topl.launcher.cli import main

    assert main(["check", *RELEASE_30B, "--fix", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["fix"]["found"] is True
    assert out["fix"]["after"]["ok"] is True
    clears = {c["key"]: c["clears"] for c in out["fix"]["changes"]}
    assert clears["rollout.chunked_prefill"] == ["TOP-CACHE-002"]
    assert out["fix"]["command"].startswith("topl check recipe=qwen3_30b_a3b_grpo_a3_strict")


def test_cli_text_prints_a_copy_pasteable_command(capsys):
    from topl.launcher.cli import main

    assert main(["check", *STRICT_A3, "rollout.calculate_log_probs=false", "--fix"]) == 2
    out = capsys.readouterr().out
    assert "after the fix: OK" in out
    assert "rollout.calculate_log_probs=true" in out.splitlines()[-1]


STRICT_RECIPES = [
    f"recipe=qwen3_{m}_{a}_{c}_strict"
    for m in ("30b_a3b", "4b")
    for a in ("grpo", "dapo")
    for c in ("a2", "a3")
]


@pytest.mark.slow
@pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed")
@pytest.mark.parametrize("stack", ["release", "prerelease"])
@pytest.mark.parametrize("recipe", STRICT_RECIPES)
def test_shipped_strict_recipes_on_the_stock_stacks_are_fixed_and_run(
    recipe, stack, tmp_path, monkeypatch
):
    """Each shipped strict recipe moved to a stock stack: the fix is accepted by `check` and its
    rendered command composes on that stack's verl (0.9.1) and passes its validate_config."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ovs = [recipe, f"stack={stack}"]
    fix = find_fix(ovs)
    # the MoE ones on 0.30.0rc2 too: topl's alignment module replaces its MoE MLP and routers
    assert fix.found, fix.blocking
    assert "TOP-STACK-005" not in {r for c in fix.changes for r in c.clears}
    fixed = ovs + [c.override for c in fix.changes]
    assert accepted(fixed), fix.to_dict()
    assert accepted_runs([fixed], tmp_path) == 1


LAYOUT = {
    "stack": ["seed", "release", "prerelease"],
    "rollout.tp": [1, 2, 4],
    "train.tp": [1, 2],
    "rollout.pp": [1, 2],
    "rollout.chunked_prefill": [True, False],
    "train.use_dynamic_bsz": [True, False],
    "rollout.max_num_seqs": [16, 64, 1024],
    "rollout.prefix_caching": [True, False],
}


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in LAYOUT.items()}))
def test_random_rejected_specs_are_fixed_or_blocked(point):
    ovs = ["recipe=qwen3_30b_a3b_grpo_a3_strict"] + [
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in point.items()
    ]
    if accepted(ovs):
        return
    fix = find_fix(ovs, budget=800)
    if fix.found:
        assert accepted(ovs + [c.override for c in fix.changes]), fix.to_dict()
        assert not {c.key for c in fix.changes} & {"stack"}  # the declared stack is kept
    else:
        assert fix.blocking


def test_a_key_you_typed_is_changed_when_nothing_else_clears_its_rule():
    """train.pp=3 on 16 devices: only another pp clears it. TOP-INIT-006 reads actor dp through
    the rendered command (its declared keys, not the view, name train.pp), so it is not "stuck",
    and the search without your keys gets half the budget, not all of it (before: "no fix")."""
    fix = find_fix(["recipe=qwen3_30b_a3b_grpo_a3_strict", "train.pp=3"])
    assert fix.found and [c.override for c in fix.changes] == ["train.pp=4"], fix.to_dict()
    assert accepted(["recipe=qwen3_30b_a3b_grpo_a3_strict", "train.pp=3", "train.pp=4"])


def test_a_fix_text_names_the_value_that_clears_its_rule():
    """rollout.block_size=8 breaks TOP-ATTN-004, which rollout.block_size=128 (named in its fix
    text) clears; with other errors the search still reaches it (the layout: your keys too)."""
    from topl.launcher.contract.core import RULES

    ovs = [
        "recipe=qwen3_4b_grpo_a3_strict",
        "rollout.block_size=8",
        "cluster.nodes=3",
        "train.pp=5",
    ]
    fix = find_fix(ovs, budget=300)
    assert fix.found and "rollout.block_size=128" in [c.override for c in fix.changes]
    assert accepted(ovs + [c.override for c in fix.changes]), fix.to_dict()
    attn = next(r for r in RULES if r.id == "TOP-ATTN-004")
    assert "rollout.block_size=128" in attn.fix
    alone = find_fix(["recipe=qwen3_4b_grpo_a3_strict", "rollout.block_size=8"], budget=300)
    assert alone.found and [c.override for c in alone.changes] == ["rollout.block_size=128"]


# the default local cluster: an 8B model is past what the local backend holds (TOP-RES-009 reads
# the model and the backend, which a fix never changes), and rollout.tp=3 breaks four more rules
NO_FIX = ["model=qwen3_8b", "rollout.tp=3"]


def test_when_no_fix_is_found_what_blocks_lists_no_rule_a_candidate_clears():
    """The search stops at the closest set it reached (here after 100 sets); of the rules left
    there, one that one more candidate clears on its own (rollout.tp=1 for TOP-RES-004,
    train.param_offload=true for TOP-MEM-001) is not what blocks (review #11)."""
    search = Search(NO_FIX, budget=100)
    calls: list[tuple] = []  # ("candidates", rules, moves) and ("judge", changes, errors), in order
    candidates, judge = search.candidates, search.judge

    def recording_candidates(spec, bad, taken, allow_user):
        moves = candidates(spec, bad, taken, allow_user)
        calls.append(("candidates", bad, moves))
        return moves

    def recording_judge(changes):
        got = judge(changes)
        calls.append(("judge", changes, got[0]))
        return got

    search.candidates = recording_candidates  # type: ignore[method-assign]
    search.judge = recording_judge  # type: ignore[method-assign]
    fix = search.run()
    assert not fix.found and fix.changes == [], fix.to_dict()
    # what blocks is judged at the closest set: the search's last candidates, each tried there
    last = max(i for i, c in enumerate(calls) if c[0] == "candidates")
    _, rules, moves = calls[last]
    tried = [errs for kind, _, errs in calls[last + 1 :] if kind == "judge"]
    assert len(tried) == len(moves) > 0
    cleared = set().union(*(rules - errs for errs in tried))
    assert cleared, rules  # rules a candidate clears were left there: the case is not trivial
    assert set(fix.blocking) == rules - cleared == {"TOP-RES-009"}
    assert "takes at most 50M" in fix.blocking["TOP-RES-009"]  # the rule's own message


def test_cli_says_no_fix_and_names_only_what_blocks(capsys, monkeypatch):
    from topl.launcher.cli import main
    from topl.launcher.plan import fix

    real = fix.find_fix
    monkeypatch.setattr(fix, "find_fix", lambda ovs, warnings: real(ovs, warnings, budget=100))
    assert main(["check", *NO_FIX, "--fix"]) == 2
    out = capsys.readouterr().out
    tail = out[out.index("\nno fix (") :].splitlines()
    assert tail[1].endswith("candidate sets judged); what blocks it:"), out
    assert [t.split(":")[0] for t in tail[2:]] == ["  TOP-RES-009"], out
    assert main(["check", *NO_FIX, "--fix", "--json"]) == 2
    got = json.loads(capsys.readouterr().out)["fix"]
    assert (got["found"], got["overrides"], got["command"], got["after"]) == (False, [], None, None)
    assert list(got["blocking"]) == ["TOP-RES-009"]
