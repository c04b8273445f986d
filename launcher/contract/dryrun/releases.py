"""Where the declared verl is, for the dry run: the installed one when it is that version, else its
wheel unpacked into ~/.cache/topl-verl/<version> (`pip download --no-deps`, never installed; the
cache scripts/gen_verl_schema.py and the tests share), and its trainer config with what the declared
patches add (their cited facts) and the verl-recipe overlays topl records (facts/verl_schema).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from topl.launcher.facts.verl_schema import schema, trainer_configs

PATCH_FILES = {"actor_rollout_ref.rollout.": "rollout/rollout.yaml"}  # where a patch adds a key


def cache() -> Path:
    return Path(os.environ.get("TOPL_VERL_CACHE") or Path.home() / ".cache" / "topl-verl")


def installed_root(version: str) -> Path | None:
    """The folder holding the installed `verl/` when it is `version` (never imported here)."""
    try:
        if importlib.metadata.version("verl") != version:
            return None
        spec = importlib.util.find_spec("verl")
    except (importlib.metadata.PackageNotFoundError, ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


def cached_root(version: str) -> Path | None:
    root = cache() / version
    return root if (root / "verl" / "trainer" / "config").is_dir() else None


def release_root(version: str) -> Path:
    """The unpacked wheel of verl `version` (the folder holding `verl/`), downloaded once; raises
    CalledProcessError / OSError where pip cannot get it."""
    root = cache() / version
    if cached_root(version):
        return root
    cache().mkdir(parents=True, exist_ok=True)
    with open(cache() / ".lock", "w") as lock:  # parallel callers unpack it once, whole
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cached_root(version):
            _unpack(version, root)
    return root


def _unpack(version: str, root: Path) -> None:
    dl = cache() / f"dl-{version}"
    wheels = list(dl.glob(f"verl-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"verl=={version}"]
            + ["-d", str(dl)],
            check=True,
            capture_output=True,
        )
        wheels = list(dl.glob(f"verl-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(root, [n for n in z.namelist() if n.startswith("verl/")])


def config_dir(root: Path, version: str, patches: tuple[str, ...]) -> Path:
    """verl's trainer/config of `root`, the declared patches' keys added (from the cited facts,
    never a copy of the patch) and the recorded DAPO trainer config: what the declared verl composes."""
    conf = cache() / "conf" / f"{version}-{'-'.join(patches) or 'stock'}"
    if conf.is_dir():
        return conf
    sch = schema(version, patches)
    part = conf.with_name(f"{conf.name}.{os.getpid()}.part")
    shutil.rmtree(part, ignore_errors=True)
    shutil.copytree(root / "verl" / "trainer" / "config", part)
    for key in sch.cites:  # the keys a declared patch adds
        prefix = next(p for p in PATCH_FILES if key.startswith(p))
        with open(part / PATCH_FILES[prefix], "a") as f:
            f.write(f"\n{key[len(prefix) :]}: {json.dumps(sch.default(key))}\n")
    for name, c in trainer_configs(version).items():
        if "overlay" in c:
            node = {"defaults": c["defaults"], **c["overlay"]}  # JSON is YAML: no PyYAML here
            (part / f"{name}.yaml").write_text(json.dumps(node, indent=1))
    try:
        part.rename(conf)
    except OSError:  # another process put it in place first
        shutil.rmtree(part, ignore_errors=True)
    return conf
