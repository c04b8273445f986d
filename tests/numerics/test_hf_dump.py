"""HookDumper on real Hugging Face Qwen3 / Qwen3-MoE models (small random configs), and diagnose
refusing dumps whose boundary sets differ."""

import json

import pytest
import torch
from helpers import run_topl

from topl.kernels import dump
from topl.kernels.diagnose import BoundaryMismatch, diagnose

transformers = pytest.importorskip("transformers")

SMALL = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
)


def hf(moe: bool):
    torch.manual_seed(0)
    if moe:
        cfg = transformers.Qwen3MoeConfig(
            **SMALL, moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2
        )
        return transformers.Qwen3MoeForCausalLM(cfg).eval()
    return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SMALL)).eval()


def dump_of(model, path, seq):
    """The README's snippet, as written there."""
    d = dump.HookDumper(model, "hf", keys=[(0, p) for p in range(len(seq))])
    with torch.no_grad():
        model(torch.tensor([seq]))
    d.remove()
    return dump.save(path, d.recorder, dump.manifest_for("hf-actor", model))


@pytest.mark.parametrize("moe", [False, True], ids=["qwen3", "qwen3_moe"])
def test_hook_dumper_on_a_real_hf_model(tmp_path, moe):
    model, seq = hf(moe), list(range(3, 20))
    a, b = dump_of(model, tmp_path / "a", seq), dump_of(model, tmp_path / "b", seq)
    manifest, rows = dump.load(a)
    assert manifest["model"]["num_layers"] == 2 and manifest["weights"]
    want = {"embed", "final_norm", "logits"} | {
        f"layers.{i}.{n}"
        for i in (0, 1)
        for n in ("input_norm", "v", "attn", "o_proj", "post_attn_residual", "mlp")
    }
    if moe:
        want |= {"layers.0.router_logits", "layers.1.router_logits"}
    assert set(rows) == want and all(len(r) == len(seq) for r in rows.values())
    r = diagnose(dump.load(a), dump.load(b))
    assert r["verdict"] == "equal" and not r["weights_differ"]
    assert sum("max_abs" in x for x in r["boundaries"]) == len(want)  # every boundary compared


def test_diagnose_refuses_different_boundary_sets(tmp_path):
    model, seq = hf(False), list(range(3, 20))
    a, b = dump_of(model, tmp_path / "a", seq), dump_of(model, tmp_path / "b", seq)
    m = json.loads((b / "manifest.json").read_text())
    del m["model"]["num_layers"], m["model"]["num_hidden_layers"]  # a config without the count
    (b / "manifest.json").write_text(json.dumps(m))
    r = diagnose(dump.load(a), dump.load(b))  # the layer count comes from the dumps themselves
    assert sum("max_abs" in x for x in r["boundaries"]) == 15
    rows = dump.load(b)[1]
    rows.pop("layers.1.mlp")
    with pytest.raises(BoundaryMismatch, match="only in A: layers.1.mlp"):
        diagnose(dump.load(a), (m, rows))
    fewer = dump.Recorder()
    fewer.rows.update({k: v for k, v in dump.load(b)[1].items() if k != "layers.1.mlp"})
    dump.save(b, fewer, m)
    cli = run_topl("diagnose", str(a), str(b), "--json")
    err = json.loads(cli.stdout)  # --json: an input error is JSON too ({"ok": false, "error"})
    assert cli.returncode == 2 and err["ok"] is False
    assert "layers.1.mlp" in json.dumps(err) and "--common" in json.dumps(err)
    cli = run_topl("diagnose", str(a), str(b), "--json", "--common")
    assert cli.returncode == 0 and json.loads(cli.stdout)["common_only"] is True
