"""The dry run (issue 46, launcher/contract/dryrun): the declared verl's own start-up checks over the
rendered command, each verl imported once per test (one child per release for all its commands).

- every shipped recipe (and the default) that `check` accepts passes the dry run of the verl it
  declares (0.9.1 installed; 0.8.0 for stack=seed from ~/.cache/topl-verl, TOPL_VERL_VERSIONS=1);
- each negative class is refused by the fast rule and by the dry run, naming the same topl keys;
- a hypothesis property over layouts: accepted => the dry run passes; the dry run fails => rejected.
Slow tier (tests/conftest.py SLOW_MODULES): each child imports verl (~3-5 s of CPU).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from startup_cases import CASES, NEIGHBOURS
from test_verl_layout import ACCEPTED, FSDP, MCORE, NEGATIVE, V

from topl.launcher.base.errors import ToplError
from topl.launcher.compose import recipes
from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import check, errors
from topl.launcher.contract.dryrun import deep as D

FETCH = bool(os.environ.get("TOPL_VERL_VERSIONS"))


CHILDREN: dict[str, subprocess.Popen] = {}


def _child(root: str) -> subprocess.Popen:
    """verl_side for one release, kept for the test process: verl is imported once per worker (the
    launcher's `run_child` starts one per `check --deep`, the same program over the same pipe)."""
    proc = CHILDREN.get(root)
    if proc is None or proc.poll() is not None:
        env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": root}
        proc = subprocess.Popen(
            [sys.executable, "-m", "topl.launcher.contract.dryrun.verl_side"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(proc.kill)
        CHILDREN[root] = proc
    return proc


def dry_runs(composed_list):
    """[violations] per composed job, by the verl it declares; None where that is not at hand."""
    out = []
    for c in composed_list:
        root, _ = D.where(c.to_object(), FETCH)
        if root is None:
            out.append(None)
            continue
        proc = _child(str(root))
        proc.stdin.write(json.dumps(D.request(c.to_object(), root)) + "\n")
        proc.stdin.flush()
        out.append([D.violation(f, c, c.to_object()) for f in json.loads(proc.stdout.readline())])
    return out


def test_every_accepted_shipped_recipe_passes_its_verls_dry_run():
    names = [None, *sorted(recipes.available())]
    jobs = [compose_job([] if n is None else [f"recipe={n}"]) for n in names]
    accepted = [(n, c) for n, c in zip(names, jobs) if not errors(check(c))]
    assert len(accepted) == len(names)  # every shipped recipe is accepted (tests/compose too)
    got = dry_runs([c for _, c in accepted])
    ran = [(n, vs) for (n, _), vs in zip(accepted, got) if vs is not None]
    assert len(ran) >= 25  # verl 0.9.1 at least (installed)
    bad = {n: [v.message for v in vs] for n, vs in ran if vs}
    assert not bad


# the dry run's id for each fast rule's class, and what only the dry run (verl's registries) checks
DRY_ID = {
    "TOP-INIT-010": "TOP-DRY-005",
    "TOP-INIT-011": "TOP-DRY-005",
    "TOP-INIT-012": "TOP-DRY-004",
    "TOP-INIT-013": "TOP-DRY-006",
    "TOP-INIT-014": "TOP-DRY-006",
    "TOP-INIT-015": "TOP-DRY-004",
    "TOP-INIT-016": "TOP-DRY-008",
    "TOP-INIT-020": "TOP-DRY-010",
    "TOP-INIT-021": "TOP-DRY-010",
}
OTHERS = [  # (case, overrides, the rule that refuses it today, dry id, keys)
    (
        "adv_estimator",
        MCORE + ["algorithm.adv_estimator=no_such"],
        "TOP-SPEC-001",
        "TOP-DRY-007",
        ["algorithm.adv_estimator"],
    ),
    ("train_lt_mini", FSDP + ["train.ppo_mini_batch_size=32"], "TOP-RES-005", "TOP-DRY-002", []),
    (
        "rollout_ep",
        MCORE + [V + "rollout.expert_parallel_size=2"],
        "TOP-VERL-002",
        "TOP-DRY-003",
        ["verl_overrides.actor_rollout_ref.rollout.expert_parallel_size"],
    ),
    (
        "is_threshold",
        MCORE
        + [
            "+verl_overrides.algorithm.rollout_correction.rollout_is=token",
            "+verl_overrides.algorithm.rollout_correction.rollout_is_threshold=-1.0",
        ],
        None,
        "TOP-DRY-007",
        ["verl_overrides.algorithm.rollout_correction.rollout_is_threshold"],
    ),
]


def test_each_class_is_refused_by_the_rule_and_by_the_dry_run():
    cases = [(c, ov, rule, DRY_ID[rule], keys) for c, ov, rule, keys in NEGATIVE] + OTHERS
    jobs = [compose_job(ov) for _, ov, *_ in cases]
    got = dry_runs(jobs)
    for (case, _, rule, dry, keys), job, vs in zip(cases, jobs, got):
        fast = {v.rule for v in errors(check(job))}
        assert rule is None or rule in fast, (case, fast)
        assert vs is not None, case
        hit = [v for v in vs if v.rule == dry]
        assert hit and hit[0].severity == "error", (case, [(v.rule, v.message) for v in vs])
        for k in keys:
            assert k in hit[0].keys, (case, list(hit[0].keys))


def test_the_former_false_rejections_pass_the_dry_run():
    assert dry_runs([compose_job(ov) for ov in ACCEPTED.values()]) == [[], []]


def test_a_critic_whose_model_files_are_not_here_is_no_error():
    """PPO's critic: verl's validate_config loads critic.model's files (HFModelConfig); on a
    machine that has neither them nor the hub (a cluster path, offline: CI sets HF_HUB_OFFLINE)
    that is a warning naming the path, not a refusal of the command (launch dry-runs before it
    submits). It was TOP-DRY-002, an error, for every PPO job."""
    ppo = ["recipe=qwen3_4b_grpo_a2_release_strict", "algorithm=ppo", "algorithm.adv_estimator=gae"]
    job = compose_job(ppo)
    assert not errors(check(job))
    (vs,) = dry_runs([job])
    assert vs is not None and not [v for v in vs if v.severity == "error"], vs
    model = [v for v in vs if v.rule == "TOP-DRY-011"]
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        assert model and "critic.model.path" in model[0].keys, vs


def test_startup_set_dry_cases_refused_and_neighbours_pass():
    """tests/contract/startup_cases.py on verl 0.9.1: the cases verl's own code refuses in the
    dry run are refused there naming their keys; a sample of valid neighbours (every third one, and
    those of the dry cases) passes it, as `launch` runs it before a remote submission."""
    # the dry-run-only cases, and those whose check verl's own code runs there (row 32: the
    # rollout-correction parsers; TOP-INIT-019 mirrors them)
    dry = [c for c in CASES if c.verl == "0.9.1" and (c.by == "dry" or c.row == 32)]
    near = [n for n in NEIGHBOURS if n.verl == "0.9.1"]
    near = near[::3] + [n for n in near if n.id in {c.id for c in dry} and n not in near[::3]]
    got = dry_runs([compose_job(c.overrides) for c in dry + near])
    for c, vs in zip(dry, got):
        assert any(v.severity == "error" and all(k in v.keys for k in c.keys) for v in vs), (
            c.id,
            [(v.rule, list(v.keys)) for v in vs],
        )
    bad = {n.id: [v.message for v in vs] for n, vs in zip(near, got[len(dry) :]) if vs}
    assert not bad


BASES = {  # one per declared verl and engine
    "megatron_091": ["recipe=qwen3_4b_grpo_a2_release_strict"],
    "fsdp_091": FSDP,
    "megatron_080_off": ["recipe=qwen3_4b_grpo_a2_off"],
    "dapo_091": ["recipe=qwen3_30b_a3b_dapo_a2_release_strict"],
}
LAYOUT = st.fixed_dictionaries(
    {"base": st.sampled_from(sorted(BASES))},
    optional={  # each layout changes some of these from its base
        "cluster.nodes": st.sampled_from([1, 2]),
        "rollout.tp": st.sampled_from([1, 2, 3, 4, 8]),
        "rollout.n": st.sampled_from([2, 4, 8]),
        "train.train_batch_size": st.sampled_from([8, 16, 24, 32]),
        "train.ppo_mini_batch_size": st.sampled_from([4, 8, 16]),
        "micro": st.sampled_from([1, 2, 3, 4]),  # every micro batch (strict mode wants them equal)
        "train.use_dynamic_bsz": st.booleans(),
        "train.ppo_max_token_len_per_gpu": st.sampled_from([16, 2048, 8192]),
        "algorithm.use_kl_loss": st.booleans(),
    },
)


# two explicit examples (each base as it is: accepted; two known refusals) and two drawn lists
# of 5 layouts: ~16 compositions and dry runs (~0.5 s of CPU each once verl is imported)
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example([{"base": b} for b in sorted(BASES)])
@example([{"base": "fsdp_091", "micro": 3}, {"base": "megatron_091", "rollout.tp": 3}])
@given(st.lists(LAYOUT, min_size=5, max_size=5))
def test_property_accepted_iff_the_dry_run_passes(layouts):
    jobs = []
    for lay in layouts:
        micro = [f"{k}={lay['micro']}" for k in MICRO if "micro" in lay]
        ov = (
            BASES[lay["base"]]
            + micro
            + [f"{k}={str(v).lower()}" for k, v in lay.items() if k not in ("base", "micro")]
        )
        try:
            jobs.append((ov, compose_job(ov)))
        except ToplError:
            continue  # refused before it composes: nothing for verl to see
    got = dry_runs([c for _, c in jobs])
    for (ov, c), vs in zip(jobs, got):
        if vs is None:
            continue
        rejected = bool(errors(check(c)))
        dry = [v for v in vs if v.severity == "error"]
        # accepted => the dry run passes (and so: the dry run fails => check rejected)
        assert rejected or not dry, (ov, [v.message for v in dry])
        SEEN["accepted" if not rejected else "rejected"] += 1


SEEN: dict[str, int] = defaultdict(int)
MICRO = (
    "train.ppo_micro_batch_size_per_gpu",
    "train.log_prob_micro_batch_size_per_gpu",
    "rollout.log_prob_micro_batch_size_per_gpu",
)


def test_property_saw_both_verdicts():
    """Run after the property (file order): it judged accepted and rejected layouts, not one kind."""
    assert SEEN["accepted"] and SEEN["rejected"], dict(SEEN)


if (
    not FETCH
    and D.where(compose_job(["recipe=qwen3_4b_grpo_a2_release_strict"]).to_object(), False)[0]
    is None
):
    pytestmark = pytest.mark.skip("verl 0.9.1 is not installed here")
