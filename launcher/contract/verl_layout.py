"""verl's start-up layout checks as rules, without verl: the functions of contract/dryrun/mirror.py
(the dry run runs the same ones over verl's own composed config) over the command topl renders,
a key absent from it taking the declared verl's default (facts/verl_schema). Each rule reports
every key of its class that fails at once, so that one round of fixes clears it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from topl.launcher import facts
from topl.launcher.base.errors import ERROR
from topl.launcher.contract.core import rule
from topl.launcher.contract.dryrun import mcore, mirror
from topl.launcher.contract.verl_firststep import legacy_trainer
from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.facts.verl_tables import ARR, MEGATRON_KEYS
from topl.launcher.render.command import command, note

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.render.command import Command
    from topl.launcher.spec.job import JobSpec

INTERP = re.compile(r"\$\{(?:oc\.select:)?([\w.]+)(?:,([^}]*))?\}")
# what every rule here reads besides its own keys: the declared verl (its schema's defaults)
USER = (
    "verl_overrides",
    "algorithm.extra_overrides",
    "algorithm.config_name",
    "cluster.versions.verl",
    "cluster.versions.verl_patches",
)
WORLD = ("cluster.nodes", "cluster.devices_per_node")
FIELD_OF = {verl: field for field, verl in MEGATRON_KEYS.items()}  # verl key -> train.* field
SIZES = ("train.engine", "train.tp", "train.pp", "train.cp", "train.ep", "train.etp")


def lookup(s: JobSpec, cmd: Command) -> mirror.Get:
    """The value verl sees for a key: the command's, else the declared verl's default, following
    `${key}` / `${oc.select:key,default}` as verl's config resolves them."""
    sch = schema_for(s)

    def get(key: str, depth: int = 0) -> Any:
        e = cmd.entry(key)
        if key == "model_engine" and e is None:  # a group choice: the trainer config's default
            return "megatron" if "megatron" in sch.config else "dp"
        value = e.value if e is not None else (sch.default(key) if sch.has(key) else None)
        m = INTERP.fullmatch(value) if isinstance(value, str) else None
        if m is None or depth > 8:
            return value
        got = get(m.group(1), depth + 1)
        if got is None and m.group(2) is not None:
            d = m.group(2)  # an ASCII default is a number (str.isdigit also takes "²")
            if d == "null":  # OmegaConf's grammar reads it as None
                return None
            return int(d) if d.isascii() and d.isdigit() else d
        return got

    return get


def _report(s: JobSpec, cmd: Command, found: list[mirror.Finding]) -> Outcome:
    if not found:
        return None
    note(s, *(cmd.entry(k) for f in found for k in f.keys))
    cites = {**mirror.CHECKS, **mcore.CHECKS}
    said = {  # actor and ref often fail alike (the ref's sizes default to the actor's)
        f"{f.message} [{cites[f.check].path}]" if f.check in cites else f.message: 0 for f in found
    }
    return "; ".join(said)


def uses_ref(get: mirror.Get) -> bool:
    """verl builds the reference model for a KL loss or a KL penalty in the reward
    (verl@0.9.1:verl/trainer/ppo/utils.py:need_reference_policy; 0.8.0 the same)."""
    return bool(get(f"{ARR}.actor.use_kl_loss") or get("algorithm.use_kl_in_reward"))


