"""Which verl an imported script targets, and what only the command line may say for it.

- `stack_choice`: the stack the script itself names (the seed's patch module -> `stack=seed`);
  otherwise the import keeps topl's default stack and says so in the report.
- `command_line`: the program (`algorithm.entrypoint`) and the trainer config
  (`algorithm.config_name`) are the user's own (launcher/compose/meaning.py: a recipe may not choose what
  runs), so a script's choice goes onto the command the report prints, never into the recipe.
- `spelled` / `unknown_keys`: the script's overrides read in the declared verl's vocabulary
  (render_version.respell, the renderer's own rules): a key that verl spells through another
  (grad_offload carried by param_offload on verl 0.9.1) is compared there; a key it cannot take is
  named with the known releases that have it, or as one no release topl knows has.
"""

from __future__ import annotations

from typing import Any

from topl.launcher.facts.verl_schema import KNOWN, schema
from topl.launcher.facts.verl_tables import GRAD_OFFLOAD, PARAM_OFFLOAD
from topl.launcher.render.spelling import GRAD_IN_PARAM, respell, shell_vars, spell

SEED_MODULE = "verl_ascend_recipe.true_on_policy"
# The config a trainer main loads when the script gives no --config-name (its @hydra.main).
DEFAULT_CONFIG = {
    # verl@0.9.1:verl/trainer/main_ppo.py:main (@hydra.main config_name="ppo_trainer")
    "verl.trainer.main_ppo": "ppo_trainer",
    # verl@00d60ad3:recipe/dapo/main_dapo.py:main (@hydra.main config_name="dapo_trainer"),
    # the DAPO recipe as verl v0.7.0 shipped it (tests/data/scripts/verl/README.md)
    "recipe.dapo.main_dapo": "dapo_trainer",
}


def config_name(s) -> str | None:
    """The trainer config the script's launch loads: its --config-name (Hydra appends `.yaml`
    only when absent, hydra@1.3.8:hydra/plugins/config_source.py:_normalize_file_name, so
    `x.yaml` and `x` are one file), else its main's own default; None when not known."""
    if s.config_name:
        name = s.config_name.strip("'\"")
        return name[: -len(".yaml")] if name.endswith(".yaml") else name
    return DEFAULT_CONFIG.get(s.entrypoint)


def command_line(s, algo_cfg) -> dict[str, str]:
    """{field: value} the user types next to `recipe=OUT` so the run is the script's program."""
    out = {}
    if s.entrypoint != algo_cfg.entrypoint:
        out["algorithm.entrypoint"] = s.entrypoint
    name = config_name(s)
    if name and name != (algo_cfg.config_name or "ppo_trainer"):
        out["algorithm.config_name"] = name
    return out


def stack_choice(s) -> tuple[str, int] | None:
    """("seed", line) when the script loads the seed's patch module (VERL_USE_EXTERNAL_MODULES,
    conf/stack/seed.yaml: external_modules), whose stack pins its verl and patches; else None."""
    for items in (s.env, getattr(s, "code_env", {})):
        mod = items.get("VERL_USE_EXTERNAL_MODULES")
        if mod is not None and mod.text.startswith(SEED_MODULE):
            return "seed", mod.line
    return None


def script_pairs(s) -> list[tuple[str, Any]]:
    return [(k, st.value) for k, st in s.overrides.items()]


def spelled(s, sch) -> dict[str, str | None]:
    """Script keys the declared verl says through another key: {key: carrier or None (verl's
    stock behaviour, no key)}; the renderer drops them the same way (render_version.respell)."""
    kept = {k for k, _ in respell(script_pairs(s), sch)}
    return {
        k: (PARAM_OFFLOAD if k == GRAD_OFFLOAD else None)
        for k, _ in script_pairs(s)
        if k not in kept
    }


def spelled_why(key: str, carrier: str | None, sch) -> str:
    if carrier:
        return (
            f"verl {sch.version} has no {key}: {carrier} says it there, with the same value "
            f"({GRAD_IN_PARAM})"
        )
    return f"verl {sch.version} has no {key}: its stock behaviour is this value (not rendered)"


