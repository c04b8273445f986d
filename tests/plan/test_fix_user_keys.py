"""`check --fix` when only keys the user typed can clear an error (launcher/plan/fix.py Search.run):
the search goes straight to changing them instead of spending its budget on the other keys."""

from topl.launcher.contract import evaluate
from topl.launcher.facts import stacks
from topl.launcher.plan import fix

# train.tp=3 divides neither the 32 heads nor the 16 devices: only train.tp (typed) can change that
TYPED = ["recipe=qwen3_30b_a3b_grpo_a3_strict", "train.tp=3", "rollout.tp=5"]


def test_an_error_only_typed_keys_can_clear_is_fixed_within_a_small_budget():
    got = fix.find_fix(TYPED, budget=50)
    assert got.found, got.blocking
    assert {c.key for c in got.changes} == {"train.tp", "rollout.tp"}
    assert all(c.user for c in got.changes)


def test_the_stack_rule_reads_the_profiles_once(monkeypatch):
    reads = []
    real = stacks.profiles

    def counting():
        reads.append(1)
        return real()

    monkeypatch.setattr(stacks, "profiles", counting)
    stacks.shipped_version.cache_clear()
    spec = fix.Search(TYPED).spec0
    for _ in range(5):
        evaluate(spec)  # TOP-STACK-006 compares the declared CANN with the seed profile's
    assert len(reads) == 1
