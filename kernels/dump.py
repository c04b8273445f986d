"""Boundary dumps: canonical per-layer tensors for chosen tokens, as safetensors + a JSON manifest.

Canonical boundaries, in dataflow order: `embed`; per layer `layers.{i}.` + input_norm, q, k, v
(after norm and RoPE), attn (before o_proj), o_proj, post_attn_residual, router_logits, experts,
expert_out, mlp; then final_norm, logits, logprobs. Rows are keyed by (sequence, position).

Two ways to fill a dump: the reference engines call `Recorder.record` directly; any torch
`nn.Module` model (Hugging Face, Megatron, vLLM) gets forward hooks from `HookDumper` with a
name map from module names to boundaries.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, cast

import torch
from safetensors.torch import load_file, save_file

Rows = dict[tuple[int, int], torch.Tensor]  # one boundary's rows, keyed by (sequence, position)
Manifest = dict[str, Any]  # manifest.json: the dump's JSON self-description

LAYER_BOUNDARIES = (
    "input_norm",
    "q",
    "k",
    "v",
    "attn",
    "o_proj",
    "post_attn_residual",
    "router_logits",
    "experts",
    "expert_out",
    "mlp",
)


def canonical_order(num_layers: int) -> list[str]:
    return [
        "embed",
        *[f"layers.{i}.{b}" for i in range(num_layers) for b in LAYER_BOUNDARIES],
        "final_norm",
        "logits",
        "logprobs",
    ]


class Recorder:
    """Collects boundary rows keyed by (sequence, position); `positions` filters what is kept."""

    def __init__(self, keep: Callable[[int, int], bool] | None = None):
        self.rows: dict[str, Rows] = defaultdict(dict)
        self.keep = keep

    def record(self, boundary: str, t: torch.Tensor, keys: list[tuple[int, int]]) -> None:
        t = t.detach()
        for i, key in enumerate(keys):
            if self.keep is None or self.keep(*key):
                # tuple(): callers may pass [seq, pos] lists (JSON keys)
                self.rows[boundary][cast(tuple[int, int], tuple(key))] = t[i].clone()


def layer_hashes(weights: dict[str, torch.Tensor]) -> dict[str, str]:
    """sha256 per layer (and for embed / final norm / lm_head) over names, dtypes and bytes."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in sorted(weights):
        m = re.search(r"layers\.(\d+)\.", name)
        groups[f"layers.{m.group(1)}" if m else name.rsplit(".", 1)[0]].append(name)
    out = {}
    for group, names in groups.items():
        h = hashlib.sha256()
        for n in names:
            t = weights[n].detach().contiguous().cpu()
            h.update(n.encode() + str(t.dtype).encode() + t.view(torch.uint8).numpy().tobytes())
        out[group] = h.hexdigest()
    return out


