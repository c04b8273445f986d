"""`topl diagnose`: the first diverging boundary and operator path vs framework difference."""

import dataclasses
import json

import pytest
import torch
from helpers import run_topl

from topl.kernels import dump
from topl.kernels import primitives as P
from topl.kernels.alignment import Alignment
from topl.kernels.diagnose import diagnose
from topl.kernels.diagnose_stats import compare_boundary, systematic, ulp_distance
from topl.kernels.model import Model, sides
from topl.kernels.probe import make_requests, probe
from topl.kernels.training import TrainingEngine

STRICT = Alignment(kv_tile=8)


@pytest.fixture(scope="module")
def models():
    from topl.launcher.compose.hydra import compose_job

    return {
        n: Model.random(compose_job([f"model={n}"]).to_object().model, seed=0)
        for n in ("tiny_dense", "tiny_moe")
    }


def dumps(tmp_path, model, alignment=STRICT, train_model=None, **kw):
    reqs = make_requests(10, model.arch.vocab_size, 1, max_len=28, max_new=14)
    probe(
        model,
        alignment,
        requests=reqs,
        block_size=8,
        dump_dir=tmp_path,
        train_model=train_model,
        **kw,
    )
    return dump.load(tmp_path / "rollout"), dump.load(tmp_path / "training")


def run(tmp_path, model, alignment=STRICT, train_model=None, **kw):
    return diagnose(*dumps(tmp_path, model, alignment, train_model, **kw))


def without_layout(d):
    """A dump as a foreign engine writes it: no record of the alignment switches."""
    return {**d[0], "layout": {}}, d[1]


@pytest.mark.parametrize(
    "switch, model, boundary",
    [
        ("attention_semantics", "tiny_dense", "layers.0.attn"),
        ("reduction_order", "tiny_dense", "layers.0.attn"),
        ("softmax_tiling", "tiny_dense", "layers.0.attn"),
        ("fp32_critical_path", "tiny_dense", "layers.0.attn"),
        ("batch_invariant", "tiny_dense", "layers.0.q"),
        ("fused_ops_matched", "tiny_dense", "layers.0.q"),
        ("moe_fixed_combine", "tiny_moe", "layers.0.mlp"),
        ("tp_aligned_reduction", "tiny_dense", "layers.0.o_proj"),
    ],
)
def test_single_switch_off_is_an_operator_path_at_the_right_boundary(
    tmp_path, models, switch, model, boundary
):
    kw = {"rollout_tp": 4} if switch == "tp_aligned_reduction" else {}
    r = run(tmp_path, models[model], STRICT.without(switch), **kw)
    assert r["verdict"] == "operator path", r["reason"]
    assert r["first_divergence"].endswith(boundary)
    assert (
        r["switches"] == [switch] and f"alignment.{switch}=true" in r["remedy"]
    )  # the dumps' layouts narrow it


@pytest.mark.parametrize("switch", ["batch_invariant", "fused_ops_matched"])
def test_switch_named_from_the_data_alone(tmp_path, models, switch):
    """Without layouts (foreign dumps) q's candidates are ordered by whether v differs too: the shared
    projection GEMM (batch_invariant) or RoPE / q-k norm (fused_ops_matched)."""
    a, b = dumps(tmp_path, models["tiny_dense"], STRICT.without(switch))
    r = diagnose(without_layout(a), without_layout(b))
    assert r["verdict"] == "operator path" and r["first_divergence"] == "layers.0.q"
    assert r["switches"][0] == switch and len(r["switches"]) == 2


class ScaledAttention(Model):
    """Planted logic-level fault: layer 1's attention output x1.01 (within 2 bf16 ULPs, all one way)."""

    def post_attention(self, i, h, attn, side):
        if i == 1:
            attn = (attn.float() * 1.01).to(attn.dtype)
        return super().post_attention(i, h, attn, side)


