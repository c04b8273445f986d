"""`topl recipes import SCRIPT.sh`: a verl launch script -> a recipe, plus a report by line.

1. `read_script` (pure): bash text -> the launch's Hydra overrides and env, each with its line
   (`bash_resolve` reads the bash; Hydra's own override parser types the values).
2. `build_recipe`: verl keys go back onto spec fields through the inverse of the renderer's table
   (`render.VERL_KEYS` + engine table: one table, read backwards); every other key, and any value
   the spec would render differently, stays a verbatim verl override; env vars topl would not
   render the same go to `cluster.env`. The recipe is checked by rendering it again.
3. report.py: the Imported record, the report by line, the recipe file's text.
"""

from __future__ import annotations

from typing import Any

from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.importer.expand import Item
from topl.launcher.importer.fit import (
    DATA_FILES,
    EAGER_KEY,
    MISSING,
    MODEL_KEY,
    as_verl_reads,
    data_dir_of,
    field_holds,
    graph_mode_of,
    model_from_config,
    not_recognised,
    script_config,
    verl_default,
)
from topl.launcher.importer.groups import cluster_choice, guess_groups
from topl.launcher.importer.read import Script
from topl.launcher.importer.report import Imported, imported, kept, same, same_run
from topl.launcher.importer.version import (
    command_line,
    command_line_rows,
    spelled,
    version_rows,
)
from topl.launcher.render import invocation as R
from topl.launcher.render.command import DERIVED, DERIVED_WHEN_SET

# Env vars `render.env_vars` derives from a spec field. Only a hint: each is kept on its field only
# when rendering the recipe gives the script's value back, otherwise it stays in cluster.env.
ENV_FIELDS = {
    "HCCL_CONNECT_TIMEOUT": "collective.connect_timeout_s",
    "HCCL_EXEC_TIMEOUT": "collective.exec_timeout_s",
    "HCCL_OP_EXPANSION_MODE": "collective.op_expansion_mode",
    "HCCL_DETERMINISTIC": "collective.hccl_deterministic",
    "HCCL_ALGO": "collective.hccl_algo",
    "VERL_USE_EXTERNAL_MODULES": "cluster.external_modules",
}


# verl keys the renderer derives from a spec field outside its tables, each with that field
# (command.DERIVED_WHEN_SET: the data files; render_stack.stack_overrides: the sampling seed).
# The script's value goes on the field only where the groups alone render another value: a
# field (or an override) equal to what topl renders anyway is never written.
DERIVED_FIELDS = {
    **DERIVED_WHEN_SET,
    f"{R.ARR}.rollout.per_request_seed": "rollout.per_request_seed",
}


def inverse_table(engine: str) -> dict[str, str]:
    """verl key -> spec field, read backwards from the renderer's own table (and DERIVED_FIELDS)."""
    table = {**R.VERL_KEYS, **(R.MEGATRON_KEYS if engine == "megatron" else R.FSDP_KEYS)}
    ref = f"{R.ARR}.ref.log_prob_micro_batch_size_per_gpu"  # rendered from a train field too
    return {**{verl: f for f, verl in table.items()}, ref: DERIVED[ref], **DERIVED_FIELDS}


def _derived_value(key: str, value: Any, rendered: dict) -> bool:
    """Does the script's `value` of a DERIVED_FIELDS key go on its field? Only where the groups
    render it otherwise, and as the field types it (the data files: List[str]; a plain string
    stays a verbatim override, unless verl reads it as that list)."""
    value = as_verl_reads(key, value)
    if same(rendered.get(key, rendered.get("+" + key, MISSING)), value):
        return False
    if key in DERIVED_WHEN_SET:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    return isinstance(value, bool)


