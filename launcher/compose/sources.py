"""Where each composed key came from (a file of the defaults list, or the command line), cached
per process by the inputs that decide it; `compose` asks for it after every compose."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from topl.launcher.base.tree import flatten
from topl.launcher.compose import recipes
from topl.launcher.compose.untrusted_options import SELECTABLE

if TYPE_CHECKING:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.config_repository import ConfigRepository


def conf_dir() -> Path:
    return Path(str(files("topl.conf")))


def value_keys(data: Any, package: str) -> list[str]:
    """Dotted keys a config file sets (its `defaults` list and `hydra` section are not values)."""
    values = {k: v for k, v in data.items() if package or k not in ("defaults", "hydra")}
    return list(flatten(values, package))


def loader_for(root: recipes.RecipeRoot | None) -> ConfigLoaderImpl:
    """A Hydra config loader over conf/ (+ the recipe root), independent of Hydra's global state."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery

    path = create_config_search_path(str(conf_dir()))
    if root is not None:  # before the structured-config ("schema") source, which Hydra expects last
        path.append("topl-recipe", f"file://{root.dir}", anchor=SearchPathQuery(provider="main"))
    return ConfigLoaderImpl(config_search_path=path)


# Each file's keys by the inputs that decide them: Hydra's defaults list and the files it names
# cost as much as the compose itself, and within one process most composes repeat them (a sweep,
# a fix search, the tests). Value overrides of dotted keys never change the defaults list.
_FILE_SOURCES: dict[tuple[Any, ...], dict[str, str]] = {}
_FILE_SOURCES_MAX = 256


def _sources_key(hydra_overrides: list[str], root: recipes.RecipeRoot | None) -> tuple[Any, ...]:
    """What the file part of `sources_of` depends on: the overrides that may choose files, the conf/
    tree and the recipe root's files (names, sources, bytes), each by content or stat."""
    rdir = str(root.dir) if root is not None else None
    choosing = []
    for o in hydra_overrides:
        k = o.partition("=")[0].lstrip("+~")
        if "." in k and not k.startswith("hydra") and "@" not in k and "/" not in k:
            continue  # a value: the same files whatever it is
        choosing.append(o.replace(rdir, "<root>") if rdir else o)
    files: list[Any] = []
    for base in (conf_dir(), root.dir if root is not None else None):
        if base is None:
            continue
        for dirpath, _, names in sorted(os.walk(base)):
            for n in sorted(names):
                st = os.stat(os.path.join(dirpath, n))
                files.append((os.path.relpath(os.path.join(dirpath, n), base), st.st_size))
                if base == conf_dir():
                    files.append(st.st_mtime_ns)
                else:  # written fresh per compose: the bytes themselves
                    files.append(Path(dirpath, n).read_bytes())
    named = tuple(sorted((k, str(v)) for k, v in root.files.items())) if root is not None else ()
    return (tuple(choosing), named, str(conf_dir()), tuple(files))


def record_defaults(
    loader: Any, hydra_overrides: list[str], root: recipes.RecipeRoot | None
) -> list[Any]:
    """The defaults list this compose's loader builds, so that `sources_of` need not build it a
    second time; and, where the cache lacks them, each file's keys read from the compose's own
    caching repository (every file already parsed) before the merge: Hydra merges with
    `no_deepcopy_set_nodes`, so afterwards a file's nodes may carry the overrides' edits
    (hydra-core@1.3.8:hydra/_internal/config_loader_impl.py:ConfigLoaderImpl._compose_config_from_defaults_list)."""
    seen = _Seen()
    seen.fkey = _sources_key(hydra_overrides, root)
    real = loader._compose_config_from_defaults_list

    def recording(defaults: Any, repo: Any) -> Any:
        seen[:] = defaults
        if seen.fkey not in _FILE_SOURCES:
            _remember(seen.fkey, file_sources(None, hydra_overrides, root, defaults, repo))
        return real(defaults=defaults, repo=repo)

    loader._compose_config_from_defaults_list = recording  # this compose's loader only
    return seen


class _Seen(list):  # type: ignore[type-arg]
    """A compose's defaults list, and the key of its files' sources in `_FILE_SOURCES`."""

    fkey: tuple[Any, ...] = ()