def test_planted_scale_is_logic_level_not_rounding(tmp_path, models):
    m = models["tiny_dense"]
    r = run(tmp_path, m, train_model=ScaledAttention(m.arch, m.w))
    row = {b["boundary"]: b for b in r["boundaries"]}["layers.1.attn"]
    assert (
        r["first_divergence"] == "layers.1.attn" and row["median_ulp_of_diffs"] <= 2
    )  # small, yet:
    assert r["verdict"] == "framework difference" and "|A| > |B|" in r["reason"], r["reason"]


def test_undumped_inputs_cannot_tell(tmp_path, models):
    """The Megatron / vLLM hook maps dump no q, k, v: an attention difference may start upstream."""
    a, b = dumps(tmp_path, models["tiny_dense"], STRICT.without("softmax_tiling"))
    for rows in (a[1], b[1]):
        for i in range(2):
            for name in ("q", "k", "v"):
                rows.pop(f"layers.{i}.{name}")
    r = diagnose(a, b)
    assert r["first_divergence"] == "layers.0.attn"
    assert (
        r["verdict"] == "cannot tell"
        and "not dumped" in r["reason"]
        and "layers.0.q" in r["remedy"]
    )


def test_rounding_statistics_separate_noise_from_bias():
    g = torch.Generator().manual_seed(0)
    b = torch.randn(4096, generator=g).bfloat16()
    step = torch.randint(0, 2, (4096,), generator=g) * 2 - 1  # one ULP up or down at random
    noisy = (b.view(torch.int16) + step.to(torch.int16)).view(torch.bfloat16)
    assert systematic(compare_boundary({(0, 0): noisy}, {(0, 0): b})) is None
    up = (b.view(torch.int16) + 1).view(torch.bfloat16)  # every magnitude one ULP larger
    assert "|A| > |B|" in systematic(compare_boundary({(0, 0): up}, {(0, 0): b}))


def test_aligned_engines_are_equal_everywhere(tmp_path, models):
    r = run(tmp_path, models["tiny_moe"])
    assert r["verdict"] == "equal" and r["first_divergence"] is None
    assert {"layers.0.router_logits", "layers.0.experts", "layers.0.expert_out", "logprobs"} <= {
        b["boundary"] for b in r["boundaries"] if b.get("equal")
    }


def test_planted_rms_norm_eps(tmp_path, models):
    m = models["tiny_dense"]
    r = run(tmp_path, m, train_model=Model(dataclasses.replace(m.arch, rms_norm_eps=1e-5), m.w))
    assert r["verdict"] == "framework difference" and "rms_norm_eps" in r["reason"]
    assert r["first_divergence"] == "layers.0.input_norm"


def test_planted_one_ulp_weight(tmp_path, models):
    m = models["tiny_dense"]
    w = dict(m.w)
    t = w["model.layers.1.mlp.up_proj.weight"].clone()
    t.view(torch.int16)[0, 0] += 1
    w["model.layers.1.mlp.up_proj.weight"] = t
    r = run(tmp_path, m, train_model=Model(m.arch, w))
    assert r["verdict"] == "framework difference" and r["weights_differ"] == ["layers.1"]


class RopeBeforeKNorm(Model):
    """Planted framework difference: RoPE applied to k before its RMSNorm instead of after."""

    def qkv(self, i, x, positions, side):
        a, p, r = self.arch, f"model.layers.{i}.self_attn.", x.shape[0]
        q = P.linear(x, self.w[p + "q_proj.weight"], side.invariant).view(
            r, a.num_heads, a.head_dim
        )
        k = P.linear(x, self.w[p + "k_proj.weight"], side.invariant).view(
            r, a.num_kv_heads, a.head_dim
        )
        v = P.linear(x, self.w[p + "v_proj.weight"], side.invariant).view(
            r, a.num_kv_heads, a.head_dim
        )
        cos, sin = P.rope_tables(positions, a.head_dim, a.rope_theta)
        k = P.apply_rope(k, cos, sin, side.fused)
        q = P.rms_norm(
            q.reshape(-1, a.head_dim), self.w[p + "q_norm.weight"], a.rms_norm_eps, side.invariant
        )
        k = P.rms_norm(
            k.reshape(-1, a.head_dim), self.w[p + "k_norm.weight"], a.rms_norm_eps, side.invariant
        )
        q = P.apply_rope(q.view(r, a.num_heads, a.head_dim), cos, sin, side.fused)
        k = k.view(r, a.num_kv_heads, a.head_dim)
        for name, t in (("q", q), ("k", k), ("v", v)):
            self.tap(f"layers.{i}.{name}", t)
        return q, k, v


