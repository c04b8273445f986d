"""Read a bash launch script's trainer launch as data: `read_script` (pure) resolves the bash
(`bash_resolve`), picks the trainer among the script's launches (`choose_launch`: a model download
or checkpoint conversion before it is not the trainer) and types each override with Hydra's own
parser, each with its line. Nothing is executed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser

from topl.launcher.base.errors import ToplError
from topl.launcher.base.redact import secret_entry
from topl.launcher.compose.meaning import env_reason
from topl.launcher.facts.verl_tables import CODE_KEYS
from topl.launcher.importer.expand import Item
from topl.launcher.importer.launch import Launch
from topl.launcher.importer.resolve import Resolved, resolve


@dataclass
class Setting:
    """One `key=value` of the script."""

    key: str  # without `+` / `++`
    value: Any  # typed as Hydra reads it
    line: int  # where the override is written
    deps: tuple[int, ...] = ()  # lines of the variables its value came from
    add: bool = False  # written with `+`


@dataclass
class Script:
    entrypoint: str
    config_name: str | None
    overrides: dict[str, Setting]
    env: dict[str, Item]
    notes: list[tuple[int, str]] = field(default_factory=list)
    line: int = 0  # where the launch is written
    runner: str = "python"  # python | torchrun | ray job submit
    runner_args: list[Item] = field(default_factory=list)
    secrets: dict[str, Secret] = field(default_factory=dict)  # reference name -> where it was
    dropped_env: set[str] = field(default_factory=set)  # loader / interpreter variables not kept
    # their values: read only to tell the stack (the seed's patch module), never written
    code_env: dict[str, Item] = field(default_factory=dict, repr=False)
    # launch arguments the recipe does not carry (line, argument, why): the round trip is not
    # exact while any is here (issue 30: an import never claims exact when it dropped something)
    dropped: list[tuple[int, str, str]] = field(default_factory=list)


@dataclass
class Secret:
    """A secret of the script: written to the recipe as `${oc.env:name}` at `target` (a
    cluster.env entry or a verl override); `value` stays in memory, only to redact output."""

    name: str
    line: int
    value: str = field(repr=False)
    target: str


# Variables that choose which code a process loads: never written into a recipe (issue 28).
CODE_ENV = frozenset(
    "LD_PRELOAD LD_AUDIT LD_LIBRARY_PATH PYTHONPATH PYTHONSTARTUP PYTHONHOME BASH_ENV ENV".split()
)

# verl's trainer mains: verl.trainer.main_ppo (verl@0.9.1:verl/trainer/main_ppo.py), the recipe
# mains (recipe.dapo.main_dapo, verl@0.7.0:recipe/dapo/main_dapo.py) and any other `main_*` module
_TRAINER = re.compile(r"^(verl\.trainer\.\w+|([\w.]+\.)?main_\w+)$")
_OVERRIDE = re.compile(r"^[+~]{0,2}[A-Za-z_][\w-]*(\.[\w-]+)+=")


def _n_overrides(launch: Launch) -> int:
    return sum(bool(_OVERRIDE.match(it.text)) for it in launch.args)


def _describe(k: int, launch: Launch) -> str:
    runner = "" if launch.runner == "python" else f"{launch.runner} ... "
    return (
        f"launch {k}: line {launch.line}: {runner}{launch.entrypoint or 'python'} "
        f"({_n_overrides(launch)} override(s))"
    )


def choose_launch(r: Resolved, launch: int | None = None) -> tuple[Launch, list[tuple[int, str]]]:
    """The trainer among the script's launches (`launch`: 1-based, as the error lists them);
    the others become report notes. Helpers (model download, checkpoint conversion) are not it."""
    if not r.launches:
        raise _no_launch(r)
    listing = "; ".join(_describe(k, it) for k, it in enumerate(r.launches, 1))
    if launch is not None:
        if not 1 <= launch <= len(r.launches):
            raise ToplError(
                f"--launch {launch}: the script has {len(r.launches)} launch(es): {listing}",
                fix=f"give --launch 1..{len(r.launches)}",
            )
        chosen = r.launches[launch - 1]
    else:
        trainers = [
            it for it in r.launches if _TRAINER.match(it.entrypoint) or _n_overrides(it) >= 3
        ]
        if not trainers:
            raise ToplError(
                f"TOP-IMPORT-003: no verl trainer launch in the script ({listing})",
                fix="import a script that runs verl (python3 -m verl.trainer.main_ppo ...), "
                "or name the launch: --launch N",
            )
        if len(trainers) > 1:
            raise ToplError(
                f"TOP-IMPORT-002: the script launches {len(trainers)} trainers ({listing}); "
                "one recipe is one launch",
                fix="choose one: topl recipes import SCRIPT --launch N (one recipe per launch)",
            )
        chosen = trainers[0]
    notes = [
        (it.line, f"`{it.entrypoint or 'python'}` is not the trainer: not imported")
        for it in r.launches
        if it is not chosen
    ]
    return chosen, notes


def _no_launch(r: Resolved) -> ToplError:
    """Say why no launch was reached: an exit the script takes on values the reader cannot know."""
    where = (
        f"the script exits at line {r.exit_line} before any launch"
        if r.exit_line
        else ("no `python ...` launch is reached")
    )
    if r.unresolved:
        probes = "; ".join(
            f"line {ln}: {name}={text}" for name, (ln, text) in sorted(r.unresolved.items())
        )
        hint = " ".join(
            f"--env {name}={'npu' if 'torch_npu' in text else 'VALUE'}"
            for name, (_ln, text) in sorted(r.unresolved.items())
        )
        return ToplError(
            f"{where}; it depends on command output the importer never runs: {probes}",
            fix=f"give the value the command would print: topl recipes import SCRIPT {hint}",
        )
    return ToplError(
        f"{where} (no `python -m ...` launch found)",
        fix="import a script that runs verl (python3 -m verl.trainer.main_ppo ...); a branch "
        "chosen by a variable can be picked with --env NAME=VALUE",
    )


def _own_config_dir(entrypoint: str, path: str) -> bool:
    """Is `--config-path` the trainer's own config folder? A relative path is read from the main's
    folder (hydra-core@1.3.8:hydra/_internal/utils.py:compute_search_path_dir), and verl's mains
    declare `config` (verl@0.9.1:verl/trainer/main_ppo.py:main, config_path="config")."""
    return entrypoint.startswith("verl.trainer.") and os.path.normpath(path) == "config"


def read_script(
    text: str,
    env: dict[str, str] | None = None,
    args: list[str] | None = None,
    launch: int | None = None,
) -> Script:
    """Resolve the script's trainer launch (nothing is executed)."""
    r = resolve(text, env, args)
    chosen, skipped = choose_launch(r, launch)
    parser, notes = OverridesParser.create(), list(r.notes) + skipped
    config_name, out, dropped = None, {}, []
    items = list(chosen.args)
    while items:
        it = items.pop(0)
        if it.text.startswith("--config-name") or it.text.startswith("--config-path"):
            name, _, value = it.text.partition("=")
            if not _ and items:
                value = items.pop(0).text
            if name == "--config-name":
                config_name = value
            else:
                notes.append(
                    (it.line, f"{name}={value} not kept (topl uses verl's packaged configs)")
                )
                if not _own_config_dir(chosen.entrypoint, value):
                    dropped.append((it.line, f"{name}={value}", "another config folder"))
            continue
        try:
            o = parser.parse_override(it.text)
        except Exception as e:  # noqa: BLE001 - Hydra's grammar errors, reported by line
            notes.append(
                (it.line, f"`{it.text[:200]}` is not a Hydra override ({str(e).splitlines()[0]})")
            )
            dropped.append((it.line, it.text[:200], "Hydra's override parser refuses this text"))
            continue
        if o.is_delete():
            notes.append((it.line, f"deletion `{it.text}` not kept"))
            dropped.append((it.line, it.text, "a deletion (a recipe sets values)"))
            continue
        if set(o.key_or_group.split(".")) & CODE_KEYS:  # recipes are data (see render.CODE_KEYS)
            notes.append((it.line, f"`{o.key_or_group}` instantiates code in verl: not kept"))
            dropped.append((it.line, it.text[:200], "instantiates code (a recipe is data)"))
            continue
        out[o.key_or_group] = Setting(o.key_or_group, o.value(), it.line, it.deps, o.is_add())
    env_items, secrets, dropped_env, code_env = {}, {}, set(), {}
    for k, v in chosen.env.items():
        # recipes are data (issue 28): what launcher/compose/meaning.py refuses in a recipe is not written
        if k in CODE_ENV or k.startswith("TOPL_") or env_reason(k):
            notes.append(
                (
                    v.line,
                    f"{k} not kept: it chooses what code runs (or is topl's own control "
                    "variable); set it on your own command line if you need it",
                )
            )
            dropped_env.add(k)
            code_env[k] = v
        elif secret_entry(k, v.text):  # by name or by shape: a reference, never the value
            secrets[k] = Secret(k, v.line, v.text, f"cluster.env.{k}")
            notes.append(
                (v.line, f"secret {k} written as ${{oc.env:{k}}} (set {k} when launching)")
            )
        else:
            env_items[k] = v
    for k, st in list(out.items()):
        text = str(st.value)
        if isinstance(st.value, str) and secret_entry("", text):  # a token / URL password
            name = re.sub(r"\W+", "_", k.split(".")[-1]).upper() + "_SECRET"
            secrets[name] = Secret(name, st.line, text, ("+" if st.add else "") + k)
            notes.append(
                (
                    st.line,
                    f"secret in {k} written as ${{oc.env:{name}}} (set {name} when launching)",
                )
            )
            del out[k]
    return Script(
        chosen.entrypoint,
        config_name,
        out,
        env_items,
        sorted(set(notes)),
        chosen.line,
        chosen.runner,
        list(chosen.runner_args),
        secrets,
        dropped_env,
        code_env,
        dropped,
    )
