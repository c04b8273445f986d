"""Accepted means it runs (issue 27): what `check` accepts composes against the real config of
the verl its stack declares and passes that verl's validate_config, as rendered.

The matrix and property tests need verl 0.8.0 / 0.9.0 unpacked from their wheels (marker
`verl_versions`, TOPL_VERL_VERSIONS=1; .ci/run sets it). The failure classes below run on the
installed verl 0.9.1 or on the schema alone; each failed on the renderer before this file.
"""

from __future__ import annotations

import json
import os

import pytest
from helpers import (
    compose_verl,
    declared_config_dir,
    hf_config_dir,
    run_topl,
    shared_hf_config_dir,
    validate_many,
    verl_config_dir,
)

from topl.launcher.compose import recipes
from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors
from topl.launcher.render.invocation import render

STACKS = ("seed", "release", "prerelease")
versions = pytest.mark.skipif(
    not os.environ.get("TOPL_VERL_VERSIONS"),
    reason="composes against verl 0.8.0 / 0.9.0 wheels: set TOPL_VERL_VERSIONS=1 (.ci/run does)",
)
needs_verl = pytest.mark.skipif(verl_config_dir() is None, reason="verl 0.9.1 not installed")


def rules(c) -> set[str]:
    return {v.rule for v in errors(check(c))}


# What this process already composed and validated, with verl's verdict None (passed): a point
# whose rendered command, declared verl config and validate_config flags equal one of these is
# not composed and validated again (the stock strict recipes are also points of the per-stack
# test; both share an xdist group below, so one process holds both).
PASSED: set[tuple] = set()


def accepted_runs(points, tmp_path) -> int:
    """Every accepted point composes against its declared verl and passes its validate_config;
    returns how many were accepted."""
    by_version: dict[str, list] = {}
    seen = 0
    for args in points:
        c = compose_job(args)
        if errors(check(c)):
            continue
        spec = c.to_object()
        spec.model.hf_path = shared_hf_config_dir(spec.model)  # verl reads config.json; no hub
        conf = declared_config_dir(spec, tmp_path)
        assert conf is not None, f"verl {spec.cluster.versions.verl} not at hand"
        inv = render(spec)
        ref, critic = spec.algorithm.use_kl_loss, spec.algorithm.use_critic
        key = (str(conf), inv.config_name, tuple(inv.overrides), bool(ref), bool(critic))
        if key in PASSED:
            seen += 1
            continue
        cfg = compose_verl(inv, conf)  # raises on a key the declared verl cannot take
        by_version.setdefault(str(spec.cluster.versions.verl), []).append(
            (args, (cfg, ref, critic), key)
        )
    for version, rows in by_version.items():
        errs = validate_many(version, [r[1] for r in rows], tmp_path)
        bad = [(args, e) for (args, _, _), e in zip(rows, errs) if e]
        assert not bad, bad
        PASSED.update(r[2] for r in rows)
    return seen + sum(len(r) for r in by_version.values())


# the release / prerelease points, then the stock strict recipes and the grad_offload points
# among them, on one worker (PASSED above); the seed's 72 points on either
STOCK_GROUP = pytest.mark.xdist_group("accepted_runs_stock")