def unknown_keys(s, sch) -> dict[str, str]:
    """Script keys (as written, `+` included) the declared verl cannot take: Hydra or verl's
    dataclasses would refuse them. Each names the known releases that have it, or none."""

    carried = spelled(s, sch)
    out = {}
    for k, st in s.overrides.items():
        written = ("+" if st.add else "") + k
        if k in carried or spell(written, sch) is not None:
            continue
        have = [v for v in KNOWN if spell(written, schema(v, (), sch.config))]
        stacks = [n for n, (v, p) in _stacks().items() if spell(written, schema(v, p, sch.config))]
        patched = f" + {', '.join(sch.patches)}" if sch.patches else ""
        where = f"verl {sch.version}{patched} ({sch.config}) has no {written}"
        if stacks or have:
            fix = (
                f"`topl recipes import SCRIPT stack={stacks[0]}`"
                if stacks
                else f"cluster.versions.verl: {have[-1]} in the recipe"
            )
            out[k] = (
                f"{where}; it composes on "
                + ", ".join([f"stack={n}" for n in stacks] + [f"verl {v}" for v in have])
                + f": declare that verl ({fix}) or rewrite the key"
            )
        else:
            out[k] = (
                f"{where}, nor does any verl whose schema topl ships ({', '.join(KNOWN)}): kept "
                "as the script wrote it, the contract refuses it (TOP-VERL-001); remove it or "
                "replace it by the key your verl uses"
            )
    return out


def _stacks() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Shipped stack -> (verl version, verl patches), read from conf/stack/*.yaml."""
    import yaml

    from topl.launcher.compose.sources import (
        conf_dir,
    )  # lazy: Hydra and OmegaConf only when this runs

    out = {}
    for f in sorted((conf_dir() / "stack").glob("*.yaml")):
        vs = (yaml.safe_load(f.read_text()) or {}).get("versions") or {}
        if vs.get("verl"):
            out[f.stem] = (str(vs["verl"]), tuple(vs.get("verl_patches") or ()))
    return out


def shell_var_rows(s) -> list[dict]:
    """One row per (key, variable) a value still refers to: the script never set it, so topl
    expands it where you launch (render_version.expand), and TOP-SCHEMA-004 refuses it unset."""
    import os

    rows = []
    for k, st in s.overrides.items():
        for name in dict.fromkeys(shell_vars(st.value)):
            fix = (
                "set here: topl expands it from the environment you launch in, as bash would"
                if name in os.environ
                else f"unset here: export {name}=... before launching (TOP-SCHEMA-004 refuses "
                "it unset: topl expands it from the launching environment)"
            )
            rows.append(
                {
                    "line": st.line,
                    "kind": "shell variable the script does not set",
                    "key": k,
                    "detail": f"${name} ({fix})",
                    "variable": name,
                }
            )
    return rows


def command_line_rows(s, cmdline: dict, rendered_config: str) -> list[dict]:
    rows = [
        {
            "line": s.line,
            "kind": "command line (not in the recipe)",
            "key": k,
            "detail": f"{v}: the script's choice; a recipe may not choose what runs "
            "(launcher/compose/meaning.py), so type it next to recipe=OUT (the report's last lines)",
        }
        for k, v in cmdline.items()
    ]
    if config_name(s) is None:  # its main's own default is not known here: say what topl passes
        rows.append(
            {
                "line": s.line,
                "kind": "command line (not in the recipe)",
                "key": "algorithm.config_name",
                "detail": f"the script gives no --config-name and `{s.entrypoint}`'s own default "
                f"is not known to topl; topl passes --config-name={rendered_config}: if the "
                "script's main loads another, add algorithm.config_name=NAME to the command",
            }
        )
    return rows


def version_rows(s, groups, sch, profile: str) -> list[dict]:
    """Which stack (hence which verl) the recipe declares, and why."""
    told = stack_choice(s)
    verl = f"verl {sch.version}" + (f" + {', '.join(sch.patches)}" if sch.patches else "")
    if "stack" in groups and told and groups["stack"] == told[0]:
        line, why = told[1], "the script loads the seed's patch module (VERL_USE_EXTERNAL_MODULES)"
    elif "stack" in groups:
        line, why = s.line, "asked for on the command line"
    else:
        line, why = (
            s.line,
            "the script names no verl version: topl's default stack (conf/config.yaml)",
        )
    return [
        {
            "line": line,
            "kind": "declared stack",
            "key": "stack",
            "detail": f"{groups.get('stack', profile)}: {verl}, config {sch.config} ({why}); "
            "another: `topl recipes import SCRIPT stack=NAME`",
        }
    ]
