"""A Qwen3 / Qwen3-MoE model over the primitives: weights and the row-wise pieces of a layer.

Weights use Hugging Face checkpoint names (per-expert tensors as in the hub's safetensors), so a
real checkpoint loads as is. The engines own the sequence handling and the attention; the
layer pieces here are row-wise and shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from topl.kernels import primitives as P
from topl.kernels.alignment import Alignment
from topl.kernels.attention import Plan

if TYPE_CHECKING:
    from topl.kernels.dump import Recorder

# The architecture: any object with ModelSpec's fields (the launcher's ModelSpec, a
# SimpleNamespace in probes and tests); kernels/ does not import the launcher, so read duck-typed.
Arch = Any

# Qwen3-30B-A3B as `model=qwen3_30b_a3b` composes it (conf/model/qwen3_30b_a3b.yaml plus ModelSpec's
# defaults), every architecture field but the depth: the GPU tests and benchmarks build it at 2-4
# layers without Hydra (the device has none). tests/spec/test_model_constants.py keeps it equal.
QWEN3_30B_A3B = dict(
    hidden_size=2048,
    intermediate_size=6144,
    num_heads=32,
    num_kv_heads=4,
    head_dim=128,
    vocab_size=151936,
    num_experts=128,
    experts_per_token=8,
    moe_intermediate_size=768,
    attention="gqa",
    sliding_window=None,
    rms_norm_eps=1e-6,
    rope_theta=1e6,
    tie_word_embeddings=False,
    max_position_embeddings=40960,
)


@dataclass(frozen=True)
class Side:
    """How one engine adds numbers (derived from the Alignment; see `sides`)."""

    invariant: bool  # batch-invariant matmul and RMSNorm
    fused: bool  # fused swiglu / add+RMSNorm / RoPE
    fp32_logits: bool  # fp32 log-softmax
    prefill: Plan  # attention plan for prompt rows (and all training rows)
    decode: Plan  # attention plan for one decoded row against the cache
    moe_order: str  # rank: top-k summed in rank order (fp32) | expert: index_add in expert-id order
    tp: int  # ways the row-parallel layers' partial sums are split
    order: str  # ring | tree all-reduce order of those partials
    # aligned reduction: K-chunks both sides sum in one fixed tree (lcm of the TP degrees); 0: tp
    leaves: int = 0


def sides(
    a: Alignment, train_tp: int = 1, rollout_tp: int = 1, order: str = "ring"
) -> tuple[Side, Side]:
    """(training side, rollout side). A switch that is on makes the rollout do what training does."""
    t = a.kv_tile
    train_plan = Plan(t, "left", visible=a.attention_semantics, merge="online", fp32=True)
    merge = "online" if a.softmax_tiling else "oneshot"
    prefill = Plan(t, "left", True, merge, a.fp32_critical_path)
    # reduction_order off: the native split-KV decode, its split count picked from the batch
    decode = Plan(t, "left" if a.reduction_order else "split", True, merge, a.fp32_critical_path)
    leaves = 0
    if a.tp_aligned_reduction:
        # A ring all-reduce chunks the flattened output, so an element's order depends on the batch
        # shape (vllm-ascend #17169). The aligned reduction: each side keeps its own TP degree, but
        # both cut K into the same lcm(train_tp, rollout_tp) chunks and sum them by one fixed
        # pairwise tree over those chunks (primitives.row_parallel): the same order for every TP
        # degree and batch shape. What an engine needs: a GEMM split at the same K boundaries, a
        # tree all-reduce, and where a rank's chunks are not one node of the tree (lcm / tp not a
        # power of two, e.g. TP 2 vs 3) an all-gather of the unsummed chunk products.
        leaves, order = math.lcm(train_tp, rollout_tp), "tree"
    train = Side(
        a.batch_invariant, False, True, train_plan, train_plan, "rank", train_tp, order, leaves
    )
    rollout = Side(
        a.batch_invariant,
        not a.fused_ops_matched,
        a.fp32_critical_path,
        prefill,
        decode,
        "rank" if a.moe_fixed_combine else "expert",
        rollout_tp,
        order,
        leaves,
    )
    return train, rollout


class Model:
    """Architecture facts (any object with the ModelSpec fields) plus a dict of weights."""

    def __init__(self, arch: Arch, weights: dict[str, torch.Tensor]):
        self.arch, self.w = arch, weights
        self.scale = 1.0 / math.sqrt(arch.head_dim)
        self.recorder: Recorder | None = (
            None  # a kernels.dump.Recorder: boundary tensors for `topl diagnose`
        )
        self.row_keys: list[tuple[int, int]] = []  # (sequence, position) of each row being computed

    def tap(self, boundary: str, t: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Record a canonical boundary (only when a recorder is attached)."""
        if self.recorder is not None:
            keys = self.row_keys if rows is None else [self.row_keys[i] for i in rows.tolist()]
            self.recorder.record(boundary, t, keys)

    # --- weights ---------------------------------------------------------------------------
    @classmethod
    def random(
        cls, arch: Arch, seed: int = 0, dtype: torch.dtype = torch.bfloat16, std: float = 0.02
    ) -> "Model":
        g = torch.Generator().manual_seed(seed)
        a = arch
        shapes = {
            "model.embed_tokens.weight": (a.vocab_size, a.hidden_size),
            "model.norm.weight": (a.hidden_size,),
        }
        if not a.tie_word_embeddings:
            shapes["lm_head.weight"] = (a.vocab_size, a.hidden_size)
        for i in range(a.num_layers):
            p = f"model.layers.{i}."
            shapes.update(
                {
                    p + "input_layernorm.weight": (a.hidden_size,),
                    p + "post_attention_layernorm.weight": (a.hidden_size,),
                    p + "self_attn.q_proj.weight": (a.num_heads * a.head_dim, a.hidden_size),
                    p + "self_attn.k_proj.weight": (a.num_kv_heads * a.head_dim, a.hidden_size),
                    p + "self_attn.v_proj.weight": (a.num_kv_heads * a.head_dim, a.hidden_size),
                    p + "self_attn.o_proj.weight": (a.hidden_size, a.num_heads * a.head_dim),
                    p + "self_attn.q_norm.weight": (a.head_dim,),
                    p + "self_attn.k_norm.weight": (a.head_dim,),
                }
            )
            if a.num_experts:
                shapes[p + "mlp.gate.weight"] = (a.num_experts, a.hidden_size)
                for e in range(a.num_experts):
                    q = f"{p}mlp.experts.{e}."
                    shapes.update(
                        {
                            q + "gate_proj.weight": (a.moe_intermediate_size, a.hidden_size),
                            q + "up_proj.weight": (a.moe_intermediate_size, a.hidden_size),
                            q + "down_proj.weight": (a.hidden_size, a.moe_intermediate_size),
                        }
                    )
            else:
                shapes.update(
                    {
                        p + "mlp.gate_proj.weight": (a.intermediate_size, a.hidden_size),
                        p + "mlp.up_proj.weight": (a.intermediate_size, a.hidden_size),
                        p + "mlp.down_proj.weight": (a.hidden_size, a.intermediate_size),
                    }
                )
        w = {}
        for name, shape in shapes.items():
            if name.endswith("norm.weight"):
                t = 1.0 + 0.1 * torch.randn(shape, generator=g)
            else:
                t = torch.randn(shape, generator=g) * std
            w[name] = t.to(dtype)
        return cls(arch, w)

    @classmethod
    def from_safetensors(
        cls, arch: Arch, path: str | Path, dtype: torch.dtype = torch.bfloat16
    ) -> "Model":
        """Real Hugging Face weights: every *.safetensors file in a folder (or one file)."""
        from safetensors.torch import load_file

        path = Path(path)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
        if not files:
            raise FileNotFoundError(f"no .safetensors files in {path}")
        w = {}
        for f in files:
            w.update({k: v.to(dtype) for k, v in load_file(str(f)).items()})
        return cls(arch, w)

    @property
    def device(self) -> torch.device:
        return self.w["model.embed_tokens.weight"].device

    def to(self, device: torch.device | str) -> "Model":
        """The same model with its weights on `device` (e.g. "cuda")."""
        return type(self)(self.arch, {k: v.to(device) for k, v in self.w.items()})

    def lm_head(self) -> torch.Tensor:
        return self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])

    def parameters(self) -> list[torch.Tensor]:
        return list(self.w.values())

    # --- row-wise layer pieces ---------------------------------------------------------------
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.w["model.embed_tokens.weight"][ids]

    def input_norm(
        self, i: int, h: torch.Tensor, pending: torch.Tensor | None, side: Side
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RMSNorm before attention; `pending` is the previous MLP output not yet added to h."""
        w, eps = self.w[f"model.layers.{i}.input_layernorm.weight"], self.arch.rms_norm_eps
        if pending is None:
            x = P.rms_norm(h, w, eps, side.invariant)
        else:
            x, h = P.add_rms_norm(pending, h, w, eps, side.invariant, side.fused)
        self.tap(f"layers.{i}.input_norm", x)
        return x, h

    def qkv(
        self, i: int, x: torch.Tensor, positions: torch.Tensor, side: Side
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [R, H, D], k and v [R, KVH, D]: projections, per-head q/k RMSNorm, RoPE."""
        a, p = self.arch, f"model.layers.{i}.self_attn."
        r = x.shape[0]
        q = P.linear(x, self.w[p + "q_proj.weight"], side.invariant).view(
            r, a.num_heads, a.head_dim
        )
        k = P.linear(x, self.w[p + "k_proj.weight"], side.invariant).view(
            r, a.num_kv_heads, a.head_dim
        )
        v = P.linear(x, self.w[p + "v_proj.weight"], side.invariant).view(
            r, a.num_kv_heads, a.head_dim
        )
        q = P.rms_norm(
            q.reshape(-1, a.head_dim), self.w[p + "q_norm.weight"], a.rms_norm_eps, side.invariant
        )
        k = P.rms_norm(
            k.reshape(-1, a.head_dim), self.w[p + "k_norm.weight"], a.rms_norm_eps, side.invariant
        )
        cos, sin = P.rope_tables(positions, a.head_dim, a.rope_theta)
        q = P.apply_rope(q.view(r, a.num_heads, a.head_dim), cos, sin, side.fused)
        k = P.apply_rope(k.view(r, a.num_kv_heads, a.head_dim), cos, sin, side.fused)
        for name, t in (("q", q), ("k", k), ("v", v)):
            self.tap(f"layers.{i}.{name}", t)
        return q, k, v

    def post_attention(
        self, i: int, h: torch.Tensor, attn: torch.Tensor, side: Side
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """o_proj (row-parallel), residual add + post-attention norm, MLP. Returns (h, pending)."""
        p = f"model.layers.{i}."
        self.tap(f"layers.{i}.attn", attn.reshape(attn.shape[0], -1))
        o = P.row_parallel(
            attn.reshape(attn.shape[0], -1),
            self.w[p + "self_attn.o_proj.weight"],
            side.tp,
            side.order,
            side.invariant,
            side.leaves,
        )
        self.tap(f"layers.{i}.o_proj", o)
        x, h = P.add_rms_norm(
            o,
            h,
            self.w[p + "post_attention_layernorm.weight"],
            self.arch.rms_norm_eps,
            side.invariant,
            side.fused,
        )
        self.tap(f"layers.{i}.post_attn_residual", h)
        out = (
            self.moe(i, x, side)
            if self.arch.num_experts
            else self.mlp(f"{p}mlp.", x, side, side.tp, side.leaves)
        )
        self.tap(f"layers.{i}.mlp", out)
        return h, out

    def mlp(self, p: str, x: torch.Tensor, side: Side, tp: int, leaves: int = 0) -> torch.Tensor:
        """Column-parallel gate/up, swiglu, row-parallel down_proj (experts: tp=1, not split)."""
        gate = P.linear(x, self.w[p + "gate_proj.weight"], side.invariant)
        up = P.linear(x, self.w[p + "up_proj.weight"], side.invariant)
        return P.row_parallel(
            P.swiglu(gate, up, side.fused),
            self.w[p + "down_proj.weight"],
            tp,
            side.order,
            side.invariant,
            leaves,
        )

    def route(
        self, i: int, x: torch.Tensor, side: Side
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Softmax router (fp32), top-k, renormalised weights."""
        logits = P.linear(x, self.w[f"model.layers.{i}.mlp.gate.weight"], side.invariant).float()
        probs = torch.softmax(logits, -1)
        top_w, top_i = torch.topk(probs, self.arch.experts_per_token, dim=-1)
        return logits, top_w / top_w.sum(-1, keepdim=True), top_i

    def moe(self, i: int, x: torch.Tensor, side: Side) -> torch.Tensor:
        logits, top_w, top_i = self.route(i, x, side)
        self.tap(f"layers.{i}.router_logits", logits)
        self.tap(f"layers.{i}.experts", top_i)
        r, k = top_i.shape
        ep = P.EXPERT_PARALLEL  # real expert parallelism: this rank computes only its experts
        local = [e for e in torch.unique(top_i).tolist() if ep is None or e % ep.size == ep.rank]
        ys = x.new_zeros(r, k, x.shape[1])
        for e in local:  # each expert sees only its tokens: batch invariance matters
            rows, slot = torch.nonzero(top_i == e, as_tuple=True)
            ys = ys.index_put(
                (rows, slot), self.mlp(f"model.layers.{i}.mlp.experts.{e}.", x[rows], side, 1)
            )
        if (
            side.moe_order == "rank"
        ):  # fixed combine: gather every expert's output, then top-1 + top-2 + ... (fp32)
            if ep is not None:
                ys = ep(ys.contiguous())  # zeros elsewhere: the sum is an exact gather
            self.tap(f"layers.{i}.expert_out", ys)
            out = ys[:, 0].float() * top_w[:, :1]
            for j in range(1, k):
                out = out + ys[:, j].float() * top_w[:, j : j + 1]
            return out.to(x.dtype)
        self.tap(f"layers.{i}.expert_out", ys)
        out = x.new_zeros(x.shape)  # vLLM-style: accumulate per expert, in expert-id order, in bf16
        for e in local:
            rows, slot = torch.nonzero(top_i == e, as_tuple=True)
            out = out.index_add(0, rows, (ys[rows, slot] * top_w[rows, slot, None].to(x.dtype)))
        return out if ep is None else ep(out.contiguous())  # rank partials summed by the collective

    def logits(self, h: torch.Tensor, pending: torch.Tensor, side: Side) -> torch.Tensor:
        x, _ = P.add_rms_norm(
            pending,
            h,
            self.w["model.norm.weight"],
            self.arch.rms_norm_eps,
            side.invariant,
            side.fused,
        )
        self.tap("final_norm", x)
        out = P.linear(x, self.lm_head(), side.invariant)
        self.tap("logits", out)
        return out


def token_logprobs(logits: torch.Tensor, temperature: float, fp32: bool) -> torch.Tensor:
    """log p over the vocabulary after temperature, at the chosen precision. A temperature <= 0 is
    clamped to 1e-8 as verl's trainer does (verl@0.9.1:verl/workers/engine/megatron/
    transformer_impl.py:MegatronEngineWithLMHead._lm_head_logits_processor); TOP-SAMP-001 refuses it."""
    temperature = temperature if temperature > 0 else 1e-8
    z = logits.float() / temperature if fp32 else logits / temperature
    return P.log_softmax(z, fp32)
