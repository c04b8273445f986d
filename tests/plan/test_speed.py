"""The everyday commands stay light: what `check` / `render` / `rules` / `plan` import, and `plan`'s
per-sweep reuse (no per-point compose, no per-point deep copy of the spec)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from topl.launcher.compose import sources
from topl.launcher.spec.view import unwrap as _plain  # another name: no source scan sees it

# Heavy stacks the launcher must never load to validate or render: torch (seconds of import),
# DeepSpeed (pulls torch), Ray, transformers. The closed forms in memory_estimate are the rules.
HEAVY = ("torch", "deepspeed", "ray", "transformers", "triton", "vllm")


def _imported(*args: str) -> set[str]:
    """Top-level packages a CLI command imports, from `python -X importtime` (a child process:
    this test process has imported torch already)."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "topl.launcher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert p.returncode in (0, 2), p.stderr[-2000:]
    mods = set()
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            mods.add(name.split(".")[0])
    assert "topl" in mods  # the timing really was read
    return mods


@pytest.mark.parametrize(
    "args",
    [
        ["check"],
        ["check", "train=fsdp", "--json"],  # the ZeRO-3 rule: closed form, no DeepSpeed
        ["check", "recipe=qwen3_30b_a3b_grpo_a3_strict"],
        ["render", "--json"],
        ["rules", "--json"],
        ["plan", "rollout.tp=1,2", "train=fsdp,megatron"],
    ],
    ids=" ".join,
)
def test_no_heavy_imports(args):
    heavy = _imported(*args) & set(HEAVY)
    assert not heavy, f"`topl {' '.join(args)}` imports {sorted(heavy)}"


def test_fsdp_rule_never_imports_deepspeed(compose, monkeypatch):
    """Even where DeepSpeed is installed, TOP-MEM-001 on FSDP is the closed form."""
    import builtins

    from topl.launcher.contract import evaluate

    real = builtins.__import__

    def guard(name, *a, **k):
        assert not name.startswith(("deepspeed", "torch")), f"imported {name}"
        return real(name, *a, **k)

    spec = compose(["train=fsdp"]).to_object()
    monkeypatch.setattr(builtins, "__import__", guard)
    list(evaluate(spec))


ENV_RECIPE = """\
# @package _global_
defaults:
  - override /alignment: strict
  - _self_
cluster:
  env: {HCCL_DETERMINISTIC: "true", VLLM_BATCH_INVARIANT: "1"}
algorithm:
  extra_overrides:
    actor_rollout_ref.rollout.tensor_model_parallel_size: 2
"""
# an extra override of a key topl renders only when rollout.per_request_seed is on: TOP-VERL-002
# depends on a key it does not declare (it renders the whole command)
SEED_RECIPE = """\
# @package _global_
defaults:
  - override /alignment: "off"
  - _self_
algorithm:
  extra_overrides:
    actor_rollout_ref.rollout.per_request_seed: true
"""
MEMO_SWEEPS = [
    # recipe x engine group x layout x lengths (TOP-MEM-*, TOP-ENG-*, TOP-RES-*, interpolations)
    [
        "recipe=qwen3_30b_a3b_grpo_a3_strict,qwen3_4b_grpo_a2_mitigated",
        "train=fsdp,megatron",
        "train.tp=1,2,8",
        "rollout.tp=1,4",
        "train.max_response_length=1024,65536",
    ],
    # out-of-range values (TOP-SPEC-001 alone), alignment groups, block size / kv_tile interpolation
    ["alignment=strict,off", "rollout.block_size=16,128", "train.tp=0,2", "rollout.top_p=0.5,2.0"],
    # the rules that read the whole spec (env, verl keys) against a base that sets both
    ["recipe={env_recipe}", "alignment.mode=strict,mitigated,off", "rollout.tp=1,2"],
    ["recipe={env_recipe}", "collective.hccl_algo=null,level0:ring", "alignment.mode=strict,off"],
    ["recipe={seed_recipe}", "rollout.per_request_seed=false,true", "rollout.tp=1,2"],
    # traced rules that read swept keys through command entries (TOP-INIT-003/006: the actor's
    # dp from its TP/PP entries, the batch and n entries) next to one none reads (max_num_seqs)
    [
        "recipe=qwen3_30b_a3b_dapo_a2_mitigated",
        "train.train_batch_size=30,32",
        "rollout.n=3,4",
        "train.tp=1,2",
        "train.pp=1,4",
        "rollout.max_num_seqs=64,65",
    ],
]


