"""Recipes: shareable YAML files that pick group options and override keys.

A recipe is plain data in Hydra's experiment format (`# @package _global_`, `override /group:`
in its defaults). It is found by name in the shipped `recipes/` folder, in folders listed in
`TOPL_RECIPE_PATH`, or given as a path. It is data: `untrusted.py` says what it may set.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from topl.launcher.base.errors import ToplError
from topl.launcher.compose import untrusted


def recipes_dir() -> Path:
    return Path(str(files("topl.recipes")))


def search_dirs() -> list[Path]:
    """Shipped recipes first, then the folders in TOPL_RECIPE_PATH (os.pathsep separated)."""
    extra = [
        Path(p).expanduser() for p in os.environ.get("TOPL_RECIPE_PATH", "").split(os.pathsep) if p
    ]
    return [recipes_dir(), *extra]


def available() -> dict[str, Path]:
    """Recipe name -> file, over every search folder (earlier folders win)."""
    found: dict[str, Path] = {}
    for d in reversed(search_dirs()):
        for f in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            if f.is_file():  # a FIFO named x.yaml would hang whoever reads it
                found[f.stem] = f
    return dict(sorted(found.items()))


def resolve(value: str, included_by: Path | None = None) -> Path:
    """A recipe name or a path to a recipe file -> the file (`included_by`: the recipe whose
    defaults list names it, for the message)."""
    if value.endswith((".yaml", ".yml")) or os.sep in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise ToplError(
                f"recipe file {value!r} does not exist",
                where=f"recipe={value}",
                fix="give an existing .yaml file, or a recipe name from `topl recipes`",
            )
        return path.resolve()
    names = available()
    if value not in names:
        close = difflib.get_close_matches(value, names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "run `topl recipes` to list them"
        if included_by is not None:
            raise ToplError(
                f"recipe {included_by.name} includes an unknown recipe {value!r}",
                where=f"{included_by}: defaults entry `- {value}`",
                fix=f"{hint} A defaults entry names another recipe (`topl recipes` lists them; "
                f"search path: {', '.join(map(str, search_dirs()))}) or `override /GROUP: "
                "OPTION`; or remove the entry",
            )
        raise ToplError(
            f"unknown recipe {value!r}",
            where=f"recipe={value} (command line)",
            fix=f"{hint} (search path: {', '.join(map(str, search_dirs()))})",
        )
    return names[value]


def find_targets(node: Any, path: str = "") -> list[str]:
    """Dotted paths of every key that names code (`_target_`, `()`, ...), dotted keys included."""
    return untrusted.code_keys(node)


def load_checked(path: Path) -> untrusted.Recipe:
    """Read a recipe once and validate it as data (see launcher/compose/untrusted.py)."""
    return untrusted.read_recipe(path, untrusted.spec_fields())


def description(path: Path) -> str:
    """The first comment line of a recipe file (its one-line description)."""
    try:
        text = untrusted.read_capped(path, 4096).decode("utf-8", errors="replace")
    except ToplError:
        return ""
    for line in text.splitlines():
        if line.startswith("#") and "@package" not in line:
            return line.lstrip("# ").strip()
    return ""


def _global_package(recipe: untrusted.Recipe) -> None:
    """A recipe given as `recipe=` sets keys from the top (`# @package _global_`); without the
    line Hydra puts its keys under `recipe.`, which the spec has not (an included recipe takes
    its includer's package, so only the one named on the command line needs it)."""
    text = recipe.text.decode("utf-8", errors="replace")
    if re.search(r"^#\s*@package\s+_global_\s*$", text, re.MULTILINE):
        return
    empty = not any(ln.strip() and not ln.lstrip().startswith("#") for ln in text.splitlines())
    raise ToplError(
        f"recipe file {recipe.path} is empty"
        if empty
        else f"recipe file {recipe.path} does not start with `# @package _global_` (without "
        "it Hydra reads every key under `recipe.`)",
        where=f"recipe={recipe.path}",
        fix="start the file with the line `# @package _global_`, then the groups and keys it "
        "sets (`topl recipes show qwen3_4b_grpo_a3_strict` prints one; `topl recipes import "
        "SCRIPT.sh` writes one)" + ("; or leave recipe= out for the defaults" if empty else ""),
    )


class RecipeRoot:
    """A private temporary Hydra search-path root whose `recipe/` group holds the chosen recipe(s)
    (several for a sweep over recipes, `recipe=a,b`) and the recipes they include, written from
    the bytes that were validated (never re-read)."""

    def __init__(self, path: Path):
        self.source = path
        self.files: dict[str, Path] = {}  # recipe name in the root -> its source file
        self.swept: dict[str, Path] = {}  # a recipe's hydra.sweeper.params key -> that recipe
        self.user_value = path.stem  # the recipe override as the user spelled it (sweeps: a,b)
        self.dir = Path(tempfile.mkdtemp(prefix="topl-recipe-"))  # mode 0700
        try:
            (self.dir / "recipe").mkdir(mode=0o700)
            self.name = self.add(path)
        except BaseException:
            self.cleanup()
            raise

    def add(self, path: Path) -> str:
        """Read, validate and write one more top-level recipe; its option name in the root (the
        file's stem, made unique when two files share it)."""
        name, i = path.stem, 1
        while name in self.files and self.files[name] != path:
            name, i = f"{path.stem}_{i}", i + 1
        if name not in self.files:
            recipe = load_checked(path)
            _global_package(recipe)
            self._add(name, recipe, [])
        return name

    def source_of(self, name: str | None) -> Path:
        return self.files.get(name or "", self.source)

    def _add(self, name: str, recipe: untrusted.Recipe, chain: list[str]) -> None:
        if name in chain or len(chain) >= untrusted.MAX_INCLUDES:
            raise ToplError(
                f"recipe includes loop or nest too deep: {' -> '.join([*chain, name])}",
                where=str(recipe.path),
                fix=f"include each recipe once, at most {untrusted.MAX_INCLUDES} levels deep",
            )
        if name in self.files and self.files[name] != recipe.path:
            raise ToplError(
                f"two different recipes named {name!r}: {self.files[name]} and {recipe.path}",
                where=str(recipe.path),
                fix="rename one of them",
            )
        self.files[name] = recipe.path
        self.swept.update(dict.fromkeys(recipe.swept, recipe.path))
        fd = os.open(
            self.dir / "recipe" / f"{name}.yaml", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
        )
        with os.fdopen(fd, "wb") as f:
            f.write(recipe.text)
        for inc in recipe.includes:
            if inc in (*chain, name):
                self._add(inc, recipe, [*chain, name])  # reports the loop
            if inc not in self.files:
                self._add(inc, load_checked(resolve(inc, recipe.path)), [*chain, name])

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
