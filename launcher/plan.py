"""Expand a sweep exactly as Hydra does and give every point a verdict, fast.

Hydra composes each point from scratch (tens of ms). Here each distinct combination of group
choices is composed once through Hydra; a point then only sets its values on a copy of that
spec (typed like Hydra would) and runs the contract: thousands of points per second.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import re
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.errors import HydraException
from omegaconf import OmegaConf

from topl.launcher.compose import GROUPS, Composed, compose_job, loader_for
from topl.launcher.contract import ERROR, evaluate
from topl.launcher.errors import ToplError
from topl.launcher.recipes import available
from topl.launcher.spec import JobSpec, world_size
from topl.launcher.tree import get_path, parent_of

_REF = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")


@dataclass
class Verdict:
    overrides: list[str]  # the point, as Hydra overrides
    valid: bool
    rules: list[str] = field(default_factory=list)  # ids of the error rules that rejected it
    warnings: list[str] = field(default_factory=list)
    train_gb: float | None = None  # estimated training states per device
    rollout_gb: float | None = None  # rollout weights per device
    devices: int = 0  # world size the point uses

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


Item = tuple[str, str, Any]  # (override text, key, typed value)


def _parse(overrides: list[str]):
    try:
        return OverridesParser.create(config_loader=loader_for(None)).parse_overrides(
            overrides
        )  # glob() lists options
    except HydraException as e:
        raise ToplError(
            f"bad sweep syntax: {e}",
            where=f"overrides: {' '.join(overrides)}",
            fix="sweeps look like key=a,b,c or key=range(1,9) (Hydra override grammar)",
        ) from None


def expand_items(overrides: list[str]) -> list[list[Item]]:
    """The sweep's points as typed items, in the order and with the override strings that
    Hydra's BasicSweeper.split_arguments produces (parsed once, not once per point)."""
    final: dict[str, list[Item]] = {}
    for ov in _parse(overrides):
        key = ov.get_key_element()
        if ov.is_sweep_override():
            if not ov.is_discrete_sweep():
                raise ToplError(
                    f"sweep type {ov.value_type.name} is not supported",
                    where=ov.input_line,
                    fix="use a list (a,b,c), range() or glob() sweep",
                )
            # one list of strings, each parsed back: shuffle() reorders every iterator afresh, so
            # zipping sweep_string_iterator with sweep_iterator pairs strings with other values
            texts = list(ov.sweep_string_iterator())
            if ov.key_or_group == "recipe" and isinstance(ov.value(), Glob):
                texts = ov.value().filter(list(available()))  # recipes live outside conf/
            typed = _parse([f"{key}={t}" for t in texts]) if texts else []
            final[key] = [(f"{key}={t}", ov.key_or_group, o.value()) for t, o in zip(texts, typed)]
        else:
            final[key] = [(f"{key}={ov.get_value_element_as_str()}", ov.key_or_group, ov.value())]
    return [list(p) for p in itertools.product(*final.values())]


def expand(overrides: list[str]) -> list[list[str]]:
    """Cartesian product of the sweep as override strings (what each job receives)."""
    return [[t for t, _, _ in p] for p in expand_items(overrides)]


def _set(obj, dotted: str, value: Any) -> None:
    obj, leaf = parent_of(obj, dotted)
    if isinstance(obj, dict):
        obj[leaf] = value
        return
    fields = {f.name: f for f in dataclasses.fields(obj)}
    if leaf not in fields:
        raise ToplError(
            f"unknown key {dotted}",
            where=f"`{dotted}=...`",
            fix="check the spelling (`topl launch --cfg job` lists every key)",
        )
    setattr(obj, leaf, _coerce(value, _hints(type(obj))[leaf], dotted))


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _coerce(value, typ, key: str):
    args = typing.get_args(typ)
    if value is None and type(None) in args:
        return None
    base = (
        next((a for a in args if a is not type(None)), typ)
        if args and typing.get_origin(typ) is typing.Union
        else typ
    )
    try:
        if base is bool and not isinstance(value, bool):
            raise ValueError
        if base is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError
        if base in (float, int, str, bool):
            return base(value)
    except (TypeError, ValueError):
        raise ToplError(
            f"value {value!r} for {key} is not a {getattr(base, '__name__', base)}",
            where=f"`{key}={value}`",
            fix="give a value of the field's type (see launcher/spec.py)",
        ) from None
    return value


