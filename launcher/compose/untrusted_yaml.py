"""Untrusted YAML, read with limits: size, aliases, values after expansion, nesting (a
billion-laughs file is refused at once), from a regular file only (a FIFO is never waited on).
launcher/compose/untrusted.py checks what the YAML says."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from topl.launcher.base.errors import ToplError

MAX_BYTES = 256 * 1024  # a recipe is a page of YAML; the shipped ones are < 1 KiB
MAX_ALIASES = 64  # YAML aliases (*name) in one file
MAX_NODES = 20_000  # values after alias expansion
MAX_DEPTH = 32  # nesting of mappings / lists (the spec is 3 deep; verl keys are dotted)


@cache
def _limited_loader() -> Any:
    """OmegaConf's YAML loader (the one Hydra uses), with a cap on aliases. Made on first use:
    importing PyYAML and OmegaConf is most of what a `check` answered from its cache would cost."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    class LimitedLoader(get_yaml_loader()):  # type: ignore[misc]  # OmegaConf builds the class
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise yaml.YAMLError(f"more than {MAX_ALIASES} YAML aliases")
            return super().compose_node(parent, index)

    return LimitedLoader


def _count(node: Any, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError
    if isinstance(node, dict):
        for k, v in node.items():
            _count(k, budget)
            _count(v, budget)
    elif isinstance(node, list):
        for v in node:
            _count(v, budget)


def _depth(node: Any) -> int:
    """How deep mappings and lists nest, counted without recursion (a cycle counts as too deep)."""
    deepest, todo = 0, [(node, 1)]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        if isinstance(n, dict):
            todo += [(v, d + 1) for v in n.values()]
        elif isinstance(n, list):
            todo += [(v, d + 1) for v in n]
    return deepest


def _yaml_error() -> type[Exception]:
    import yaml

    error: type[Exception] = yaml.YAMLError
    return error


def load_yaml(text: bytes, where: str) -> Any:
    """Parse YAML as OmegaConf/Hydra would, refusing oversize, alias-heavy or exploding files."""
    fix = "recipes are small plain YAML: write values out instead of using anchors and aliases"
    if len(text) > MAX_BYTES:
        raise ToplError(
            f"the file is {len(text)} bytes; the limit is {MAX_BYTES}", where=where, fix=fix
        )
    try:
        loader = _limited_loader()(text.decode("utf-8"))
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except UnicodeDecodeError:
        raise ToplError("the file is not UTF-8 text", where=where) from None
    except RecursionError:
        raise ToplError(
            f"the YAML nests deeper than {MAX_DEPTH} levels", where=where, fix=fix
        ) from None
    except _yaml_error() as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        problem = getattr(e, "problem", None) or str(e)
        if "alias" in problem:
            raise ToplError(f"YAML limit: {problem}", where=at, fix=fix) from None
        raise ToplError(
            f"YAML syntax error: {problem}", where=at, fix="fix the YAML syntax at that line"
        ) from None
    if _depth(data) > MAX_DEPTH:
        raise ToplError(f"the YAML nests deeper than {MAX_DEPTH} levels", where=where, fix=fix)
    try:
        _count(data, [MAX_NODES])
    except (ValueError, RecursionError):
        raise ToplError(
            f"the YAML expands to more than {MAX_NODES} values (aliases)", where=where, fix=fix
        ) from None
    return data


def read_capped(path: Path, cap: int) -> bytes:
    """At most `cap` bytes of a regular file: a FIFO or a device is refused, never waited on."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ToplError(f"cannot read the recipe: {e.strerror}", where=str(path)) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ToplError(
                "the recipe is not a regular file (a FIFO, a device or a folder)",
                where=str(path),
                fix="point at a .yaml file",
            )
        os.set_blocking(fd, True)
        try:
            return f.read(cap)
        except OSError as e:
            raise ToplError(f"cannot read the recipe: {e.strerror}", where=str(path)) from None
