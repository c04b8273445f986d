"""The generated stack tables: docs/reference.md's "Supported stacks" (the shipped profiles and
the facts: `python -m topl.launcher.facts.stacks`) and docs/stacks.md's per-release table
(`releases_markdown`); `python scripts/regen_docs.py` writes both, tests/facts/test_facts.py
keeps them in sync."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from topl.launcher.align import targets
from topl.launcher.facts import supports

FEATURES = (  # (row, fact id)
    ("FA3 attention backend", "fa3_backend"),
    ("FA3 chosen by attention_backend=FLASH_ATTN", "fa3_by_attention_backend"),
    ("FA3 chosen by additional_config.rl_config", "rl_config"),
    ("NZ off through VLLM_ASCEND_ENABLE_NZ", "nz_env"),
    ("NZ off through additional_config.weight_nz_mode", "nz_config"),
    ("per-request sampling seed", "per_request_seed"),
    ("vLLM pipeline parallel on NPU", "vllm_pp_npu"),
    ("MindSpeed batch-invariant switches", "mindspeed_bi_switches"),
    ("torch_npu.npu.set_deterministic_level", "set_deterministic_level"),
    ("HCCL strict keeps the order on A3", "hccl_strict_orders_on_a3"),
    (
        "vendor docs: chunked prefill / prefix cache / preemption break batch invariance",
        "bi_breaks_with_chunked_prefill_prefix_cache_preemption",
    ),
    (
        "seed evidence: logdiff 0 with prefix cache and chunked prefill on",
        "seed_logdiff0_with_cache_and_chunking",
    ),
)


def profiles() -> dict[str, dict[str, Any]]:
    import yaml  # here: `check` reads no profile file

    root = resources.files("topl.conf") / "stack"
    found = {
        p.name[:-5]: yaml.safe_load(p.read_text())
        for p in root.iterdir()
        if p.name.endswith(".yaml")
    }
    order = {"seed": 0, "release": 1, "prerelease": 2}  # the shipped ones first, then any others
    return {k: found[k] for k in sorted(found, key=lambda k: (order.get(k, 3), k))}


@cache
def shipped_version(profile: str, package: str) -> str:
    """A version a shipped profile declares (conf/stack/PROFILE.yaml), read once per process:
    rules ask for it on every spec they judge (`check --fix` judges thousands)."""
    return str(profiles()[profile]["versions"][package])


def _patched(version: str, patches: list[str] | None) -> str:
    return f"{version} + {', '.join(patches)}" if patches else str(version)


def stacks_markdown() -> str:
    ps = profiles()
    names = list(ps)
    vs = {k: {**p["versions"], "profile": k} for k, p in ps.items()}
    rows = [
        ("verl", [_patched(v["verl"], v.get("verl_patches")) for v in vs.values()]),
        (
            "vLLM / vllm-ascend",
            [
                f"{v['vllm']} / " + _patched(v["vllm_ascend"], v.get("vllm_ascend_patches"))
                for v in vs.values()
            ],
        ),
        ("torch / torch_npu", [f"{v['torch']} / {v['torch_npu']}" for v in vs.values()]),
        ("CANN", [str(v["cann"]) for v in vs.values()]),
        ("MindSpeed", [str(v["mindspeed"]) for v in vs.values()]),
        (
            "patch module",
            [
                f"`{p['external_modules']}`"
                if p.get("external_modules")
                else f"`{targets.LOAD_MODULE}` (topl's, strict NPU runs)"
                if targets.version_key(p["versions"]["vllm_ascend"])
                else "none"
                for p in ps.values()
            ],
        ),
        (
            "alignments nothing provides to a MoE model (TOP-STACK-005; docs/stacks.md)",
            [
                "none"
                if p.get("external_modules")
                else ", ".join(targets.missing(p["versions"]["vllm_ascend"])) or "none"
                for p in ps.values()
            ],
        ),
    ]
    rows += [
        (f"{label} (`{fid}`)", ["yes" if supports(fid, v) else "no" for v in vs.values()])
        for label, fid in FEATURES
    ]
    out = ["| | " + " | ".join(f"`stack={n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    out += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return "\n".join(out)


def releases_markdown() -> str:
    """docs/stacks.md's release table: every vllm-ascend release topl knows (issue 47's range),
    its target group, the vLLM it pins, how FA3 is chosen, and what strict gets, dense and MoE
    (the shipped strict recipes on each: tests/facts/test_facts_releases.py)."""
    group = {v: g.name for g in targets.GROUPS for v in g.releases}
    out = [
        "| vllm-ascend | group | vLLM | FA3 chosen by | strict, dense | strict, MoE |",
        "|---|---|---|---|---|---|",
    ]
    for v in targets.KNOWN:
        on = {"vllm_ascend": v}
        fa3 = (
            "`additional_config.rl_config`"
            if supports("rl_config", on)
            else "`attention_backend=FLASH_ATTN` + `VLLM_BATCH_INVARIANT=1`"
            if supports("fa3_backend", on)
            else "none (the seed's patch: `stack=seed`)"
            if supports("seed_fa3_patch_applies", on)
            else "none"
        )
        if v in targets.UNALIGNABLE:
            dense = moe = "refused (TOP-STACK-002, TOP-STACK-005: no FA3)"
            if supports("seed_fa3_patch_applies", on):
                dense = moe = "`stack=seed` only (the seed's module)"
        else:
            gaps = targets.missing(v)
            dense = "topl's module" + (" (gaps)" if set(gaps) - targets.MOE_ONLY else "")
            moe = "topl's module" + (" (gaps)" if gaps else "")
        pin = targets.VLLM_PIN[v]
        out.append(f"| {v} | {group.get(v, '-')} | {pin} | {fa3} | {dense} | {moe} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(stacks_markdown())
