"""Contract soundness: keys are measured, fields are validated, env and verl keys are checked."""

import json
import subprocess
import sys

import pytest
from helpers import STRICT_A3, run_topl, verl_config_dir
from paths import ROOT

from topl.launcher.base.errors import ToplError
from topl.launcher.compose.recipes import recipes_dir
from topl.launcher.contract import check
from topl.launcher.contract.core import RULES
from topl.launcher.spec.view import Reads, View

VARIANTS = [
    [],
    ["train.tp=2", "rollout.tp=2"],
    ["train.cp=2"],
    ["rollout.n=1"],
    ["rollout.pp=5"],
    ["train.ep=4", "rollout.ep=2", "rollout.dp=2"],
    ["alignment=off"],
    ["alignment=mitigated"],
    ["collective=lccl_aiv"],
    ["train.use_dynamic_bsz=true"],
    ["+cluster.env.HCCL_DETERMINISTIC=true"],
    ["+algorithm.extra_overrides.actor_rollout_ref.rollout.enforce_eager=false"],
    ["+algorithm.extra_overrides.trainer.no_such_key=1"],
    ["train=fsdp", "train.tp=2"],
]


def _covered(read: str, declared) -> bool:
    return any(read == d or read.startswith(d + ".") for d in declared)


def _variants(compose):
    for v in VARIANTS:
        yield compose(STRICT_A3 + v)
        yield compose(v)


def _recipes(compose):
    names = sorted(p.stem for p in recipes_dir().glob("*.yaml"))
    for i, name in enumerate(names):
        yield compose([f"recipe={name}", *VARIANTS[i % len(VARIANTS)]])


def test_declared_keys_cover_every_read(compose):
    """The catalog's key list is documentation; what a rule reports is what it read. They agree."""
    _cover(_variants(compose))


@pytest.mark.slow  # 72 more Hydra composes: CI runs it, the fast tier has the variants above
def test_declared_keys_cover_every_read_on_every_recipe(compose):
    _cover(_recipes(compose))


def _cover(specs) -> None:
    missing: dict[str, set[str]] = {}
    for composed in specs:
        spec = composed.to_object()
        for r in RULES:
            reads = Reads()
            r.check(View(spec, reads))
            extra = [k for k in reads if not _covered(k, r.keys)]
            if extra:
                missing.setdefault(r.id, set()).update(extra)
    assert not missing, f"rules read keys they do not declare: {missing}"


def test_a_violation_reports_the_key_that_triggered_it(compose):
    """TOP-COLL-001 with train.cp=2 once listed four keys equal to 1 and hid cp."""
    vs = {
        v.rule: v
        for v in check(
            compose(STRICT_A3 + ["collective=default", "train.cp=2", "alignment.mode=strict"])
        )
    }
    keys = vs["TOP-COLL-001"].keys
    assert keys["train.cp"] == {"value": 2, "source": "command line `train.cp=2`"}
    assert keys["collective.hccl_deterministic"]["value"] == "false"


def test_strict_env_override_names_both_sources(compose):
    vs = {v.rule: v for v in check(compose(STRICT_A3 + ["+cluster.env.HCCL_DETERMINISTIC=true"]))}
    v = vs["TOP-ENV-001"]
    assert v.severity == "error"
    assert (
        v.keys["cluster.env.HCCL_DETERMINISTIC"]["source"]
        == "command line `+cluster.env.HCCL_DETERMINISTIC=true`"
    )
    assert v.keys["collective.hccl_deterministic"] == {
        "value": "strict",
        "source": "conf/collective/hccl_strict.yaml",
    }
    assert "collective.hccl_deterministic" in v.message


def test_env_that_agrees_with_the_spec_passes(compose):
    ids = {
        v.rule
        for v in check(
            compose(
                STRICT_A3
                + ["+cluster.env.HCCL_DETERMINISTIC=strict", "+cluster.env.HCCL_EXEC_TIMEOUT=7200"]
            )
        )
    }
    assert not ids & {"TOP-ENV-001", "TOP-ENV-002", "TOP-ENV-003"}


def test_env_reaches_render_only_after_the_contract(compose):
    """The same value the rule compares is what workers get (render's env = derived + cluster.env)."""
    from topl.launcher.render.env import derived_env, env_vars

    spec = compose(STRICT_A3 + ["+cluster.env.VLLM_BATCH_INVARIANT=0"]).to_object()
    assert derived_env(spec)["VLLM_BATCH_INVARIANT"] == "1"
    assert env_vars(spec)["VLLM_BATCH_INVARIANT"] == "0"


