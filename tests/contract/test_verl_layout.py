"""The fast rules for verl's start-up layout (issue 46, contract/verl_layout.py): each class refused
with every key that decides it, the two former false rejections accepted, and `--deep` saying in
one line (JSON kept) where the declared verl is not at hand. The dry run over the same cases runs
in tests/contract/test_dryrun_verl.py (slow tier: it imports verl)."""

from __future__ import annotations

import json

import pytest
from helpers import run_topl_inproc

from topl.launcher.contract import check

V = "+verl_overrides.actor_rollout_ref."
MCORE = ["recipe=qwen3_4b_grpo_a2_release_strict"]  # verl 0.9.1, Megatron, 1 x 8, V1 trainer
FSDP = ["stack=release", "cluster.backend=ray_job", "cluster.devices_per_node=8"]  # the default
# (case, overrides, the fast rule, keys its violation must list)
NEGATIVE = [
    (
        "rollout_micro_3",
        MCORE + [V + "rollout.log_prob_micro_batch_size_per_gpu=3"],
        "TOP-INIT-010",
        [
            "verl_overrides.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
            "train.train_batch_size",
            "rollout.n",
        ],
    ),
    (
        "ref_micro_3",
        MCORE
        + [
            "algorithm.use_kl_loss=true",
            V + "ref.log_prob_use_dynamic_bsz=false",
            V + "ref.log_prob_micro_batch_size_per_gpu=3",
        ],
        "TOP-INIT-010",
        ["verl_overrides.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"],
    ),
    (
        "token_budget",
        FSDP + ["train.use_dynamic_bsz=true", "train.ppo_max_token_len_per_gpu=16"],
        "TOP-INIT-011",
        ["train.ppo_max_token_len_per_gpu", "train.max_prompt_length", "train.max_response_length"],
    ),
    (
        "ulysses_16_on_8",
        FSDP + ["train.ulysses_sp=16"],
        "TOP-INIT-012",
        ["train.ulysses_sp", "cluster.devices_per_node"],
    ),
    ("fsdp_size_3", FSDP + ["train.fsdp_size=3"], "TOP-INIT-012", ["train.fsdp_size"]),
    (
        "ulysses_no_remove_padding",
        FSDP + ["train.ulysses_sp=2", V + "model.use_remove_padding=false"],
        "TOP-INIT-012",
        ["train.ulysses_sp", "verl_overrides.actor_rollout_ref.model.use_remove_padding"],
    ),
    (
        "replica_not_whole_nodes",
        FSDP + ["cluster.nodes=3", "rollout.tp=12"],
        "TOP-INIT-013",
        ["rollout.tp", "cluster.devices_per_node"],
    ),
    (
        "tokens_below_seqs",
        MCORE + ["rollout.chunked_prefill=true", "rollout.max_num_batched_tokens=16"],
        "TOP-INIT-014",
        ["rollout.max_num_batched_tokens", "rollout.max_num_seqs"],
    ),
    (
        "use_mbridge_off",
        MCORE + [V + "actor.megatron.use_mbridge=false"],
        "TOP-INIT-015",
        ["verl_overrides.actor_rollout_ref.actor.megatron.use_mbridge"],
    ),
    (
        "gen_batch_3",
        MCORE + ["algorithm.gen_batch_size=3"],
        "TOP-INIT-016",
        ["algorithm.gen_batch_size", "train.train_batch_size"],
    ),
    (  # megatron-core's get_num_layers_to_build: 18 layers a stage over 4 virtual stages
        "vpp_4_of_18",
        MCORE + ["train.pp=2", V + "actor.megatron.virtual_pipeline_model_parallel_size=4"],
        "TOP-INIT-020",
        ["verl_overrides.actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size"],
    ),
    (  # megatron-core's TransformerConfig: selective recompute takes no layer count
        "selective_with_layers",
        MCORE + ["train.recompute_granularity=selective"],
        "TOP-INIT-020",
        ["train.recompute_granularity", "train.recompute_num_layers"],
    ),
    (  # parallel_state (the reference initializes it): a virtual pipeline needs pp > 1
        "ref_vpp_pp_1",
        MCORE
        + ["algorithm.use_kl_loss=true", V + "ref.log_prob_use_dynamic_bsz=false"]
        + [V + "ref.megatron.virtual_pipeline_model_parallel_size=2"],
        "TOP-INIT-020",
        ["verl_overrides.actor_rollout_ref.ref.megatron.virtual_pipeline_model_parallel_size"],
    ),
    (  # verl: the reference's parallel groups serve the actor too (non-strict: only a warning,
        # TOP-VERL-003, said so before, and that verl ran the ref's value for the ref alone)
        "ref_layout_differs",
        ["recipe=qwen3_4b_grpo_a2_off", "stack=release", "algorithm.use_kl_loss=true"]
        + [V + "ref.megatron.pipeline_model_parallel_size=2"],
        "TOP-INIT-021",
        [
            "verl_overrides.actor_rollout_ref.ref.megatron.pipeline_model_parallel_size",
            "train.pp",
        ],
    ),
]
# verl 0.9's V1 trainer pads the batch to whole mini batches and filters groups itself: both were
# refused before (TOP-RES-005, TOP-ALG-001); the dry run accepts them (test_dryrun_verl.py)
ACCEPTED = {
    "train_batch_not_a_multiple_of_mini": MCORE
    + ["train.train_batch_size=24", "train.ppo_mini_batch_size=16"],
    "filter_groups_on_main_ppo": MCORE + ["algorithm.filter_groups=true"],
}
STILL_REFUSED = {  # verl 0.8.0's RayPPOTrainer does neither
    "train_batch_not_a_multiple_of_mini": (
        [
            "recipe=qwen3_4b_grpo_a2_strict",
            "train.train_batch_size=24",
            "train.ppo_mini_batch_size=16",
        ],
        "TOP-RES-005",
    ),
    "filter_groups_on_main_ppo": (
        ["recipe=qwen3_4b_grpo_a2_strict", "algorithm.filter_groups=true"],
        "TOP-ALG-001",
    ),
}


