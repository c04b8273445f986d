"""topl's alignment module (topl.launcher.align) for the stock stacks, the module itself (its
CPU numerics against megatron-core: tests/align/test_align.py):

- all-or-nothing patching over stand-in modules (no vllm needed);
- tier facts_sources: each target's parameter list read by AST in every supported release.
"""

from __future__ import annotations

import ast
import os
import sys
import types

import pytest

from topl.launcher import facts
from topl.launcher.align import targets

torch = pytest.importorskip("torch")


# ---- the module: all or nothing


def _stand_ins(monkeypatch, version, drop=None, rename_param=None):
    """Stand-in modules holding every target of `version` with its declared parameters."""
    made = {}
    for t in targets.TARGETS[version]:
        mod = made.get(t.module)
        if mod is None:
            mod = made[t.module] = types.ModuleType(t.module)
            monkeypatch.setitem(sys.modules, t.module, mod)
        if t.alignment == drop:
            continue
        params = [("other" if p == rename_param else p) for p in t.params]
        ns: dict = {}
        exec(f"def f({', '.join(params)}): return 'original'", ns)
        *path, name = t.attr.split(".")
        owner = mod
        for part in path:
            if not hasattr(owner, part):
                setattr(owner, part, type(part, (), {}))
            owner = getattr(owner, part)
        value = staticmethod(ns["f"]) if params[:1] != ["self"] and path else ns["f"]
        setattr(owner, name, value)
    return made


def _current(made, t):
    owner = made[t.module]
    *path, name = t.attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    return getattr(owner, name, None)


@pytest.mark.parametrize("version", list(targets.TARGETS))
def test_every_target_is_patched_when_all_are_there(monkeypatch, version):
    from topl.launcher.align import patches

    made = _stand_ins(monkeypatch, version)
    before = {t: _current(made, t) for t in targets.TARGETS[version]}
    done = patches.apply(version)
    assert len(done) == len(targets.TARGETS[version])
    for t, old in before.items():
        assert _current(made, t) is not old, t
    # the log-probs replacement is still a staticmethod (Sampler calls it on the class)
    sampler = made["vllm.v1.sample.sampler"].Sampler
    assert isinstance(vars(sampler)["compute_logprobs"], staticmethod)
    x = torch.randn(3, 50)
    from topl.launcher.align import ops

    assert torch.equal(sampler.compute_logprobs(x), ops.log_softmax(x))


def test_a_function_imported_by_name_elsewhere_is_rebound(monkeypatch):
    """vllm-ascend's model runner does `from vllm_ascend.ascend_forward_context import
    select_moe_comm_method`; a module-attribute patch alone would leave its copy unaligned."""
    from topl.launcher.align import patches

    made = _stand_ins(monkeypatch, "0.23.0.post1")
    ctx = made["vllm_ascend.ascend_forward_context"]
    runner = types.ModuleType("vllm_ascend.worker.model_runner_v1")
    runner.select_moe_comm_method = ctx.select_moe_comm_method
    monkeypatch.setitem(sys.modules, runner.__name__, runner)
    ctx.MoECommType = types.SimpleNamespace(ALLTOALL="alltoall")
    patches.apply("0.23.0.post1")
    assert runner.select_moe_comm_method is ctx.select_moe_comm_method
    assert runner.select_moe_comm_method(1, None) == "alltoall"


@pytest.mark.parametrize(
    "version,drop,rename",
    [
        ("0.23.0.post1", "moe_mlp", None),
        ("0.23.0.post1", None, "combine_metadata"),
        ("0.30.0rc2", "comm_alltoall", None),
        ("0.30.0rc2", None, "draft_moe_quant_type"),
        ("0.30.0rc2", "moe_mlp", None),
        ("0.30.0rc2", None, "indices_type"),
        ("0.30.0rc2", None, "banned_token_ids"),
    ],
)
def test_a_missing_or_changed_target_patches_nothing(monkeypatch, version, drop, rename):
    from topl.launcher.align import patches

    made = _stand_ins(monkeypatch, version, drop=drop, rename_param=rename)
    before = {t: _current(made, t) for t in targets.TARGETS[version]}
    with pytest.raises(patches.AlignError) as e:
        patches.apply(version)
    msg = str(e.value)
    assert "nothing patched" in msg and "fact align_" in msg
    for t, old in before.items():
        assert _current(made, t) is old, t


