"""Localise residual logdiff: weights first, then the first diverging boundary, then a verdict.

Verdicts
- operator path: the first diverging boundary's inputs are bitwise equal and its outputs differ at
  rounding level (a few ULPs): a kernel or reduction order differs. Named with the alignment
  switch / contract rule that addresses that boundary.
- framework difference: weights or model config differ, boundaries do not map, or the first
  divergence is logic-level (many ULPs across most elements: an op applied at another point, a
  different epsilon, a missing step).
"""
from __future__ import annotations

import re

import torch

from topl.kernels.dump import LAYER_BOUNDARIES, canonical_order

# Median ULP distance of the differing elements up to which a difference is "rounding level": a
# reordered sum or a fused op moves results by one ULP here and there (median 1 for every switch of
# the reference engines); a step applied at another point moves most of them by several.
ROUNDING_ULPS = 2

REMEDY = {
    "embed": "weights or token ids differ (framework)",
    "input_norm": "alignment.batch_invariant / alignment.fused_ops_matched (add+RMSNorm) — TOP-ALN-001",
    "q": "alignment.fused_ops_matched (RoPE) / alignment.batch_invariant — TOP-ALN-001",
    "k": "alignment.fused_ops_matched (RoPE) / alignment.batch_invariant — TOP-ALN-001",
    "v": "alignment.batch_invariant — TOP-ALN-001",
    "attn": "alignment.attention_semantics / reduction_order / softmax_tiling / fp32_critical_path — "
            "TOP-ATTN-001, TOP-ATTN-004, TOP-ALN-001",
    "o_proj": "alignment.tp_aligned_reduction / alignment.batch_invariant — TOP-TP-001, TOP-COLL-001",
    "post_attn_residual": "alignment.fused_ops_matched (add+RMSNorm) — TOP-ALN-001",
    "router_logits": "alignment.batch_invariant (router matmul) — TOP-ALN-001",
    "experts": "routing differs: alignment.batch_invariant upstream; verl router_replay",
    "expert_out": "alignment.batch_invariant (expert GEMMs) — TOP-ALN-001",
    "mlp": "alignment.moe_fixed_combine / fused_ops_matched (swiglu) / tp_aligned_reduction — TOP-ALN-001, TOP-TP-002",
    "final_norm": "alignment.fused_ops_matched (add+RMSNorm) / batch_invariant — TOP-ALN-001",
    "logits": "alignment.batch_invariant (lm_head) — TOP-ALN-001",
    "logprobs": "alignment.fp32_critical_path (fp32 log-softmax); rollout.logprobs_mode — TOP-LOGP-002",
}


def _inputs(boundary: str, num_layers: int, moe: bool) -> list[str]:
    """The dumped boundaries a boundary is computed from (its dataflow inputs)."""
    if boundary == "embed":
        return []
    m = re.match(r"layers\.(\d+)\.(\w+)$", boundary)
    if not m:
        last = f"layers.{num_layers - 1}."
        return {"final_norm": [last + "post_attn_residual", last + "mlp"], "logits": ["final_norm"],
                "logprobs": ["logits"]}[boundary]
    i, b = int(m.group(1)), m.group(2)
    p = f"layers.{i}."
    layer_in = ["embed"] if i == 0 else [f"layers.{i - 1}.post_attn_residual", f"layers.{i - 1}.mlp"]
    return {"input_norm": layer_in, "q": [p + "input_norm"], "k": [p + "input_norm"], "v": [p + "input_norm"],
            "attn": [p + "q", p + "k", p + "v"], "o_proj": [p + "attn"],
            "post_attn_residual": [p + "o_proj", *layer_in], "router_logits": [p + "post_attn_residual"],
            "experts": [p + "router_logits"], "expert_out": [p + "post_attn_residual", p + "experts"],
            "mlp": [p + "post_attn_residual"] + ([p + "expert_out"] if moe else [])}[b]


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place, in the tensors' own dtype (integer view)."""
    if not a.is_floating_point():
        return (a != b).long()
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}.get(a.dtype)
    if bits is None:
        a, b, bits = a.float(), b.float(), torch.int32
    ia, ib = a.contiguous().view(bits).long(), b.contiguous().view(bits).long()
    # map sign-magnitude to a monotonic integer line
    top = 1 << (torch.iinfo(bits).bits - 1)
    ia = torch.where(ia < 0, -top - ia, ia)
    ib = torch.where(ib < 0, -top - ib, ib)
    return (ia - ib).abs()


