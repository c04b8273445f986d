"""topl's alignment module (topl.launcher.align) for the stock stacks.

- CPU numerics: each plain-torch alignment in `ops` against megatron-core's own implementation of
  the same training step, bitwise (megatron-core 0.16.1 imported from the wheel; skipped without
  it). torch_npu calls are not run here.
- The module: all-or-nothing patching over stand-in modules (no vllm needed).
- Tier facts_sources: each target's parameter list read by AST in every supported release.
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


def _megatron():
    return pytest.importorskip("megatron.core.transformer.moe.moe_utils")


def _logits(t=37, e=16, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t, e, generator=g, dtype=torch.float32).to(dtype)


# ---- CPU numerics against megatron-core


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups", [None, (4, 2)])
@pytest.mark.parametrize("scale", [None, 2.5])
@pytest.mark.parametrize("pre", [False, True])
def test_expert_selection_is_megatrons_topk_then_softmax(dtype, groups, scale, pre):
    mu = _megatron()
    from topl.launcher.align import ops

    logits = _logits(dtype=dtype)
    ng, gk = groups or (None, None)
    w, ids = ops.select_experts(
        logits, 4, num_groups=ng, group_topk=gk, scaling_factor=scale, pre_softmax=pre
    )
    probs, routing_map = mu.topk_routing_with_score_function(
        logits, 4, pre, ng, gk, scaling_factor=scale, score_function="softmax"
    )
    mine = torch.zeros_like(logits).scatter(1, ids, w)
    assert torch.equal(mine, probs)
    assert torch.equal(torch.zeros_like(routing_map).scatter(1, ids, True), routing_map)


def _routing(t=37, e=16, k=4, seed=1):
    from topl.launcher.align import ops

    w, ids = ops.select_experts(_logits(t, e, seed, torch.float32), k)
    return w, ids


def _npu_permute_mapping(ids: torch.Tensor) -> torch.Tensor:
    """What vllm-ascend's dispatch keeps as reversed_local_input_permutation_mapping: entry j of
    the flattened ids -> its row after a stable sort by expert (npu_moe_token_permute's
    documented order; the kernel itself is NPU-only, see docs/stacks.md)."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    row = torch.empty_like(order)
    row[order] = torch.arange(order.numel())
    return row


def test_dispatch_order_is_megatrons_permute():
    mu = _megatron()
    from topl.launcher.align import ops

    w, ids = _routing()
    tokens = torch.randn(ids.shape[0], 8)
    routing_map = torch.zeros(ids.shape[0], 16, dtype=torch.bool).scatter(1, ids, True)
    permuted, _, sorted_indices = mu.permute(tokens, routing_map)
    assert torch.equal(ops.expert_major_order(ids, 16), sorted_indices)
    got = ops.order_from_permutation(_npu_permute_mapping(ids), ids.shape[1])
    assert torch.equal(got, sorted_indices)
    assert torch.equal(tokens.index_select(0, got), permuted)


