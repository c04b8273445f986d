"""`topl plan --rank`: the step estimate is docs/rank.md's formula, and the ranking follows it."""

import dataclasses
import json

import pytest
from helpers import run_topl_inproc

from topl.launcher.compose.hydra import compose_job
from topl.launcher.plan import cost

# A made-up chip with round figures, so the hand computation below stays readable:
# 1e7 FLOP/s, 1e6 B/s of HBM, 1e6 B/s inside a node, 1e5 B/s between nodes.
SLOW = {"peak_tflops": 1e-5, "hbm_gbps": 1e-3, "intra_node_gbps": 1e-3, "inter_node_gbps": 1e-4}


def _chip(monkeypatch, **figs):
    table = {"A2": {k: {"value": v} for k, v in figs.items()}}
    monkeypatch.setattr(cost, "chips", lambda: table)


@pytest.fixture(scope="module")
def tiny():
    """tiny_dense (2 layers, H 64, MLP 128, 4 heads x 16, 2 KV heads, vocab 32, untied) on two
    devices of one node, train tp=2 (Megatron), rollout tp=2; 2 prompts x 2 samples of 8 + 8 tokens."""
    return compose_job(
        [
            "model=tiny_dense",
            "train=megatron",
            "cluster.soc=A2",
            "cluster.devices_per_node=2",
            "train.tp=2",
            "rollout.tp=2",
            "train.train_batch_size=2",
            "rollout.n=2",
            "train.ppo_mini_batch_size=2",
            "train.ppo_micro_batch_size_per_gpu=2",
            "train.log_prob_micro_batch_size_per_gpu=2",
            "train.max_prompt_length=8",
            "train.max_response_length=8",
            "rollout.max_num_seqs=256",
            "algorithm.use_kl_loss=false",
        ]
    ).to_object()


def test_tiny_case_is_the_formula_by_hand(monkeypatch, tiny):
    _chip(monkeypatch, **SLOW)
    got = cost.step_cost(tiny)
    # params: attention 64*16*(2*4+2*2) + 2*16 = 12320, MLP 3*64*128 = 24576, norms 128:
    # 37024 a layer; dense = 2*37024 + 2*32*64 (embed + lm_head) + 64 = 78208.
    # active N = 78208 - 32*64 (the lookup) = 76160; L = 16
    # F(16) = 2*76160*16 + 2*2*4*16*16^2 = 2437120 + 65536 = 2502656; S = 4 sequences, W = 2
    fl = 4 * 2502656 / 2
    # rollout: G = 4 / (2/2) = 4 sequences, ceil(4/256)*8 = 8 decode steps reading the tp=2 shard
    # 2*78208/2 = 78208 B; KV: 4*8*(8 + 4) token reads of 2*2*1*16*2 = 128 B
    r_hbm = 8 * 78208 + 4 * 8 * 12 * 128
    r_tp = 4 * 16 * 2 * 2 * (2 * 64) * 1  # G*L * layers * 2 all-reduces * 2H bytes * 2(tp-1)/tp
    r_sync = 78208  # each device receives its rollout shard
    # log-prob: one forward (no reference, no critic); dp = 1, T = 64 tokens, micro = ceil(4/2)
    lp_hbm = 2 * 78208
    lp_tp = 64 * 2 * 2 * (2 * 64) * 1
    # train: 3 F per sequence; weights read 3x per micro-batch; one optimizer step over the
    # dense shard 78208/2 = 39104 params at 30 B; dp = 1: no gradient all-reduce
    tr_hbm = 3 * 2 * 78208 + 30 * 39104
    tr_tp = 64 * 2 * 4 * (2 * 64) * 1
    want = {
        "rollout": (fl / 1e7, r_hbm / 1e6, (r_tp + r_sync) / 1e6),
        "logprob": (fl / 1e7, lp_hbm / 1e6, lp_tp / 1e6),
        "train": (3 * fl / 1e7, tr_hbm / 1e6, tr_tp / 1e6),
    }
    for phase, (c, h, m) in want.items():
        p = got[phase]
        assert (p["compute_s"], p["hbm_s"], p["comm_s"]) == pytest.approx((c, h, m)), phase
        assert p["seconds"] == pytest.approx(max(c, h) + m), phase
    assert got["rollout"]["comm_bytes"] == {"rollout_tp": r_tp, "weight_sync": r_sync}
    assert got["step_s"] == pytest.approx(sum(max(c, h) + m for c, h, m in want.values()))
    assert got["step_s"] == pytest.approx(3.0269952)  # the sum, done once on paper
    assert got["dominant"] == "train.hbm"  # 1.642 s: the largest single term