def compare_boundary(ra: dict, rb: dict) -> dict | None:
    keys = sorted(set(ra) & set(rb))
    if not keys:
        return None
    if any(ra[k].numel() != rb[k].numel() for k in keys[:1]):
        return {"tokens": len(keys), "shape_mismatch": [list(ra[keys[0]].shape), list(rb[keys[0]].shape)],
                "equal": False}
    a = torch.stack([ra[k].reshape(-1) for k in keys])  # per token, flattened: [KVH, D] maps to [KVH*D]
    b = torch.stack([rb[k].reshape(-1) for k in keys])
    if a.shape != b.shape:
        return {"tokens": len(keys), "shape_mismatch": [list(a.shape), list(b.shape)], "equal": False}
    if a.dtype != b.dtype:
        a, b = a.float(), b.float()
    eq = a == b
    ulp = ulp_distance(a, b)
    diff = ulp[~eq].float()
    return {"tokens": len(keys), "equal": bool(eq.all()), "fraction_equal": float(eq.float().mean()),
            "max_abs": float((a.float() - b.float()).abs().max()), "max_ulp": int(ulp.max()),
            "median_ulp_of_diffs": float(diff.median()) if diff.numel() else 0.0}


class BoundaryMismatch(ValueError):
    """The two dumps do not record the same boundaries: comparing a subset would hide the rest."""


def diagnose(a: tuple[dict, dict], b: tuple[dict, dict], common_only: bool = False) -> dict:
    """Compare two dumps (manifest, rows) -> report with a per-boundary table and a verdict.
    Dumps with different boundary sets are refused (BoundaryMismatch) unless `common_only`."""
    (ma, ra), (mb, rb) = a, b
    # the layer count from the dumps themselves too: a manifest without num_layers must not
    # silently shrink the comparison to embed / final_norm / logits
    seen = [int(m.group(1)) + 1 for n in (*ra, *rb) if (m := re.match(r"layers\.(\d+)\.", n))]
    num_layers = max([int(ma["model"].get("num_layers") or 0), *seen])
    unknown = sorted((set(ra) | set(rb)) - set(canonical_order(num_layers)))
    only_a, only_b = sorted(set(ra) - set(rb)), sorted(set(rb) - set(ra))
    if unknown or ((only_a or only_b) and not common_only):
        raise BoundaryMismatch(
            "the dumps do not record the same boundaries"
            + (f"; only in A: {', '.join(only_a)}" if only_a else "")
            + (f"; only in B: {', '.join(only_b)}" if only_b else "")
            + (f"; not canonical boundary names: {', '.join(unknown)}" if unknown else ""))
    moe = bool(ma["model"].get("num_experts", 0))
    report = {"a": ma.get("engine"), "b": mb.get("engine"), "boundaries": [], "first_divergence": None,
              "common_only": bool(only_a or only_b)}
    wa, wb = ma.get("weights", {}), mb.get("weights", {})
    bad_w = sorted(k for k in set(wa) | set(wb) if wa.get(k) != wb.get(k)) if wa and wb else []
    cfg_diff = {k: (ma["model"].get(k), mb["model"].get(k)) for k in set(ma["model"]) | set(mb["model"])
                if k not in ("name", "hf_path") and ma["model"].get(k) != mb["model"].get(k)}
    report["weights_differ"] = bad_w
    report["config_differ"] = {k: list(v) for k, v in cfg_diff.items()}
    for name in canonical_order(num_layers):
        in_a, in_b = name in ra, name in rb
        row = {"boundary": name}
        if not (in_a and in_b):
            row["mapped"] = "absent in " + ("both" if not (in_a or in_b) else ("A" if not in_a else "B"))
            if in_a or in_b:
                report["boundaries"].append(row)
            continue
        stats = compare_boundary(ra[name], rb[name])
        if stats is None:
            row["mapped"] = "no common tokens"
            report["boundaries"].append(row)
            continue
        row.update(stats)
        report["boundaries"].append(row)
        if not stats["equal"] and report["first_divergence"] is None:
            report["first_divergence"] = name
    report["verdict"], report["reason"], report["remedy"] = _verdict(report, ra, rb, num_layers, moe)
    return report


