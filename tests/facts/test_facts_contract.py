"""The stack facts decide what renders and what the contract says, per profile and release
(the facts themselves, their citations and evidence: test_facts.py)."""

import json

import pytest

from topl.launcher.contract import check
from topl.launcher.render.invocation import render

STRICT = ["recipe=qwen3_4b_grpo_a3_strict"]
VLLM = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def rendered(compose, profile, *more):
    inv = render(compose([*STRICT, f"stack={profile}", *more]).to_object())
    return inv, {o.split("=", 1)[0].lstrip("+"): o.split("=", 1)[1] for o in inv.overrides}


@pytest.mark.parametrize("profile", ["seed", "release", "prerelease"])
def test_each_profile_renders_what_its_stack_reads(compose, profile):
    inv, o = rendered(compose, profile)
    rl = f"{VLLM}.additional_config.rl_config.enable_training_consistency"
    if profile == "prerelease":  # FA3 from rl_config; the backend name is ignored there
        assert o[rl] == "true" and f"{VLLM}.attention_backend" not in o
    else:  # FA3 from attention_backend=FLASH_ATTN with VLLM_BATCH_INVARIANT=1
        assert o[f"{VLLM}.attention_backend"] == "FLASH_ATTN" and rl not in o
        assert inv.env["VLLM_BATCH_INVARIANT"] == "1"
    nz_env, nz_cfg = (
        "VLLM_ASCEND_ENABLE_NZ" in inv.env,
        f"{VLLM}.additional_config.weight_nz_mode" in o,
    )
    assert (nz_env, nz_cfg) == {
        "seed": (True, False),
        "release": (True, True),
        "prerelease": (False, True),
    }[profile]
    assert not any("full_determinism" in k for k in o)  # one seed per replica: n equal samples
    assert (o.get("actor_rollout_ref.rollout.per_request_seed") == "true") == (profile == "seed")
    assert (
        o["actor_rollout_ref.rollout.enforce_eager"] == "true"
        and f"{VLLM}.compilation_config" not in o
    )
    _, o = rendered(compose, profile, "rollout.graph_mode=piecewise")
    assert o["actor_rollout_ref.rollout.enforce_eager"] == "false"
    assert json.loads(json.loads(o[f"{VLLM}.compilation_config"])) == {
        "cudagraph_mode": "PIECEWISE"
    }


def test_logprobs_auto_follows_temperature(compose):
    _, o = rendered(compose, "release", "rollout.logprobs_mode=auto")
    assert o["actor_rollout_ref.rollout.logprobs_mode"] == "raw_logprobs"
    _, o = rendered(compose, "release", "rollout.logprobs_mode=auto", "rollout.temperature=0.7")
    assert o["actor_rollout_ref.rollout.logprobs_mode"] == "processed_logprobs"


def severities(compose, *overrides):
    return {v.rule: v.severity for v in check(compose([*STRICT, *overrides]))}


def test_seed_evidence_turns_cache_and_chunking_into_info_on_its_stack(compose):
    on = ("rollout.prefix_caching=true", "rollout.chunked_prefill=true")
    seed = severities(compose, "stack=seed", *on)
    assert seed["TOP-CACHE-001"] == seed["TOP-CACHE-002"] == "info"  # measured: outranks
    pre = severities(compose, "stack=prerelease", *on)  # vllm-ascend's own docs: breaks BI
    assert pre["TOP-CACHE-001"] == pre["TOP-CACHE-002"] == "error"


def test_preemption_is_an_error_where_the_stack_says_it_breaks(compose):
    more = ("rollout.max_num_seqs=4096", "train.max_response_length=16384")
    assert severities(compose, "stack=release", *more)["TOP-MEM-003"] == "warning"
    assert severities(compose, "stack=prerelease", *more)["TOP-MEM-003"] == "error"


def test_raw_logprobs_at_temperature_below_one_rejected(compose):
    got = severities(compose, "rollout.logprobs_mode=raw_logprobs", "rollout.temperature=0.7")
    assert got.get("TOP-LOGP-002") == "error"


def test_seed_patch_module_on_another_vllm_ascend_rejected(compose):
    got = severities(
        compose, "stack=release", "cluster.external_modules=verl_ascend_recipe.true_on_policy.patch"
    )
    assert got.get("TOP-STACK-005") == "error"
    # topl's alignment module covers vllm-ascend 0.23.0.post1 (the renderer adds it)
    assert severities(compose, "stack=release").get("TOP-STACK-005") is None


def test_alignments_nothing_provides_are_errors(compose, monkeypatch):
    """topl's alignment module covers both stock stacks (topl.launcher.align.targets), MoE
    included; an alignment it lacks on the declared version is an error for a MoE model only
    when it is a MoE one, and named; the seed's 0.18.0 without its module has nothing aligned."""
    from topl.launcher.align import targets

    for stack in ("stack=release", "stack=prerelease"):
        assert severities(compose, stack, "model=tiny_moe").get("TOP-STACK-005") is None
    pre = dict(targets.TARGETS)
    pre["0.30.0rc2"] = tuple(t for t in pre["0.30.0rc2"] if t.alignment != "expert_select")
    monkeypatch.setattr(targets, "TARGETS", pre)
    got = [
        v
        for v in check(compose([*STRICT, "stack=prerelease", "model=tiny_moe"]))
        if v.rule == "TOP-STACK-005"
    ]
    assert [v.severity for v in got] == ["error"] and "expert_select" in got[0].message
    assert severities(compose, "stack=prerelease", "model=qwen3_8b").get("TOP-STACK-005") is None
    bare = severities(compose, "stack=seed", "cluster.external_modules=null")
    assert bare.get("TOP-STACK-005") == "error"


def test_fa3_graph_capture_follows_the_release_docs(compose):
    """0.21.0rc1's FA3 docs ask for enforce_eager=True: piecewise there is an error (was silent)."""
    old = ("stack=release", "cluster.versions.vllm_ascend=0.21.0rc1")
    assert severities(compose, *old, "rollout.graph_mode=piecewise").get("TOP-GRAPH-002") == "error"
    assert "TOP-GRAPH-002" not in severities(compose, *old, "rollout.graph_mode=eager")
    assert "TOP-GRAPH-002" not in severities(
        compose, "stack=release", "rollout.graph_mode=piecewise"
    )


@pytest.mark.parametrize(
    "cann,warns",
    # another build warns (no public order against the betas); the seed's own build does not:
    # the seed measured logdiff 0 on it (seed evidence outranks the docs' rule)
    [("9.0.0-beta.1", True), ("9.0.0.B150", True), ("9.0.0.B160", False), ("9.0.0-beta.2", False)],
)
def test_hccl_strict_on_a3_warns_before_9_0_0_beta_2(compose, cann, warns):
    got = severities(compose, f"cluster.versions.cann={cann}")
    assert ("TOP-STACK-006" in got) == warns, got


def test_an_unreadable_version_is_an_error_not_a_silent_no(compose):
    c = compose([*STRICT, "cluster.versions.cann=CANN900B160"])
    v = {v.rule: v for v in check(c)}["TOP-VER-001"]
    assert v.severity == "error" and "cann version 'CANN900B160'" in v.message
    assert "9.0.0.B160" in v.fix
    assert "TOP-VER-001" not in severities(compose, "stack=prerelease")
