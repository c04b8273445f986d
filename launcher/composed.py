"""A composed job (typed config, each key's source, the overrides): what `compose` returns and the
compose cache keeps. No Hydra here, so that a cached `check` never imports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from topl.launcher.spec import JobSpec

SCHEMA_SOURCE = "topl schema default"


@dataclass
class Composed:
    """A composed job: the typed config, each key's source, and the overrides that made it."""

    cfg: DictConfig  # typed by JobSpec (structured config)
    sources: dict[str, str]  # dotted key -> "conf/train/megatron.yaml" | "command line `k=v`" | ...
    overrides: list[str]  # as given by the user
    choices: dict[str, str] = field(default_factory=dict)  # group -> chosen option
    recipe: str | None = None  # recipe file, when one was used

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
        return OmegaConf.select(self.cfg, key, throw_on_missing=False)

    def to_object(self) -> JobSpec:
        """The JobSpec dataclass instance (interpolations resolved)."""
        return cast("JobSpec", OmegaConf.to_object(self.cfg))