@rule(
    "TOP-INIT-010",
    ERROR,
    "the log-prob recompute and the reference split their per-rank batch into whole micro batches",
    (
        "train.train_batch_size",
        "train.ppo_mini_batch_size",
        "rollout.n",
        "train.log_prob_micro_batch_size_per_gpu",
        "rollout.log_prob_micro_batch_size_per_gpu",
        "train.use_dynamic_bsz",
        "algorithm.use_kl_loss",
        "algorithm.entrypoint",
        "algorithm.use_critic",
        *WORLD,
        *USER,
    ),
    "make each log_prob_micro_batch_size_per_gpu divide the per-rank batch the message gives "
    "(train_batch_size * n / dp, padded by verl 0.9's trainer to its mini batch)",
)
def recompute_micro(s: JobSpec) -> Outcome:
    """Each log-prob pass (the actor's recompute, the reference) gets the step's batch split over
    dp and asserts it splits into micro batches (verl@0.9.1:verl/workers/engine/utils.py:
    prepare_micro_batches; 0.8.0 and 0.9.0 too). verl 0.9's V1 trainer pads the batch to
    lcm(dp, mini batch * n) first (verl/trainer/ppo/v1/trainer_base.py:
    PPOTrainer._get_required_batch_multiple); the actor update's own split is TOP-RES-005."""
    cmd = command(s)
    get = lookup(s, cmd)
    v1 = legacy_trainer(s, cmd) is False
    found = mirror.batch_split(get, uses_ref(get), v1, s.algorithm.use_critic)
    return _report(
        s, cmd, [f for f in found if f.check == "micro_divides" and "ppo_micro" not in f.keys[0]]
    )


@rule(
    "TOP-INIT-011",
    ERROR,
    "with dynamic batch size every token budget holds prompt + response",
    (
        "train.use_dynamic_bsz",
        "train.ppo_max_token_len_per_gpu",
        "train.max_prompt_length",
        "train.max_response_length",
        "train.ulysses_sp",
        "train.cp",
        "algorithm.use_kl_loss",
        "algorithm.entrypoint",
        *USER,
    ),
    "raise train.ppo_max_token_len_per_gpu (and any log_prob_max_token_len_per_gpu set in "
    "verl_overrides) to at least max_prompt_length + max_response_length (per sequence-parallel rank)",
)
def token_budget(s: JobSpec) -> Outcome:
    """rearrange_micro_batches asserts max_token_len >= the longest sequence of the batch
    (verl@0.9.1:verl/utils/seqlen_balancing.py:rearrange_micro_batches; 0.8.0 too): a budget
    below prompt + response fails on the first step that generates a full-length answer."""
    cmd = command(s)
    get = lookup(s, cmd)
    found = mirror.batch_split(get, uses_ref(get), legacy_trainer(s, cmd) is False)
    return _report(s, cmd, [f for f in found if f.check == "token_budget"])


@rule(
    "TOP-INIT-012",
    ERROR,
    "FSDP's device meshes (Ulysses, fsdp_size) cover the world; Ulysses runs with remove-padding",
    ("train.engine", "train.ulysses_sp", "train.fsdp_size", "algorithm.use_kl_loss", *WORLD, *USER),
    "choose ulysses_sp and fsdp_size dividing the device count, and keep "
    "actor_rollout_ref.model.use_remove_padding=true with ulysses_sp > 1",
)
def fsdp_meshes(s: JobSpec) -> Outcome:
    """FSDPEngine builds init_device_mesh((world // sp, sp)) and create_device_mesh((world //
    fsdp_size, fsdp_size)), which must cover the world, and raises for Ulysses without
    remove-padding (verl@0.9.1:verl/workers/engine/fsdp/transformer_impl.py:FSDPEngine;
    verl/workers/engine/fsdp/utils.py:create_device_mesh; 0.8.0 the same), for actor and ref."""
    cmd = command(s)
    get = lookup(s, cmd)
    return _report(
        s, cmd, mirror.fsdp_meshes(get, ("actor", "ref") if uses_ref(get) else ("actor",))
    )


@rule(
    "TOP-INIT-013",
    ERROR,
    "a rollout replica (tp*dp*pp) is whole nodes or part of one; vLLM's dp puts whole TP groups on a node",
    ("rollout.tp", "rollout.dp", "rollout.pp", "cluster.devices_per_node", *USER),
    "choose rollout.tp*dp*pp dividing (or a multiple of) devices_per_node, and with rollout.dp > 1 a "
    "tp dividing devices_per_node",
)
def rollout_replicas(s: JobSpec) -> Outcome:
    """RolloutReplica asserts its world (tp*dp*pp) is a multiple of min(gpus_per_node, world)
    (verl@0.9.1:verl/workers/rollout/replica.py:RolloutReplica.__init__), and vLLM's server with
    data parallel asserts gpus_per_node % tp == 0 (verl/workers/rollout/vllm_rollout/
    vllm_async_server.py:vLLMHttpServer.launch_server); 0.8.0 the same."""
    cmd = command(s)
    return _report(s, cmd, mirror.replicas(lookup(s, cmd)))


