"""Every vllm-ascend release from the seed's 0.18.0 to 0.30.0rc2 (issue 47), declared on the
shipped strict recipes: accepted in strict with topl's alignment module, or refused by a rule that
names the missing capability with its citation (never "nothing provides"); and the keys each
release reads rendered as that release reads them. The expected values are issue 47's reading of
the sdists (its research report §3-§4), written out here, not derived from the facts. The
alignment targets themselves, per release: tests/align/test_align_targets.py."""

import pytest

from topl.launcher.align import targets
from topl.launcher.contract import check
from topl.launcher.contract.core import RULES
from topl.launcher.render.invocation import render

RANGE = ("0.18.0", "0.19.1rc1", "0.20.2rc1", "0.21.0rc1", "0.22.1rc1", "0.23.0rc1", "0.23.0",
         "0.23.0.post1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1", "0.27.1rc1", "0.28.0rc1",
         "0.29.0rc1", "0.30.0rc1", "0.30.0rc2")  # fmt: skip
NO_FA3 = {"0.18.0", "0.19.1rc1"}
RL_CONFIG = {"0.27.1rc1", "0.28.0rc1", "0.29.0rc1", "0.30.0rc1", "0.30.0rc2"}
# vllm-ascend's batch-invariance docs from 0.28.0rc1: preemption breaks it (TOP-MEM-003 is an
# error there; the release recipes keep the seed's max_num_seqs=1024, the prerelease ones 64)
PREEMPTION_DOCS = {"0.28.0rc1", "0.29.0rc1", "0.30.0rc1", "0.30.0rc2"}
RECIPES = (
    "qwen3_4b_grpo_a3_release_strict",
    "qwen3_4b_grpo_a3_prerelease_strict",
    "qwen3_30b_a3b_grpo_a3_release_strict",
    "qwen3_30b_a3b_grpo_a3_prerelease_strict",
)
VLLM = "actor_rollout_ref.rollout.engine_kwargs.vllm"
WHY = {r.id: r.why for r in RULES}  # the rule's doc and its facts' citations


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_release_is_accepted_in_strict_or_refused_with_why(compose, recipe):
    for v in RANGE:
        spec = compose([f"recipe={recipe}", f"cluster.versions.vllm_ascend={v}"])
        errors = {x.rule: x for x in check(spec) if x.severity == "error"}
        if v in NO_FA3:
            assert set(errors) == {"TOP-STACK-002", "TOP-STACK-005"}, (v, errors)
            msg = errors["TOP-STACK-005"].message
            assert "cannot be aligned" in msg and "nothing provides" not in msg, msg
            assert f"vllm-ascend@{v}:vllm_ascend/attention/fa3_v1.py" in msg, msg
            assert "vllm_ascend_true_on_policy.patch" in msg, msg
            assert "no FA3 backend" in errors["TOP-STACK-002"].message
        elif v in PREEMPTION_DOCS and "_release_" in recipe:
            assert set(errors) == {"TOP-MEM-003"}, (v, errors)
            assert "user_guide/feature_guide/batch_invariance.md" in WHY["TOP-MEM-003"]
        else:
            assert not errors, (v, errors)
            _renders_the_keys_it_reads(render(spec.to_object()), v)


def _renders_the_keys_it_reads(inv, v):
    o = {x.split("=", 1)[0].lstrip("+"): x.split("=", 1)[1] for x in inv.overrides}
    rl = f"{VLLM}.additional_config.rl_config"
    assert targets.LOAD_MODULE in inv.env["VERL_USE_EXTERNAL_MODULES"].split(","), v
    assert inv.env["VLLM_BATCH_INVARIANT"] == "1"  # read by vLLM on every release
    if v in RL_CONFIG:  # FA3 from rl_config; attention_backend is reset there
        assert o[f"{rl}.enabled"] == o[f"{rl}.enable_training_consistency"] == "true", v
        assert f"{VLLM}.attention_backend" not in o, v
        assert "VLLM_ASCEND_ENABLE_NZ" not in inv.env, v  # gone from envs.py
    else:  # FA3 from attention_backend=FLASH_ATTN with VLLM_BATCH_INVARIANT=1
        assert o[f"{VLLM}.attention_backend"] == "FLASH_ATTN", v
        assert not any(k.startswith(rl) for k in o), v
        assert inv.env["VLLM_ASCEND_ENABLE_NZ"] == "0", v
    assert o[f"{VLLM}.additional_config.weight_nz_mode"] == "0", v  # from 0.20.2rc1 on