def test_each_term_moves_the_estimate(monkeypatch, tiny):
    """Recompute, a reference model, a second node's link: each adds the term the page names."""
    _chip(monkeypatch, **SLOW)
    base = cost.step_cost(tiny)
    full = cost.step_cost(
        dataclasses.replace(
            tiny, train=dataclasses.replace(tiny.train, recompute_granularity="full")
        )
    )
    assert full["train"]["compute_s"] == pytest.approx(base["train"]["compute_s"] * 4 / 3)
    ref = dataclasses.replace(tiny, algorithm=dataclasses.replace(tiny.algorithm, use_kl_loss=True))
    assert cost.step_cost(ref)["logprob"]["flops"] == 2 * base["logprob"]["flops"]
    # tp=2 over two one-device nodes: the TP collectives now take the inter-node link (10x slower)
    apart = dataclasses.replace(
        tiny, cluster=dataclasses.replace(tiny.cluster, nodes=2, devices_per_node=1)
    )
    got = cost.step_cost(apart)
    assert got["train"]["comm_s"] == pytest.approx(10 * base["train"]["comm_s"])


def _rank_json(*extra):
    r = run_topl_inproc(
        "plan",
        "recipe=qwen3_4b_grpo_a3_strict",
        "train.tp=1,2,4",
        "train.pp=1,2",
        "rollout.tp=1,2,4",
        *extra,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_ranking_follows_the_estimate_and_keeps_plans_fields():
    plain = _rank_json("--json")
    ranked = _rank_json("--json", "--rank")
    assert "ranking" not in plain and all("cost" not in v for v in plain["verdicts"])
    for a, b in zip(plain["verdicts"], ranked["verdicts"]):
        assert {k: v for k, v in b.items() if k != "cost"} == a  # plan's fields, untouched
        assert (b["cost"] is None) == (not b["valid"])
    costs = {i: v["cost"] for i, v in enumerate(ranked["verdicts"]) if v["cost"]}
    assert len(costs) > 2 and sorted(costs) == sorted(ranked["ranking"])
    steps = [costs[i]["step_s"] for i in ranked["ranking"]]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    for c in costs.values():
        parts = [c[p] for p in cost.PHASES]
        assert c["step_s"] == pytest.approx(
            sum(max(p["compute_s"], p["hbm_s"]) + p["comm_s"] for p in parts)
        )


def test_slow_links_turn_the_ranking_toward_less_communication(monkeypatch):
    """The default A3 figures favour rollout tp=4 (decode reads fewer weights per device); with
    links 10^4 x slower the collectives dominate and the least-communicating layout comes first."""
    first = _rank_json("--json", "--rank")
    top = first["verdicts"][first["ranking"][0]]["overrides"]
    assert "rollout.tp=4" in top
    figs = {k: v["value"] for k, v in cost.chips()["A3"].items() if isinstance(v, dict)}
    monkeypatch.setattr(
        cost,
        "chips",
        lambda: {"A3": {k: {"value": v / (1e4 if "node" in k else 1)} for k, v in figs.items()}},
    )
    slow = _rank_json("--json", "--rank")
    best = slow["verdicts"][slow["ranking"][0]]
    assert best["cost"]["dominant"].endswith(".comm")
    assert "train.tp=1" in best["overrides"] and "rollout.tp=1" in best["overrides"]


def test_table_lists_accepted_points_cheapest_first():
    r = run_topl_inproc(
        "plan", "recipe=qwen3_4b_grpo_a3_strict", "train.tp=1,2,4", "rollout.tp=1,4", "--rank"
    )
    assert r.returncode == 0, r.stderr
    rows = [l.split() for l in r.stdout.splitlines() if l[:1].isdigit() and " valid" not in l]
    steps = [float(row[3]) for row in rows]
    assert rows and steps == sorted(steps)
    assert all(row[4].split(".")[0] in cost.PHASES for row in rows)  # the dominant term
    assert "invalid" not in r.stdout and "roofline estimate" in r.stdout


def test_a_cluster_without_figures_is_named_not_ranked():
    r = run_topl_inproc("plan", "train.tp=1", "--rank")
    assert r.returncode == 0, r.stderr
    assert "1 accepted points not estimated" in r.stdout and "chips.json" in r.stdout
    # named as the table numbers points, with their overrides (docs/rank.md; review #8)
    assert "not estimated: #0 (train.tp=1)" in " ".join(r.stdout.split()), r.stdout
    assert "step s (est.)" not in r.stdout  # no header over an empty table
    assert r.stdout.startswith("topl plan --rank: no accepted point has an estimate")


def test_fsdp_gathers_the_weights_every_micro_batch(monkeypatch, tiny):
    """ZeRO-3 over both devices (tp=1): one micro-batch of 2 sequences per device; each pass
    gathers the other half of the 78208 bf16 weights (fwd; bwd again) and reduce-scatters fp32
    gradients."""
    _chip(monkeypatch, **SLOW)
    train = dataclasses.replace(tiny.train, engine="fsdp", tp=1)
    got = cost.step_cost(dataclasses.replace(tiny, train=train))
    half = 78208 * (2 - 1) / 2
    assert got["logprob"]["comm_bytes"] == {"fsdp_shard": 2 * half}
    assert got["logprob"]["hbm_bytes"] == 2 * 78208
    assert got["train"]["comm_bytes"] == {"fsdp_shard": (2 + 2 + 4) * half}
    assert got["train"]["hbm_bytes"] == 3 * 2 * 78208 + 30 * 78208 / 2  # optimizer: its half