def _verdict(report, ra, rb, num_layers, moe):
    rows = {r["boundary"]: r for r in report["boundaries"]}
    first = report["first_divergence"]
    if report["weights_differ"]:
        return ("framework difference", f"weights differ in {', '.join(report['weights_differ'])}",
                "load the same checkpoint on both sides (a conversion or sharding bug)")
    if report["config_differ"]:
        where = f"; first visible at {first}" if first else ""
        return ("framework difference", f"model config differs: {report['config_differ']}{where}",
                "make both engines read the same model config")
    if first is None:
        compared = [r for r in report["boundaries"] if "equal" in r]
        if not compared:
            return ("framework difference", "no boundary maps between the two dumps", "check the name maps")
        return ("equal", "every mapped boundary is bitwise equal", "")
    r = rows[first]
    if "shape_mismatch" in r:
        return ("framework difference", f"{first}: shapes {r['shape_mismatch']} do not map", "check the name map / TP gather dims")
    inputs = _inputs(first, num_layers, moe)
    unequal_inputs = [i for i in inputs if i in rows and rows[i].get("equal") is False]
    if unequal_inputs:
        return ("framework difference", f"inputs of {first} already differ: {unequal_inputs}", "")
    kind = first.rsplit(".", 1)[-1]
    if r["median_ulp_of_diffs"] > ROUNDING_ULPS:
        return ("framework difference",
                f"{first}: logic-level difference (median {r['median_ulp_of_diffs']:.0f} ULPs over "
                f"{1 - r['fraction_equal']:.0%} of elements) with equal inputs: an op applied at a different point "
                "or a different formula", "compare the two implementations of this step")
    return ("operator path", f"{first}: inputs equal, outputs differ at rounding level "
            f"(max {r['max_ulp']} ULP): kernel or reduction order", REMEDY.get(kind, ""))


def plot(report: dict, rows_a: dict, rows_b: dict, out_dir) -> list:
    """max |Δ| per boundary (log scale) and a histogram of Δ log p."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r for r in report["boundaries"] if "max_abs" in r]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.3), 4))
    ax.bar(range(len(rows)), [max(r["max_abs"], 1e-12) for r in rows],
           color=["tab:green" if r["equal"] else "tab:red" for r in rows])
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [r["boundary"] for r in rows], rotation=90, fontsize=7)
    ax.set_ylabel("max |Δ| (1e-12 = equal)")
    ax.set_title(f"{report['a']} vs {report['b']}: first divergence {report['first_divergence']}")
    fig.tight_layout()
    p1 = out_dir / "boundaries.png"
    fig.savefig(p1, dpi=100)
    plt.close(fig)
    paths = [p1]
    if "logprobs" in rows_a and "logprobs" in rows_b:
        keys = sorted(set(rows_a["logprobs"]) & set(rows_b["logprobs"]))
        d = torch.stack([rows_a["logprobs"][k].float() - rows_b["logprobs"][k].float() for k in keys]).flatten()
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.hist(d.numpy(), bins=50)
        ax.set(title="Δ log p (A - B)", xlabel="Δ log p", ylabel="tokens")
        fig.tight_layout()
        p2 = out_dir / "logprob_diff_hist.png"
        fig.savefig(p2, dpi=100)
        plt.close(fig)
        paths.append(p2)
    return paths


__all__ = ["diagnose", "plot", "ulp_distance", "LAYER_BOUNDARIES"]
