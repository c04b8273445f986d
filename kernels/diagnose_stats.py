"""Per-boundary statistics of `topl diagnose`: shape, dtype, non-finite values, ULP distances,
and whether a difference looks like rounding (kernels/diagnose.py reads them into a verdict)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from topl.kernels.dump import Rows

# Median ULP distance of the differing elements up to which a difference is "rounding level": a
# reordered sum or a fused op moves results by one ULP here and there (median 1 for every switch of
# the reference engines); a step applied at another point moves most of them by several.
ROUNDING_ULPS = 2
# A difference is systematic when at least this many elements differ and at least this fraction of
# them moves the same way (signed, or in magnitude); reordered sums round up and down about equally.
BIAS_MIN_ELEMENTS, BIAS_FRACTION = 64, 0.9


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in units in the last place, in the tensors' own dtype (integer view)."""
    if not a.is_floating_point():
        return (a != b).long()
    bits = {
        torch.float32: torch.int32,
        torch.bfloat16: torch.int16,
        torch.float16: torch.int16,
    }.get(a.dtype)
    if bits is None:
        a, b, bits = a.float(), b.float(), torch.int32
    ia, ib = a.contiguous().view(bits).long(), b.contiguous().view(bits).long()
    # map sign-magnitude to a monotonic integer line
    top = 1 << (torch.iinfo(bits).bits - 1)
    ia = torch.where(ia < 0, -top - ia, ia)
    ib = torch.where(ib < 0, -top - ib, ib)
    return (ia - ib).abs()


def _nonfinite(t: torch.Tensor, keys: list[tuple[int, int]]) -> dict[str, Any] | None:
    """NaN / inf counts of one side and where the first one is (token key, flat element index)."""
    bad = ~torch.isfinite(t)
    if not bad.any():
        return None
    first = int(bad.reshape(-1).nonzero()[0])
    per = t[0].numel()
    return {
        "nan": int(torch.isnan(t).sum()),
        "inf": int(torch.isinf(t).sum()),
        "first": {"token": list(keys[first // per]), "element": first % per},
    }


def compare_boundary(ra: Rows, rb: Rows) -> dict[str, Any] | None:
    """Per-boundary statistics: shape, then dtype, then values (NaN equal to NaN, non-finite
    values counted per side, the value statistics over the elements finite on both sides)."""
    keys = sorted(set(ra) & set(rb))
    if not keys:
        return None
    # a token's row is compared flattened ([KVH, D] maps to [KVH*D]): its element count must agree
    odd = next((k for k in keys if ra[k].numel() != rb[k].numel()), None)
    if odd is not None:
        shapes = [list(ra[odd].shape), list(rb[odd].shape)]
        return {"tokens": len(keys), "shape_mismatch": shapes, "equal": False}
    dta, dtb = ra[keys[0]].dtype, rb[keys[0]].dtype
    if dta != dtb:
        return {"tokens": len(keys), "dtype_mismatch": [str(dta), str(dtb)], "equal": False}
    a = torch.stack([ra[k].reshape(-1) for k in keys])
    b = torch.stack([rb[k].reshape(-1) for k in keys])
    floating = a.is_floating_point()
    eq = (a == b) | (torch.isnan(a) & torch.isnan(b)) if floating else a == b
    out = {"tokens": len(keys), "elements": a.numel(), "equal": bool(eq.all())}
    if floating:
        nf = {s: got for s, t in (("A", a), ("B", b)) if (got := _nonfinite(t, keys))}
        if nf:
            out["nonfinite"] = nf
            out["nonfinite_mismatch"] = int((~eq & ~(torch.isfinite(a) & torch.isfinite(b))).sum())
        both = torch.isfinite(a) & torch.isfinite(b)
    else:
        both = torch.ones_like(eq)
    ulp = torch.where(both, ulp_distance(a, b), 0)
    diff = ulp[~eq & both].float()
    gap = torch.where(both, (a.float() - b.float()).abs(), 0.0)
    out.update(
        fraction_equal=float(eq.float().mean()),
        max_abs=float(gap.max()),
        max_ulp=int(ulp.max()),
        median_ulp_of_diffs=float(diff.median()) if diff.numel() else 0.0,
        differing=int((~eq).sum()),
    )
    if diff.numel() and floating:
        sel = ~eq & both
        fa, fb = a[sel].float(), b[sel].float()
        eps = torch.finfo(a.dtype).eps
        out.update(
            sign_bias=float((fa > fb).float().mean()),  # share of A > B: 0.5 for rounding
            magnitude_bias=float((fa.abs() > fb.abs()).float().mean()),  # share of |A| > |B|
            median_rel_err_eps=float(((fa - fb).abs() / fb.abs().clamp_min(1e-30)).median() / eps),
        )
    return out


def strict_json(obj: Any) -> Any:
    """The report with non-finite floats as strings ("nan", "inf", "-inf"): strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if obj != obj else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def systematic(r: dict[str, Any]) -> str | None:
    """Why the differing elements are not rounding noise, or None."""
    n = r.get("differing", 0)
    if r["median_ulp_of_diffs"] > ROUNDING_ULPS:
        return (
            f"median {r['median_ulp_of_diffs']:.0f} ULPs over the {n} of {r['elements']} "
            "elements that differ"
        )
    if n >= BIAS_MIN_ELEMENTS:
        for key, what in (("sign_bias", "A > B"), ("magnitude_bias", "|A| > |B|")):
            share = r.get(key, 0.5)
            if max(share, 1 - share) >= BIAS_FRACTION:
                return (
                    f"{what} on {round(share * n)} of {n} differing elements "
                    f"(rounding goes both ways; relative error {r['median_rel_err_eps']:.1f} eps)"
                )
    return None


def nonfinite_text(r: dict[str, Any]) -> str:
    """'3 NaN, 0 inf in A (first at token [2, 5], element 17); B: none' for a boundary row."""
    nf = r.get("nonfinite", {})
    parts = []
    for side in ("A", "B"):
        got = nf.get(side)
        if got:
            f = got["first"]
            parts.append(
                f"{got['nan']} NaN, {got['inf']} inf of {r['elements']} elements in {side} "
                f"(first at token {f['token']}, element {f['element']})"
            )
        else:
            parts.append(f"{side}: all finite")
    return "; ".join(parts)