def _set(tree: dict, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for part in head:
        tree = tree.setdefault(part, {})
    tree[last] = value


def _model(s: Script, groups: dict) -> dict | None:
    """The model's fields when no group names it (from a readable config.json); else refuse."""
    if "model" in groups:
        return None
    st = s.overrides.get(MODEL_KEY)
    fields_ = model_from_config(st.value) if st is not None else None
    if fields_ is None:
        raise not_recognised(st.value if st else "(not set: verl's default)", st and st.line)
    return fields_


def _ray_job(s: Script) -> tuple[dict, list[dict]]:
    """`ray job submit` options: the address -> cluster.ray_address (backend ray_job); the
    working dir and runtime env are reported (topl's ray_job backend builds its own)."""
    fields_, report, it = {}, [], iter(s.runner_args)
    for a in it:
        name, eq, value = a.text.partition("=")
        if name.startswith("--") and not eq and name not in ("--no-wait", "--verify"):
            value = next(it, Item("", a.line)).text
        if name == "--address":
            fields_.update({"cluster.ray_address": value, "cluster.backend": "ray_job"})
        elif name:
            report.append(
                {
                    "line": a.line,
                    "kind": "ray job submit option not kept",
                    "key": name,
                    "detail": value
                    + {
                        "--working-dir": " (topl's ray_job backend ships no working dir: "
                        "modules it names must be installed on the cluster)",
                        "--runtime-env": " (its env vars / packages are not read: put env vars "
                        "in cluster.env)",
                        "--runtime-env-json": " (not read: put env vars in cluster.env)",
                    }.get(name, ""),
                }
            )
    return fields_, report


def build_recipe(s: Script, choices: dict[str, str] | None = None) -> Imported:
    """Map the script onto spec fields over the chosen groups; the rest stays verbatim; every key
    the script leaves to verl is rendered with verl's own value, or listed in `topl_adds`."""
    from omegaconf import OmegaConf

    from topl.launcher.compose.hydra import compose_job  # lazy: OmegaConf only when this runs

    groups = {**guess_groups(s), **(choices or {})}
    model_fields = _model(s, groups)
    base = compose_job([f"{g}={o}" for g, o in groups.items()])
    cmdline = command_line(s, base.cfg.algorithm)
    if cmdline:  # composed as the printed command composes it: the schema reads config_name
        base = compose_job([f"{g}={o}" for g, o in groups.items()] + [*_args(cmdline)])
    sch = schema_for(base.to_object())
    carried = spelled(s, sch)  # keys the declared verl says through another (compared there)
    engine = OmegaConf.select(base.cfg, "train.engine")
    inv = inverse_table(engine)
    vcfg = script_config(s, engine == "megatron")
    fields: dict[str, Any] = {f"model.{k}": v for k, v in (model_fields or {}).items()}
    verbatim: dict[str, Any] = {}
    ray_fields, ray_report = _ray_job(s) if s.runner == "ray job submit" else ({}, [])
    fields.update(ray_fields)
    for key, st in s.overrides.items():
        f = inv.get(key)
        if f and key not in DERIVED_FIELDS and isinstance(st.value, (str, int, float, bool)):
            fields[f] = st.value
    env_base = R.env_vars(base.to_object())
    env = {k: it.text for k, it in s.env.items() if env_base.get(k) != it.text}
    for k in [k for k in env if k in ENV_FIELDS]:  # a field when rendering it gives the same env
        v = env.pop(k)
        fields[ENV_FIELDS[k]] = (
            int(v) if v.isascii() and v.isdigit() and k.endswith("TIMEOUT") else v
        )
    rendered = dict(R.overrides(base.to_object()))  # the groups alone (DERIVED_FIELDS)
    folder = data_dir_of(s)
    if folder is not None:  # DIR/train.parquet + DIR/test.parquet: topl's data_dir renders both
        fields["data_dir"] = folder
    for key, st in s.overrides.items():  # after the table's fields: their place in the recipe
        if folder is not None and key in DATA_FILES:
            continue
        if key in DERIVED_FIELDS and _derived_value(key, st.value, rendered):
            fields[DERIVED_FIELDS[key]] = as_verl_reads(key, st.value)
    mode = graph_mode_of(s, verl_default(EAGER_KEY, vcfg, sch))  # enforce_eager as verl runs it
    if mode is not None and mode != OmegaConf.select(base.cfg, "rollout.graph_mode"):
        fields["rollout.graph_mode"] = mode

    def attempt():
        over = {**fields, **{f"cluster.env.{k}": v for k, v in env.items()}}
        rec = {}
        for k, v in over.items():
            _set(rec, k, v)
        if verbatim:
            rec["verl_overrides"] = dict(verbatim)
        cfg = base.cfg.copy()
        OmegaConf.set_struct(cfg, False)  # Dict fields (cluster.env, verl_overrides) take new keys
        cfg.merge_with(rec)  # typed merge: a value a field's type rejects raises here
        spec = OmegaConf.to_object(cfg)
        return rec, dict(R.overrides(spec)), R.env_vars(spec)

    tried: set[str] = set()  # fields given verl's default (once: else it stays verbatim)
    for _ in range(8):
        try:
            rec, pairs, env_r = attempt()
        except Exception as e:
            bad = next((f for f in fields if f.split(".")[-1] in str(e)), None)
            if bad is None:
                raise
            fields.pop(bad)
            continue
        moved = False
        for k, f in ENV_FIELDS.items():  # not rendered as the script has it: back to cluster.env
            if k in s.env and env_r.get(k) != s.env[k].text and f in fields:
                env[k] = s.env[k].text
                fields.pop(f)
                moved = True
        for key, st in s.overrides.items():
            got = pairs.get(key, pairs.get("+" + key, MISSING))
            if key in carried:  # kept as written; rendered through its carrier (respell)
                if inv.get(key) not in fields:
                    verbatim.setdefault(("+" if st.add else "") + key, st.value)
                continue
            if got is MISSING or not same_run(key, got, st.value):
                f = inv.get(key)
                fields.pop(f, None) if f else None
                vkey = ("+" if st.add else "") + key
                if vkey not in verbatim:
                    verbatim[vkey] = st.value
                    moved = True
        for k, v in pairs.items():  # a key the script leaves to verl: verl's value, not a group's
            d = verl_default(k, vcfg, sch)
            if k.lstrip("+") in s.overrides or k in verbatim or kept(k, v, d, s):
                continue
            if d is not MISSING and not same(v, d) and not isinstance(d, dict):
                f = inv.get(k.lstrip("+"))
                # on the field that renders it where the field holds it (the contract reads the
                # field; strict mode refuses a verl override of a rendered key, TOP-VERL-002)
                if f and f not in tried and field_holds(base.cfg, f, d):
                    fields[f] = d
                    tried.add(f)
                else:
                    verbatim[k] = d
                moved = True
            off = next((fv for p, fv in OFF.items() if k.startswith(p)), None)
            if d is MISSING and off and fields.get(off[0]) != off[1]:
                fields[off[0]] = off[1]  # a key verl lacks: turn off the field that renders it
                moved = True
        if not moved:
            break
    for sec in s.secrets.values():  # references only: the value never reaches the recipe
        ref = "${oc.env:" + sec.name + "}"
        if sec.target.startswith("cluster.env."):
            rec.setdefault("cluster", {}).setdefault("env", {})[sec.name] = ref
        else:
            rec.setdefault("verl_overrides", {})[sec.target] = ref
    imp = imported(s, groups, rec, pairs, env, env_r, verbatim, vcfg, inv, ray_report, sch)
    imp.command_line = cmdline
    imp.report += command_line_rows(s, cmdline, base.cfg.algorithm.config_name or "ppo_trainer")
    imp.report += version_rows(s, groups, sch, base.cfg.cluster.versions.profile)
    placed = cluster_choice(s)[1] if "cluster" not in (choices or {}) else None
    imp.report += [placed] if placed else []  # a GPU script's cluster: why, and how to change it
    imp.report.sort(key=lambda r: (r["line"] is None, r["line"] or 0))
    return imp


def _args(cmdline: dict) -> list[str]:
    return [f"{k}={v}" for k, v in cmdline.items()]


# Keys verl's config lacks that a group renders, and the spec field that stops rendering them.
OFF = {
    # DAPO overlong shaping: render.algorithm_overrides renders reward.reward_kwargs.* only when
    # algorithm.overlong_buffer_fraction > 0 (the script's own reward keys are kept verbatim)
    "reward.reward_kwargs.": ("algorithm.overlong_buffer_fraction", 0.0),
}