@pytest.mark.parametrize("sweep", MEMO_SWEEPS, ids=range(len(MEMO_SWEEPS)))
def test_memoised_verdicts_equal_the_whole_contract(sweep, tmp_path):
    """Every point, errors and warnings and estimates: the per-sweep reuse changes nothing."""
    from topl.launcher.plan.sweep import Planner, expand_items

    recipes = {"env_recipe": ENV_RECIPE, "seed_recipe": SEED_RECIPE}
    for name, text in recipes.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    fast, full = Planner(), Planner(memo=False)
    points = expand_items([o.format(**{n: tmp_path / f"{n}.yaml" for n in recipes}) for o in sweep])
    got = [fast.verdict(p).to_dict() for p in points]
    want = [full.verdict(p).to_dict() for p in points]
    assert got == want
    assert len({(*v["rules"], "/", *v["warnings"]) for v in want}) > 1  # verdicts really move


def test_rules_run_once_per_distinct_input():
    """A rule that reads none of the swept keys runs once for the whole sweep."""
    from topl.launcher.plan import memo as sweep_memo
    from topl.launcher.plan.sweep import Planner, expand_items

    planner = Planner()
    for p in expand_items(
        ["rollout.max_num_seqs=range(1,41)", "train.ppo_micro_batch_size_per_gpu=1,2"]
    ):
        planner.verdict(p)
    (memo,) = planner._memos.values()
    runs = {r.id: len(c) for _, rules, c in memo.groups if c is not None for _, r in rules}
    assert runs["TOP-ATTN-004"] == 1  # reads neither key
    assert runs["TOP-MEM-003"] == 40  # reads max_num_seqs only
    assert runs["TOP-LOGP-003"] == 2  # reads the micro batch only
    # the rules that read the command are traced: one run per distinct swept value they read
    traced = {r.id: t for _, r, t in memo.traced}
    assert {r for r, w in sweep_memo._OPAQUE.items() if w} <= set(traced)
    kept = {i: sum(map(len, t.traces.values())) for i, t in traced.items() if not t.every}
    assert kept["TOP-VERL-001"] == 1  # the user's own entries: the same at every point
    assert kept["TOP-INIT-002"] == 2  # reads the micro batch's entry, not max_num_seqs'


def test_points_share_what_they_do_not_change():
    """No deep copy per point: untouched sections are the base's, and the base stays as it was."""
    from topl.launcher.plan.sweep import Planner, expand_items

    planner = Planner()
    a, b = expand_items(["rollout.tp=1,2"])
    sa, sb = planner.spec(a)[0], planner.spec(b)[0]
    assert (sa.rollout.tp, sb.rollout.tp) == (1, 2)
    assert sa.model is sb.model and sa.train is sb.train
    assert sa.rollout is not sb.rollout
    ((_, base, _),) = planner._bases.values()
    assert base.rollout.tp not in (None,) and base.rollout is not sa.rollout


def test_a_rule_reading_outside_the_view_is_found_by_probing(compose):
    """Whole-spec rules are found by running them, not only by reading their source."""
    from topl.launcher.contract.core import RULES, Rule
    from topl.launcher.plan.memo import _reads_whole_spec

    spec = compose([]).to_object()
    hidden = Rule("X", "error", "", ("rollout.tp",), "", lambda s: str(_plain(s).train.tp))
    plain = Rule("Y", "error", "", ("rollout.tp",), "", lambda s: str(s.rollout.tp))
    assert _reads_whole_spec(hidden, spec) and not _reads_whole_spec(plain, spec)
    assert all(r is not hidden for r in RULES)


