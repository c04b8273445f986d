"""A composed job (typed config, each key's source, the overrides): what `compose` returns and the
compose cache keeps. Neither Hydra nor OmegaConf is imported here: a `check` answered from the
compose cache builds the JobSpec straight from the kept data and never imports either."""

from __future__ import annotations

import dataclasses
import typing
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from topl.launcher.spec.job import JobSpec

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from topl.launcher.spec.job import JobSpec

SCHEMA_SOURCE = "topl schema default"


class Composed:
    """A composed job: the typed config, each key's source, and the overrides that made it.

    Made from a DictConfig (Hydra's compose), or from such a config's plain container, as written
    (`data`) and resolved (`resolved`): a compose cache hit whose config reads no environment. Its
    DictConfig is built only if something asks for `.cfg`."""

    def __init__(
        self,
        cfg: DictConfig | None,
        sources: dict[str, str],  # dotted key -> "conf/train/megatron.yaml" | "command line `k=v`"
        overrides: list[str],  # as given by the user
        choices: dict[str, str] | None = None,  # group -> chosen option
        recipe: str | None = None,  # recipe file, when one was used
        *,
        data: dict[str, Any] | None = None,
        resolved: dict[str, Any] | None = None,
    ) -> None:
        assert (cfg is None) != (data is None or resolved is None), "a DictConfig or its data"
        self._cfg, self._data, self._resolved = cfg, data, resolved
        self.sources, self.overrides = sources, overrides
        self.choices, self.recipe = choices or {}, recipe

    def __repr__(self) -> str:
        return f"Composed(overrides={self.overrides!r}, recipe={self.recipe!r})"

    @property
    def cfg(self) -> DictConfig:
        """The typed config (structured by JobSpec, struct mode)."""
        if self._cfg is None:
            from omegaconf import DictConfig, OmegaConf

            cfg = OmegaConf.merge(OmegaConf.structured(JobSpec), self._data)
            assert isinstance(cfg, DictConfig)
            OmegaConf.set_struct(cfg, True)
            self._cfg = cfg
        return self._cfg

    def source(self, key: str) -> str:
        """Where a key's value came from (walks up to the nearest recorded parent)."""
        parts = key.split(".")
        while parts:
            k = ".".join(parts)
            if k in self.sources:
                return self.sources[k]
            parts.pop()
        below = sorted({v for k, v in self.sources.items() if k.startswith(key + ".")})
        return (
            ", ".join(below) if below else SCHEMA_SOURCE
        )  # a container: where its entries came from

    def value(self, key: str) -> Any:
        """The value at a dotted key (None when absent), resolved; a container as written (its
        interpolations kept): a plain dict / list when made from data, else a DictConfig."""
        if self._resolved is None:  # made from a DictConfig (data and resolved come together)
            from omegaconf import OmegaConf

            return OmegaConf.select(self.cfg, key, throw_on_missing=False)
        written = _select(self._data, key)
        if isinstance(written, (dict, list)):
            return written
        value = _select(self._resolved, key)
        if isinstance(value, (dict, list)):  # a container written as `${..}`: as OmegaConf shows it
            from omegaconf import OmegaConf

            return OmegaConf.select(self.cfg, key, throw_on_missing=False)
        return value

    def to_object(self) -> JobSpec:
        """The JobSpec dataclass instance (interpolations resolved)."""
        if self._resolved is None:
            from omegaconf import OmegaConf

            return cast("JobSpec", OmegaConf.to_object(self.cfg))

        return cast("JobSpec", _build(JobSpec, self._resolved))


def _select(tree: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def _build(cls: type, data: dict[str, Any]) -> Any:
    """`cls(**data)` with each dataclass-typed field built the same way: the object OmegaConf's
    `to_object` makes of a structured config whose container is `data`. Every field must be
    there with a value of its type, as the compose that kept it left it; anything else raises
    TypeError (a hand-edited cache entry: the caller composes again)."""
    kw = {}
    for name, hint, sub in _dataclass_fields(cls):
        value = data[name]
        if sub is not None:
            kw[name] = _build(sub, value)
        elif _holds(hint, value):
            kw[name] = _copy(value)
        else:
            raise TypeError(f"{cls.__name__}.{name}: {value!r} is not a {hint}")
    return cls(**kw)


def _holds(hint: Any, value: Any) -> bool:
    """`value` is of the type `hint` names, exactly as OmegaConf leaves a field's value (an int
    in a float field is a float there; a bool is no int) and not OmegaConf's MISSING marker."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "'???'" not in repr(value)  # nowhere inside a free-form value either
    if value == "???":
        return False
    if origin is typing.Union:
        return any(_holds(a, value) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_holds(args[0], v) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(k, str) and _holds(args[1], v) for k, v in value.items()
        )
    return type(value) is hint


def _copy(value: Any) -> Any:
    """A fresh list / dict tree per object built, as OmegaConf gives (callers may edit theirs)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@cache
def _dataclass_fields(cls: type) -> tuple[tuple[str, Any, type | None], ...]:
    """Each field of a dataclass: its name, its type, and that type again when a dataclass."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, hints[f.name], hints[f.name] if dataclasses.is_dataclass(hints[f.name]) else None)
        for f in dataclasses.fields(cls)
    )
