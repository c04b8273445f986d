"""The training engine is the real architecture: Hugging Face transformers' Qwen3 / Qwen3-MoE
implementation (code no one here wrote) gives the same logits for the same weights."""

import pytest
import torch

from topl.kernels.alignment import Alignment
from topl.kernels.model import Model, sides
from topl.kernels.training import TrainingEngine

transformers = pytest.importorskip("transformers")


def hf_model(model: Model, dtype):
    a = model.arch
    common = dict(
        vocab_size=a.vocab_size,
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.num_layers,
        num_attention_heads=a.num_heads,
        num_key_value_heads=a.num_kv_heads,
        head_dim=a.head_dim,
        rms_norm_eps=a.rms_norm_eps,
        rope_theta=a.rope_theta,
        tie_word_embeddings=a.tie_word_embeddings,
        attn_implementation="eager",
    )
    if a.num_experts:
        cfg = transformers.Qwen3MoeConfig(
            num_experts=a.num_experts,
            num_experts_per_tok=a.experts_per_token,
            moe_intermediate_size=a.moe_intermediate_size,
            norm_topk_prob=True,
            **common,
        )
        hf = transformers.Qwen3MoeForCausalLM(cfg)
    else:
        hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**common))
    sd = {}
    for name, t in hf.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):
            p = name[: -len("gate_up_proj")]
            t = torch.stack(
                [
                    torch.cat(
                        [model.w[f"{p}{e}.gate_proj.weight"], model.w[f"{p}{e}.up_proj.weight"]]
                    )
                    for e in range(a.num_experts)
                ]
            )
        elif name.endswith("mlp.experts.down_proj"):
            p = name[: -len("down_proj")]
            t = torch.stack([model.w[f"{p}{e}.down_proj.weight"] for e in range(a.num_experts)])
        else:
            t = model.w[name]
        sd[name] = t
    hf.load_state_dict(sd)
    return hf.to(dtype).eval()


@pytest.mark.parametrize("name", ["tiny_dense", "tiny_moe"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_training_engine_logits_match_transformers(name, dtype):
    from topl.launcher.compose.hydra import compose_job

    arch = compose_job([f"model={name}"]).to_object().model
    model = Model.random(arch, seed=0, dtype=dtype, std=0.2)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, arch.vocab_size, (n,), generator=g).tolist() for n in (23, 9, 17)]
    ours = TrainingEngine(model, sides(Alignment(kv_tile=8))[0], micro_batch=3).forward_logits(seqs)
    hf = hf_model(model, dtype)
    with torch.no_grad():
        for s, mine in zip(seqs, ours):
            ref = hf(torch.tensor([s])).logits[0]
            if dtype == torch.float32:
                torch.testing.assert_close(mine.float(), ref.float(), rtol=1e-5, atol=1e-5)
            else:  # bf16: a few ulps of the logits' scale per position
                err = (mine.float() - ref.float()).abs().amax(-1) / ref.float().abs().amax(-1)
                if name == "tiny_dense":
                    assert err.max() <= 0.05, err
                else:  # a near-tie in the router can pick another expert in bf16: most positions must agree
                    assert (err <= 0.05).float().mean() >= 0.9, err
