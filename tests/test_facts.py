"""The stack model: facts, the per-profile rendering they drive, and (marker `facts_sources`) the
facts re-read in the real packages."""

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from topl.launcher import facts
from topl.launcher.contract import check
from topl.launcher.render import render

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {p.stem: yaml.safe_load(p.read_text()) for p in (ROOT / "conf" / "stack").glob("*.yaml")}
STRICT = ["recipe=qwen3_4b_grpo_a3_strict"]
VLLM = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def test_declared_versions_read_as_pep440():
    assert str(facts.version("mindspeed", "core_r0.16.0")) == "0.16.0"
    assert str(facts.version("cann", "9.0.0.B160")) == "9.0.0"
    assert str(facts.version("cann", "8.5.RC1")) == "8.5rc1"
    assert str(facts.version("torch", "2.9.0+cpu")) == "2.9.0"


def test_versions_and_patches_decide():
    v = {"vllm_ascend": "0.18.0", "vllm_ascend_patches": []}
    assert not facts.supports("fa3_backend", v)
    assert facts.supports("fa3_backend", {**v, "vllm_ascend_patches": ["true_on_policy"]})
    assert facts.supports("fa3_backend", {"vllm_ascend": "0.23.0.post1"})
    assert not facts.supports("rl_config", {"vllm_ascend": "0.26.0rc1"})
    assert facts.supports("rl_config", {"vllm_ascend": "0.27.1rc1"})
    assert facts.supports("set_deterministic_level", {"torch_npu": "2.9.0.post2"})
    assert not facts.supports("set_deterministic_level", {"torch_npu": "2.9.0"})
    assert not facts.supports("per_request_seed", {"verl": "0.9.1", "verl_patches": []})


def test_every_fact_is_cited_or_says_why_not():
    for f in facts.FACTS:
        assert f.evidence or (f.source and f.unchecked), f.id
        assert "@" in facts.why(f.id) or f.unchecked, f.id


def test_doctor_markers_are_cited_in_a_real_release():
    """What the doctor looks for in an installed package is what the checker proves is there."""
    for f in facts.FACTS:
        if f.detect:
            module, rel, needle = f.detect
            assert any(e.present and needle in e.needle for e in f.evidence), f.id


def test_downloads_stay_within_the_shipped_profiles():
    """The checker downloads only releases a shipped profile declares (a few tens of MB)."""
    declared = {(k, str(v)) for p in PROFILES.values() for k, v in p["versions"].items()}
    key = {"vllm-ascend": "vllm_ascend", "verl": "verl", "torch-npu": "torch_npu", "vllm": "vllm"}
    for f in facts.FACTS:
        for e in f.evidence:
            if not e.package.startswith("github:"):
                assert (key[e.package], e.version) in declared, e.cite


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


def test_seed_evidence_turns_cache_and_chunking_into_warnings_on_its_stack(compose):
    on = ("rollout.prefix_caching=true", "rollout.chunked_prefill=true")
    seed = severities(compose, "stack=seed", *on)
    assert seed["TOP-CACHE-001"] == seed["TOP-CACHE-002"] == "warning"
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
    assert severities(compose, "stack=release").get("TOP-STACK-005") == "warning"


def test_readme_stack_table_matches_the_facts():
    from topl.launcher.facts.stacks import stacks_markdown

    text = (ROOT / "docs" / "reference.md").read_text()
    table = text.split("<!-- stacks:begin -->")[1].split("<!-- stacks:end -->")[0].strip()
    assert table == stacks_markdown().strip(), "regenerate: python -m topl.launcher.facts.stacks"


def test_rules_cite_their_sources():
    from topl.launcher.contract import RULES

    by_id = {r.id: r for r in RULES}
    for rid in ("TOP-STACK-002", "TOP-GRAPH-001", "TOP-CACHE-001", "TOP-LOGP-002", "TOP-SEED-001"):
        assert "Sources:" in by_id[rid].why and "@" in by_id[rid].why, rid


@pytest.mark.facts_sources
@pytest.mark.skipif(
    not os.environ.get("TOPL_FACTS_SOURCES"),
    reason="downloads release files: set TOPL_FACTS_SOURCES=1 (.ci/run does)",
)
def test_every_cited_fact_holds_in_the_real_packages():
    sys.path.insert(0, str(ROOT / "scripts"))
    from check_facts import check as check_facts

    rows = check_facts()
    wrong = [r for r in rows if r["status"] == "WRONG"]
    assert not wrong, wrong
    if all(r["status"] in ("skipped", "unchecked") for r in rows):
        pytest.skip("no source reachable: " + rows[0]["why"])
    assert any(r["status"] == "ok" for r in rows)
