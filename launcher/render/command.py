"""The command verl will receive, as one map: dotted verl key -> value, each with its source.

`render.render` prints the command; this module says, for each key of it, who set it: topl (from
which spec field), a recipe's `verl_overrides`, `algorithm.extra_overrides`, or the environment.
Contract rules read it next to the spec (TOP-VERL-*): what verl gets is what they check, whatever
the source. It is built once per spec object and cached (plan evaluates rules per point).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

from topl.launcher.facts import verl_tables
from topl.launcher.facts.verl_schema import schema_for
from topl.launcher.render import invocation as R
from topl.launcher.render.spelling import bare, respell, spell, verl_override_items
from topl.launcher.spec.view import RENDERED, record, unwrap

if TYPE_CHECKING:
    from topl.launcher.facts.verl_schema import Schema
    from topl.launcher.spec.job import JobSpec

ENV_PREFIX = "ray_kwargs.ray_init.runtime_env.env_vars."
USER = ("verl_overrides", "extra_overrides")
# Keys topl derives from a spec field outside the VERL_KEYS tables: the field that decides them
# (what a violation names as the value's source).
DERIVED = {
    f"{R.ARR}.rollout.log_prob_use_dynamic_bsz": "train.use_dynamic_bsz",
    f"{R.ARR}.ref.log_prob_micro_batch_size_per_gpu": "train.log_prob_micro_batch_size_per_gpu",
    f"{R.ARR}.rollout.enforce_eager": "rollout.graph_mode",
    f"{verl_tables.VLLM}.compilation_config": "rollout.graph_mode",
    f"{R.ARR}.rollout.per_request_seed": "rollout.per_request_seed",
    f"{R.ARR}.rollout.dtype": "train.dtype",  # the ref and the rollout get the actor's dtype
    f"{R.ARR}.ref.megatron.dtype": "train.dtype",
    f"{R.ARR}.ref.fsdp_config.dtype": "train.dtype",
    **{k: f for f, k in verl_tables.CRITIC_MEGATRON_KEYS.items()},
    "data.train_files": "data_dir",
    "data.val_files": "data_dir",
    # invocation.algorithm_overrides renders these from the DAPO fields
    "algorithm.filter_groups.enable": "algorithm.filter_groups",
    "algorithm.filter_groups.metric": "algorithm.filter_groups_metric",
    "algorithm.filter_groups.max_num_gen_batches": "algorithm.max_num_gen_batches",
}
DERIVED_WHEN_SET = {"data.train_files": "train_files", "data.val_files": "val_files"}
DERIVED_PREFIXES = {  # key prefix -> spec field (strict switches, rollout correction)
    f"{R.ARR}.actor.megatron.override_transformer_config.": "alignment.mode",
    f"{verl_tables.VLLM}.additional_config.": "alignment.mode",
    "algorithm.rollout_correction.": "alignment.rollout_correction",
}


class Entry(NamedTuple):
    """One key of the command. `origin` is the spec key whose source (a recipe file, the command
    line, a conf/ file) is where the value came from: `rollout.tp`, `verl_overrides.<key>`,
    `algorithm.extra_overrides.<key>`, `cluster.env.<NAME>`; empty for topl's constants.
    (A tuple: plan builds about a hundred per point.)"""

    key: str  # dotted verl key, without Hydra's +/++/~
    value: Any
    prefix: str  # "", "+", "++" or "~" as rendered
    by: str  # topl | verl_overrides | extra_overrides | env
    origin: str = ""

    @property
    def user(self) -> bool:
        """Set verbatim by a recipe or override (not derived by topl from a checked field)."""
        return self.by in USER

    def describe(self) -> str:
        """`key=value (set by ...)` for messages."""
        how = {
            "topl": f"rendered by topl from {self.origin}" if self.origin else "rendered by topl",
            "verl_overrides": f"set by {self.origin}",
            "extra_overrides": f"set by {self.origin}",
            "env": f"environment, from {self.origin}" if self.origin else "environment",
        }[self.by]
        return f"{self.key}={R.fmt(self.value)} ({how})"


class Command:
    """The final key -> Entry map (last writer wins, as Hydra applies the overrides), plus what
    topl itself rendered for each key before a recipe or override replaced it. The environment
    entries (`ray_kwargs...env_vars.*`) are made on first use: most rules never read them."""

    def __init__(
        self,
        entries: dict[str, Entry],
        own: dict[str, Entry],
        spec: JobSpec,
        user: list[Entry] | None = None,  # `entries`' verbatim ones, where known (plan)
    ):
        self.entries, self.own, self._spec = entries, own, spec
        self._env: dict[str, Entry] | None = None
        if user is None:  # verbatim, in command order
            user = [e for e in entries.values() if e.by in USER]
        self.user = user

    @property
    def env(self) -> dict[str, Entry]:
        if self._env is None:
            self._env = _env_entries(self._spec)
        return self._env

    def __contains__(self, key: str) -> bool:
        return self.entry(key) is not None

    def __iter__(self) -> Iterator[Entry]:
        yield from self.entries.values()
        yield from self.env.values()

    def entry(self, key: str) -> Entry | None:
        if key.startswith(ENV_PREFIX):
            return self.env.get(key)
        return self.entries.get(key)

    def get(self, key: str, default: Any = None) -> Any:
        e = self.entry(key)
        return default if e is None else e.value

    def keys_by(self, by: tuple[str, ...]) -> list[str]:
        """The keys of the entries (not env) set by one of `by`, in command order."""
        return [e.key for e in self.entries.values() if e.by in by]

    def typed(self, by: tuple[str, ...], types: tuple[type, ...]) -> list[Entry]:
        """The entries (not env) set by one of `by` whose value is one of `types`. (plan traces
        both reads finer than a listing: sweep_trace._RecCommand.)"""
        return [e for e in self.entries.values() if e.by in by and isinstance(e.value, types)]


@functools.cache
def _origins(megatron: bool) -> dict[str, str]:
    table = {**R.VERL_KEYS, **(R.MEGATRON_KEYS if megatron else R.FSDP_KEYS)}
    return {verl: field_ for field_, verl in table.items()}


def _own_origins(s: JobSpec) -> dict[str, str]:
    return _origins(s.train.engine == "megatron")


def _origin(key: str, table: dict[str, str]) -> str:
    """The spec field a rendered key comes from (the spec-dependent DERIVED_WHEN_SET: `build`)."""
    if key in table:
        return table[key]
    if key in DERIVED:
        return DERIVED[key]
    return next((f for p, f in DERIVED_PREFIXES.items() if key.startswith(p)), "")


def _prefix(written: str, sch: Schema) -> str:
    """The prefix render gives a key on the declared verl (render_version.spell); a key that
    verl cannot take keeps the prefix as written (TOP-VERL-001 / TOP-SCHEMA-001 refuse it)."""
    return bare(spell(written, sch) or written)[0]


_META: dict[tuple[int, bool], tuple[Any, dict[str, tuple[str, str]]]] = {}


def _key_meta(sch: Schema, megatron: bool) -> dict[str, tuple[str, str]]:
    """verl key -> (prefix, origin) of topl's own entries: they depend on the key, the schema and
    the engine only, not on the value (plan builds a command per point)."""
    got = _META.get((id(sch), megatron))
    if got is None or got[0] is not sch:
        got = _META[(id(sch), megatron)] = (sch, {})
    return got[1]


def build(s: JobSpec) -> Command:
    """The command for a (plain) spec; see `command` for the cached entry point."""
    sch = schema_for(s)
    plain = dataclasses.replace(
        s,
        algorithm=dataclasses.replace(s.algorithm, extra_overrides={}),
        verl_overrides={},
    )
    megatron = s.train.engine == "megatron"
    table = _origins(megatron)
    meta = _key_meta(sch, megatron)
    own: dict[str, Entry] = {}
    for key, value in R.overrides(plain):  # topl's own keys, spelled for the declared verl
        m = meta.get(key)
        if m is None:  # (prefix, origin): the origin may still follow the spec (DERIVED_WHEN_SET)
            m = meta[key] = (_prefix(key, sch), _origin(key, table))
        field_ = DERIVED_WHEN_SET.get(key)
        origin = field_ if field_ and getattr(s, field_) is not None else m[1]
        own[key] = Entry(key, value, m[0], "topl", origin)
    entries = dict(own)
    written: dict[str, str] = {}  # verbatim key -> as written (respell reads the written form)
    for key, value in R.extra_items(s.algorithm.extra_overrides):
        prefix, k = bare(key)
        entries.pop(k, None)  # the latest writer, at the end, as the command has it
        origin = f"algorithm.extra_overrides.{key}"
        entries[k] = Entry(k, value, _prefix(key, sch), "extra_overrides", origin)
        written[k] = key
    for key, value in verl_override_items(s.verl_overrides):
        prefix, k = bare(key)
        entries.pop(k, None)
        entries[k] = Entry(k, value, _prefix(key, sch), "verl_overrides", f"verl_overrides.{key}")
        written[k] = key
    if written:  # what render drops on this verl (a patch's off switch on stock verl)
        kept = {
            bare(k)[1] for k, _ in respell([(written[k], entries[k].value) for k in written], sch)
        }
        for k in written:
            if k not in kept:
                del entries[k]
    return Command(entries, own, s)


def _env_entries(s: JobSpec) -> dict[str, Entry]:
    """The environment the command forwards to Ray workers (render_env.argv_env), by origin."""
    out, set_env = {}, s.cluster.env
    for name, value in R.argv_env(s).items():
        key = ENV_PREFIX + name
        origin = (
            f"cluster.env.{name}" if name in set_env else verl_tables.ENV_OWNERS.get(name, ("",))[0]
        )
        out[key] = Entry(key, value, _prefix(key, schema_for(s)), "env", origin)
    return out


_CACHE: dict[int, tuple[Any, Command]] = {}
_CACHE_SIZE = 64


def command(s: JobSpec) -> Command:
    """The command of a spec (or a contract View of one), built once per spec object: every rule
    that reads it shares one build. Specs are not changed after composition (rules are pure; plan
    copies a spec per point), so the object is the key; it is held, so its id cannot be reused."""
    plain = unwrap(s, RENDERED)  # a rule reads the command's entries: a sweep traces those
    hit = _CACHE.get(id(plain))
    if hit is not None and hit[0] is plain:
        return hit[1]
    return remember(plain, build(plain))


def remember(plain: JobSpec, cmd: Command) -> Command:
    """Hold `cmd` as the command of the spec object `plain` (plan: a patched one, command_patch)."""
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(plain)] = (plain, cmd)
    return cmd


def note(s: JobSpec, *entries: Entry | None) -> None:
    """Record entries as read by the rule running over `s` (a contract View): the violation then
    lists each one under its origin, with the origin's source (recipe file, command line)."""
    for e in entries:
        if e is not None:
            record(s, e.origin or e.key, e.value)