@pytest.mark.parametrize("case,overrides,rule,keys", NEGATIVE, ids=[c[0] for c in NEGATIVE])
def test_fast_rule_refuses_with_every_key(compose, case, overrides, rule, keys):
    got = [v for v in check(compose(overrides)) if v.rule == rule]
    assert got and got[0].severity == "error", case
    for k in keys:
        assert k in got[0].keys, (case, list(got[0].keys))


def test_one_violation_names_actor_and_ref_alike_once(compose):
    """Ulysses 16 fails the actor's and the ref's mesh alike: one message, not two."""
    v = next(
        v
        for v in check(compose(FSDP + ["train.ulysses_sp=16", "algorithm.use_kl_loss=true"]))
        if v.rule == "TOP-INIT-012"
    )
    assert v.message.count("init_device_mesh") == 1


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_former_false_rejections_are_accepted_where_verl_runs_them(compose, name):
    assert not [v for v in check(compose(ACCEPTED[name])) if v.severity == "error"]
    overrides, rule = STILL_REFUSED[name]
    assert rule in {v.rule for v in check(compose(overrides)) if v.severity == "error"}


def test_deep_without_the_declared_verl_is_one_line_and_json_stays_json(tmp_path, monkeypatch):
    """stack=seed declares verl 0.8.0: not installed here; an empty cache and no fetch (launch's
    way) gives one warning, TOP-DRY-000, in JSON too."""
    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.contract.dryrun.deep import deep

    monkeypatch.setenv("TOPL_VERL_CACHE", str(tmp_path))
    vs, note = deep(compose_job(["recipe=qwen3_4b_grpo_a2_strict"]), fetch=False)
    assert [(v.rule, v.severity) for v in vs] == [("TOP-DRY-000", "warning")]
    assert (
        "verl 0.8.0 is neither installed here nor cached" in vs[0].message
        and "\n" not in vs[0].message
    )
    r = run_topl_inproc(
        "check",
        "recipe=qwen3_4b_grpo_a2_strict",
        "--deep",
        "--json",
        env={"TOPL_VERL_CACHE": str(tmp_path), "PIP_NO_INDEX": "1"},
    )
    out = json.loads(r.stdout)
    assert "TOP-DRY-000" in {v["rule"] for v in out["violations"]} and "Traceback" not in r.stderr


def test_local_backend_has_nothing_to_dry_run(compose):
    from topl.launcher.contract.dryrun.deep import deep

    assert deep(compose([]))[0] == []


def test_the_dry_run_ids_are_in_the_catalog():
    from topl.launcher.cli.rules import catalog

    ids = {r.id for r, _ in catalog()}
    assert {f"TOP-DRY-{i:03}" for i in range(11)} <= ids


KL_REF = MCORE + ["algorithm.use_kl_loss=true", V + "ref.log_prob_use_dynamic_bsz=false"]
# (rule, overrides breaking several keys of its class, the keys its one violation must list)
ALL_AT_ONCE = [
    (
        "TOP-VERL-002",  # the ref's layout decides the actor's (Megatron's groups are process-wide)
        KL_REF
        + [
            V + "ref.megatron.tensor_model_parallel_size=2",
            V + "ref.megatron.pipeline_model_parallel_size=2",
            V + "ref.megatron.context_parallel_size=2",
        ],
        [
            f"verl_overrides.actor_rollout_ref.ref.megatron.{k}_parallel_size"
            for k in ("tensor_model", "pipeline_model", "context")
        ]
        + ["train.tp", "train.pp", "train.cp"],
    ),
    (
        "TOP-INIT-010",
        KL_REF
        + [
            "rollout.log_prob_micro_batch_size_per_gpu=3",
            V + "ref.log_prob_micro_batch_size_per_gpu=3",
        ],
        [
            "rollout.log_prob_micro_batch_size_per_gpu",
            "verl_overrides.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        ],
    ),
    (
        "TOP-INIT-017",
        MCORE + ["+verl_overrides.algorithm.adv_estimator=x", V + "actor.loss_agg_mode=y"],
        [
            "verl_overrides.algorithm.adv_estimator",
            "verl_overrides.actor_rollout_ref.actor.loss_agg_mode",
        ],
    ),
    (
        "TOP-INIT-018",
        MCORE + [V + "actor.ppo_micro_batch_size=4", V + "rollout.log_prob_micro_batch_size=8"],
        [
            "verl_overrides.actor_rollout_ref.actor.ppo_micro_batch_size",
            "verl_overrides.actor_rollout_ref.rollout.log_prob_micro_batch_size",
            "train.ppo_micro_batch_size_per_gpu",
            "rollout.log_prob_micro_batch_size_per_gpu",
        ],
    ),
]


@pytest.mark.parametrize("rule,overrides,keys", ALL_AT_ONCE, ids=[c[0] for c in ALL_AT_ONCE])
def test_every_mismatched_key_of_a_class_in_one_violation(compose, rule, overrides, keys):
    """Issue 46 item 5: one fix round clears a class; its one violation lists every key."""
    got = [v for v in check(compose(overrides)) if v.rule == rule]
    assert len(got) == 1 and got[0].severity == "error", [v.rule for v in check(compose(overrides))]
    assert [k for k in keys if k not in got[0].keys] == []
