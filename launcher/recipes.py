"""Recipes: shareable YAML files that pick group options and override keys.

A recipe is plain data in Hydra's experiment format (`# @package _global_`, `override /group:`
in its defaults). It is found by name in the shipped `recipes/` folder, in folders listed in
`TOPL_RECIPE_PATH`, or given as a path; it never instantiates code (`_target_` is refused).
"""
from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path

import yaml

from topl.launcher.errors import ToplError


def recipes_dir() -> Path:
    return Path(str(files("topl.recipes")))


def search_dirs() -> list[Path]:
    """Shipped recipes first, then the folders in TOPL_RECIPE_PATH (os.pathsep separated)."""
    extra = [Path(p).expanduser() for p in os.environ.get("TOPL_RECIPE_PATH", "").split(os.pathsep) if p]
    return [recipes_dir(), *extra]


def available() -> dict[str, Path]:
    """Recipe name -> file, over every search folder (earlier folders win)."""
    found: dict[str, Path] = {}
    for d in reversed(search_dirs()):
        for f in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            found[f.stem] = f
    return dict(sorted(found.items()))


def resolve(value: str) -> Path:
    """A recipe name or a path to a recipe file -> the file."""
    if value.endswith((".yaml", ".yml")) or os.sep in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise ToplError(f"recipe file {value!r} does not exist", where=f"recipe={value}",
                            fix="give an existing .yaml file, or a recipe name from `topl recipes`")
        return path.resolve()
    names = available()
    if value not in names:
        close = difflib.get_close_matches(value, names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "run `topl recipes` to list them"
        raise ToplError(f"unknown recipe {value!r}", where=f"recipe={value} (command line)",
                        fix=f"{hint} (search path: {', '.join(map(str, search_dirs()))})")
    return names[value]


def find_targets(node, path: str = "") -> list[str]:
    """Dotted paths of every `_target_` key (code to instantiate) inside a loaded YAML tree."""
    hits: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            here = f"{path}.{k}" if path else str(k)
            if k == "_target_":
                hits.append(here)
            hits += find_targets(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            hits += find_targets(v, f"{path}[{i}]")
    return hits


def load_checked(path: Path) -> dict:
    """Parse a user YAML file as data: syntax errors and `_target_` become readable errors."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise ToplError(f"YAML syntax error: {getattr(e, 'problem', e)}", where=where,
                        fix="fix the YAML syntax at that line") from None
    if not isinstance(data, dict):
        raise ToplError("a recipe must be a YAML mapping", where=str(path))
    targets = find_targets(data)
    if targets:
        raise ToplError(f"`_target_` found at {', '.join(targets)}: recipes are data and never instantiate code",
                        where=str(path), fix="remove the `_target_` keys")
    return data


def description(path: Path) -> str:
    """The first comment line of a recipe file (its one-line description)."""
    for line in path.read_text().splitlines():
        if line.startswith("#") and "@package" not in line:
            return line.lstrip("# ").strip()
    return ""


class RecipeRoot:
    """A temporary Hydra search-path root whose `recipe/` group holds the chosen recipe file(s)
    (several for a sweep over recipes, `recipe=a,b`)."""

    def __init__(self, path: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="topl-recipe-"))
        (self.dir / "recipe").mkdir()
        self.sources: dict[str, Path] = {}  # option name in the root -> the user's file
        self.name = self.add(path)
        self.source = path

    def add(self, path: Path) -> str:
        """Copy one more recipe in; its option name (the file's stem, made unique)."""
        name, i = path.stem, 1
        while name in self.sources and self.sources[name] != path:
            name, i = f"{path.stem}_{i}", i + 1
        self.sources[name] = path
        shutil.copyfile(path, self.dir / "recipe" / f"{name}.yaml")
        return name

    def source_of(self, name: str | None) -> Path:
        return self.sources.get(name or "", self.source)

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