class Planner:
    """Validates points; composes each distinct set of group choices once."""

    def __init__(self):
        self._bases: dict[tuple, tuple[Composed, Any, list[tuple[str, str]]]] = {}

    def _base(self, group_overrides: list[str]):
        key = tuple(group_overrides)
        if key not in self._bases:
            c = compose_job(list(group_overrides))
            interp = [(k, _raw(c.cfg, k)) for k in _interpolated(c.cfg)]
            self._bases[key] = (c, c.to_object(), interp)
        return self._bases[key]

    def spec(self, point: list[Item]):
        """(spec object, sources) for one point."""
        groups, values = [], []
        for text, k, v in point:
            if k.startswith("hydra."):
                continue  # Hydra's own settings (sweeper, run dir): not part of the job spec
            (groups if (k.lstrip("+~") in GROUPS or "/" in k or "@" in k) else values).append(
                (text, k, v)
            )
        if any(not _replayable(text, k, v) for text, k, v in values):
            # a form the fast path cannot type exactly as Hydra would (+/++/~, a quoted number,
            # a dict entry, an interpolation...): compose this point through Hydra, like `check`
            c = compose_job([t for t, k, _ in point if not k.startswith("hydra.")])
            return c.to_object(), c.sources
        base, obj, interp = self._base([g[0] for g in groups])
        spec = copy.deepcopy(obj)
        sources = dict(base.sources)
        for text, k, v in values:
            _set(spec, k, v)
            sources[k] = f"command line `{text}`"
        for k, raw in interp:  # re-resolve ${a.b} references after the point's values are set
            if not any(k == vk for _, vk, _ in values):
                _set(spec, k, _resolve(raw, spec))
        return spec, sources

    def verdict(self, point: list[Item]) -> Verdict:
        from topl.launcher.memory_estimate import estimate

        spec, _ = self.spec(point)
        errs, warns = [], []
        for r, severity, _msg in evaluate(spec):  # the same rules, in the same order, as `check`
            bucket = errs if severity == ERROR else warns
            if r.id not in bucket:
                bucket.append(r.id)
        try:
            e = estimate(spec)
            tg, rg = round(e["train_gb"], 2), round(e["rollout_weights_gb"], 2)
        except (ValueError, ZeroDivisionError):
            tg = rg = None
        return Verdict([t for t, _, _ in point], not errs, errs, warns, tg, rg, world_size(spec))


def _replayable(text: str, key: str, value) -> bool:
    """True when setting `value` on the typed spec equals what Hydra + OmegaConf would compose."""
    if text.startswith(("+", "~")) or (isinstance(value, str) and "${" in value):
        return False
    cls = JobSpec
    parts = key.split(".")
    for i, part in enumerate(parts):
        hints = _hints(cls)
        if part not in hints:
            return False  # unknown key: Hydra's own message
        typ = hints[part]
        if dataclasses.is_dataclass(typ):
            cls = typ
            continue
        if i != len(parts) - 1:
            return False  # inside a dict field (cluster.env, extra_overrides)
        args = typing.get_args(typ)
        if value is None:
            return type(None) in args
        base = next((a for a in args if a is not type(None)), typ) if args else typ
        return (type(value) is base or (base is float and type(value) is int)) and base in (
            int,
            float,
            str,
            bool,
        )
    return False


def _interpolated(cfg, prefix: str = "") -> list[str]:
    out = []
    for k in cfg.keys():
        node = cfg._get_node(k)
        key = f"{prefix}{k}"
        if OmegaConf.is_interpolation(cfg, k):
            out.append(key)
        elif OmegaConf.is_dict(node):
            out += _interpolated(node, key + ".")
    return out


def _raw(cfg, key: str) -> str:
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return node._get_node(leaf)._value()


def _resolve(raw: str, spec):
    whole = _REF.fullmatch(raw.strip())
    if whole:
        return get_path(spec, whole.group(1))
    if ":" in raw.replace("${", "").split("}")[0]:
        raise ToplError(f"interpolation {raw!r} uses a resolver the planner cannot replay")
    return _REF.sub(lambda m: str(get_path(spec, m.group(1))), raw)


def plan(overrides: list[str]) -> list[Verdict]:
    """Every point of the sweep with its verdict."""
    from topl.launcher.untrusted import guard_overrides

    planner = Planner()
    return [planner.verdict(p) for p in expand_items(guard_overrides(overrides))]


def swept_keys(overrides: list[str]) -> list[str]:
    return [o.key_or_group for o in _parse(overrides) if o.is_sweep_override()]