def test_an_unknown_release_is_refused():
    from topl.launcher.align import patches

    with pytest.raises(patches.AlignError, match="0.23.0.post1"):
        patches.apply("0.24.0")


# ---- targets are facts


def test_every_target_is_a_cited_fact_in_its_release():
    for version, ts in targets.TARGETS.items():
        for t in ts:
            f = facts.fact(t.fact)
            pkg, want = _package_of(t, version)
            cited = {(e.package, e.version) for e in f.evidence if e.present}
            assert (pkg, want) in cited, (t, want)
    for version, gone in targets.NOT_PROVIDED.items():
        for alignment in gone:
            f = facts.fact(f"align_{alignment}")
            assert any(e.version == version and not e.present for e in f.evidence)


def _vllm_of(vllm_ascend, key="vllm"):
    from topl.launcher.facts.stacks import profiles

    for p in profiles().values():
        if str(p["versions"]["vllm_ascend"]) == vllm_ascend:
            return str(p["versions"][key])
    raise AssertionError(vllm_ascend)


def _package_of(t, vllm_ascend):
    """(PyPI name, version) a target lives in, on the profile of that vllm-ascend."""
    top = t.module.split(".")[0]
    if top == "vllm_ascend":
        return "vllm-ascend", vllm_ascend
    return top, _vllm_of(vllm_ascend, top)


def test_missing_names_what_topl_leaves_unaligned():
    assert targets.missing("0.23.0.post1") == {}
    assert targets.missing("0.30.0rc2") == {}
    assert set(targets.missing("0.18.0")) == set(targets.ALIGNMENTS)


def _def(tree, attr):
    *path, name = attr.split(".")
    body = tree.body
    for part in path:
        body = next(n.body for n in body if isinstance(n, ast.ClassDef) and n.name == part)
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.facts_sources
@pytest.mark.skipif(
    not os.environ.get("TOPL_FACTS_SOURCES"),
    reason="downloads release files: set TOPL_FACTS_SOURCES=1 (.ci/run does)",
)
def test_targets_match_each_release_by_ast():
    """Each target's parameter names, read by AST in the released sdist / wheel it is for."""
    from topl.launcher.facts.evidence import Evidence
    from topl.launcher.facts.sources import read_all

    want = []
    for version, ts in targets.TARGETS.items():
        for t in ts:
            pkg, ver = _package_of(t, version)
            want.append((t, Evidence(pkg, ver, t.module.replace(".", "/") + ".py", "")))
    texts, skipped = read_all([e for _, e in want])
    if skipped:
        pytest.skip(f"no package index: {skipped}")
    for t, e in want:
        fn = _def(ast.parse(texts[(e.package, e.version, e.path)]), t.attr)
        a = fn.args
        got = tuple(x.arg for x in a.posonlyargs + a.args + a.kwonlyargs)
        assert got == t.params, (e.package, e.version, t.attr, got)


# ---- the renderer adds the module


@pytest.mark.parametrize(
    "stack,want",
    [
        ("stack=release", ["topl.launcher.align.load", "topl.launcher.guard"]),
        ("stack=prerelease", ["topl.launcher.align.load", "topl.launcher.guard"]),
        ("stack=seed", ["verl_ascend_recipe.true_on_policy.patch", "topl.launcher.guard"]),
    ],
)
def test_strict_npu_runs_load_the_alignment_module_before_the_guard(stack, want):
    import json

    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.render.env import without_guard
    from topl.launcher.render.invocation import render

    env = render(
        compose_job(["recipe=qwen3_30b_a3b_grpo_a3_strict", stack, "rollout.pp=1"]).to_object()
    ).env
    assert env["VERL_USE_EXTERNAL_MODULES"].split(",") == want
    assert json.loads(env["TOPL_GUARD"])["modules"][want[0]] == ["loaded", "TOP-STACK-005"]
    assert "topl.launcher.align.load" not in without_guard(env).get("VERL_USE_EXTERNAL_MODULES", "")


def test_the_module_is_not_loaded_off_npu_or_when_not_strict():
    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.render.invocation import render

    for extra in (["alignment=off"], ["cluster.device=cuda"]):
        spec = compose_job(["recipe=qwen3_30b_a3b_grpo_a3_strict", "stack=release", *extra])
        env = render(spec.to_object()).env
        assert "topl.launcher.align" not in env.get("VERL_USE_EXTERNAL_MODULES", "")
