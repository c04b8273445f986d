"""verl's first-step (balance batch, PrefixGrouper) and critic checks as rules: every cited check
is in the verl releases it names, and the rules fire where those checks would."""

import ast
import os
import re
from pathlib import Path

import pytest
from helpers import verl_release

from topl.launcher.contract import check
from topl.launcher.contract.dryrun import mirror
from topl.launcher.contract.dryrun.mirror import ALL
from topl.launcher.contract.verl_firststep import CHECKS as FIRSTSTEP

CHECKS = {**FIRSTSTEP, **mirror.CHECKS}  # the dry run's mirrored checks, which the rules share

ROOTS = [Path(p) / "verl" for p in os.environ.get("TOPL_VERL_SOURCES", "").split(os.pathsep) if p]
# every release the citations name that is at hand: installed, cached, or (TOPL_VERL_VERSIONS=1, as
# .ci/run sets) downloaded by pip, never installed
ROOTS += [r / "verl" for v in ALL if (r := verl_release(v)) is not None]
ROOTS = sorted(set(ROOTS))
OFF = ["recipe=qwen3_4b_grpo_a3_off"]  # 16 devices, tp=pp=1: actor dp 16; n=8, balance_batch on
PG = "+verl_overrides.actor_rollout_ref.actor.use_prefix_grouper=true"
PPO = ["algorithm.adv_estimator=gae", "algorithm.use_critic=true"]


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _function(tree, symbol: str):
    node = tree
    for part in symbol.split("."):
        node = next(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == part
        )
    return node


def _texts(fn, kind: str) -> list[str]:
    nodes = list(ast.walk(fn))
    if kind == "assert":
        return [_norm(ast.unparse(n.test)) for n in nodes if isinstance(n, ast.Assert)]
    if kind == "raise":
        return [
            _norm(ast.unparse(n.test))
            for n in nodes
            if isinstance(n, ast.If) and any(isinstance(b, ast.Raise) for b in n.body)
        ]
    return [_norm(ast.unparse(n)) for n in nodes if isinstance(n, ast.expr)]


def _version(root: Path) -> str:
    return (root / "version" / "version").read_text().strip()


@pytest.mark.skipif(not ROOTS, reason="verl not installed")
@pytest.mark.parametrize("root", ROOTS, ids=str)
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_cited_check_is_in_verl(name, root):
    """A verl that moves or changes a check fails here, naming the rule's citation."""
    cite = CHECKS[name]
    version = _version(root)
    if version not in cite.versions:
        assert not (root / cite.path).is_file() or cite.text not in (root / cite.path).read_text()
        return  # and a release it does not name does not have it either
    fn = _function(ast.parse((root / cite.path).read_text()), cite.symbol)
    assert any(_norm(cite.text) in t for t in _texts(fn, cite.kind)), f"{cite}: no {cite.text}"


def errors(compose, overrides):
    return {v.rule for v in check(compose(overrides)) if v.severity == "error"}


def test_prefix_grouper_needs_whole_prompt_groups_per_rank(compose):
    """8 prompts x 8 samples split over 16 ranks by sequence, but not by prompt group."""
    assert "TOP-INIT-007" not in errors(compose, [*OFF, "train.train_batch_size=8"])
    bad = errors(compose, [*OFF, "train.train_batch_size=8", PG])
    assert bad == {"TOP-INIT-007"}, bad  # nothing else refuses it
    assert "TOP-INIT-007" not in errors(compose, [*OFF, "train.train_batch_size=16", PG])


def test_balance_checks_follow_the_trainer_that_runs(compose):
    """verl 0.9.x's V1 trainer pads the batch; its old trainer (use_v1=false) and 0.8.0 do not."""
    bad = [*OFF, "train.train_batch_size=8", PG]
    release = [*bad, "stack=release"]
    assert "TOP-INIT-007" not in errors(compose, release)
    assert "TOP-INIT-007" in errors(compose, [*release, "+verl_overrides.trainer.use_v1=false"])
    assert "TOP-INIT-007" not in errors(
        compose, [*bad, "+verl_overrides.trainer.balance_batch=false"]
    )
    # DAPO runs verl-recipe's RayDAPOTrainer (the old trainer) on every verl
    dapo = ["recipe=qwen3_4b_dapo_a3_off", "train.train_batch_size=8", PG, "stack=release"]
    assert "TOP-INIT-007" in errors(compose, dapo)


def test_balance_batch_split_fires_where_the_batch_does_not_split(compose):
    assert "TOP-INIT-006" in errors(compose, [*OFF, "train.train_batch_size=3"])
    assert "TOP-INIT-006" not in errors(compose, [*OFF, "train.train_batch_size=2"])


def test_critic_mini_batch_splits_over_the_critics_own_dp(compose):
    """The critic's engine splits over its own dp: topl renders it the actor's layout (dp 2
    here); sizes set for it alone in verl_overrides (tp=pp=1: dp 16) are its dp, and TOP-INIT-021
    refuses the layouts' mismatch (the critic's groups would serve the actor too)."""
    base = [*OFF, *PPO, "rollout.n=1", "train.ppo_mini_batch_size=2", "train.tp=2", "train.pp=4"]
    base += ["rollout.tp=2", "train.train_batch_size=16"]
    assert not {"TOP-INIT-008", "TOP-INIT-021"} & errors(compose, base)
    critic = "+verl_overrides.critic.megatron"
    own = [
        *base,
        f"{critic}.tensor_model_parallel_size=1",
        f"{critic}.pipeline_model_parallel_size=1",
    ]
    assert {"TOP-INIT-008", "TOP-INIT-021"} <= errors(compose, own)
    assert "TOP-INIT-008" not in errors(
        compose, [*OFF, "rollout.n=1", "train.ppo_mini_batch_size=2"]
    )


def test_critic_mini_batch_no_larger_than_the_train_batch(compose):
    base = [*OFF, *PPO, "train.use_dynamic_bsz=false"]
    assert "TOP-INIT-009" in errors(
        compose, [*base, "+verl_overrides.critic.ppo_mini_batch_size=32"]
    )
    assert "TOP-INIT-009" not in errors(compose, base)
    dyn = [*OFF, *PPO, "+verl_overrides.critic.ppo_mini_batch_size=32"]
    assert "TOP-INIT-009" not in errors(compose, dyn)  # the critic batches by tokens
