"""A composed job kept on disk by everything that decides it, so that `check` / `render` of inputs
composed before skip Hydra: importing Hydra and composing are about two thirds of a `check`.

Key: the overrides as typed, the working directory, TOPL_RECIPE_PATH, the Python / Hydra /
OmegaConf that compose, and every file of topl's launcher, conf/ and kernels (path, size, mtime).
An entry also lists the recipe files the compose read (a sha256 of their bytes) and the file each
of their names finds first on the search path: a hit needs both unchanged (an edited recipe or
include, or a new file that shadows a name, misses). Entries are JSON data; a hit re-runs every
check that reads the environment or guards against code (no code keys, no secret on argv,
interpolations resolved, types), so it says what a compose says. Not kept: failed composes (each
fails afresh, with its message), `--unsafe` runs, values that call a Hydra resolver
(`${now:...}` resolves only inside Hydra) and anything the redactor would hide (a secret typed
into `cluster.env`: secrets never land in files).

TOPL_COMPOSE_CACHE=0 turns it off; TOPL_CACHE_DIR (default $XDG_CACHE_HOME/topl, ~/.cache/topl)
says where; the newest MAX_ENTRIES entries stay. Files of another user, or writable by others,
are not read.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from topl.launcher.base import redact
from topl.launcher.compose import untrusted
from topl.launcher.compose.composed import Composed
from topl.launcher.compose.overrides_guard import UNSAFE_FLAG
from topl.launcher.compose.recipes import search_dirs
from topl.launcher.spec.job import JobSpec

FORMAT = 2
MAX_ENTRIES = 256  # ~25 KB each
_HYDRA_RESOLVER = re.compile(r"\$\{(?!oc\.)[A-Za-z_][\w.]*:")  # OmegaConf's own oc.* need no Hydra
# What only OmegaConf resolves or checks on every hit: any interpolation but a plain absolute
# reference (a resolver such as `${oc.env:..}` reads this shell's environment; a nested or
# relative form is left to OmegaConf too), an escape, or a MISSING value. An entry with none of
# these also keeps its config resolved (`${rollout.block_size}` as its value); a hit uses that.
_LIVE = re.compile(r"\$\{(?![A-Za-z_][\w.]*\})|\\\$\{|\?\?\?")


def cache_dir() -> Path | None:
    """Where entries live; None when TOPL_COMPOSE_CACHE turns the cache off."""
    if os.environ.get("TOPL_COMPOSE_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    base = os.environ.get("TOPL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "topl"
    )
    return Path(base) / "compose"


def compose_cached(overrides: list[str]) -> Composed:
    """`compose.compose_job(overrides)`, from the cache when nothing that decides it changed."""

    where = cache_dir()
    if where is None or UNSAFE_FLAG in overrides:
        return _compose(overrides)[0]
    try:
        key = _key(overrides)
    except OSError:  # e.g. the working directory is gone: compose (and fail) as without a cache
        return _compose(overrides)[0]
    entry = _read(where / f"{key}.json")  # None, or the shape _write writes (_well_formed)
    if entry is not None and entry["deps"] == _deps(list(entry["deps"]["files"])):
        if (kept := _rebuild(entry, overrides)) is not None:
            return kept
    composed, files = _compose(overrides)
    _write(where, key, composed, _deps(files))
    return composed


def _compose(overrides: list[str]) -> tuple[Composed, list[str]]:
    """A Hydra compose, and the recipe files it read."""
    from topl.launcher.compose.hydra import (
        compose_job,
        split_recipe,
    )  # lazy: Hydra and OmegaConf only when this runs

    prepared = split_recipe(list(overrides))
    root = prepared[1]
    try:
        composed = compose_job(overrides, prepared=prepared)
        return composed, sorted(str(p) for p in (root.files.values() if root else ()))
    finally:
        if root is not None:
            root.cleanup()


def _key(overrides: list[str]) -> str:
    h = hashlib.sha256()
    for part in (FORMAT, sys.version, os.getcwd(), os.environ.get("TOPL_RECIPE_PATH", "")):
        h.update(f"{part}\0".encode())
    h.update(json.dumps(overrides).encode())
    for name in ("hydra", "omegaconf"):
        spec = importlib.util.find_spec(name)  # a top-level package: found, not imported
        if spec is not None and spec.origin:
            st = os.stat(spec.origin)
            h.update(f"{spec.origin}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    launcher = (
        Path(__file__).resolve().parents[1]
    )  # the launcher root: any stage may decide a compose
    for base in (launcher, launcher.parent / "conf", launcher.parent / "kernels"):
        for dirpath, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for n in sorted(names):
                st = os.stat(os.path.join(dirpath, n))
                h.update(f"{dirpath}/{n}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _deps(files: list[str]) -> dict[str, Any]:
    """What a hit needs unchanged beyond the key: each recipe file's bytes, and which file each of
    their names finds first on the search path now (a new file may shadow one: recipes.available)."""

    dirs = search_dirs()
    digests: dict[str, str | None] = {}
    names: dict[str, str | None] = {}
    for f in files:
        try:
            digests[f] = hashlib.sha256(Path(f).read_bytes()).hexdigest()
        except OSError:
            digests[f] = None
        stem = Path(f).stem
        names[stem] = next((str(p) for d in dirs if (p := d / f"{stem}.yaml").is_file()), None)
    return {"files": digests, "names": names}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None  # another user's, or others may write it: not trusted
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    return entry if _well_formed(entry) else None


def _well_formed(entry: Any) -> bool:
    """The shape `_write` writes (anything else is read as a miss, not as an error)."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return False
    deps = entry.get("deps")
    return (
        isinstance(deps, dict)
        and all(isinstance(deps.get(k), dict) for k in ("files", "names"))
        and all(isinstance(entry.get(k), dict) for k in ("cfg", "sources", "choices"))
        and isinstance(entry.get("recipe"), (str, type(None)))
        and isinstance(entry.get("resolved"), (dict, type(None)))
    )


