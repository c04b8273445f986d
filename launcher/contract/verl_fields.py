"""A recipe's `verl_overrides` against the spec fields topl renders the same keys from.

verl_overrides go last on the command: where topl renders a key from a spec field, the override
wins and the field, which every other rule checked, reaches verl as nothing. Strict mode owns the
log-prob path (TOP-VERL-002); TOP-VERL-003 covers every other key topl renders from a field, in
every mode, so a user who sets the field (`rollout.per_request_seed=true` on a recipe whose
overrides say false) is told, instead of running the recipe's value.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import TYPE_CHECKING, Any

from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.contract.verl_keys import MIRRORS, same, strict_problem
from topl.launcher.render.command import command, note
from topl.launcher.render.invocation import fmt
from topl.launcher.spec.job import JobSpec, is_strict

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.render.command import Command
    from topl.launcher.spec.job import JobSpec

_UNKNOWN = object()


@functools.cache
def field_default(path: str) -> Any:
    """The JobSpec default of a dotted spec field (`rollout.per_request_seed` -> None); _UNKNOWN
    where the schema has none (a section's MISSING) or the path is not a field."""

    cls: Any = JobSpec
    parts = path.split(".")
    for i, part in enumerate(parts):
        if not (
            dataclasses.is_dataclass(cls) and part in {f.name for f in dataclasses.fields(cls)}
        ):
            return _UNKNOWN
        f = next(f for f in dataclasses.fields(cls) if f.name == part)
        if i < len(parts) - 1:
            cls = typing.get_type_hints(cls)[part]
            continue
        if f.default is not dataclasses.MISSING:
            return f.default
        if f.default_factory is not dataclasses.MISSING:
            return f.default_factory()
    return _UNKNOWN


def read_field(s: JobSpec, path: str) -> Any:
    """The spec field's value, read through the rule's view (so the violation lists its source)."""
    node = s
    for part in path.split("."):
        node = getattr(node, part)
    return node


def _renders(cmd: Command, key: str, ref: bool) -> Any:
    """topl's entry for `key`: its own, or (where the ref runs) the actor key verl's ref config
    copies (verl@0.9.1:verl/trainer/config/ref/ref.yaml and ref/megatron_ref.yaml: oc.select)."""
    own = cmd.own.get(key)
    if own is None and ref and key in MIRRORS:
        own = cmd.own.get(MIRRORS[key])
    return own


@rule(
    "TOP-VERL-003",
    ERROR,
    "a recipe's verl_overrides do not silently replace a key topl renders from a spec field",
    # and the spec field that renders the replaced key: any of topl's tables (command._origins)
    (
        "verl_overrides",
        *("algorithm", "alignment", "cluster", "model", "rollout", "train"),
        *("data_dir", "train_files", "val_files", "experiment", "project", "seed"),
    ),
    "drop the key from the recipe's verl_overrides and set the spec field the message names "
    "instead (topl renders the key from it; `topl render` shows the result)",
)
def override_beats_field(s: JobSpec) -> Outcome:
    """verl_overrides replace a rendered key of the same name (render.with_verl_overrides): the
    contract checked the spec field, verl runs the recipe's value. An error where the field was
    set (its value is not the schema default: a recipe, a config group or the command line chose
    it, and expects it to hold); a warning where it is at its default (the override is the only
    value anyone wrote, but the field still says something else). Extra overrides of topl's keys
    and strict mode's log-prob path are TOP-VERL-002's."""
    cmd = command(s)
    strict = is_strict(s)
    ref = bool(s.algorithm.use_kl_loss or s.algorithm.use_kl_in_reward)
    found: list[tuple[bool, str]] = []
    for e in cmd.user:
        if e.by != "verl_overrides":
            continue
        own = _renders(cmd, e.key, ref)
        if own is None or not own.origin or same(own.value, e.value):
            continue
        if strict and strict_problem(cmd, e, ref) is not None:
            continue  # TOP-VERL-002 reports it
        path = own.origin
        leaf = f"{path}.{own.key.rsplit('.', 1)[1]}"  # a section renders its fields by name
        if field_default(path) is _UNKNOWN and field_default(leaf) is not _UNKNOWN:
            path = leaf
        value = read_field(s, path)
        default = field_default(path)
        is_set = default is _UNKNOWN or not same(value, default)
        note(s, e, own)
        how = "set" if is_set else "its default"
        found.append(
            (
                is_set,
                f"{e.origin}={fmt(e.value)} replaces {own.key}={fmt(own.value)} that topl renders "
                f"from {path}={fmt(value)} ({how}); verl would run {fmt(e.value)}",
            )
        )
    if found:
        message = "; ".join(m for _, m in found)
        return (ERROR if any(is_set for is_set, _ in found) else WARNING), message
