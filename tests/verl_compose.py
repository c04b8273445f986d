"""verl's real config composed for a rendered command, as Hydra composes it, cheaply enough to run
for every shipped recipe on every declared release (tests/helpers.py re-exports compose_verl)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def verl_config_dir() -> Path | None:
    """The installed verl's trainer/config folder (found, not imported), or None."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


# Each verl YAML file parsed once per test process (keyed on its path, mtime and size), not once
# per compose: ~300 composes per CI run read the same ~40 files, and PyYAML's pure-Python parse
# was ~40 % of each. The object is what OmegaConf.load builds the config from; each compose gets
# its own config built from a copy, so Hydra's merges never reach the kept parse.
_PARSED: dict[tuple, tuple] = {}


def _load_config_parsed_once(self, config_path):
    """hydra@1.3.8:hydra/_internal/core_plugins/file_config_source.py:FileConfigSource.load_config
    (the header from the first 512 characters, then OmegaConf.load) with the parse kept."""
    import copy

    import yaml
    from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
    from omegaconf import OmegaConf
    from omegaconf._utils import get_yaml_loader

    full = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
    try:
        st = os.stat(full)
    except OSError:
        raise ConfigLoadError(f"Config not found : {full}") from None
    key = (full, st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        with open(full, encoding="utf-8") as f:
            text = f.read()
        obj = yaml.load(text, Loader=get_yaml_loader())
        _PARSED[key] = (ConfigSource._get_header_dict(text[:512]), obj)
    header, obj = _PARSED[key]
    return ConfigResult(
        config=OmegaConf.create() if obj is None else OmegaConf.create(copy.deepcopy(obj)),
        path=f"{self.scheme()}://{self.path}",
        provider=self.provider,
        header=dict(header),
    )


# verl's config composed once per (folder and its files, config name, the overrides that choose
# configs): a rendered command is value overrides (`a.b=c`, `+a.b=c`, `++a.b=c`, `~a.b`), which
# never change Hydra's defaults list, so each point is that base plus the step Hydra itself runs for
# value overrides after composing the defaults list, in struct mode
# (hydra-core@1.3.8:hydra/_internal/config_loader_impl.py:ConfigLoaderImpl._load_configuration_impl
# calls ConfigLoaderImpl._apply_overrides_to_config; the hydra node it drops at the end is not
# there to begin with). What an override is, Hydra decides as it does there (defaults_list.py:
# Overrides.__init__: a group of the repository, unless its value is a dict); a sweep, a hydra.*
# override or a group choice is part of the key (composed in full). ~0.4 s of CPU per compose of
# the 30B configs became ~0.07 s; a test compares both paths with Hydra's own compose.
_BASES: dict[tuple, object] = {}


def compose_verl(invocation, config_dir=None):
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    conf = str(config_dir or verl_config_dir())
    parsed = OverridesParser.create().parse_overrides(list(invocation.overrides))
    repo = _repository(conf)
    choosing = [
        o
        for o in parsed
        if o.is_sweep_override()
        or o.is_hydra_override()
        or o.package is not None
        or (repo.group_exists(o.key_or_group) and not isinstance(o.value(), dict))
    ]
    key = (conf, _stat(conf), invocation.config_name, tuple(o.input_line for o in choosing))
    if key not in _BASES:
        _BASES[key] = _compose_verl(invocation.config_name, [o.input_line for o in choosing], conf)
    cfg = copy.deepcopy(_BASES[key])
    ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if o not in choosing], cfg)
    return cfg


_REPOS: dict[str, object] = {}


def _repository(conf: str):
    """Hydra's config repository over `conf` (what `group_exists` reads), one per folder."""
    if conf not in _REPOS:
        from hydra._internal.config_repository import ConfigRepository
        from hydra._internal.utils import create_config_search_path

        _REPOS[conf] = ConfigRepository(config_search_path=create_config_search_path(conf))
    return _REPOS[conf]


def _stat(conf: str) -> tuple:
    """Every file under `conf` by path, size and mtime: a file rewritten in place is read again."""
    out = []
    for dirpath, dirs, names in sorted(os.walk(conf)):
        dirs.sort()
        for n in sorted(names):
            st = os.stat(os.path.join(dirpath, n))
            out.append((dirpath, n, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _compose_verl(config_name: str, overrides: list[str], conf: str):
    """Hydra's own compose of verl's config, each YAML file parsed once per process."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.file_config_source import FileConfigSource
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    own = FileConfigSource.load_config
    FileConfigSource.load_config = _load_config_parsed_once  # this compose only
    try:
        with initialize_config_dir(config_dir=conf, version_base=None):
            return compose(config_name, overrides=overrides)
    finally:
        FileConfigSource.load_config = own
        GlobalHydra.instance().clear()
