"""`topl recipes import`'s result and report: the Imported record, what the report lists by
line (the script's keys kept verbatim, what was not resolved, what topl adds and why, what it
writes out with verl's own value), and the recipe file's text. `build_recipe` (recipe.py) fills it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topl.launcher.importer.exact import dropped_rows
from topl.launcher.importer.fit import (
    MISSING,
    as_verl_reads,
    script_values,
    topl_adds,
    verl_default,
)
from topl.launcher.importer.read import Script
from topl.launcher.importer.version import shell_var_rows, spelled, spelled_why, unknown_keys
from topl.launcher.render import env as render_env


def same(a: Any, b: Any) -> bool:
    """Values equal as verl would read them (True is not 1; 1 equals 1.0)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def same_run(key: str, a: Any, b: Any) -> bool:
    """`same`, with a data file string read as verl reads it (fit.as_verl_reads)."""
    return same(as_verl_reads(key, a), as_verl_reads(key, b))


@dataclass
class Imported:
    recipe: dict  # the recipe's content (without the defaults list)
    defaults: dict[str, str]  # group -> option
    report: list[dict]  # {line, kind, key, detail}
    round_trip: list[dict]  # script settings the recipe does not render identically (should be [])
    topl_adds: list[dict] = field(default_factory=list)  # {key, value, why}: kept, not the script's
    verl_defaults: list[str] = field(default_factory=list)  # keys written with verl's own value
    secrets: dict = field(default_factory=dict)  # name -> script_read.Secret (redaction only)
    # what the user types next to `recipe=OUT` (a recipe may not choose the program or config)
    command_line: dict[str, str] = field(default_factory=dict)
    respelled: dict[str, str | None] = field(default_factory=dict)  # key -> the key saying it
    verl: str = ""  # the declared verl the recipe was checked against (version + patches)
    dropped: list[dict] = field(default_factory=list)  # {line, key, script, why}: not carried

    def command_args(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.command_line.items()]


def kept(key: str, value: Any, default: Any = None, s: Script | None = None) -> bool:
    """A key topl keeps although the script does not set it (TOPL_ADDS; the device only as npu)."""
    return topl_adds(key, default, script_values(s), value) is not None and (
        key != "trainer.device" or value == "npu"
    )


def imported(s, groups, rec, pairs, env, env_r, verbatim, vcfg, inv, extra, sch) -> Imported:
    """The report: the script's own keys kept verbatim, what was not resolved, and in sections of
    their own what topl adds (with why) and what it writes out with verl's own value."""
    report = [
        {"line": st.line, "kind": "verl override (no spec field)", "key": k, "detail": st.value}
        for k, st in s.overrides.items()
        if ("+" if st.add else "") + k in verbatim
    ]
    report += [
        {"line": s.env[k].line, "kind": "env kept in cluster.env", "key": k, "detail": v}
        for k, v in env.items()
    ]
    report += [
        {"line": ln, "kind": "not resolved", "key": None, "detail": msg} for ln, msg in s.notes
    ]
    report += extra
    carried = spelled(s, sch)
    report += [
        {"line": s.overrides[k].line, "kind": "unknown to verl", "key": k, "detail": why}
        for k, why in unknown_keys(s, sch).items()
    ]
    report += [
        {
            "line": s.overrides[k].line,
            "kind": "spelled for the declared verl",
            "key": k,
            "detail": spelled_why(k, c, sch),
        }
        for k, c in carried.items()
    ]
    report += shell_var_rows(s)
    adds, written, trip = [], [], []
    for k, v in pairs.items():
        key = k.lstrip("+")
        if key in s.overrides:
            continue
        d = verl_default(key, vcfg, sch)
        if d is not MISSING and same(v, d):
            written.append(key)  # verl's own value, written out: no change
        elif kept(key, v, d, s):
            adds.append({"key": key, "value": v, "why": topl_adds(key, d, script_values(s), v)})
        else:
            verl = "absent" if d is MISSING else repr(d)
            trip.append(
                {"line": None, "key": key, "script": f"(not set; verl: {verl})", "rendered": v}
            )
    as_script = render_env.without_guard(
        env_r
    )  # the guard is topl's addition, as the `+` and forwarding
    adds += [
        {"key": f"env {k}", "value": v, "why": _env_why(k)}
        for k, v in env_r.items()
        if k not in s.env
    ]
    trip += [
        {
            "line": st.line,
            "key": k,
            "script": st.value,
            "rendered": pairs.get(k, pairs.get("+" + k)),
        }
        for k, st in s.overrides.items()
        if k not in carried and not same_run(k, pairs.get(k, pairs.get("+" + k, MISSING)), st.value)
    ]
    trip += [
        {"line": it.line, "key": k, "script": it.text, "rendered": as_script.get(k)}
        for k, it in s.env.items()
        if as_script.get(k) != it.text
    ]
    report.sort(key=lambda r: (r["line"] is None, r["line"] or 0))
    verl = sch.version + (f" + {', '.join(sch.patches)}" if sch.patches else "")
    imp = Imported(rec, groups, report, trip, adds, written, dict(s.secrets))
    imp.respelled, imp.verl, imp.dropped = carried, verl, dropped_rows(s, env_r)
    return imp


def _env_why(name: str) -> str:
    if name.startswith("TOPL_") or name == "VERL_USE_EXTERNAL_MODULES":
        return "topl's guard (records the run's determinism settings)"
    if name in (
        "VLLM_BATCH_INVARIANT",
        "CLOSE_MATMUL_K_SHIFT",
        "ATB_MATMUL_SHUFFLE_K_ENABLE",
        "ATB_LLM_LCOC_ENABLE",
        "VLLM_ASCEND_ENABLE_NZ",
        "LCCL_DETERMINISTIC",
    ):
        return "strict alignment (TOP-COLL-001/002)"
    return "topl's Ascend default for every process (render_env.derived_env)"


def recipe_text(imp: Imported, source: str) -> str:
    """The recipe file: Hydra experiment format, groups first, then the differing values."""
    import yaml

    head = [
        "# @package _global_",
        f"# Imported from {source} by `topl recipes import`.",
        "defaults:",
    ]
    head += [
        f"  - override /{g}: {o if o != 'off' else chr(34) + 'off' + chr(34)}"
        for g, o in imp.defaults.items()
    ]
    head.append("  - _self_")
    body = yaml.safe_dump(imp.recipe, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(head) + "\n\n" + body
