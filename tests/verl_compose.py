"""Compose rendered overrides against verl 0.9.1's real config (a helper for the tests)."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def verl_config_dir() -> Path | None:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def compose_verl(invocation):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return compose(invocation.config_name, overrides=invocation.overrides)
    finally:
        GlobalHydra.instance().clear()