@pytest.mark.parametrize("deterministic", [False, True])
def test_weighted_combine_is_megatrons_unpermute(deterministic):
    """Weights carried by dispatch and applied in the expert (as Megatron's experts apply
    permuted_probs after the activation), then a plain unpermute: the same bits as Megatron's
    unpermute with probs."""
    mu = _megatron()
    from topl.launcher.align import ops

    w, ids = _routing()
    t, k = ids.shape
    routing_map = torch.zeros(t, 16, dtype=torch.bool).scatter(1, ids, True)
    probs = torch.zeros(t, 16).scatter(1, ids, w)
    mapping = _npu_permute_mapping(ids)
    order = ops.order_from_permutation(mapping, k)
    expert_out = torch.randn(t * k, 8)
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        want = mu.unpermute(
            expert_out, order, torch.Size([t, 8]), probs=probs, routing_map=routing_map
        )
        weighted = expert_out * ops.permute_weights(w, mapping)
        got = ops.unpermute(weighted, order, torch.Size([t, 8]))
        plain = mu.unpermute(weighted, order, torch.Size([t, 8]))
    finally:
        torch.use_deterministic_algorithms(old)
    assert torch.equal(got, want) and torch.equal(got, plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logprobs_are_megatrons_cross_entropy(dtype):
    pytest.importorskip("megatron.core")
    from megatron.core.tensor_parallel.cross_entropy import VocabParallelCrossEntropy as CE

    from topl.launcher.align import ops

    logits = _logits(9, 1000, 3, dtype)
    target = torch.randint(0, 1000, (9,), generator=torch.Generator().manual_seed(4))
    lp = ops.log_softmax(logits).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    x, m = CE.calculate_logits_max(logits.clone())
    _, _, predicted, sum_exp, exp = CE.calculate_predicted_logits(x, target, m, 0, 1000)
    _, loss = CE.calculate_cross_entropy_loss(exp, predicted, sum_exp)
    assert torch.equal(lp, -loss)
    # vLLM's own compute_logprobs (the fused log_softmax kernel, fact align_logprobs) is not
    # bitwise Megatron's form even on CPU: the replacement matters
    vllm_lp = logits.log_softmax(dim=-1, dtype=torch.float32).gather(-1, target.unsqueeze(-1))
    assert not torch.equal(vllm_lp.squeeze(-1), -loss)


def test_silu_mul_is_megatrons_swiglu():
    pytest.importorskip("megatron.core")
    from megatron.core.fusions.fused_bias_swiglu import swiglu

    from topl.launcher.align import ops

    # megatron-core wraps swiglu in its jit fuser (torch.compile from torch 2.2,
    # megatron-core@0.16.1:megatron/core/jit.py), which in bf16 keeps silu(y1) in float32 before
    # the product: that form is NOT the plain one (docs/stacks.md). Compared here: Megatron's
    # eager swiglu, which MindSpeed's training runs when the fuser is off.
    eager = getattr(swiglu, "_torchdynamo_orig_callable", swiglu)
    x = _logits(11, 64, 5)
    assert torch.equal(ops.silu_mul(x), eager(x))
    assert torch.equal(ops.silu_mul(x.float()), eager(x.float()))


class _Group:
    def __init__(self, size, rank):
        self._s, self._r = size, rank

    def size(self):
        return self._s

    def rank(self):
        return self._r


@pytest.mark.parametrize("rows", [1, 5, 8, 13])
@pytest.mark.parametrize("tp", [2, 4])
def test_padded_row_parallel_splits_as_megatron(rows, tp):
    """Reduce-scatter of rows padded to a multiple of TP: each rank keeps Megatron's
    _split_along_first_dim chunk of the sum; gathered and unpadded it is the sum itself."""
    pytest.importorskip("megatron.core")
    from megatron.core.tensor_parallel.mappings import _split_along_first_dim

    from topl.launcher.align import ops

    parts = [torch.randn(rows, 6, generator=torch.Generator().manual_seed(r)) for r in range(tp)]
    total = parts[0].clone()
    for p in parts[1:]:
        total = total + p  # one order, as the collective's sum
    padded_total = ops.pad_rows(total, tp)[0]
    gathered = torch.cat(list(padded_total.chunk(tp)))
    for rank in range(tp):
        seen = []

        def rs(x, rank=rank, seen=seen):  # this rank's chunk of the sum over ranks
            assert x.shape == padded_total.shape
            seen.append(padded_total.chunk(tp)[rank])
            return seen[-1]

        def ag(x):
            return gathered

        out = ops.row_parallel_reduce(parts[rank], tp, rs, ag)
        want = _split_along_first_dim(padded_total, _Group(tp, rank))
        assert torch.equal(seen[0], want)
        assert torch.equal(out, total)


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

    from topl.launcher.compose import compose_job
    from topl.launcher.render import render
    from topl.launcher.render_env import without_guard

    env = render(
        compose_job(["recipe=qwen3_30b_a3b_grpo_a3_strict", stack, "rollout.pp=1"]).to_object()
    ).env
    assert env["VERL_USE_EXTERNAL_MODULES"].split(",") == want
    assert json.loads(env["TOPL_GUARD"])["modules"][want[0]] == ["loaded", "TOP-STACK-005"]
    assert "topl.launcher.align.load" not in without_guard(env).get("VERL_USE_EXTERNAL_MODULES", "")


def test_the_module_is_not_loaded_off_npu_or_when_not_strict():
    from topl.launcher.compose import compose_job
    from topl.launcher.render import render

    for extra in (["alignment=off"], ["cluster.device=cuda"]):
        spec = compose_job(["recipe=qwen3_30b_a3b_grpo_a3_strict", "stack=release", *extra])
        env = render(spec.to_object()).env
        assert "topl.launcher.align" not in env.get("VERL_USE_EXTERNAL_MODULES", "")
