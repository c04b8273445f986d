"""topl's stages and layers, read from the code: every import between topl modules (those inside
functions and under TYPE_CHECKING counted), the layer order they must follow, and
docs/architecture.md rendered from the packages' own docstrings.

    python scripts/architecture.py > docs/architecture.md

tests/project/test_import_layers.py holds the code to this order and the document to the code.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = {"launcher": "topl.launcher", "kernels": "topl.kernels"}
PLUGIN = ("topl.launcher.hydra_plugins.topl_sweeper", "hydra_plugins.topl_sweeper")

# Lowest first. A module imports only from its own package and from lower layers; packages of
# one layer are independent of each other. guard.py (verl imports it by name), align/ (loaded
# into vLLM by path) and hydra_plugins/ (Hydra's namespace) stay where those look for them.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("base", "align", "guard", "kernels"),
    ("spec", "facts"),
    ("compose", "render"),
    ("contract", "doctor", "importer"),
    ("plan", "run"),
    ("cli", "hydra_plugins"),
)
# What a user reads in the README, in order: the stages of one `topl launch`.
PIPELINE = ("compose", "spec", "contract", "render", "plan", "run")


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported topl module
    name: str | None  # the name imported from it (`from m import name`), None for a module
    line: int
    lazy: bool  # inside a function or a class body (not at module level, TYPE_CHECKING aside)
    comment: str  # the source line's trailing comment, if any


def modules() -> dict[str, Path]:
    """Every topl module by dotted name (packages by their __init__.py)."""
    out = {}
    for folder, top in TOPS.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            parts = list(p.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([top, *parts]).replace(*PLUGIN)
            out[name] = p
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports(mods: dict[str, Path] | None = None) -> list[Import]:
    """Every import of a topl module by a topl module, one per imported name."""
    mods = mods or modules()
    out = []
    for src, path in mods.items():
        text = path.read_text()
        lines, tree = text.splitlines(), ast.parse(text)
        top = set()
        for node in tree.body:  # module level, inside if / try too (TYPE_CHECKING included)
            top.update(
                map(id, ast.walk(node)) if isinstance(node, (ast.If, ast.Try)) else [id(node)]
            )
        for node in ast.walk(tree):
            pairs: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                pairs = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    pairs.append((full, None) if full in mods else (node.module, a.name))
            comment = ""
            if pairs:  # on the statement's lines, or a comment line just above it
                span = lines[node.lineno - 1 : node.end_lineno]
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                found = [s.partition("#")[2].strip() for s in span if "#" in s]
                comment = found[0] if found else above[1:].strip() if above[:1] == "#" else ""
            for target, name in pairs:
                t = _resolve(target, mods)
                if t and t != src:
                    out.append(Import(src, t, name, node.lineno, id(node) not in top, comment))
    return out


def stage(module: str) -> str:
    """The package a module belongs to: launcher/<stage>/..., guard, kernels or hydra_plugins."""
    if module.startswith("topl.kernels"):
        return "kernels"
    if module.startswith("hydra_plugins"):
        return "hydra_plugins"
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "<root>"


def layer(stage_name: str) -> int:
    if stage_name == "<root>":  # topl.launcher itself: its version, nothing else
        return 0
    return next(i for i, names in enumerate(LAYERS) if stage_name in names)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _doc(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def markdown() -> str:
    """docs/architecture.md: the pipeline, the layers, each package's docstring and modules."""
    mods = modules()
    out = [
        "# Architecture",
        "",
        "Generated by `python scripts/architecture.py > docs/architecture.md` from the packages'",
        "docstrings and their imports; tests/project/test_import_layers.py fails when it drifts.",
        "",
        "## The pipeline",
        "",
        "```",
        "conf/ + recipes/ + overrides",
        "   │ " + " → ".join(PIPELINE),
        "   │ (doctor checks the target stack; importer turns a bash script into a recipe)",
        "   ▼",
        "the verl command, launched and watched",
        "```",
        "",
        "## Layers",
        "",
        "A module imports only from its own package and from lower layers (imports inside",
        "functions and under TYPE_CHECKING counted); packages of one layer are independent.",
        "",
        "| layer | packages |",
        "|---|---|",
    ]
    for i, names in reversed(list(enumerate(LAYERS))):
        out.append(f"| L{i} | {' · '.join(f'`{n}`' for n in names)} |")
    out += ["", "## Packages", ""]
    for names in LAYERS:
        for n in names:
            if n == "kernels":
                init, prefix = ROOT / "kernels" / "__init__.py", "topl.kernels"
            elif n == "hydra_plugins":
                init, prefix = ROOT / "launcher/hydra_plugins/topl_sweeper/__init__.py", PLUGIN[1]
            elif n == "guard":
                init, prefix = ROOT / "launcher" / "guard.py", "topl.launcher.guard"
            else:
                init, prefix = ROOT / "launcher" / n / "__init__.py", f"topl.launcher.{n}"
            first = _doc(init).split("\n\n")[0]
            out += [f"### `{prefix}` (L{layer(n)})", "", " ".join(first.split()), ""]
            subs = [m for m in mods if m.startswith(prefix + ".")]
            for m in subs:
                first = _doc(mods[m]).split("\n\n")[0]
                out.append(f"- `{m[len(prefix) + 1 :]}`: {' '.join(first.split())}")
            if subs:
                out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