def test_planted_rope_at_a_different_point(tmp_path, models):
    m = models["tiny_dense"]
    r = run(tmp_path, m, train_model=RopeBeforeKNorm(m.arch, m.w))
    assert r["verdict"] == "framework difference" and r["first_divergence"] == "layers.0.k"
    assert "logic-level" in r["reason"]


def test_ulp_distance():
    a = torch.tensor([1.0, -2.0, 0.0], dtype=torch.bfloat16)
    b = torch.tensor(
        [1.0078125, -1.9921875, 0.0], dtype=torch.bfloat16
    )  # one bf16 step each (0: none)
    assert ulp_distance(a, b).tolist() == [1, 1, 0]


def test_hugging_face_forward_against_the_training_engine(tmp_path, models):
    """A model implementation no one here wrote, dumped through the HF name map."""
    pytest.importorskip("transformers")
    from test_hf_parity import hf_model

    arch = models["tiny_dense"].arch
    m = Model.random(arch, seed=0, dtype=torch.float32, std=0.2)
    seq = torch.randint(
        0, arch.vocab_size, (19,), generator=torch.Generator().manual_seed(0)
    ).tolist()
    rec = dump.Recorder()
    m.recorder = rec
    TrainingEngine(m, sides(STRICT)[0], 1).forward_logits([seq])
    m.recorder = None
    dump.save(tmp_path / "ours", rec, dump.manifest_for("topl-training", m))
    hf = hf_model(m, torch.float32)
    d = dump.HookDumper(hf, "hf", keys=[(0, p) for p in range(len(seq))])
    with torch.no_grad():
        hf(torch.tensor([seq]))
    d.remove()
    manifest = {
        **dump.manifest_for("topl-training", m),
        "engine": "hf-transformers",
        "weights": dump.layer_hashes(hf.state_dict()),
    }
    dump.save(tmp_path / "hf", d.recorder, manifest)
    # the hf name map reaches fewer boundaries (q/k after RoPE live inside HF's forward): explicit
    r = diagnose(dump.load(tmp_path / "hf"), dump.load(tmp_path / "ours"), common_only=True)
    compared = {b["boundary"]: b for b in r["boundaries"] if "max_abs" in b}
    assert not r["weights_differ"] and compared["embed"]["equal"]
    for b in (
        "layers.0.input_norm",
        "layers.0.v",
        "layers.0.attn",
        "layers.0.o_proj",
        "layers.1.post_attn_residual",
        "layers.1.mlp",
        "final_norm",
        "logits",
    ):
        assert compared[b]["max_abs"] < 1e-4, (b, compared[b])
    # HF's own attention differs from ours at rounding level, and the HF map dumps no q / k: honest
    # "cannot tell" rather than "inputs equal"
    assert r["first_divergence"] == "layers.0.attn" and r["verdict"] == "cannot tell", r["reason"]


def test_cli_probe_dump_then_diagnose(tmp_path):
    d = tmp_path / "dumps"
    r = run_topl(
        "probe", "alignment.softmax_tiling=false", "alignment.mode=off", "--dump", str(d), "--json"
    )
    assert r.returncode == 0, r.stderr
    r = run_topl(
        "diagnose",
        str(d / "rollout"),
        str(d / "training"),
        "--json",
        "--plots",
        str(tmp_path / "p"),
    )
    out = json.loads(r.stdout)
    assert out["verdict"] == "operator path" and out["first_divergence"].endswith(".attn")
    assert all(
        (tmp_path / "p" / f).stat().st_size > 1000
        for f in ("boundaries.png", "logprob_diff_hist.png")
    )
    bad = run_topl("diagnose", str(tmp_path), str(d / "training"))
    assert bad.returncode == 2 and "not a dump folder" in bad.stderr