# a `+` form the fast path cannot type, next to swept values: composed into the base once
PLUS_SWEEPS = [
    [
        "recipe=qwen3_30b_a3b_grpo_a3_strict",
        "+verl_overrides.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false",
        "train.use_dynamic_bsz=true,false",
        "rollout.tp=1,2",
    ],
    # a swept value below the `+` key: their order matters, each point is composed whole
    [
        "+verl_overrides.trainer.total_epochs=3",
        "verl_overrides.trainer.total_epochs=1,2",
    ],
]


@pytest.mark.parametrize("sweep", PLUS_SWEEPS, ids=range(len(PLUS_SWEEPS)))
def test_plus_forms_compose_into_the_base_with_the_same_verdicts(sweep, monkeypatch):
    from topl.launcher.plan import sweep as plan
    from topl.launcher.plan.sweep import Planner, expand_items

    points = expand_items(sweep)
    full = Planner(memo=False)
    want = [full.verdict(p).to_dict() for p in points]
    composes = []
    real = plan.compose_job
    monkeypatch.setattr(plan, "compose_job", lambda ovs: composes.append(ovs) or real(ovs))
    fast = Planner()
    got = [fast.verdict(p).to_dict() for p in points]
    assert got == want
    overlapping = any(o.startswith("verl_overrides.") for o in sweep)
    assert len(composes) == (len(points) if overlapping else 1), composes


def test_cached_sources_equal_a_fresh_replay_and_follow_the_recipe_bytes(tmp_path):
    """The file part of each key's source is cached per process; it equals Hydra's defaults list
    replayed from scratch, and a recipe rewritten in place is read again."""
    from topl.launcher.compose import hydra as C

    for ovs in ([], ["train=fsdp", "train.tp=2"], ["recipe=qwen3_30b_a3b_grpo_a3_strict"]):
        got = C.compose_job(ovs).sources
        hyd, root = C.split_recipe(ovs)
        try:
            fresh = sources.file_sources(sources.loader_for(root), hyd, root)
        finally:
            if root is not None:
                root.cleanup()
        assert {k: v for k, v in got.items() if not v.startswith("command line")} == {
            k: v for k, v in fresh.items() if k in got and not got[k].startswith("command line")
        }
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("# @package _global_\ntrain:\n  tp: 2\n")
    assert C.compose_job([f"recipe={recipe}"]).source("train.tp") == str(recipe)
    recipe.write_text("# @package _global_\nrollout:\n  tp: 2\n")
    again = C.compose_job([f"recipe={recipe}"])
    assert again.source("rollout.tp") == str(recipe)
    assert again.source("train.tp") != str(recipe)


# TOP-VERL-002 reads the actor's TP entry (the mirror of the ref's, which the recipe sets) only
# through the command: its answer follows train.tp by a command entry, not by a declared key
TRACED_SWEEP = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "algorithm.use_kl_loss=true",
    "train.tp=1,2",
    "rollout.n=4,16",
    "train.train_batch_size=16,60",
]


def test_traced_rules_follow_the_command_entries_they_read(monkeypatch):
    """Each traced answer is reused only where the swept values its run read are the same; a
    trace that forgets the command entries it read gives other verdicts, and this test sees it."""
    from topl.launcher.plan import trace as sweep_trace
    from topl.launcher.plan.sweep import Planner, expand_items

    points = expand_items(TRACED_SWEEP)
    want = [Planner(memo=False).verdict(p).to_dict() for p in points]
    fast = Planner()
    assert [fast.verdict(p).to_dict() for p in points] == want
    assert {"TOP-VERL-002" in v["rules"] for v in want} == {True, False}
    (memo,) = fast._memos.values()
    t = next(t for _, r, t in memo.traced if r.id == "TOP-VERL-002")
    ((keys, answers),) = t.traces.items()  # run twice (tp 1, 2), not once per point
    assert "train.tp" in keys and not {"rollout.n", "train.train_batch_size"} & set(keys)
    assert len(answers) == 2
    # full memos (one answer kept per rule group and trace): the rest run, the verdicts stand
    from topl.launcher.plan import memo as sweep_memo

    monkeypatch.setattr(sweep_memo, "CACHE_MAX", 1)
    assert [Planner().verdict(p).to_dict() for p in points] == want
    # a memo that ignored the command entries a run read would reuse one answer everywhere
    monkeypatch.setattr(sweep_trace.Traced, "_read", lambda self, log, template: ())
    wrong = Planner()
    assert [wrong.verdict(p).to_dict() for p in points] != want


