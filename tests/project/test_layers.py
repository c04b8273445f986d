"""The package's layers: the run layer, backends, contract and kernels sit below the command line;
the contract reads verl's key tables from a neutral module; modules stay small."""

import ast
from pathlib import Path

from paths import ROOT

LAUNCHER = ROOT / "launcher"
LINE_BUDGET = (
    420  # lines per module: the developers' guide says "< ~400"; a few over is not yet a split
)


def _imports(path: Path) -> list[str]:
    """Every module a file imports, spelled out (`from a import b` gives a and a.b)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return out


def test_nothing_outside_the_cli_imports_the_cli():
    """The run layer, the backends, the contract and the kernels sit below `topl.launcher.cli`."""
    files = [*LAUNCHER.rglob("*.py"), *(ROOT / "kernels").rglob("*.py")]
    hits = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in files
        if LAUNCHER / "cli" not in p.parents
        for m in _imports(p)
        if m == "topl.launcher.cli" or m.startswith("topl.launcher.cli.")
    ]
    assert len(files) > 50 and not hits, hits


def test_the_walk_sees_an_import_of_the_cli(tmp_path):
    """The walker above finds the imports it must refuse, lazy ones inside functions included."""
    p = tmp_path / "m.py"
    p.write_text(
        "def f():\n    from topl.launcher import cli\n    import topl.launcher.cli.output\n"
    )
    assert {"topl.launcher.cli", "topl.launcher.cli.output"} <= set(_imports(p))


def test_the_contract_reads_verl_key_tables_from_the_neutral_module():
    """Tables (UPPER_CASE names) come from verl_tables.py, which both the renderer and the
    contract import; the contract asks the renderer only for what it computes."""
    hits = []
    for p in (LAUNCHER / "contract").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "topl.launcher.render.invocation"
            ):
                hits += [f"{p.name}: {a.name}" for a in node.names if a.name.isupper()]
    assert not hits, hits
    from topl.launcher.facts import verl_tables
    from topl.launcher.render import invocation as render

    assert render.VERL_KEYS is verl_tables.VERL_KEYS and render.ARR == verl_tables.ARR


def test_the_run_layer_prints_nothing_the_cli_reports_its_events():
    """launch.py hands what a person should see to `LaunchContext.say`; cli/launch.py prints it."""
    from topl.launcher.cli import launch as cli_launch
    from topl.launcher.run import launch

    calls = [
        n.func.id
        for n in ast.walk(ast.parse((LAUNCHER / "run" / "launch.py").read_text()))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    assert "print" not in calls
    assert set(launch.EVENTS) <= set(_said_events(LAUNCHER / "cli" / "launch.py"))
    assert cli_launch.say is not None


def _said_events(path: Path) -> list[str]:
    """The event names cli/launch.py:say compares against."""
    (fn,) = [
        n
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name == "say"
    ]
    return [
        c.value
        for n in ast.walk(fn)
        if isinstance(n, ast.Compare)
        for c in n.comparators
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    ]


def test_the_cli_prints_each_event_as_before(capsys, tmp_path):
    from topl.launcher.cli.launch import say

    say("run_dir", run_dir=tmp_path)
    say("follow_hint", run_dir=tmp_path)
    say(
        "doctor_error",
        node="n1",
        finding={"id": "X-1", "what": "w", "found": "f", "needed": "n", "fix": "x"},
    )
    out, err = capsys.readouterr()
    assert (
        out
        == f"topl: run directory {tmp_path}\ntopl: follow it to its end with: topl watch {tmp_path}\n"
    )
    assert err == "ERROR X-1 on n1: w: found f, needed n\n  fix: x\n"


def test_modules_stay_within_the_line_budget():
    files = [
        p
        for d in ("launcher", "kernels", "tests", "scripts")
        for p in (ROOT / d).rglob("*.py")
        if "build" not in p.parts
    ]
    over = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text().splitlines())) > LINE_BUDGET
    }
    assert len(files) > 100 and not over, over
