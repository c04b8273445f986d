"""The tree shows the pipeline: one package per stage, imports one way down the layers of
scripts/architecture.py (lazy and TYPE_CHECKING imports counted), no circle between files or
packages, no private name across modules, few imports inside functions (each saying why), and
docs/architecture.md as the code renders it."""

import ast
import sys

import pytest
from paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import architecture as A  # noqa: E402

MODS = A.modules()
IMPORTS = A.imports(MODS)
# Triton kernels are private to the module that launches them (kernels/gpu)
PRIVATE_OK = ("topl.kernels.gpu.",)


def test_the_walk_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The graph counts imports inside functions and under TYPE_CHECKING, and `from pkg import mod`
    as an import of the module: a circle hidden in any of them is still found."""
    mods = {"topl.launcher.a": tmp_path / "a.py", "topl.launcher.b": tmp_path / "b.py"}
    mods["topl.launcher.a"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from topl.launcher.b import X\n"
    )
    mods["topl.launcher.b"].write_text("def f():\n    from topl.launcher import a  # lazy: why\n")
    got = A.imports(mods)
    assert {(i.source, i.target, i.lazy) for i in got} == {
        ("topl.launcher.a", "topl.launcher.b", False),
        ("topl.launcher.b", "topl.launcher.a", True),
    }
    edges = {"topl.launcher.a": {"topl.launcher.b"}, "topl.launcher.b": {"topl.launcher.a"}}
    assert A.cycles(edges) == [["topl.launcher.a", "topl.launcher.b"]]
    assert [i.comment for i in got if i.lazy] == ["lazy: why"]


def test_no_import_circle_between_files():
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        edges.setdefault(i.source, set()).add(i.target)
    assert len(MODS) > 100 and A.cycles(edges) == []


def test_no_import_circle_between_packages():
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        a, b = A.stage(i.source), A.stage(i.target)
        if a != b:
            edges.setdefault(a, set()).add(b)
    assert A.cycles(edges) == []


def test_imports_run_down_the_layers():
    """A module imports from its own package or from a lower layer only."""
    up = [
        f"{i.source}:{i.line} -> {i.target}"
        for i in IMPORTS
        if A.stage(i.source) != A.stage(i.target)
        and A.layer(A.stage(i.target)) >= A.layer(A.stage(i.source))
    ]
    assert not up, "\n".join(up)


def test_every_stage_is_a_package_in_a_layer_and_few_modules_sit_at_the_top():
    launcher = ROOT / "launcher"
    packages = {p.name for p in launcher.iterdir() if (p / "__init__.py").is_file()}
    layered = {n for names in A.LAYERS for n in names}
    assert packages <= layered, packages - layered
    top = [p.name for p in launcher.glob("*.py")]
    assert sorted(top) == ["__init__.py", "guard.py"] and len(top) <= 12
    for pkg in packages:  # each says what it owns, and holds no re-exports
        tree = ast.parse((launcher / pkg / "__init__.py").read_text())
        assert ast.get_docstring(tree), pkg


def test_no_private_name_is_imported_from_another_module():
    bad = [
        f"{i.source}:{i.line} {i.target}.{i.name}"
        for i in IMPORTS
        if i.name and i.name.startswith("_") and not i.name.startswith("__")
        if not i.source.startswith(PRIVATE_OK)
    ]
    assert not bad, "\n".join(bad)


def test_few_imports_sit_inside_functions_and_each_says_why():
    """Inside a function only to keep a heavy dependency (Hydra, torch, Ray, verl, Triton...) off
    a path that does not need it; the line says which."""
    statements = {(i.source, i.line): i for i in IMPORTS}
    lazy = [i for i in statements.values() if i.lazy]
    assert len(lazy) <= 0.2 * len(statements), f"{len(lazy)} of {len(statements)}"
    silent = [f"{i.source}:{i.line}" for i in lazy if not i.comment]
    assert not silent, "\n".join(silent)


def test_every_unwrap_declares_what_it_reads():
    """plan reuses a rule's answer while the keys it read keep their values: code that unwraps the
    spec out of the recording view says there which keys it reads (launcher/spec/view.py)."""
    from topl.launcher.spec.view import Reads, View, unwrap

    bare = []
    for path in MODS.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "unwrap":
                if len(node.args) < 2:
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr in ("_obj", "_reads"):
                if path.name != "view.py":
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "_getframe":
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno} frame inspection")
    assert not bare, "\n".join(bare)
    reads = Reads()
    view = View(object(), reads)
    assert unwrap(view, "cluster.versions") is not view and reads.declared == {"cluster.versions"}
    with pytest.raises(TypeError, match="declare"):
        unwrap(view)


def test_the_architecture_document_is_the_code_rendered():
    got = (ROOT / "docs" / "architecture.md").read_text()
    assert got == A.markdown(), "python scripts/architecture.py > docs/architecture.md"