def save(path: str | Path, recorder: Recorder, manifest: Manifest) -> Path:
    """`path/dump.safetensors` (one tensor per boundary, rows in key order) + `path/manifest.json`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors, keys = {}, {}
    for boundary, rows in recorder.rows.items():
        order = sorted(rows)
        tensors[boundary] = torch.stack([rows[k] for k in order]).contiguous()
        keys[boundary] = [list(k) for k in order]
    save_file(tensors, str(path / "dump.safetensors"))
    (path / "manifest.json").write_text(
        json.dumps({**manifest, "keys": keys}, indent=1, default=str)
    )
    return path


# What a dump folder may hold, checked before any work (a dump may come from anywhere): the
# deepest released LLMs have ~100-200 layers; a manifest is a few MB of row keys.
MAX_LAYERS = 4096
MAX_MANIFEST_BYTES = 64 << 20


class BadDump(ValueError):
    """A dump folder that cannot be read as one (not a regular file, corrupt, out of bounds)."""


def _regular(path: Path, cap: int | None = None) -> int:
    """The size of a regular file (a FIFO or a device would hang the reader), at most `cap`."""
    import os
    import stat

    try:
        st = os.stat(path)
    except OSError as e:
        raise BadDump(f"{path}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadDump(f"{path} is not a regular file (a FIFO, a device or a folder)")
    if cap is not None and st.st_size > cap:
        raise BadDump(f"{path} is {st.st_size} bytes; a dump's manifest is at most {cap}")
    return st.st_size


def _layer(name: str) -> int:
    m = re.match(r"layers\.(\d{1,9})\.", name)
    return int(m.group(1)) if m else (MAX_LAYERS if name.startswith("layers.") else -1)


def load(path: str | Path) -> tuple[Manifest, dict[str, Rows]]:
    """A dump folder's (manifest, rows); BadDump, before any work, for what is not one."""
    path = Path(path)
    _regular(path / "manifest.json", MAX_MANIFEST_BYTES)
    try:
        manifest = json.loads((path / "manifest.json").read_bytes())
    except (ValueError, RecursionError) as e:
        raise BadDump(f"{path / 'manifest.json'} is not JSON ({e})") from None
    model = manifest.get("model", {}) if isinstance(manifest, dict) else None
    keys = manifest.get("keys") if isinstance(manifest, dict) else None
    if not isinstance(model, dict) or not isinstance(keys, dict):
        raise BadDump(f"{path / 'manifest.json'}: not a dump manifest (its model and keys)")
    layers = model.get("num_layers") or 0
    if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers <= MAX_LAYERS:
        raise BadDump(f"manifest model.num_layers={str(layers)[:40]}: an int in [0, {MAX_LAYERS}]")
    _regular(path / "dump.safetensors")
    try:
        tensors = load_file(str(path / "dump.safetensors"))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own errors for a bad file
        raise BadDump(f"{path / 'dump.safetensors'} is not a safetensors file ({e})") from None
    if any(_layer(b) >= MAX_LAYERS for b in tensors):
        raise BadDump(f"{path}: a boundary of a layer past {MAX_LAYERS}")
    try:
        rows = {b: {tuple(k): tensors[b][i] for i, k in enumerate(keys[b])} for b in tensors}
    except (KeyError, IndexError, TypeError) as e:
        raise BadDump(f"{path}: the manifest's keys do not match the tensors ({e!r:.80})") from None
    return manifest, rows


def model_facts(model: Any) -> dict[str, Any]:
    """The architecture a dump records: a reference Model's `arch`, or a Hugging Face model's
    config (num_hidden_layers is also given as `num_layers`, the name diagnose reads)."""
    from dataclasses import asdict, is_dataclass

    if hasattr(model, "arch"):
        arch = model.arch
        return (
            asdict(arch) if is_dataclass(arch) and not isinstance(arch, type) else dict(vars(arch))
        )
    cfg = getattr(model, "config", None)
    if cfg is None:
        return {}
    facts = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
    facts.setdefault("num_layers", facts.get("num_hidden_layers", 0))
    return facts


def manifest_for(
    engine: str,
    model: Any,
    *,
    layout: dict[str, Any] | None = None,
    dims: dict[str, int] | None = None,
) -> Manifest:
    """What a dump says about itself; `dims` names the sharded dim of TP-split boundaries.
    `model`: a reference Model, or any nn.Module (weights hashed from its state_dict)."""
    import platform

    weights = (
        model.w
        if hasattr(model, "w")
        else (model.state_dict() if isinstance(model, torch.nn.Module) else {})
    )
    dtype = str(next(iter(weights.values())).dtype) if weights else "unknown"
    return {
        "engine": engine,
        "model": model_facts(model),
        "dtype": dtype,
        "layout": layout or {},
        "dims": dims or {},
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "weights": layer_hashes(weights) if weights else {},
    }


