"""topl's alignment module (topl.launcher.align) on every vllm-ascend release it covers, the
module itself (its CPU numerics against megatron-core: tests/align/test_align.py; the
replacements against each release's callers: test_align_releases.py):

- all-or-nothing patching over stand-in modules (no vllm needed);
- tier facts_sources: each target's parameter list read by AST in every covered release (the
  sha256-pinned sdists, evidence.SDIST_SHA256; read once into the facts cache).
"""

from __future__ import annotations

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
        owner = getattr(owner, part, None)  # a dropped target's class is not there either
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
        ("0.20.2rc1", None, "need_trans"),
        ("0.24.0rc1", None, "swiglu_alpha"),
        ("0.25.1rc1", None, "vllm_config"),
        ("0.27.1rc1", None, "activation_situ_beta"),
        ("0.28.0rc1", "silu_mul", None),
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


VERL = "0.9.1"  # both stock profiles' verl: the logits_vocab target is verl's


def _package_of(t, vllm_ascend):
    """(PyPI name, version) a target lives in: vllm-ascend itself, the vLLM it pins, or verl."""
    top = t.module.split(".")[0]
    if top == "vllm_ascend":
        return "vllm-ascend", vllm_ascend
    return top, (targets.VLLM_PIN[vllm_ascend] if top == "vllm" else VERL)


def test_the_vllm_pins_are_the_profiles():
    from topl.launcher.facts.stacks import profiles

    for p in profiles().values():
        v = p["versions"]
        if str(v["vllm_ascend"]) in targets.TARGETS:
            assert targets.VLLM_PIN[str(v["vllm_ascend"])] == str(v["vllm"])
            assert str(v["verl"]) == VERL


def test_missing_names_what_topl_leaves_unaligned():
    for v in targets.TARGETS:
        assert targets.missing(v) == {}, v
    assert set(targets.missing("0.18.0")) == set(targets.ALIGNMENTS)
    # every release in the range is covered, or refused with the facts that say why
    assert set(targets.TARGETS) | set(targets.UNALIGNABLE) == set(RANGE) == set(targets.KNOWN)
    for why, fids in targets.UNALIGNABLE.values():
        assert why and all(facts.fact(f) for f in fids)


# issue 47: every vllm-ascend release on the registry from the seed's 0.18.0 to 0.30.0rc2
RANGE = ("0.18.0", "0.19.1rc1", "0.20.2rc1", "0.21.0rc1", "0.22.1rc1", "0.23.0rc1", "0.23.0",
         "0.23.0.post1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1", "0.27.1rc1", "0.28.0rc1",
         "0.29.0rc1", "0.30.0rc1", "0.30.0rc2")  # fmt: skip


@pytest.mark.facts_sources
@pytest.mark.skipif(
    not os.environ.get("TOPL_FACTS_SOURCES"),
    reason="downloads release files: set TOPL_FACTS_SOURCES=1 (.ci/run does)",
)
def test_targets_match_each_release_by_ast():
    """Each target's parameter names, read by AST in the released sdist / wheel it is for."""
    from topl.launcher.facts.evidence import Evidence
    from topl.launcher.facts.sources import params, read_all

    want = []
    docker = {v: Evidence("vllm-ascend", v, "Dockerfile", "") for v in targets.VLLM_PIN}
    for version, ts in targets.TARGETS.items():
        for t in ts:
            pkg, ver = _package_of(t, version)
            want.append((t, Evidence(pkg, ver, t.module.replace(".", "/") + ".py", "")))
    texts, skipped = read_all([e for _, e in want] + list(docker.values()))
    if skipped:
        pytest.skip(f"no package index: {skipped}")
    for v, e in docker.items():  # the vLLM each release pins (vLLM-owned targets are read there)
        assert f"\nARG VLLM_TAG=v{targets.VLLM_PIN[v]}\n" in texts[(e.package, v, e.path)], v
    for t, e in want:
        got = params(texts[(e.package, e.version, e.path)] or "", t.attr)
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
