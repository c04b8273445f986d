"""verl's start-up assertions as rules (issue 27, item 4): each cited assertion is still in the
installed verl, and the rules accept what verl runs and refuse what it asserts against."""

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest
from helpers import STRICT_A3, hf_config_dir, validate_on_declared

from topl.launcher.contract import check
from topl.launcher.render.invocation import render

VERL = importlib.util.find_spec("verl")


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _function(tree: ast.Module, symbol: str):
    """The function (or Class.method) named `symbol` in a module."""
    node = tree
    for part in symbol.split("."):
        node = next(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == part
        )
    return node


def _assertions():
    from topl.launcher.contract.verl_startup import ASSERTIONS

    return ASSERTIONS  # (collected lazily: the other tests here also run against older topl)


# verl source trees to check besides the installed one (os.pathsep separated folders holding
# `verl/`), e.g. 0.8.0 and 0.9.0 unpacked from `pip download --no-deps verl==X`.
ROOTS = [Path(p) / "verl" for p in os.environ.get("TOPL_VERL_SOURCES", "").split(os.pathsep) if p]
if VERL is not None:
    ROOTS.insert(0, Path(list(VERL.submodule_search_locations)[0]))


@pytest.mark.skipif(not ROOTS, reason="verl not installed")
@pytest.mark.parametrize("root", ROOTS, ids=str)
@pytest.mark.parametrize("name", sorted(_assertions()))
def test_every_cited_assertion_is_in_verl(name, root):
    """A new verl that moves or changes an assertion fails here, naming the rule's citation."""
    cite = _assertions()[name]
    tree = ast.parse((root / cite.path).read_text())
    fn = _function(tree, cite.symbol)
    asserted = [_norm(ast.unparse(n.test)) for n in ast.walk(fn) if isinstance(n, ast.Assert)]
    assert any(_norm(cite.text) in a for a in asserted), f"{cite} no longer asserts {cite.text}"


def errors(compose, overrides):
    return {v.rule for v in check(compose(overrides)) if v.severity == "error"}


# Dynamic batch size: verl builds micro batches from a token budget; micro-batch divisibility does
# not apply (verl@0.9.1:verl/utils/config.py:validate_config skips it too).
# verl 0.9.1 (installed: its validate_config runs below); its vLLM has no NPU pipeline parallel
RELEASE = ["stack=release", "rollout.pp=1", "rollout.tp=2", "train.tp=2", "train.pp=4"]
DYNAMIC_OK = {
    "rollout.n=3 with a micro batch that does not divide it": [
        "recipe=qwen3_30b_a3b_grpo_a3_off",
        *RELEASE,
        "rollout.n=3",
        "train.ppo_micro_batch_size_per_gpu=5",
    ],
    "PPO with n=1 and a one-sequence-per-rank mini batch": [
        "recipe=qwen3_30b_a3b_grpo_a3_off",
        *RELEASE,
        "rollout.n=1",
        "algorithm.adv_estimator=gae",
        "algorithm.use_critic=true",
        "train.ppo_mini_batch_size=2",
        # the critic gets the actor's layout (topl renders it; TOP-INIT-021): its dp is the actor's
    ],
}


@pytest.mark.parametrize("case", sorted(DYNAMIC_OK))
def test_micro_batch_checks_do_not_apply_under_dynamic_bsz(compose, case, tmp_path):
    c = compose(DYNAMIC_OK[case])
    assert c.to_object().train.use_dynamic_bsz
    assert not errors(compose, DYNAMIC_OK[case])
    if VERL is not None:  # and verl's own validation agrees (the critic reads a local config)
        spec = c.to_object()
        spec.model.hf_path = hf_config_dir(spec.model, tmp_path / "hf")
        validate_on_declared(spec, render(spec, environ={"HOME": "/home/u"}), tmp_path)


def test_micro_batch_checks_still_apply_without_dynamic_bsz(compose):
    bad = DYNAMIC_OK["rollout.n=3 with a micro batch that does not divide it"]
    assert "TOP-RES-005" in errors(compose, [*bad, "train.use_dynamic_bsz=false"])


def test_mini_batch_over_dp_holds_with_dynamic_bsz_too(compose):
    """verl asserts ppo_mini_batch_size * n % dp == 0 in the training worker either way."""
    bad = ["recipe=qwen3_30b_a3b_grpo_a3_off", "rollout.n=3", "train.ppo_mini_batch_size=1"]
    assert "TOP-INIT-003" in errors(compose, bad)


def test_ulysses_sp_not_dividing_heads_is_refused(compose):
    assert "TOP-INIT-004" in errors(compose, ["train=fsdp", "model=qwen3_4b", "train.ulysses_sp=3"])
    # a multiple of the kv heads (8) that divides the heads (32): verl repeats kv heads
    assert "TOP-INIT-004" not in errors(
        compose, ["train=fsdp", "model=qwen3_4b", "train.ulysses_sp=16", "cluster.nodes=2"]
    )


def test_expert_tensor_parallel_is_refused_in_strict(compose):
    assert "TOP-TP-003" in errors(compose, STRICT_A3 + ["train.etp=2"])
    assert "TOP-TP-003" not in errors(compose, STRICT_A3 + ["train.etp=2", "alignment=off"])


def test_null_micro_batch_through_verl_overrides_is_refused(compose):
    key = "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
    bad = [*STRICT_A3, "alignment=off", f"+verl_overrides.{key}=null"]
    assert "TOP-INIT-002" in errors(compose, bad)


def test_rollout_sizes_set_verbatim_must_tile_the_world(compose):
    key = "actor_rollout_ref.rollout.data_parallel_size"
    assert "TOP-INIT-005" in errors(
        compose, [*STRICT_A3, "alignment=off", f"+verl_overrides.{key}=3"]
    )