@rule(
    "TOP-INIT-014",
    ERROR,
    "vLLM's token budget per step holds max_num_seqs sequences (max_num_batched_tokens >= max_num_seqs)",
    ("rollout.max_num_batched_tokens", "rollout.max_num_seqs", "rollout.chunked_prefill", *USER),
    "raise rollout.max_num_batched_tokens to at least rollout.max_num_seqs",
)
def vllm_scheduler(s: JobSpec) -> Outcome:
    """vllm@0.24.0:vllm/config/scheduler.py:SchedulerConfig.verify_max_model_len raises when
    max_num_batched_tokens < max_num_seqs; verl passes both (engine_kwargs.vllm over them) and
    0.9.1 raises an unchunked budget to max_model_len first (TOP-ENG-008)."""
    cmd = command(s)
    raises = schema_for(s).version not in ("0.8.0", "0.9.0")
    return _report(s, cmd, mirror.vllm_scheduler(lookup(s, cmd), raises))


@rule(
    "TOP-INIT-015",
    ERROR,
    "Megatron engines run through mbridge (use_mbridge stays true)",
    ("train.engine", *USER),
    "drop use_mbridge=false from verl_overrides / extra_overrides: verl's Megatron engine needs it",
)
def mbridge(s: JobSpec) -> Outcome:
    """MegatronEngine.__init__ asserts engine_config.use_mbridge (verl@0.9.1:verl/workers/engine/
    megatron/transformer_impl.py; 0.8.0 the same) for the actor and the reference."""
    cmd = command(s)
    get = lookup(s, cmd)
    return _report(
        s, cmd, mirror.use_mbridge(get, ("actor", "ref") if uses_ref(get) else ("actor",))
    )


@rule(
    "TOP-INIT-016",
    ERROR,
    "verl 0.9's trainer fetches whole gen batches and filters groups by a named metric",
    (
        "train.train_batch_size",
        "algorithm.gen_batch_size",
        "algorithm.filter_groups",
        "algorithm.filter_groups_metric",
        "algorithm.entrypoint",
        "cluster.versions.verl",
        *USER,
    ),
    "make train.train_batch_size a multiple of algorithm.gen_batch_size; set "
    "algorithm.filter_groups_metric with filter_groups",
)
def v1_trainer(s: JobSpec) -> Outcome:
    """The V1 trainer (main_ppo on verl 0.9.x, trainer.use_v1) fetches train_batch_size prompts
    in whole gen_batch_size fetches and needs filter_groups.metric with group filtering
    (verl@0.9.1:verl/trainer/ppo/v1/trainer_base.py:PPOTrainer._next_train_batch,
    _resolve_filter_groups_metric). verl-recipe's DAPO trainer allows gen_batch_size above it."""
    cmd = command(s)
    if legacy_trainer(s, cmd) is not False:
        return None
    return _report(s, cmd, mirror.v1_trainer(lookup(s, cmd)))