# --- hooks for nn.Module models -----------------------------------------------------------------
# (module-name regex, "out" | "in", boundary template with {0} = layer index)
HF_MAP = [
    (r"model\.embed_tokens$", "out", "embed"),
    (r"model\.layers\.(\d+)\.input_layernorm$", "out", "layers.{0}.input_norm"),
    (r"model\.layers\.(\d+)\.self_attn\.v_proj$", "out", "layers.{0}.v"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj$", "in", "layers.{0}.attn"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj$", "out", "layers.{0}.o_proj"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm$", "in", "layers.{0}.post_attn_residual"),
    (r"model\.layers\.(\d+)\.mlp\.gate$", "out", "layers.{0}.router_logits"),
    (r"model\.layers\.(\d+)\.mlp$", "out", "layers.{0}.mlp"),
    (r"model\.norm$", "out", "final_norm"),
    (r"lm_head$", "out", "logits"),
]
MEGATRON_MAP = [  # Megatron-core GPTModel (what verl's Megatron actor runs)
    (r"embedding\.word_embeddings$", "out", "embed"),
    (r"decoder\.layers\.(\d+)\.input_layernorm$", "out", "layers.{0}.input_norm"),
    (r"decoder\.layers\.(\d+)\.self_attention\.linear_proj$", "in", "layers.{0}.attn"),
    (r"decoder\.layers\.(\d+)\.self_attention\.linear_proj$", "out", "layers.{0}.o_proj"),
    (r"decoder\.layers\.(\d+)\.pre_mlp_layernorm$", "in", "layers.{0}.post_attn_residual"),
    (r"decoder\.layers\.(\d+)\.mlp\.router$", "out", "layers.{0}.router_logits"),
    (r"decoder\.layers\.(\d+)\.mlp$", "out", "layers.{0}.mlp"),
    (r"decoder\.final_layernorm$", "out", "final_norm"),
    (r"output_layer$", "out", "logits"),
]
VLLM_MAP = [  # vLLM's Qwen3 / Qwen3-MoE (fused qkv_proj; attention output is attn's output)
    (r"model\.embed_tokens$", "out", "embed"),
    (r"model\.layers\.(\d+)\.input_layernorm$", "out", "layers.{0}.input_norm"),
    (r"model\.layers\.(\d+)\.self_attn\.attn$", "out", "layers.{0}.attn"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj$", "out", "layers.{0}.o_proj"),
    (r"model\.layers\.(\d+)\.mlp\.gate$", "out", "layers.{0}.router_logits"),
    (r"model\.layers\.(\d+)\.mlp$", "out", "layers.{0}.mlp"),
    (r"model\.norm$", "out", "final_norm"),
    (r"lm_head$", "out", "logits"),
]
NAME_MAPS = {"hf": HF_MAP, "megatron": MEGATRON_MAP, "vllm": VLLM_MAP}


class HookDumper:
    """Forward hooks on an nn.Module by name pattern. Use from inside a verl / vLLM worker:

        d = HookDumper(model, "hf", keys=[(seq, pos) ...])    # keys of the rows this forward computes
        model(input_ids)                                       # hooks record
        d.remove(); dump.save(out_dir, d.recorder, manifest)

    `gather(tensor, dim)` reassembles TP-sharded outputs (e.g. an all_gather over the TP group)
    for boundaries listed in `dims` {boundary_suffix: dim}.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        name_map: str | list[tuple[str, str, str]],
        keys: list[tuple[int, int]],
        recorder: Recorder | None = None,
        gather: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
        dims: dict[str, int] | None = None,
    ):
        self.recorder, self.keys = recorder or Recorder(), keys
        self.handles: list[Any] = []  # torch hook handles
        self.gather, self.dims = gather, dims or {}
        table = NAME_MAPS[name_map] if isinstance(name_map, str) else name_map
        for name, mod in module.named_modules():
            for pattern, where, template in table:
                m = re.search(pattern, name)
                if m:
                    self._attach(mod, where, template.format(*m.groups()))

    def _attach(self, mod: torch.nn.Module, where: str, boundary: str) -> None:
        def grab(t: Any) -> None:
            t = t[0] if isinstance(t, (tuple, list)) else t
            if isinstance(t, tuple):
                t = t[0]
            t = t.reshape(-1, t.shape[-1]) if t.dim() > 2 else t
            suffix = boundary.rsplit(".", 1)[-1]
            if self.gather is not None and suffix in self.dims:
                t = self.gather(t, self.dims[suffix])
            self.recorder.record(boundary, t, self.keys)

        if where == "in":
            self.handles.append(mod.register_forward_pre_hook(lambda _m, args: grab(args)))
        else:
            self.handles.append(mod.register_forward_hook(lambda _m, _args, out: grab(out)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