def _remember(fkey: tuple[Any, ...], file_sources: dict[str, str]) -> None:
    if len(_FILE_SOURCES) >= _FILE_SOURCES_MAX:
        _FILE_SOURCES.clear()
    _FILE_SOURCES[fkey] = file_sources


def sources_of(
    loader: Any,
    hydra_overrides: list[str],
    root: recipes.RecipeRoot | None,
    defaults: Any = None,
    swept: dict[str, str] | None = None,
) -> dict[str, str]:
    """Each composed key's source; `swept`: keys a recipe's sweep parameters set (recipe_sweeps)."""
    fkey = getattr(defaults, "fkey", None) or _sources_key(hydra_overrides, root)
    if fkey not in _FILE_SOURCES:
        _remember(fkey, file_sources(loader or loader_for(root), hydra_overrides, root, defaults))
    sources = dict(_FILE_SOURCES[fkey])
    parser = OverridesParser.create()
    for ov in parser.parse_overrides([o for o in hydra_overrides if not o.startswith("hydra.")]):
        key = ov.key_or_group
        if "@" in key or "/" in key or key in GROUPS:
            continue  # a group choice: its file is the source of the values
        text = ov.input_line or f"{key}={ov.value()}"
        where = f"command line `{text}`"
        if swept and key in swept:
            where = f"{swept[key]} (hydra.sweeper.params `{text}`)"
        sources[key] = where
        for k in list(sources):
            if k.startswith(key + "."):
                sources[k] = where
    return sources


def recipe_sweeps(root: recipes.RecipeRoot | None, user_overrides: list[str]) -> dict[str, str]:
    """The keys a sweep point got from a recipe's `hydra.sweeper.params` -> that recipe's label
    (a key the user typed, as itself or as a sweep parameter, is the command line's)."""
    if root is None:
        return {}
    typed = {
        o.partition("=")[0].lstrip("+~").strip().removeprefix("hydra.sweeper.params.").lstrip("+~")
        for o in user_overrides
    }
    return {k: _label(path) for k, path in root.swept.items() if k not in typed}


def file_sources(
    loader: Any,
    hydra_overrides: list[str],
    root: recipes.RecipeRoot | None,
    defaults: Any = None,
    repo: Any = None,
) -> dict[str, str]:
    """Each key a config file of the defaults list sets -> that file's label (the last wins);
    `repo`: the compose's repository (files parsed once), else a fresh one reads them again."""
    if not defaults:
        defaults = loader.compute_defaults_list("config", hydra_overrides, RunMode.RUN).defaults
    repo = repo or _repo(loader, root)
    sources: dict[str, str] = {}
    conf = conf_dir()
    for d in defaults:
        if (
            d.config_path is None
            or d.config_path.startswith("hydra/")
            or d.config_path == "topl_schema"
        ):
            continue
        result = repo.load_config(d.config_path)
        if (
            result is None
            or result.provider == "structured config"
            or not result.path.startswith("file://")
        ):
            continue
        file = Path(result.path.removeprefix("file://")) / f"{d.config_path}.yaml"
        if root is not None and str(file).startswith(str(root.dir)):
            label = _label(root.source_of(file.stem))
        else:
            label = f"conf/{d.config_path}.yaml" if str(file).startswith(str(conf)) else str(file)
        package = d.package or ""
        data = OmegaConf.to_container(result.config, resolve=False)
        for key in value_keys(data, package if package not in ("_global_",) else ""):
            sources[key] = label
    return sources


GROUPS = SELECTABLE | {"recipe"}


def _label(path: Path) -> str:
    """A shipped recipe as `recipes/NAME.yaml`, anything else by its full path."""
    shipped = recipes.recipes_dir()
    return f"recipes/{path.name}" if path.parent == shipped else str(path)


def _repo(loader: ConfigLoaderImpl, root: recipes.RecipeRoot | None) -> ConfigRepository:
    """A config repository over Hydra's search path plus the recipe root (a searchpath override)."""
    from hydra._internal.config_repository import ConfigRepository

    return ConfigRepository(config_search_path=loader.get_search_path())
