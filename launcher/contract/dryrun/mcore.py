"""megatron-core's start-up checks on the Megatron layout verl passes it, as pure functions over a
key lookup (mirror.Get) and the model's sizes. verl's MegatronEngine hands each engine's
`megatron.*` sizes to parallel_state.initialize_model_parallel, builds a TransformerConfig from
them and override_transformer_config (Megatron-Bridge's provider on verl 0.9.1's default, mbridge
on 0.8.0's: verl@0.9.1:verl/workers/engine/megatron/transformer_impl.py:MegatronEngine.
_init_device_mesh, _build_tf_config; 0.8.0 the same calls), then builds its layers
(transformer_block.get_num_layers_to_build, moe_layer.BaseMoELayer). Each check cites megatron-core
0.16.0's text (0.16.1 the same); tests/contract/test_mcore_layout.py finds each in the installed
megatron-core by AST, and runs its TransformerConfig over the same layouts where it imports.

The fast rule (contract/verl_layout.py TOP-INIT-020) looks keys up in the rendered command, the
dry run (verl_side.py) in verl's composed config. Stdlib only: the dry run's child imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from topl.launcher.contract.dryrun.mirror import A, Finding, Get, megatron, world

VERSION = "0.16.0"


@dataclass(frozen=True)
class Cite:
    path: str  # below megatron/core
    symbol: str
    text: str  # the condition as megatron-core writes it
    kind: str = "raise"  # raise (an `if` whose body raises) | assert

    def __str__(self) -> str:
        return f"megatron_core@{VERSION}:megatron/core/{self.path}:{self.symbol} (0.16.1 the same)"


PS, TB, TC = (
    "parallel_state.py",
    "transformer/transformer_block.py",
    "transformer/transformer_config.py",
)
POST = "TransformerConfig.__post_init__"
CHECKS = {
    "mp_world": Cite(PS, "initialize_model_parallel", "world_size % model_size != 0"),
    "vpp_needs_pp": Cite(PS, "initialize_model_parallel", "not pipeline_model_parallel_size > 1"),
    "expert_world": Cite(
        PS,
        "initialize_model_parallel",
        "world_size % expert_tensor_model_pipeline_parallel_size != 0",
    ),
    "sequence_parallel_tp": Cite(
        "model_parallel_config.py",
        "ModelParallelConfig.__post_init__",
        "self.tensor_model_parallel_size <= 1",
    ),
    "heads_tp": Cite(TC, POST, "self.num_attention_heads % self.tensor_model_parallel_size != 0"),
    "groups_tp": Cite(
        TC,
        POST,
        "self.num_query_groups % self.tensor_model_parallel_size != 0 and "
        "self.tensor_model_parallel_size % self.num_query_groups != 0",
    ),
    "ep_dense": Cite(
        TC, POST, "self.expert_model_parallel_size > 1 and self.num_moe_experts is None"
    ),
    "recompute_granularity": Cite(
        TC, POST, "self.recompute_granularity not in ['full', 'selective']"
    ),
    "recompute_method": Cite(TC, POST, "self.recompute_method not in ['block', 'uniform']"),
    "recompute_method_unset": Cite(TC, POST, "self.recompute_granularity != 'selective'"),
    "recompute_layers_unset": Cite(
        TC,
        POST,
        "self.recompute_granularity != 'selective' and self.recompute_num_layers is None",
    ),
    "recompute_layers_selective": Cite(
        TC,
        POST,
        "self.recompute_granularity == 'selective' and self.recompute_num_layers is not None",
    ),
    "layers_pp": Cite(
        TB,
        "get_num_layers_to_build",
        "num_layers % config.pipeline_model_parallel_size == 0",
        "assert",
    ),
    "layers_vpp": Cite(
        TB, "get_num_layers_to_build", "num_layers_per_pipeline_rank % vp_size == 0", "assert"
    ),
    "experts_ep": Cite(
        "transformer/moe/moe_layer.py",
        "BaseMoELayer.__init__",
        "self.config.num_moe_experts % ep_size == 0",
        "assert",
    ),
}
# What megatron-core checks in a TransformerConfig or while it builds the layers: the dry run calls
# megatron-core for these where it imports (CPU is enough); the rest need a process group
CONFIG_CHECKS = {k for k, c in CHECKS.items() if c.path in (TC, TB, "model_parallel_config.py")}
# Checks that topl's own rules make over the train.* fields (TOP-RES-001/002/003, TOP-ENG-005/006):
# TOP-INIT-020 reports them only where a recipe or override set a size verbatim.
SPEC_CHECKED = {"mp_world", "expert_world", "heads_tp", "groups_tp", "ep_dense", "experts_ep"}
SPEC_CHECKED |= {"layers_pp"}
# override_transformer_config keys that change the pipeline split (uneven first / last stage, a
# layout): get_num_layers_to_build then follows other arithmetic, which this module does not mirror
UNEVEN = (
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
    "pipeline_model_parallel_layout",
    "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split",
)


class Model(NamedTuple):
    num_layers: int
    num_heads: int
    num_kv_heads: int
    num_experts: int  # 0: dense


def _int(v: Any, default: int) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else default


def roles(get: Get, use_ref: bool, use_critic: bool) -> tuple[str, ...]:
    """The Megatron engines verl builds in one worker process, in its order: the critic's
    TrainingWorker builds its engine when the colocated worker is constructed (every role is in
    "global_pool": verl@0.9.1:verl/single_controller/ray/base.py:create_colocated_worker_cls,
    verl/workers/engine_workers.py:TrainingWorker.__init__), then ActorRolloutRefWorker.init_model
    builds the reference, then the actor (0.8.0 and 0.9.0 the same)."""
    return (("critic",) if use_critic else ()) + (("ref",) if use_ref else ()) + ("actor",)


GROUPS = ("tensor", "pipeline", "virtual_pipeline", "context", "expert", "etp")


def shared_groups(get: Get, engines: tuple[str, ...]) -> list[Finding]:
    """verl initializes megatron-core's parallel_state once per worker process: the first Megatron
    engine built (engines[0], see roles) calls initialize_model_parallel with its sizes, every later
    one finds it initialized and returns (mirror.CHECKS["shared_groups"]). A later engine whose
    sizes differ runs in the first one's groups, without an error: on 0.8.0 (mbridge) its model is
    built with those groups' sizes (mbridge@0.15.1:mbridge/core/llm_bridge.py:LLMBridge.
    _build_base_config reads parallel_state), on 0.9.x Megatron-Bridge's provider takes its own
    sizes over groups of other sizes."""
    if not megatron(get) or len(engines) < 2:
        return []
    first = sizes(get, engines[0])
    want = (first.tp, first.pp, first.vpp, first.cp, first.ep, first.etp)
    out = []
    for role in engines[1:]:
        z = sizes(get, role)
        diff = [
            (n, a, b)
            for n, a, b in zip(GROUPS, want, (z.tp, z.pp, z.vpp, z.cp, z.ep, z.etp))
            if a != b
        ]
        if not diff:
            continue
        said = ", ".join(f"{z.keys[n]}={b}, the {engines[0]}'s {a}" for n, a, b in diff)
        out.append(
            Finding(
                "shared_groups",
                f"the {engines[0]} engine, built first, initializes megatron-core's parallel "
                f"groups for the whole worker and the {role} engine runs in them: {said} "
                f"(not raised: the {role} silently takes the {engines[0]}'s layout) ({role})",
                tuple(z.keys[n] for n, _, _ in diff) + tuple(first.keys[n] for n, _, _ in diff),
            )
        )
    return out


def layout(get: Get, m: Model, engines: tuple[str, ...]) -> list[Finding]:
    """What megatron-core refuses for each engine's sizes (see CHECKS), every one at once."""
    if not megatron(get):
        return []
    out: list[Finding] = []
    for role in engines:
        out += _engine(get, m, role)
    return out


