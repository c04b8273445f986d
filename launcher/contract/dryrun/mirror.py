"""verl's start-up arithmetic that needs a process group, a device or a running trainer, as pure
functions over a key lookup: `get(verl key)` is the value verl sees. The fast rules
(contract/verl_layout.py) look keys up in the command topl renders (verl's defaults from the
declared schema); the dry run (verl_side.py) in verl's own composed, resolved config. One copy of
each check, two sources of values. Each finding names the check it mirrors (a key of CHECKS, which
tests/contract/test_verl_firststep.py finds in every release it names, by AST) and every verl key
that decides it. Stdlib only: the dry run's child imports it next to verl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

Get = Callable[[str], Any]
A = "actor_rollout_ref"
ALL = ("0.8.0", "0.9.0", "0.9.1")
V9 = ("0.9.0", "0.9.1")


@dataclass(frozen=True)
class Cite:
    path: str  # below the verl package
    symbol: str  # Class.method or function holding the check
    text: (
        str  # the condition as verl writes it (an assert's test, a raise's if-test, an expression)
    )
    kind: str = "assert"  # assert | raise (an `if` whose body raises) | expr
    versions: tuple[str, ...] = ALL  # the releases whose source has it

    def __str__(self) -> str:
        return (
            f"verl@{self.versions[-1]}:verl/{self.path}:{self.symbol} ({', '.join(self.versions)})"
        )


CHECKS = {
    "micro_divides": Cite(
        "workers/engine/utils.py",
        "prepare_micro_batches",
        "total_data_size % (force_group_size * micro_batch_size_per_gpu) == 0",
    ),
    "token_budget": Cite(
        "utils/seqlen_balancing.py", "rearrange_micro_batches", "max_token_len >= max_seq_len"
    ),
    "ulysses_remove_padding": Cite(
        "workers/engine/fsdp/transformer_impl.py",
        "FSDPEngine.__init__",
        "self.engine_config.ulysses_sequence_parallel_size > 1 and (not self.use_remove_padding)",
        kind="raise",
    ),
    "ulysses_world": Cite(
        "workers/engine/fsdp/transformer_impl.py",
        "FSDPEngine._init_device_mesh",
        "init_device_mesh(device_name, mesh_shape=(dp_size, self.ulysses_sequence_parallel_size),"
        " mesh_dim_names=['dp', 'sp'])",
        kind="expr",
    ),
    "fsdp_size": Cite(
        "workers/engine/fsdp/utils.py",
        "create_device_mesh",
        "init_device_mesh(device_name, mesh_shape=(world_size // fsdp_size, fsdp_size),"
        " mesh_dim_names=['ddp', 'fsdp'])",
        kind="expr",
    ),
    "replica_nodes": Cite(
        "workers/rollout/replica.py",
        "RolloutReplica.__init__",
        "self.world_size % self.gpus_per_replica_node == 0",
    ),
    "vllm_dp_local": Cite(
        "workers/rollout/vllm_rollout/vllm_async_server.py",
        "vLLMHttpServer.launch_server",
        "self.gpus_per_node % self.config.tensor_model_parallel_size == 0",
    ),
    "use_mbridge": Cite(
        "workers/engine/megatron/transformer_impl.py",
        "MegatronEngine.__init__",
        "self.engine_config.use_mbridge",
    ),
    # the first Megatron engine of a worker process initializes megatron-core's parallel groups;
    # a later one returns here and runs in them ("TODO: set different parallelism for actor,
    # critic, ref"): mcore.shared_groups
    "shared_groups": Cite(
        "workers/engine/megatron/transformer_impl.py",
        "MegatronEngine._init_device_mesh",
        "mpu.is_initialized()",
        kind="expr",
    ),
    # verl's dynamic context parallel asks megatron-core for an initialize_model_parallel that
    # takes it (0.9.x first imports its DefaultDynamicCPScheduler): mcore.dynamic_cp
    "dynamic_cp": Cite(
        "workers/engine/megatron/transformer_impl.py",
        "MegatronEngine._init_device_mesh",
        "'dynamic_context_parallel' in inspect.signature(mpu.initialize_model_parallel).parameters",
    ),
    "gen_batch_size": Cite(
        "trainer/ppo/v1/trainer_base.py",
        "PPOTrainer._next_train_batch",
        "num_prompts <= 0 or num_prompts % gen_batch_size != 0",
        kind="raise",
        versions=V9,
    ),
    "filter_groups_metric": Cite(
        "trainer/ppo/v1/trainer_base.py",
        "PPOTrainer._resolve_filter_groups_metric",
        "not filter_metric",
        kind="raise",
        versions=V9,
    ),
    "v1_pads_to_mini": Cite(
        "trainer/ppo/v1/trainer_base.py",
        "PPOTrainer._get_required_batch_multiple",
        "math.lcm(required_multiple, actor_global_mini_batch_size)",
        kind="expr",
        versions=V9,
    ),
}
# vLLM's own engine-argument check on what verl passes (verl pins the vLLM it starts; the NPU
# stacks' vLLM has the same check)
VLLM_SCHEDULER = (
    "vllm@0.24.0:vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len "
    "(max_num_batched_tokens < max_num_seqs raises)"
)


class Finding(NamedTuple):
    check: str  # a key of CHECKS (or "vllm_scheduler")
    message: str  # what verl (vLLM) would say, with the numbers it would put in it
    keys: tuple[str, ...]  # every verl key that decides it


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def world(get: Get) -> int:
    return (_int(get("trainer.nnodes")) or 1) * (_int(get("trainer.n_gpus_per_node")) or 1)


def megatron(get: Get) -> bool:
    """model_engine is a Hydra group choice (the command's); a composed config has the strategy."""
    engine = get("model_engine")
    return engine == "megatron" or engine is None and get(f"{A}.actor.strategy") == "megatron"


def engine_dp_sp(get: Get, role: str) -> tuple[int, int]:
    """(data-parallel, sequence-parallel) size of one training engine (actor | ref)."""
    w = world(get)
    if megatron(get):
        m = f"{A}.{role}.megatron."
        mp = 1
        for k in ("tensor", "pipeline"):
            mp *= _int(get(f"{m}{k}_model_parallel_size")) or 1
        cp = _int(get(f"{m}context_parallel_size")) or 1
        return max(w // max(mp * cp, 1), 1), cp
    sp = _int(get(f"{A}.{role}.ulysses_sequence_parallel_size")) or 1
    return max(w // sp, 1), sp


def fsdp_meshes(get: Get, roles: tuple[str, ...]) -> list[Finding]:
    """The device meshes FSDPEngine builds for each role: (world/sp, sp) for Ulysses, (world/fsdp,
    fsdp) for hybrid sharding; both must cover the world exactly (torch's init_device_mesh)."""
    if megatron(get):
        return []
    w, out = world(get), []
    for role in roles:
        p = f"{A}.{role}"
        sp = _int(get(f"{p}.ulysses_sequence_parallel_size")) or 1
        if sp > 1 and not get(f"{A}.model.use_remove_padding"):
            out.append(
                Finding(
                    "ulysses_remove_padding",
                    "ValueError: When using sequence parallelism (ulysses_sequence_parallel_"
                    "size > 1), you must enable `use_remove_padding`.",
                    (f"{p}.ulysses_sequence_parallel_size", f"{A}.model.use_remove_padding"),
                )
            )
        if w % sp:
            out.append(
                Finding(
                    "ulysses_world",
                    f"RuntimeError: init_device_mesh mesh_shape=(dp={w // sp}, sp={sp}) does "
                    f"not cover world_size {w}: ulysses_sequence_parallel_size must divide it",
                    (
                        f"{p}.ulysses_sequence_parallel_size",
                        "trainer.nnodes",
                        "trainer.n_gpus_per_node",
                    ),
                )
            )
        fsdp = _int(get(f"{p}.fsdp_config.fsdp_size"))
        if fsdp is not None and (fsdp == 0 or 0 < fsdp < w and w % fsdp):
            out.append(
                Finding(
                    "fsdp_size",
                    f"RuntimeError: create_device_mesh mesh_shape=(ddp={w // fsdp if fsdp else '?'}"
                    f", fsdp={fsdp}) does not cover world_size {w}: fsdp_size must divide it",
                    (f"{p}.fsdp_config.fsdp_size", "trainer.nnodes", "trainer.n_gpus_per_node"),
                )
            )
    return out


def use_mbridge(get: Get, roles: tuple[str, ...]) -> list[Finding]:
    """MegatronEngine asserts engine_config.use_mbridge for each Megatron engine it builds."""
    if not megatron(get):
        return []
    off = [
        f"{A}.{r}.megatron.use_mbridge"
        for r in roles
        if get(f"{A}.{r}.megatron.use_mbridge") is False
    ]
    return (
        [Finding("use_mbridge", "AssertionError: use_mbridge must be True", tuple(off))]
        if off
        else []
    )


def log_prob_batch(get: Get, v1: bool, use_critic: bool) -> int | None:
    """The sequences of one step as the log-prob passes get them: train_batch_size * n, which the
    V1 trainer pads to a multiple of lcm(actor dp, the actor's [and critic's] global mini batch)."""
    tbs, n = _int(get("data.train_batch_size")), _int(get(f"{A}.rollout.n")) or 1
    if tbs is None:
        return None
    bsz, (dp, _) = tbs * n, engine_dp_sp(get, "actor")
    if not v1:
        return bsz if bsz % dp == 0 else None  # else balance batch / dispatch refuses first
    mult = dp
    for mini in (
        get(f"{A}.actor.ppo_mini_batch_size"),
        get("critic.ppo_mini_batch_size") if use_critic else None,
    ):
        if _int(mini):
            mult = math.lcm(mult, mini * n)
    return -(-bsz // mult) * mult


def batch_split(get: Get, use_ref: bool, v1: bool, use_critic: bool = False) -> list[Finding]:
    """prepare_micro_batches on each pass of step 1: the actor update gets mini * n / dp sequences
    per rank, the log-prob recompute (rollout) and the reference the padded batch / dp; without
    dynamic batch size each must split into whole micro batches, with it each token budget (x the
    sequence-parallel size) must hold the longest sequence, prompt + response."""
    out: list[Finding] = []
    n = _int(get(f"{A}.rollout.n")) or 1
    seq = (_int(get("data.max_prompt_length")) or 0) + (_int(get("data.max_response_length")) or 0)
    dp, sp = engine_dp_sp(get, "actor")
    mini = (_int(get(f"{A}.actor.ppo_mini_batch_size")) or 0) * n
    bsz = log_prob_batch(get, v1, use_critic)
    passes = [
        (
            "actor",
            "ppo",
            mini // dp if mini and mini % dp == 0 else None,
            sp,
            (f"{A}.actor.ppo_mini_batch_size", f"{A}.rollout.n"),
        )
    ]
    src = ("data.train_batch_size", f"{A}.rollout.n", "trainer.nnodes", "trainer.n_gpus_per_node")
    passes.append(("rollout", "log_prob", bsz // dp if bsz else None, sp, src))
    if use_ref:
        rdp, rsp = engine_dp_sp(get, "ref")
        passes.append(("ref", "log_prob", bsz // rdp if bsz and bsz % rdp == 0 else None, rsp, src))
    dyn_key = {"actor": f"{A}.actor.use_dynamic_bsz"}
    for role, kind, per_rank, s, more in passes:
        p = f"{A}.{role}"
        dyn = get(dyn_key.get(role, f"{p}.log_prob_use_dynamic_bsz"))
        if dyn:
            key = f"{p}.{kind}_max_token_len_per_gpu"
            tok = _int(get(key))
            if tok is not None and seq and tok * s < seq:
                out.append(
                    Finding(
                        "token_budget",
                        f"AssertionError: max_token_len must be greater than the sequence length. "
                        f"Got max_token_len={tok * s} and max_seq_len={seq} (prompt + response, "
                        f"the longest sequence a step can hold)",
                        (key, "data.max_prompt_length", "data.max_response_length"),
                    )
                )
            continue
        key = f"{p}.{kind}_micro_batch_size_per_gpu"
        micro = _int(get(key))
        if micro and per_rank is not None and per_rank % micro:
            out.append(
                Finding(
                    "micro_divides",
                    f"AssertionError: data size must be divisible by force_group_size * "
                    f"micro_batch_size_per_gpu ({per_rank} sequences per data-parallel rank on "
                    f"the {role} {kind.replace('_', '-')} pass, micro_batch_size_per_gpu {micro})",
                    (key, *more),
                )
            )
    return out


def replicas(get: Get) -> list[Finding]:
    """RolloutReplica: a replica (tp * dp * pp devices) spans whole nodes or fits in one; vLLM with
    rollout dp > 1 puts whole TP groups on a node."""
    r = f"{A}.rollout"
    tp = _int(get(f"{r}.tensor_model_parallel_size")) or 1
    dp = _int(get(f"{r}.data_parallel_size")) or 1
    pp = _int(get(f"{r}.pipeline_model_parallel_size")) or 1
    gpn = _int(get(f"{r}.n_gpus_per_node")) or _int(get("trainer.n_gpus_per_node")) or 1
    size, out = tp * dp * pp, []
    keys = (
        f"{r}.tensor_model_parallel_size",
        f"{r}.data_parallel_size",
        f"{r}.pipeline_model_parallel_size",
    )
    per_node = min(gpn, size)
    if size % per_node:
        out.append(
            Finding(
                "replica_nodes",
                f"AssertionError: world_size {size} must be divisible by gpus_per_node {per_node}",
                (*keys, f"{r}.n_gpus_per_node", "trainer.n_gpus_per_node"),
            )
        )
    elif get(f"{r}.name") == "vllm" and dp > 1 and per_node % tp:
        out.append(
            Finding(
                "vllm_dp_local",
                "AssertionError: gpus_per_node should be divisible by tensor_model_parallel_size "
                f"({per_node} devices of a replica per node, tp={tp})",
                keys[:2],
            )
        )
    return out


def vllm_scheduler(get: Get, raises_budget: bool) -> list[Finding]:
    """vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs. verl passes both, with
    rollout.engine_kwargs.vllm over them; with chunked prefill off, verl 0.9.1 first raises the
    token budget to max_model_len itself (`raises_budget`), which then always holds max_num_seqs
    when max_model_len is set (unset: the model's max_position_embeddings, known to the rule)."""
    r = f"{A}.rollout"
    if get(f"{r}.name") != "vllm":
        return []
    kw = f"{r}.engine_kwargs.vllm."
    tok_key = (
        kw + "max_num_batched_tokens"
        if get(kw + "max_num_batched_tokens") is not None
        else f"{r}.max_num_batched_tokens"
    )
    seq_key = kw + "max_num_seqs" if get(kw + "max_num_seqs") is not None else f"{r}.max_num_seqs"
    tokens, seqs = _int(get(tok_key)), _int(get(seq_key))
    chunked = get(kw + "enable_chunked_prefill")
    chunked = get(f"{r}.enable_chunked_prefill") if chunked is None else chunked
    if tokens is None or seqs is None:
        return []
    if not chunked and raises_budget:
        mml = _int(get(kw + "max_model_len")) or _int(get(f"{r}.max_model_len"))
        if mml is None:
            return []  # raised to max_position_embeddings: the model's, unknown here
        tokens = max(tokens, mml)
    if tokens < seqs:
        return [
            Finding(
                "vllm_scheduler",
                f"ValueError: max_num_batched_tokens ({tokens}) must be greater than or equal to "
                f"max_num_seqs ({seqs}).",
                (tok_key, seq_key),
            )
        ]
    return []


def v1_trainer(get: Get) -> list[Finding]:
    """The V1 trainer's own start-up checks (verl 0.9.x main_ppo, trainer.use_v1)."""
    out = []
    tbs = _int(get("data.train_batch_size")) or 0
    gen = _int(get("data.gen_batch_size")) or tbs
    if tbs and gen and tbs % gen:
        out.append(
            Finding(
                "gen_batch_size",
                f"ValueError: num_prompts ({tbs}) must be a positive multiple of gen_batch_size "
                f"({gen}); it is submitted in whole gen_batch_size dataloader fetches.",
                ("data.gen_batch_size", "data.train_batch_size"),
            )
        )
    if get("algorithm.filter_groups.enable") and not get("algorithm.filter_groups.metric"):
        out.append(
            Finding(
                "filter_groups_metric",
                "ValueError: algorithm.filter_groups.metric must be set when group filtering is "
                "enabled",
                ("algorithm.filter_groups.metric", "algorithm.filter_groups.enable"),
            )
        )
    return out