def _write(where: Path, key: str, composed: Composed, deps: dict[str, Any]) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(composed.cfg, resolve=False, enum_to_str=True)
    entry = {
        "format": FORMAT,
        "deps": deps,
        "cfg": cfg,
        "resolved": None,
        "sources": composed.sources,
        "choices": composed.choices,
        "recipe": composed.recipe,
    }
    try:
        if not _LIVE.search(json.dumps(cfg)):
            entry["resolved"] = OmegaConf.to_container(composed.cfg, resolve=True)
        text = json.dumps(entry)
    except (TypeError, ValueError):  # not JSON (a YAML !!binary value): composed every time
        return

    if json.loads(text) != entry:  # JSON changes it (a non-string key, NaN): composed every time
        return
    if _HYDRA_RESOLVER.search(text) or redact.current().text(text) != text:
        return  # resolves only inside Hydra; or holds a secret (cluster.env): never in a file
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")  # mode 0600
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, where / f"{key}.json")
        entries = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # a cache: a read-only or full disk only costs the next compose


def _rebuild(entry: dict[str, Any], overrides: list[str]) -> Composed | None:
    """The Composed of a kept entry, after the checks `compose._compose` runs on a fresh one
    that read the environment or guard against code (the same order, the same messages); None
    when the entry's config is not of a JobSpec's shape."""

    user = [o for o in overrides if o != UNSAFE_FLAG]
    where = f"overrides: {' '.join(user) or '(none)'}"
    untrusted.check_values(entry["cfg"], where, resolvers=True)
    if entry["resolved"] is not None:  # nothing that reads the environment: no OmegaConf needed
        untrusted.check_values(entry["resolved"], where, resolvers=True)  # what is used, checked
        info = (entry["sources"], user, entry["choices"], entry["recipe"])
        kept = Composed(None, *info, data=entry["cfg"], resolved=entry["resolved"])
        try:
            env = kept.to_object().cluster.env  # every field there, of a JobSpec's shape
        except (KeyError, TypeError, AttributeError):
            return None  # not what a compose writes (a hand-edited entry): a miss
        redact.remember(env)
        untrusted.check_no_secret_on_argv(entry["resolved"], where)
        return kept
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.merge(OmegaConf.structured(JobSpec), entry["cfg"])
        assert isinstance(cfg, DictConfig)
        OmegaConf.set_struct(cfg, True)
        redact.remember(OmegaConf.to_container(cfg.cluster.env))  # type: ignore[arg-type]
        OmegaConf.to_object(cfg)  # resolves interpolations (the environment's too) now
        untrusted.check_no_secret_on_argv(OmegaConf.to_container(cfg, resolve=True), where)
    except OmegaConfBaseException as e:
        from topl.launcher.compose.hydra import (
            friendly_error,
        )  # lazy: Hydra and OmegaConf only when this runs

        raise friendly_error(e, user) from None
    return Composed(cfg, entry["sources"], user, entry["choices"], entry["recipe"])