def test_patched_commands_equal_built_ones():
    """A point's command patched from its base's is the one `build` makes, entry by entry; keys
    render reads twice, and None or bool values, are built whole."""
    from topl.launcher.plan.patch import Template, patched
    from topl.launcher.plan.sweep import Planner, expand_items
    from topl.launcher.render.command import build

    planner = Planner()
    sweep = [
        "recipe=qwen3_30b_a3b_grpo_a3_strict",
        "train.tp=1,4",
        "rollout.max_num_seqs=16,200",
        "rollout.logprobs_mode=raw_logprobs,processed_logprobs",  # read twice: built whole
        "train.param_offload=true,false",  # a bool: built whole
    ]
    n_patched, template = 0, None
    for p in expand_items(sweep):
        groups, values, _ = planner._split(p)
        _, spec, interp = planner._fast_spec(groups, values)
        template = template or Template(spec)  # as plan does: the first point
        got = patched(template, spec, (*(k for _, k, _ in values), *interp))
        want = build(spec)
        if got is not None:
            n_patched += 1
            assert list(got.entries.items()) == list(want.entries.items())
            assert list(got.own.items()) == list(want.own.items()) and got.user == want.user
    assert template.row("train.tp") and template.row("rollout.max_num_seqs")
    assert template.row("rollout.logprobs_mode") is None
    assert template.row("train.param_offload") is None
    assert 0 < n_patched < len(expand_items(sweep))


@pytest.mark.parametrize(
    "ovs",
    [
        [],
        ["train=fsdp", "rollout.tp=2"],
        ["recipe=qwen3_30b_a3b_grpo_a3_strict"],
        ["recipe=qwen3_4b_grpo_a2_mitigated", "alignment=off"],
    ],
    ids=" ".join,
)
def test_unused_hydra_groups_change_nothing_in_the_job(ovs, monkeypatch):
    """compose_job leaves out Hydra's own output/help/logging/launcher/sweeper configs: the job,
    its sources and its choices are the ones of the whole compose."""
    from topl.launcher.compose import hydra as C

    trimmed = C.compose_job(ovs)
    monkeypatch.setattr(C, "_unused_hydra", lambda _: [])
    whole = C.compose_job(ovs)
    assert C._unused_hydra(["a=1"]) == [] and trimmed.cfg == whole.cfg
    assert (trimmed.sources, trimmed.choices) == (whole.sources, whole.choices)


def test_an_override_of_the_hydra_section_is_composed_as_written():
    from topl.launcher.compose import hydra as C

    assert C._unused_hydra(["train.tp=2", "hydra.searchpath=[file:///x]"])
    assert C._unused_hydra(["hydra.job_logging.root.level=DEBUG"]) == []
    assert C._unused_hydra(["hydra/job_logging=disabled"]) == []
    from topl.launcher.compose.overrides_guard import UNSAFE_FLAG

    # the section is there to override
    C.compose_job([UNSAFE_FLAG, "hydra.job_logging.root.level=DEBUG", "hydra.job.name=x"])


def test_a_render_reading_outside_the_view_patches_nothing(compose, monkeypatch):
    """A key read once through the view but again behind it (`unwrap`) is not patchable."""
    from topl.launcher.plan import patch as command_patch
    from topl.launcher.render import invocation as R

    spec = compose(["recipe=qwen3_30b_a3b_grpo_a3_strict"]).to_object()
    assert command_patch.Template(spec).row("rollout.max_num_seqs")
    real = R.overrides

    def behind(s):
        _plain(s).rollout.max_num_seqs  # noqa: B018 - the read the view does not see
        return real(s)

    monkeypatch.setattr(R, "overrides", behind)
    assert command_patch.Template(spec).row("rollout.max_num_seqs") is None