@pytest.mark.verl_versions
@versions
@pytest.mark.parametrize(
    "stack", ["seed", *(pytest.param(s, marks=STOCK_GROUP) for s in ("release", "prerelease"))]
)
def test_every_shipped_recipe_accepted_on_a_stack_runs_there(stack, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = accepted_runs([[f"recipe={r}", f"stack={stack}"] for r in recipes.available()], tmp_path)
    assert n >= 12, f"only {n} shipped recipes accepted on stack={stack}"


@pytest.mark.verl_versions
@versions
def test_group_combinations_accepted_run(tmp_path, monkeypatch):
    """A property over the spec space, fixed budget and derandomized (same sample every run):
    hypothesis draws the points, then every accepted one is composed and validated (one verl
    process per version)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    points: list[list[str]] = []

    @settings(
        max_examples=20, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(
        st.sampled_from(["grpo", "gspo", "dapo", "ppo"]),
        st.sampled_from(["off", "mitigated", "strict"]),
        st.sampled_from(["megatron", "fsdp"]),
        st.sampled_from(["qwen3_4b", "qwen3_8b", "qwen3_30b_a3b"]),
        st.sampled_from(["atlas_a2", "atlas_a3"]),
        st.sampled_from(STACKS),
        st.sampled_from([True, False]),
    )
    def draw(algo, mode, train, model, cluster, stack, dyn):
        point = [
            f"algorithm={algo}",
            f"alignment={mode}",
            f"collective={'hccl_strict' if mode == 'strict' else 'default'}",
            f"train={train}",
            f"model={model}",
            f"cluster={cluster}",
            f"stack={stack}",
            "rollout=vllm_ascend",
            f"train.use_dynamic_bsz={str(dyn).lower()}",
        ]
        if point not in points:
            points.append(point)

    draw()
    assert len(points) >= 10
    assert accepted_runs(points, tmp_path) > 0, "the sample accepted nothing: it proves nothing"


STOCK = sorted(
    n for n in recipes.available() if n.endswith(("_release_strict", "_prerelease_strict"))
)


@STOCK_GROUP
@needs_verl
def test_stock_stack_strict_recipes_are_accepted_and_run_on_verl_091(tmp_path, monkeypatch):
    """The strict matrix of the stock stacks (scripts/gen_recipes.py, issue 35): each recipe is
    accepted as shipped and composes against verl 0.9.1, the verl both stacks declare, passing
    its validate_config (one verl process for all)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert len(STOCK) == 24
    refused = {n: rules(compose_job([f"recipe={n}"])) for n in STOCK}
    assert not any(refused.values()), refused
    assert accepted_runs([[f"recipe={n}"] for n in STOCK], tmp_path) == len(STOCK)


# ---- the failure classes of issue 27 (this half), each with a test that failed before


@STOCK_GROUP
@needs_verl
def test_release_recipes_with_grad_offload_compose_on_verl_091(tmp_path, monkeypatch):
    """All 48 recipes set train.grad_offload; verl 0.9.1 has no such key (its param_offload
    releases the gradient buffers): rendered as such, never as the 0.8.0 key."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    names = ["qwen3_4b_grpo_a2_off", "qwen3_4b_dapo_a3_mitigated", "qwen3_4b_gspo_a3_off"]
    points = [[f"recipe={n}", f"stack={s}"] for n in names for s in ("release", "prerelease")]
    for p in points:
        assert compose_job(p).to_object().train.grad_offload is True
    assert accepted_runs(points, tmp_path) == len(points)
    inv = render(compose_job(points[0]).to_object())
    assert not any("grad_offload" in o for o in inv.overrides)
    assert "actor_rollout_ref.actor.megatron.param_offload=true" in inv.overrides


def test_grad_offload_that_param_offload_cannot_carry_is_refused():
    c = compose_job(["recipe=qwen3_4b_grpo_a2_off", "stack=release", "train.param_offload=false"])
    assert "TOP-SCHEMA-002" in rules(c)
    seed = compose_job(["recipe=qwen3_4b_grpo_a2_off", "train.param_offload=false"])
    assert "TOP-SCHEMA-002" not in rules(seed)  # verl 0.8.0 has grad_offload: rendered as is
    assert (
        "actor_rollout_ref.actor.megatron.grad_offload=true" in render(seed.to_object()).overrides
    )


def test_plus_follows_the_declared_verl():
    """The seed's patch keys exist on the seed profile (no `+`/`++`), engine_kwargs.vllm keys are
    free-form everywhere (`+`), and a key the declared verl lacks is refused, naming both."""
    seed = render(compose_job(["recipe=seed_qwen3_4b_grpo_on"]).to_object()).overrides
    assert "actor_rollout_ref.rollout.per_request_seed=true" in seed
    assert "actor_rollout_ref.rollout.seed=42" in seed
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=128" in seed
    c = compose_job(
        ["recipe=qwen3_4b_grpo_a2_strict", "stack=release", "rollout.per_request_seed=true"]
    )
    v = next(v for v in errors(check(c)) if v.rule == "TOP-SCHEMA-001")
    assert "verl 0.9.1" in v.message and "actor_rollout_ref.rollout.per_request_seed" in v.message


def test_train_steps_reaches_verl():
    """The seed recipes ran epoch-bounded; that is train.steps=null now, and a user's steps win."""
    base = compose_job(["recipe=seed_qwen3_4b_grpo_on"]).to_object()
    assert base.train.steps is None
    assert not any("total_training_steps" in o for o in render(base).overrides)
    spec = compose_job(["recipe=seed_qwen3_4b_grpo_on", "train.steps=50"]).to_object()
    assert "trainer.total_training_steps=50" in render(spec).overrides


def test_train_dtype_is_rendered():
    spec = compose_job(["recipe=qwen3_4b_grpo_a2_off", "train.dtype=float16"]).to_object()
    o = render(spec).overrides
    for key in ("actor.megatron.dtype", "ref.megatron.dtype", "rollout.dtype"):
        assert f"actor_rollout_ref.{key}=float16" in o, key
    fsdp = render(compose_job(["train=fsdp", "train.dtype=float32"]).to_object()).overrides
    assert "actor_rollout_ref.actor.fsdp_config.dtype=float32" in fsdp
    assert "TOP-SCHEMA-006" in rules(
        compose_job(["recipe=qwen3_4b_grpo_a2_off", "train.dtype=float32"])
    )


def test_fsdp_renders_no_megatron_key():
    plain = render(compose_job(["train=fsdp", "alignment=off"]).to_object()).overrides
    assert not any(".megatron." in o or o.startswith("model_engine=megatron") for o in plain)
    c = compose_job(["recipe=qwen3_4b_grpo_a2_off", "train=fsdp"])
    v = next(v for v in errors(check(c)) if v.rule == "TOP-SCHEMA-005")
    assert "actor_rollout_ref.actor.megatron.use_mbridge" in v.message


def test_home_in_data_paths_is_expanded_or_refused(monkeypatch):
    spec = compose_job(["recipe=seed_qwen3_4b_grpo_on"]).to_object()
    o = render(spec, environ={"HOME": "/home/u"}).overrides
    assert "data.train_files=[/home/u/data/gsm8k/train.parquet]" in o
    assert not any("$HOME" in x for x in o)
    monkeypatch.delenv("HOME")
    v = next(
        v
        for v in errors(check(compose_job(["recipe=seed_qwen3_4b_grpo_on"])))
        if v.rule == "TOP-SCHEMA-004"
    )
    assert "data.train_files" in v.message and "$HOME" in v.message


def test_stock_verl_080_refused_for_strict_megatron_with_both_reasons():
    c = compose_job(
        ["recipe=qwen3_4b_grpo_a2_strict", "stack=release", "cluster.versions.verl=0.8.0"]
    )
    vs = {v.rule: v for v in errors(check(c))}
    assert "actor_rollout_ref.rollout.seed" in vs["TOP-SCHEMA-001"].message
    assert "verl 0.8.0" in vs["TOP-SCHEMA-001"].message
    assert "TOP-SCHEMA-003" in vs  # MindSpeed's attention patch registered twice
    # verl_patches are read: the seed's patch list makes the same verl 0.8.0 fine
    seed = compose_job(["recipe=qwen3_4b_grpo_a2_strict"])
    assert not {"TOP-SCHEMA-001", "TOP-SCHEMA-003"} & rules(seed)
    no_bi = compose_job(
        [
            "recipe=qwen3_4b_grpo_a2_strict",
            "cluster.versions.verl_patches=[vllm_pp,per_request_seed]",
        ]
    )
    assert "TOP-SCHEMA-003" in rules(no_bi)
    assert "TOP-SCHEMA-003" not in rules(
        compose_job(
            ["recipe=qwen3_4b_grpo_a2_strict", "stack=release", "cluster.versions.verl=0.9.0"]
        )
    )


@pytest.mark.verl_versions
@versions
def test_stock_verl_080_really_lacks_what_strict_renders(tmp_path):
    """The rule's first reason, against the real 0.8.0 config: rollout.seed does not compose."""
    from hydra.errors import ConfigCompositionException

    from topl.launcher.render.invocation import Invocation

    spec = compose_job(["stack=release", "cluster.versions.verl=0.8.0"]).to_object()
    conf = declared_config_dir(spec, tmp_path)
    with pytest.raises(ConfigCompositionException):
        compose_verl(Invocation("m", "ppo_trainer", ["actor_rollout_ref.rollout.seed=42"]), conf)


def test_render_json_on_a_rejected_spec_prints_the_violations():
    r = run_topl("render", "recipe=qwen3_4b_grpo_a2_off", "train.dtype=float32", "--json")
    assert r.returncode == 2, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is False
    assert "TOP-SCHEMA-006" in {v["rule"] for v in out["violations"]}
    check_out = json.loads(
        run_topl("check", "recipe=qwen3_4b_grpo_a2_off", "train.dtype=float32", "--json").stdout
    )
    assert out == check_out  # the same shape as `check --json`


@needs_verl
def test_the_validator_reports_verls_own_rejection_and_answers_on(tmp_path, monkeypatch):
    """The kept verl process (tests/helpers.py) is a real verdict: a config verl 0.9.1 rejects
    comes back with verl's message, and the configs after it are still judged on their own."""
    from helpers import installed_verl

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = compose_job(["recipe=qwen3_4b_grpo_a2_release_strict"]).to_object()
    spec.model.hf_path = hf_config_dir(spec.model, tmp_path / "hf")
    good = compose_verl(render(spec), declared_config_dir(spec, tmp_path))
    bad = good.copy()
    bad.data.train_batch_size = 7  # 7 x n rollouts is not a multiple of the minimal batch
    items = [(c, False, False) for c in (good, bad, good)]
    errs = validate_many(installed_verl(), items, tmp_path)
    assert errs[0] is None and errs[2] is None, errs
    assert errs[1] and "must be divisible by minimal possible batch size" in errs[1], errs


@needs_verl
def test_compose_verl_parses_each_file_once_and_composes_as_hydra_does(tmp_path):
    """tests/verl_compose.compose_verl keeps each verl YAML file's parse for the process: the config
    equals Hydra's own compose, a second compose parses nothing again, and a file rewritten in
    place is read again."""
    import shutil

    import verl_compose
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from topl.launcher.render.invocation import Invocation

    conf = tmp_path / "config"
    shutil.copytree(verl_config_dir(), conf)
    inv = Invocation("m", "ppo_trainer", ["actor_rollout_ref.rollout.n=3"])
    first = compose_verl(inv, conf)
    parsed = {k for k in verl_compose._PARSED if k[0].startswith(str(conf.resolve()))}
    assert len(parsed) > 10
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        own = compose(inv.config_name, overrides=inv.overrides)
    GlobalHydra.instance().clear()
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(own)
    before = len(verl_compose._PARSED)
    assert OmegaConf.to_yaml(compose_verl(inv, conf)) == OmegaConf.to_yaml(own)
    assert len(verl_compose._PARSED) == before  # nothing parsed twice
    with open(conf / "rollout" / "rollout.yaml", "a") as f:
        f.write("\nparsed_again: 1\n")
    assert compose_verl(inv, conf).actor_rollout_ref.rollout.parsed_again == 1


@needs_verl
def test_compose_verl_base_plus_value_overrides_is_hydras_compose(tmp_path, monkeypatch):
    """tests/verl_compose.compose_verl composes verl's config once per set of group choices and applies
    each command's value overrides with Hydra's own step for them: the config, and the error for a
    key verl cannot take, equal a full Hydra compose of the same command (what both share: Hydra's
    defaults list and its `_apply_overrides_to_config`; what differs: the base is composed once).
    Both recipes declare the installed verl 0.9.1 (the DAPO one for its trainer-config overlay), so
    the README's test command runs this without TOPL_VERL_VERSIONS; a seed recipe (0.8.0) needed
    that wheel and failed on a fresh machine (issue 49)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException
    from omegaconf import OmegaConf

    from topl.launcher.render.invocation import Invocation

    def hydras(inv, conf):
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(conf), version_base=None):
                return compose(inv.config_name, overrides=list(inv.overrides))
        finally:
            GlobalHydra.instance().clear()

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    invocations = []
    for args in (
        ["recipe=qwen3_30b_a3b_grpo_a3_release_strict"],
        ["recipe=qwen3_4b_dapo_a2_release_strict"],
    ):
        spec = compose_job(args).to_object()
        spec.model.hf_path = shared_hf_config_dir(spec.model)
        conf = declared_config_dir(spec, tmp_path)
        assert conf is not None, f"verl {spec.cluster.versions.verl} is not the installed one"
        invocations.append((render(spec), conf))
    first, conf = invocations[0]  # a group choice on top: composed in full, then the values applied
    invocations.append(
        (
            Invocation(
                "m",
                first.config_name,
                ["actor@actor_rollout_ref.actor=megatron_actor", *first.overrides],
            ),
            conf,
        )
    )
    for inv, where in invocations:
        assert OmegaConf.to_yaml(compose_verl(inv, where)) == OmegaConf.to_yaml(hydras(inv, where))
    for bad in ("+actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.no_such_key=2"):
        inv = Invocation("m", first.config_name, [*first.overrides, bad])
        with pytest.raises(ConfigCompositionException) as ours:
            compose_verl(inv, conf)
        with pytest.raises(ConfigCompositionException) as own:
            hydras(inv, conf)
        assert str(ours.value) == str(own.value)
