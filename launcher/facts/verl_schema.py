"""verl's config schema per declared version: which keys exist, their types and defaults.

    schema("0.9.1").has("actor_rollout_ref.rollout.seed")           -> True
    schema("0.8.0").has("actor_rollout_ref.rollout.seed")           -> False (stock 0.8.0)
    schema("0.8.0", ("per_request_seed",)).default("actor_rollout_ref.rollout.seed") -> None
    schema_for(spec)  # spec.cluster.versions.verl / .verl_patches, spec.algorithm.config_name

The files under facts/verl_schema/ are generated from the real releases
(scripts/gen_verl_schema.py composes each wheel's trainer/config). A declared verl patch adds
the keys its cited fact records (`topl.launcher.facts`: verl_patch_rollout_seed_keys), never a
copy of the patch. Loaded lazily, one file per declared version, then cached.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any, Protocol

from packaging.version import Version

from topl.launcher import facts


class DeclaresVerl(Protocol):
    """A job spec, as far as its verl goes (facts sit below the spec: no import of it)."""

    @property
    def cluster(self) -> Any: ...  # .versions.verl, .versions.verl_patches

    @property
    def algorithm(self) -> Any: ...  # .config_name


KNOWN = ("0.8.0", "0.9.0", "0.9.1")
# declared verl patch -> the facts whose `value` maps verl key -> [type, default] it adds. The
# seed's combined NPU-PP + per-request-seed patch adds the same two rollout keys as the
# per-request-seed one (both cited in the fact).
PATCH_FACTS = {
    "per_request_seed": ("verl_patch_rollout_seed_keys",),
    "vllm_pp": ("verl_patch_rollout_seed_keys",),
    "mindspeed_batch_invariant": (),  # changes MindSpeed's repatch only, no config key
}


@dataclass(frozen=True)
class Schema:
    version: str  # the declared verl version
    patches: tuple[str, ...]
    config: str  # the trainer config name (ppo_trainer, dapo_megatron_trainer)
    keys: dict[str, list[Any]] = field(repr=False)  # key -> [type, default]
    free: tuple[str, ...] = field(repr=False)  # containers that accept new keys (with `+`)
    source: str = ""  # where the keys were read (citation)
    exact: bool = True  # False: no schema of this version ships; the nearest older one is used
    cites: dict[str, str] = field(default_factory=dict, repr=False)  # patched key -> citation
    # key as written -> render_version.spell's answer: a pure function of the key and this
    # schema, asked about a hundred times per point by `plan` (filled on use)
    spelled: dict[str, str | None] = field(default_factory=dict, repr=False, compare=False)

    def has(self, key: str) -> bool:
        return key in self.keys

    def default(self, key: str) -> Any:
        return self.keys[key][1]

    def type(self, key: str) -> str:
        """bool, int, float, str, list, null, interp (an interpolation such as ${...}), any."""
        kind: str = self.keys[key][0]
        return kind

    def free_form(self, key: str) -> bool:
        """Not a key of its own but below a mapping verl passes on: Hydra needs `+key`."""
        return not self.has(key) and any(key.startswith(f + ".") for f in self.free)

    def accepts_new(self, key: str) -> bool:
        """A new key Hydra adds with `+` and verl's dataclasses do not refuse: free-form, or with
        no ancestor that names a `_target_` (verl builds a dataclass from those nodes)."""
        if self.has(key):
            return False
        parts = key.split(".")
        anc = (".".join(parts[:i]) for i in range(1, len(parts)))
        return self.free_form(key) or not any(self.has(f"{a}._target_") for a in anc)

    def spelling(self, key: str) -> str | None:
        """The override name for `key` on this verl (`key` or `+key`); None: it cannot compose."""
        if self.has(key):
            return key
        return f"+{key}" if self.free_form(key) else None

    def cite(self, key: str) -> str:
        return self.cites.get(key) or self.source


def nearest(version: str) -> str:
    """The shipped schema for `version`: itself, else the newest known one not above it."""
    if version in KNOWN:
        return version
    try:
        v = Version(str(version))
    except Exception:
        return KNOWN[-1]
    older = [k for k in KNOWN if Version(k) <= v]
    return older[-1] if older else KNOWN[0]


@functools.cache
def _load(version: str) -> dict[str, Any]:
    path = files("topl.launcher.facts").joinpath(f"verl_schema/verl-{version}.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def trainer_configs(version: str) -> dict[str, Any]:
    """The trainer configs topl renders for `version` (name -> source, and for a verl-recipe
    config its defaults and overlay), from the nearest shipped schema."""
    configs: dict[str, Any] = _load(nearest(str(version)))["configs"]
    return configs


def _patch_keys(patches: tuple[str, ...]) -> tuple[dict[str, list[Any]], dict[str, str]]:

    keys: dict[str, list[Any]] = {}
    cites: dict[str, str] = {}
    for p in patches:
        for fid in PATCH_FACTS.get(p, ()):
            where = "; ".join(facts.cites(fid))
            for k, td in facts.fact(fid).value.items():
                keys[k] = list(td)
                cites[k] = f"verl_patches:{p} ({where})"
    return keys, cites


@functools.cache
def schema(version: str, patches: tuple[str, ...] = (), config: str = "ppo_trainer") -> Schema:
    """The schema of verl `version` with the declared `patches`, for trainer config `config`."""
    v = nearest(str(version))
    data = _load(v)
    keys = dict(data["keys"])
    conf = data["configs"].get(config)
    if conf and conf.get("keys"):
        keys.update(conf["keys"])
    added, cites = _patch_keys(tuple(patches))
    keys.update(added)
    source = data["source"] + (f"; {conf['source']}" if conf and "keys" in conf else "")
    return Schema(
        version=str(version),
        patches=tuple(patches),
        config=config,
        keys=keys,
        free=tuple(data["free_form"]),
        source=source,
        exact=v == str(version),
        cites=cites,
    )


SCHEMA_KEYS = ("cluster.versions", "algorithm.config_name")  # what schema_for reads of a spec


def schema_for(job: DeclaresVerl) -> Schema:
    """The schema of the verl the spec declares (cluster.versions), for its trainer config."""
    vs = job.cluster.versions
    config = getattr(job.algorithm, "config_name", None) or "ppo_trainer"
    return schema(str(vs.verl), tuple(vs.verl_patches or ()), config)
