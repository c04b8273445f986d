"""Localise residual logdiff: weights first, then the first diverging boundary, then a verdict.

Verdicts
- operator path: the first diverging boundary's inputs are bitwise equal and its outputs differ at
  rounding level: a kernel or reduction order differs. Named with the alignment switch(es) / contract
  rule that address that boundary, narrowed by sibling boundaries and by the dumps' own layouts.
- framework difference: weights or model config differ, boundaries do not map, or the first
  divergence is logic-level: an op applied at another point, a different epsilon or scale, a
  missing step.
- dtype difference: the models' dtypes, or a boundary's stored dtype, differ (checked first: values
  of different dtypes are not compared).
- non-finite values: the first diverging boundary has NaN / inf on one side only (named with
  counts and the first token and element); identical NaN / inf on both sides count as equal.
- cannot tell: an input of the first diverging boundary was not dumped (the Megatron / vLLM hook
  maps have no q, k, v), so the divergence may have started upstream of it.

Rounding vs logic, on the differing elements of the first diverging boundary: rounding moves
results by about one ULP (median <= ROUNDING_ULPS), relative errors of the order of the dtype's
epsilon, and in both directions about equally often; a logic-level change moves them further, or
all the same way (a x1.01 scale is within 2 bf16 ULPs, but every |value| grows).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from topl.kernels.diagnose_stats import (
    compare_boundary,
    nonfinite_text,
    strict_json,
    systematic,
    ulp_distance,
)
from topl.kernels.dump import LAYER_BOUNDARIES, Manifest, Rows, canonical_order

# Alignment switches that change each boundary's operator, most likely first (kernels/model.py);
# with the contract rules that enforce them.
CANDIDATES = {
    "input_norm": ["batch_invariant", "fused_ops_matched"],
    "q": ["fused_ops_matched", "batch_invariant"],
    "k": ["fused_ops_matched", "batch_invariant"],
    "v": ["batch_invariant"],
    "attn": ["attention_semantics", "reduction_order", "softmax_tiling", "fp32_critical_path"],
    "o_proj": ["tp_aligned_reduction", "batch_invariant"],
    "post_attn_residual": ["fused_ops_matched"],
    "router_logits": ["batch_invariant"],
    "expert_out": ["batch_invariant", "fused_ops_matched"],
    "mlp": ["moe_fixed_combine", "tp_aligned_reduction", "fused_ops_matched", "batch_invariant"],
    "final_norm": ["fused_ops_matched", "batch_invariant"],
    "logits": ["batch_invariant"],
    "logprobs": ["fp32_critical_path"],
}
WHAT = {
    "attention_semantics": "only visible keys in the softmax (TOP-ATTN-001)",
    "reduction_order": "decode KV splits on the training tiles (TOP-ATTN-001, TOP-ATTN-004)",
    "softmax_tiling": "the same online-softmax tile cadence (TOP-ATTN-001, TOP-ATTN-004)",
    "fp32_critical_path": "fp32 softmax sums and log-softmax (TOP-ALN-001)",
    "batch_invariant": "batch-invariant GEMM / RMSNorm (TOP-STACK-004)",
    "fused_ops_matched": "the same fused-or-not swiglu / add+RMSNorm / RoPE (TOP-STACK-005)",
    "moe_fixed_combine": "top-k expert outputs summed in rank order (TOP-ALN-001)",
    "tp_aligned_reduction": "the same TP partials and reduction tree (TOP-TP-001, TOP-COLL-001)",
}

REMEDY = {  # where no alignment switch applies
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
        return {
            "final_norm": [last + "post_attn_residual", last + "mlp"],
            "logits": ["final_norm"],
            "logprobs": ["logits"],
        }[boundary]
    i, b = int(m.group(1)), m.group(2)
    p = f"layers.{i}."
    layer_in = (
        ["embed"] if i == 0 else [f"layers.{i - 1}.post_attn_residual", f"layers.{i - 1}.mlp"]
    )
    return {
        "input_norm": layer_in,
        "q": [p + "input_norm"],
        "k": [p + "input_norm"],
        "v": [p + "input_norm"],
        "attn": [p + "q", p + "k", p + "v"],
        "o_proj": [p + "attn"],
        "post_attn_residual": [p + "o_proj", *layer_in],
        "router_logits": [p + "post_attn_residual"],
        "experts": [p + "router_logits"],
        "expert_out": [p + "post_attn_residual", p + "experts"],
        "mlp": [p + "post_attn_residual"] + ([p + "expert_out"] if moe else []),
    }[b]


class BoundaryMismatch(ValueError):
    """The two dumps do not record the same boundaries: comparing a subset would hide the rest."""


Dump = tuple[Manifest, dict[str, Rows]]  # what dump.load returns
Layouts = tuple[dict[str, Any], dict[str, Any]]  # each dump's manifest["layout"]


def diagnose(a: Dump, b: Dump, common_only: bool = False) -> dict[str, Any]:
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
            + (f"; not canonical boundary names: {', '.join(unknown)}" if unknown else "")
        )
    moe = bool(ma["model"].get("num_experts", 0))
    report: dict[str, Any] = {
        "a": ma.get("engine"),
        "b": mb.get("engine"),
        "boundaries": [],
        "first_divergence": None,
        "common_only": bool(only_a or only_b),
    }
    wa, wb = ma.get("weights", {}), mb.get("weights", {})
    bad_w = sorted(k for k in set(wa) | set(wb) if wa.get(k) != wb.get(k)) if wa and wb else []
    cfg_diff = {
        k: (ma["model"].get(k), mb["model"].get(k))
        for k in set(ma["model"]) | set(mb["model"])
        if k not in ("name", "hf_path") and ma["model"].get(k) != mb["model"].get(k)
    }
    report["dtype"] = [ma.get("dtype"), mb.get("dtype")]
    report["weights_differ"] = bad_w
    report["config_differ"] = {k: list(v) for k, v in cfg_diff.items()}
    for name in canonical_order(num_layers):
        in_a, in_b = name in ra, name in rb
        row: dict[str, Any] = {"boundary": name}
        if not (in_a and in_b):
            row["mapped"] = "absent in " + (
                "both" if not (in_a or in_b) else ("A" if not in_a else "B")
            )
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
    layouts = (ma.get("layout") or {}, mb.get("layout") or {})
    report["verdict"], report["reason"], report["remedy"], report["switches"] = _verdict(
        report, num_layers, moe, layouts
    )
    out: dict[str, Any] = strict_json(report)
    return out


def switches_for(
    first: str, rows: dict[str, dict[str, Any]], moe: bool, layouts: Layouts
) -> list[str]:
    """The alignment switches that address an operator difference at `first`, most likely first."""
    kind = first.rsplit(".", 1)[-1]
    cands = [c for c in CANDIDATES.get(kind, []) if moe or c != "moe_fixed_combine"]
    sibling = first.rsplit(".", 1)[0] + ".v"
    if kind in ("q", "k") and rows.get(sibling, {}).get("equal") is False:
        cands = [
            "batch_invariant",
            "fused_ops_matched",
        ]  # v differs too: the shared projection GEMM
    off = set()
    for lay in layouts:  # a dump that records its alignment (topl's engines do) narrows the list
        al = lay.get("alignment") or {}
        off |= {s for s, on in al.items() if on is False}
    return [c for c in cands if c in off] or cands


def _verdict(
    report: dict[str, Any], num_layers: int, moe: bool, layouts: Layouts
) -> tuple[str, str, str, list[str]]:
    """(verdict, reason, remedy, switches)."""
    rows = {r["boundary"]: r for r in report["boundaries"]}
    first = report["first_divergence"]
    dt = report["dtype"]
    stored = [r for r in report["boundaries"] if "dtype_mismatch" in r]
    if (dt[0] and dt[1] and dt[0] != dt[1]) or stored:
        what = f"A's model is {dt[0]}, B's {dt[1]}" if dt[0] != dt[1] else "same model dtype"
        if stored:
            x = stored[0]
            what += (
                f"; {len(stored)} boundaries stored in different dtypes, first {x['boundary']}: "
                f"{x['dtype_mismatch'][0]} vs {x['dtype_mismatch'][1]}"
            )
        return (
            "dtype difference",
            f"{what}: values of different dtypes are not compared",
            "run both engines in one dtype (train.dtype) and dump boundaries as computed",
            [],
        )
    if report["weights_differ"]:
        return (
            "framework difference",
            f"weights differ in {', '.join(report['weights_differ'])}",
            "load the same checkpoint on both sides (a conversion or sharding bug)",
            [],
        )
    if report["config_differ"]:
        where = f"; first visible at {first}" if first else ""
        return (
            "framework difference",
            f"model config differs: {report['config_differ']}{where}",
            "make both engines read the same model config",
            [],
        )
    if first is None:
        compared = [r for r in report["boundaries"] if "equal" in r]
        if not compared:
            return (
                "framework difference",
                "no boundary maps between the two dumps",
                "check the name maps",
                [],
            )
        nf = [r for r in compared if r.get("nonfinite")]
        if nf:
            return (
                "equal",
                f"every mapped boundary is bitwise equal, non-finite values included (first at "
                f"{nf[0]['boundary']}: {nonfinite_text(nf[0])})",
                "both engines produce the same NaN / inf: look upstream of "
                f"{nf[0]['boundary']} on both",
                [],
            )
        return ("equal", "every mapped boundary is bitwise equal", "", [])
    r = rows[first]
    if r.get("nonfinite_mismatch"):
        return (
            "non-finite values",
            f"{first}: {r['nonfinite_mismatch']} of {r['elements']} elements are NaN / inf on "
            f"one side only ({nonfinite_text(r)})",
            f"find what overflows or divides by zero at {first} on that side (fp16 range, a fully "
            "masked softmax row, an epsilon)",
            [],
        )
    if "shape_mismatch" in r:
        return (
            "framework difference",
            f"{first}: shapes {r['shape_mismatch']} do not map",
            "check the name map / TP gather dims",
            [],
        )
    inputs = _inputs(first, num_layers, moe)
    missing = [i for i in inputs if "equal" not in rows.get(i, {})]
    if missing:
        return (
            "cannot tell",
            f"{first} differs but its inputs {missing} were not dumped in both: the "
            "divergence may start there",
            f"dump {', '.join(missing)} as well (name map / keys)",
            switches_for(first, rows, moe, layouts),
        )
    unequal_inputs = [i for i in inputs if rows[i].get("equal") is False]
    if unequal_inputs:
        return (
            "framework difference",
            f"inputs of {first} already differ: {unequal_inputs}",
            "",
            [],
        )
    why = systematic(r)
    if why:
        return (
            "framework difference",
            f"{first}: logic-level difference with equal inputs ({why}): an op "
            "applied at a different point, another scale or formula",
            "compare the two implementations of this step",
            [],
        )
    found = switches_for(first, rows, moe, layouts)
    kind = first.rsplit(".", 1)[-1]
    remedy = "; ".join(f"alignment.{s}=true: {WHAT[s]}" for s in found) or REMEDY.get(kind, "")
    if kind == "logprobs":
        remedy += "; rollout.logprobs_mode (TOP-LOGP-002)"
    on = _all_on(first, moe, layouts)
    if on:  # both dumps record every switch for this boundary on: none of them is the remedy
        found, remedy = (
            [],
            (
                f"the switches for {kind} ({', '.join(on)}) are already on in both dumps: compare "
                "the two kernels of this step"
            ),
        )
    return (
        "operator path",
        f"{first}: inputs equal, {r['differing']} of {r['elements']} elements differ at "
        f"rounding level (median {r['median_ulp_of_diffs']:.0f}, max {r['max_ulp']} ULP, no "
        "sign bias): kernel or reduction order",
        remedy,
        found,
    )


def _all_on(first: str, moe: bool, layouts: Layouts) -> list[str]:
    """The boundary's candidate switches when both dumps record all of them on, else []."""
    kind = first.rsplit(".", 1)[-1]
    cands = [c for c in CANDIDATES.get(kind, []) if moe or c != "moe_fixed_combine"]
    als = [lay.get("alignment") or {} for lay in layouts]
    if cands and all(al and all(al.get(c) is True for c in cands) for al in als):
        return cands
    return []


def plot(
    report: dict[str, Any], rows_a: dict[str, Rows], rows_b: dict[str, Rows], out_dir: str | Path
) -> list[Path]:
    """max |Δ| per boundary (log scale) and a histogram of Δ log p."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r for r in report["boundaries"] if "max_abs" in r]
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.3), 4))
    ax.bar(
        range(len(rows)),
        [max(r["max_abs"], 1e-12) for r in rows],
        color=["tab:green" if r["equal"] else "tab:red" for r in rows],
    )
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
        d = torch.stack(
            [rows_a["logprobs"][k].float() - rows_b["logprobs"][k].float() for k in keys]
        ).flatten()
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
