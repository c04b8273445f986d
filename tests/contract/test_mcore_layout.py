"""megatron-core's start-up checks on a Megatron layout (launcher/contract/dryrun/mcore.py, rule
TOP-INIT-020): each cited check is in the installed megatron-core's source, where cited (AST); the
mirror refuses exactly the layouts megatron-core's own TransformerConfig / get_num_layers_to_build
refuse; the rule covers the critic, which the start-up set leaves out (its dry run loads the model
files: tests/contract/startup_cases.py)."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors
from topl.launcher.contract.dryrun import mcore

# megatron-core's source, found without importing it (its import costs 0.5-3 s: only the parity
# test pays it)
SPEC = importlib.util.find_spec("megatron.core") if importlib.util.find_spec("megatron") else None
ROOT = Path(SPEC.origin).parent if SPEC and SPEC.origin else None
needs_mcore = pytest.mark.skipif(ROOT is None, reason="megatron-core not installed (.ci/run does)")


def _norm(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _conditions(path: Path, symbol: str, kind: str) -> list[str]:
    node: ast.AST = ast.parse(path.read_text())
    for part in symbol.split("."):
        node = next(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part
        )
    walked = list(ast.walk(node))
    if kind == "assert":
        return [_norm(ast.unparse(n.test)) for n in walked if isinstance(n, ast.Assert)]
    return [
        _norm(ast.unparse(n.test))
        for n in walked
        if isinstance(n, ast.If) and any(isinstance(b, ast.Raise) for b in n.body)
    ]


@needs_mcore
@pytest.mark.parametrize("name", sorted(mcore.CHECKS))
def test_every_cited_check_is_in_megatron_core(name):
    """A megatron-core that moves or changes a check fails here, naming the citation."""
    cite = mcore.CHECKS[name]
    assert ROOT is not None
    found = _conditions(ROOT / cite.path, cite.symbol, cite.kind)
    assert any(_norm(cite.text) in t for t in found), f"{cite}: no {cite.text}"


MODELS = {  # Qwen3-4B (dense) and Qwen3-30B-A3B (MoE): conf/model/*.yaml
    "dense": (mcore.Model(36, 32, 8, 0), 2560),
    "moe": (mcore.Model(48, 32, 4, 128), 2048),
}
GRID = {
    "tp": (1, 2, 3),
    "pp": (1, 2, 5),
    "vpp": (None, 2, 3),
    "ep": (1, 2),
    "recompute": (
        {},
        {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
        {"recompute_granularity": "full", "recompute_method": None, "recompute_num_layers": 1},
        {"recompute_granularity": "selective", "recompute_num_layers": 1},
        {"recompute_granularity": "partial"},
    ),
}


def _megatron_core_refuses(model: mcore.Model, hidden: int, lay: dict) -> bool:
    import torch  # lazy: megatron-core's dependency
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    try:
        cfg = TransformerConfig(
            num_layers=model.num_layers,
            hidden_size=hidden,
            num_attention_heads=model.num_heads,
            num_query_groups=model.num_kv_heads,
            num_moe_experts=model.num_experts or None,
            add_bias_linear=False,
            tensor_model_parallel_size=lay["tp"],
            pipeline_model_parallel_size=lay["pp"],
            virtual_pipeline_model_parallel_size=lay["vpp"],
            expert_model_parallel_size=lay["ep"],
            params_dtype=torch.bfloat16,
            pipeline_dtype=torch.bfloat16,
            bf16=True,
            **{k: v for k, v in lay["recompute"].items() if v is not None},
        )
        for rank in range(lay["pp"]):
            get_num_layers_to_build(cfg, vp_stage=0, pp_rank=rank)
    except (ValueError, AssertionError):
        return True
    return False


def _mirror_refuses(model: mcore.Model, lay: dict) -> bool:
    otc = f"{mcore.A}.actor.megatron.override_transformer_config."
    keys = {
        "model_engine": "megatron",
        "trainer.n_gpus_per_node": 8,
        f"{mcore.A}.actor.megatron.tensor_model_parallel_size": lay["tp"],
        f"{mcore.A}.actor.megatron.pipeline_model_parallel_size": lay["pp"],
        f"{mcore.A}.actor.megatron.virtual_pipeline_model_parallel_size": lay["vpp"],
        f"{mcore.A}.actor.megatron.expert_model_parallel_size": lay["ep"],
        **{otc + k: v for k, v in lay["recompute"].items()},
    }
    found = mcore.layout(keys.get, model, ("actor",))
    return any(f.check in mcore.CONFIG_CHECKS for f in found)


@needs_mcore
# on the worker that imports megatron-core for tests/align (its import once, not twice)
@pytest.mark.xdist_group("test_align.py")
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_mirror_refuses_what_megatron_cores_config_refuses(name):
    """Over 210 layouts per model, the re-derived config checks agree with megatron-core's own
    (pp > 1 only, where the virtual pipeline is a config matter: at pp=1 parallel_state refuses
    it first, before any config is built)."""
    model, hidden = MODELS[name]
    verdicts = {True: 0, False: 0}
    for values in itertools.product(*GRID.values()):
        lay = dict(zip(GRID, values))
        if lay["vpp"] is not None and lay["pp"] == 1:
            continue
        real = _megatron_core_refuses(model, hidden, lay)
        assert _mirror_refuses(model, lay) == real, (name, lay, real)
        verdicts[real] += 1
    assert verdicts[True] and verdicts[False]


def test_the_critic_engine_is_checked_too():
    ppo = ["recipe=qwen3_4b_grpo_a2_release_strict", "algorithm.adv_estimator=gae"]
    ppo.append("algorithm.use_critic=true")
    key = "verl_overrides.critic.megatron.virtual_pipeline_model_parallel_size"
    vs = errors(check(compose_job(ppo + [f"+{key}=2"])))
    hit = [v for v in vs if v.rule == "TOP-INIT-020"]
    assert hit and key in hit[0].keys and "(critic)" in hit[0].message
    assert not [v for v in errors(check(compose_job(ppo))) if v.rule == "TOP-INIT-020"]


def test_every_megatron_engine_of_the_worker_has_the_first_ones_layout():
    """verl initializes megatron-core's parallel groups once per worker, with the first engine's
    sizes (the critic's, built with the worker; else the reference's); the others run in them
    (TOP-INIT-021). topl renders the critic the actor's sizes, so PPO with pp=2 is accepted; a
    size set for one engine alone is refused, naming both keys."""
    ppo = ["recipe=qwen3_4b_grpo_a2_off", "stack=release", "algorithm.adv_estimator=gae"]
    ppo += ["algorithm.use_critic=true", "train.pp=2", "+verl_overrides.actor_rollout_ref"]
    ppo[-1] += ".ref.megatron.pipeline_model_parallel_size=2"  # the recipe pins the ref's to 1
    assert "TOP-INIT-021" not in {v.rule for v in errors(check(compose_job(ppo)))}
    key = "verl_overrides.critic.megatron.tensor_model_parallel_size"
    vs = errors(check(compose_job(ppo + [f"+{key}=2"])))
    hit = [v for v in vs if v.rule == "TOP-INIT-021"]
    assert hit and key in hit[0].keys and "train.tp" in hit[0].keys, vs
    assert "critic engine, built first" in hit[0].message and "(actor)" in hit[0].message
    kl = [*ppo[:2], "algorithm.use_kl_loss=true", "train.pp=2"]  # the recipe's ref pp=1
    hit = [v for v in errors(check(compose_job(kl))) if v.rule == "TOP-INIT-021"]
    assert hit and "ref engine, built first" in hit[0].message


@needs_mcore
def test_the_installed_megatron_core_has_no_dynamic_context_parallel():
    """TOP-INIT-022's premise (mcore.NO_DYNAMIC_CP), read in the installed megatron-core (.ci/run:
    0.16.1): no DefaultDynamicCPScheduler, no dynamic_context_parallel parameter."""
    tree = ast.parse((ROOT / "parallel_state.py").read_text())
    init = next(
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "initialize_model_parallel"
    )
    names = {a.arg for a in init.args.args + init.args.kwonlyargs}
    assert "context_parallel_size" in names and "dynamic_context_parallel" not in names
    schedule = ROOT / "datasets" / "data_schedule.py"
    assert not schedule.exists() or "DefaultDynamicCPScheduler" not in schedule.read_text()
    version = (ROOT / "package_info.py").read_text()
    assert "MINOR = 16" in version, "a new megatron-core line: read it, update NO_DYNAMIC_CP"


def test_dynamic_context_parallel_is_refused_on_every_engine_it_is_set_for():
    base = ["recipe=qwen3_4b_grpo_a2_off", "stack=release", "train.cp=2"]
    key = "verl_overrides.actor_rollout_ref.ref.megatron.dynamic_context_parallel"
    vs = errors(check(compose_job([*base, "algorithm.use_kl_loss=true", f"+{key}=true"])))
    hit = [v for v in vs if v.rule == "TOP-INIT-022"]
    assert hit and key in hit[0].keys and "(ref)" in hit[0].message, vs
    assert "TOP-INIT-022" not in {
        v.rule for v in errors(check(compose_job([*base, f"+{key}=true"])))
    }
    later = [*base, "cluster.versions.mindspeed=core_r0.17.0", "algorithm.use_kl_loss=true"]
    assert "TOP-INIT-022" not in {
        v.rule for v in errors(check(compose_job([*later, f"+{key}=true"])))
    }