@rule(
    "TOP-INIT-020",
    ERROR,
    "megatron-core accepts each Megatron engine's layout (virtual pipeline, recompute, the sizes a "
    "recipe sets verbatim)",
    (
        *SIZES,
        "train.recompute_granularity",
        "train.recompute_method",
        "train.recompute_num_layers",
        "model.num_layers",
        "model.num_heads",
        "model.num_kv_heads",
        "model.num_experts",
        "algorithm.use_kl_loss",
        "algorithm.use_critic",
        *WORLD,
        *USER,
    ),
    "give virtual_pipeline_model_parallel_size only with pipeline_model_parallel_size > 1 and "
    "dividing num_layers / pp; set train.recompute_granularity=full with recompute_method "
    "block|uniform and recompute_num_layers, or selective with recompute_num_layers=null; set "
    "Megatron sizes through train.tp/pp/cp/ep/etp (checked) rather than verl_overrides",
)
def megatron_layout(s: JobSpec) -> Outcome:
    """megatron-core's own start-up checks on what verl passes it for the reference, the actor and
    the critic (contract/dryrun/mcore.py cites each: megatron_core@0.16.0:megatron/core/
    parallel_state.py:initialize_model_parallel, transformer/transformer_config.py:
    TransformerConfig.__post_init__, transformer/transformer_block.py:get_num_layers_to_build,
    transformer/moe/moe_layer.py:BaseMoELayer.__init__), over the command and the model's sizes.
    Those TOP-RES-001/002/003 and TOP-ENG-005/006 check on train.* are reported here only where a
    recipe or override set a size verbatim."""
    cmd = command(s)
    get = lookup(s, cmd)
    m = s.model
    model = mcore.Model(m.num_layers, m.num_heads, m.num_kv_heads, m.num_experts)
    found = mcore.layout(get, model, mcore.roles(get, uses_ref(get), s.algorithm.use_critic))
    found = [
        f
        for f in found
        if f.check not in mcore.SPEC_CHECKED
        or any((e := cmd.entry(k)) is not None and e.user for k in f.keys)
    ]
    # an unset train.* field decides too (recompute_method=null): read, the violation lists it
    for k in {k for f in found for k in f.keys if cmd.entry(k) is None and k in FIELD_OF}:
        getattr(s.train, FIELD_OF[k].split(".", 1)[1])
    return _report(s, cmd, found)


@rule(
    "TOP-INIT-021",
    ERROR,
    "the Megatron engines of one worker (critic, reference, actor) have the same parallel sizes",
    (*SIZES, "algorithm.use_kl_loss", "algorithm.use_critic", *USER),
    "drop the reference's / critic's Megatron sizes from verl_overrides (the reference's default "
    "to the actor's, topl renders the critic's from train.*), or give every engine the same "
    "tensor/pipeline/virtual_pipeline/context/expert/expert_tensor sizes",
)
def shared_groups(s: JobSpec) -> Outcome:
    """verl builds every engine of a job in one worker process and initializes megatron-core's
    parallel groups once, with the first engine's sizes (the critic's, else the reference's);
    the later ones skip initialize_model_parallel (verl@0.9.1:verl/workers/engine/megatron/
    transformer_impl.py:MegatronEngine._init_device_mesh: `if mpu.is_initialized(): return`,
    0.8.0 and 0.9.0 the same) and run in those groups without an error (contract/dryrun/mcore.py:
    shared_groups). Strict mode refuses a reference of other sizes already (TOP-VERL-002)."""
    cmd = command(s)
    get = lookup(s, cmd)
    engines = mcore.roles(get, uses_ref(get), s.algorithm.use_critic)
    return _report(s, cmd, mcore.shared_groups(get, engines))


@rule(
    "TOP-INIT-022",
    ERROR,
    "verl's dynamic context parallel runs only on a megatron-core that has it (none released)",
    (
        "train.engine",
        "algorithm.use_kl_loss",
        "algorithm.use_critic",
        "cluster.versions.mindspeed",
        *USER,
    ),
    "drop megatron.dynamic_context_parallel from verl_overrides and use static context parallel "
    "(train.cp)",
)
def dynamic_context_parallel(s: JobSpec) -> Outcome:
    """MegatronEngine._init_device_mesh needs megatron-core's dynamic-CP scheduler and an
    initialize_model_parallel taking dynamic_context_parallel (verl@0.9.1:verl/workers/engine/
    megatron/transformer_impl.py:MegatronEngine._init_device_mesh; 0.8.0 and 0.9.0 too), which
    megatron-core 0.16.0 / 0.16.1 lack (contract/dryrun/mcore.py:NO_DYNAMIC_CP); every stack runs
    MindSpeed core_r0.16.0 on that line. A later MindSpeed line is not judged (not read here)."""
    ms = facts.version("mindspeed", s.cluster.versions.mindspeed)
    if ms is None or ms >= Version("0.17"):
        return None
    cmd = command(s)
    get = lookup(s, cmd)
    engines = mcore.roles(get, uses_ref(get), s.algorithm.use_critic)
    return _report(s, cmd, mcore.dynamic_cp(get, engines))