class Sizes(NamedTuple):
    keys: dict[str, str]  # size name -> the engine's verl key
    tp: int
    pp: int
    vpp: Any  # None, or what verl passes (an int)
    cp: int
    ep: int
    etp: int
    otc: str  # the engine's override_transformer_config prefix


def sizes(get: Get, role: str) -> Sizes:
    """One engine's sizes as verl passes them (expert_tensor_parallel_size null: tp's)."""
    p = "critic.megatron." if role == "critic" else f"{A}.{role}.megatron."
    k = {n: p + n for n in ("tensor", "pipeline", "virtual_pipeline", "context", "expert")}
    k = {n: f"{v}_model_parallel_size" for n, v in k.items()}
    k["context"], k["etp"] = p + "context_parallel_size", p + "expert_tensor_parallel_size"
    tp = _int(get(k["tensor"]), 1)
    return Sizes(
        k,
        tp,
        _int(get(k["pipeline"]), 1),
        get(k["virtual_pipeline"]),
        _int(get(k["context"]), 1),
        _int(get(k["expert"]), 1),
        _int(get(k["etp"]), tp),
        p + "override_transformer_config.",
    )


def _engine(get: Get, m: Model, role: str) -> list[Finding]:
    z = sizes(get, role)
    k, tp, pp, vpp, cp, ep, etp = z.keys, z.tp, z.pp, z.vpp, z.cp, z.ep, z.etp
    w, wk = world(get), ("trainer.nnodes", "trainer.n_gpus_per_node")
    out: list[Finding] = []

    def add(check: str, message: str, *keys: str) -> None:
        out.append(Finding(check, f"{message} ({role})", keys))

    if w % (tp * pp * cp):
        add(
            "mp_world",
            f"RuntimeError: world_size ({w}) is not divisible by {tp * pp * cp}",
            k["tensor"],
            k["pipeline"],
            k["context"],
            *wk,
        )
    if vpp is not None and pp <= 1:
        add(
            "vpp_needs_pp",
            "RuntimeError: pipeline-model-parallel size should be greater than 1 "
            "with interleaved schedule",
            k["virtual_pipeline"],
            k["pipeline"],
        )
    if w % (etp * ep * pp):
        add(
            "expert_world",
            f"RuntimeError: world_size ({w}) is not divisible by "
            f"expert_tensor_model_pipeline_parallel size ({etp * ep * pp})",
            k["etp"],
            k["expert"],
            k["pipeline"],
            *wk,
        )
    otc = z.otc
    sp = get(otc + "sequence_parallel")
    if sp is True and tp <= 1:  # verl turns its own sequence_parallel off at tp=1; this is after
        add(
            "sequence_parallel_tp",
            "ValueError: Cannot use sequence parallelism without tensor parallelism",
            otc + "sequence_parallel",
            k["tensor"],
        )
    if m.num_heads % tp:
        add(
            "heads_tp",
            f"ValueError: num_attention_heads ({m.num_heads}) must be a multiple of "
            f"tensor_model_parallel_size ({tp}).",
            k["tensor"],
        )
    elif m.num_kv_heads % tp and tp % m.num_kv_heads:
        add(
            "groups_tp",
            f"ValueError: num_query_groups ({m.num_kv_heads}) must be a multiple or "
            f"divisor of tensor_model_parallel_size ({tp}).",
            k["tensor"],
        )
    if ep > 1 and not m.num_experts:
        add(
            "ep_dense",
            "ValueError: num_moe_experts must be non None to use expert-parallel.",
            k["expert"],
        )
    elif m.num_experts and m.num_experts % ep:
        add(
            "experts_ep",
            f"AssertionError: num_moe_experts ({m.num_experts}) % "
            f"expert_model_parallel_size ({ep}) == 0",
            k["expert"],
        )
    out += _recompute(get, otc, role)
    if any(get(otc + u) not in (None, False) for u in UNEVEN):
        return out
    if m.num_layers % pp:
        add(
            "layers_pp",
            f"AssertionError: num_layers ({m.num_layers}) should be divisible by "
            f"pipeline_model_parallel_size ({pp})",
            k["pipeline"],
        )
    elif isinstance(vpp, int) and pp > 1 and (m.num_layers // pp) % vpp:
        add(
            "layers_vpp",
            f"AssertionError: num_layers_per_pipeline_rank {m.num_layers // pp} "
            f"should be divisible by vp_size {vpp}",
            k["virtual_pipeline"],
            k["pipeline"],
        )
    return out


def _recompute(get: Get, otc: str, role: str) -> list[Finding]:
    """TransformerConfig's activation-recompute checks, over override_transformer_config (topl
    renders train.recompute_* there; the reference takes the actor's)."""
    g, me, n = (
        otc + x for x in ("recompute_granularity", "recompute_method", "recompute_num_layers")
    )
    gran, method, layers = get(g), get(me), get(n)
    if gran is None:
        return []
    out = []

    def add(check: str, message: str, *keys: str) -> None:
        out.append(Finding(check, f"ValueError: {message} ({role})", keys))

    if gran not in ("full", "selective"):
        add(
            "recompute_granularity",
            f'recompute_granularity: {gran} must be "full" or "selective".',
            g,
        )
        return out
    if method is not None and method not in ("block", "uniform"):
        add("recompute_method", f'recompute_method: {method} must be "block" or "uniform".', me)
    elif method is None and gran != "selective":
        add(
            "recompute_method_unset",
            f'Using recompute_granularity: {gran} so recompute_method must be "block" or "uniform"',
            g,
            me,
        )
    if gran != "selective" and layers is None:
        add(
            "recompute_layers_unset",
            f"When using recompute_granularity: {gran} "
            "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank",
            g,
            n,
        )
    elif gran == "selective" and layers is not None:
        add(
            "recompute_layers_selective",
            "When using recompute_granularity: selective recompute_num_layers must be None.",
            g,
            n,
        )
    return out


# megatron-core releases read for what verl's dynamic context parallel needs (NVIDIA/Megatron-LM
# #5154): 0.16.0 and 0.16.1, the newest on PyPI, have neither
# megatron/core/datasets/data_schedule.py:DefaultDynamicCPScheduler nor a dynamic_context_parallel
# parameter of parallel_state.initialize_model_parallel (tests/contract/test_mcore_layout.py reads
# the installed one); MindSpeed core_r0.16.0 runs on that line
NO_DYNAMIC_CP = "0.16.0, 0.16.1"


def dynamic_cp(get: Get, engines: tuple[str, ...]) -> list[Finding]:
    """An engine with megatron.dynamic_context_parallel: verl 0.9.x raises when it imports the
    scheduler (verl@0.9.1:verl/utils/dynamic_cp_scheduler.py:get_megatron_dynamic_cp_scheduler_cls,
    from MegatronEngine._init_device_mesh), 0.8.0 asserts the parameter (mirror.CHECKS
    ["dynamic_cp"]), on a megatron-core without it (NO_DYNAMIC_CP)."""
    if not megatron(get):
        return []
    out = []
    for role in engines:
        key = sizes(get, role).keys["tensor"].rsplit(".", 1)[0] + ".dynamic_context_parallel"
        if get(key) is True:
            out.append(
                Finding(
                    "dynamic_cp",
                    "RuntimeError: Dynamic CP requires a Megatron-Core build containing "
                    "NVIDIA/Megatron-LM#5154 (verl 0.9; 0.8.0: AssertionError: "
                    "dynamic_context_parallel is not supported in your megatron version): "
                    f"megatron-core {NO_DYNAMIC_CP} have no dynamic context parallel ({role})",
                    (key,),
                )
            )
    return out