@pytest.mark.parametrize(
    "override",
    [
        "train.tp=0",
        "train.pp=-1",
        "rollout.n=0",
        "train.ppo_mini_batch_size=0",
        "train.dtype=fp7",
        "train.engine=bogus",
        "rollout.top_p=1.5",
        "rollout.temperature=-1",
        "rollout.gpu_memory_utilization=0",
        "cluster.backend=pbs",
        "rollout.logprobs_mode=logits",
        "algorithm.loss_agg_mode=mean",
        "algorithm.adv_estimator=gpro",
        "alignment.rollout_correction.rollout_is=tokens",
        "alignment.rollout_correction.rollout_rs=token",
        "train.fsdp_size=0",
        "model.num_layers=0",
        "cluster.nodes=0",
        "train.max_prompt_length=0",
        "rollout.top_k=-2",
    ],
)
def test_field_constraints_reject_with_one_message(compose, override):
    vs = check(compose(STRICT_A3 + [override]))
    key = override.split("=")[0]
    assert [v.rule for v in vs] == ["TOP-SPEC-001"]
    assert vs[0].keys == {
        key: {"value": vs[0].keys[key]["value"], "source": f"command line `{override}`"}
    }


def test_field_constraint_exit_code_and_json():
    r = run_topl("check", "train.tp=0", "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is False and out["violations"][0]["rule"] == "TOP-SPEC-001"


def test_every_constraint_with_a_source_cites_a_package():
    from topl.launcher.spec.constraints import fields
    from topl.launcher.spec.job import JobSpec

    for key, f in fields(JobSpec):
        src = f.metadata["src"]
        assert not src or "@" in src or src.startswith("CANN"), (key, src)


def test_readme_constraint_table_matches_the_code():
    from topl.launcher.spec.constraints import table
    from topl.launcher.spec.job import JobSpec

    text = (ROOT / "docs" / "reference.md").read_text()
    got = text.split("<!-- constraints:begin -->")[1].split("<!-- constraints:end -->")[0].strip()
    assert got == table(JobSpec).strip(), "regenerate: topl rules --constraints"


@pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed")
def test_verl_key_list_is_what_verl_composes():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_verl_keys.py"), "--check"],
        capture_output=True,
        text=True,
        cwd="/",
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed")
def test_extra_overrides_the_rule_accepts_compose_in_verl(compose, tmp_path):
    """What TOP-VERL-001 lets through, verl's own config accepts; what it rejects, verl rejects."""
    from helpers import compose_verl, declared_config_dir
    from hydra.errors import HydraException

    from topl.launcher.render.invocation import render

    ok = compose(
        STRICT_A3
        + [
            "+algorithm.extra_overrides.trainer.log_val_generations=0",
            "+algorithm.extra_overrides.actor_rollout_ref.rollout.engine_kwargs.vllm.x=1",
        ]
    )
    assert not {v.rule for v in check(ok)} & {"TOP-VERL-001", "TOP-VERL-002"}
    spec = ok.to_object()
    conf = declared_config_dir(spec, tmp_path)  # the recipe's stack is the seed's: 0.8.0 + patches
    if conf is None:
        pytest.skip("verl 0.8.0 not cached: set TOPL_VERL_VERSIONS=1")
    compose_verl(render(spec), conf)
    bad = compose(STRICT_A3 + ["+algorithm.extra_overrides.trainer.log_val_generation=0"])
    assert "TOP-VERL-001" in {v.rule for v in check(bad)}
    from topl.launcher.base.errors import ToplError
    from topl.launcher.render.invocation import Invocation

    with pytest.raises(ToplError, match="trainer.log_val_generation"):
        render(bad.to_object())  # refused at render too: never a command that cannot compose
    with pytest.raises(HydraException):  # and verl's config refuses it
        compose_verl(Invocation("m", "ppo_trainer", ["trainer.log_val_generation=0"]), conf)


@pytest.mark.parametrize(
    "override",
    [
        "rollout.prefix_caching=2",
        "++alignment.batch_invariant=672",
        "rollout.prefix_caching='yes'",
        "cluster.versions.batch_invariant_ops=0",
    ],
)
def test_a_switch_is_true_or_false(compose, override):
    """OmegaConf would read these as booleans; on the command line they are typos."""
    with pytest.raises(ToplError) as e:
        compose(STRICT_A3 + [override])
    assert "true or false" in e.value.render()
