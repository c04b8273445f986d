"""The typed spine: mypy runs clean over the modules [tool.mypy] lists, every spec parameter in
them is a `JobSpec`, and the annotations are real (a misuse of the spec is caught). Skipped where
mypy is absent (it is in the `test` extra; .ci/run also runs it on its own, after ruff)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

pytest.importorskip("mypy", reason="mypy is in the `test` extra")

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: mypy itself depends on tomli there
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONFIG = PYPROJECT["tool"]["mypy"]
SPEC_PARAMS = {"s", "spec"}  # what the launcher calls a job spec in a signature
# generic over a spec and its sections (`T`), or recursive over them (any dataclass): the helpers
# that take both
NOT_JOBSPEC = {("launcher/spec/view.py", "unwrap"), ("launcher/spec/constraints.py", "problems")}


def _mypy(request, *args: str) -> subprocess.CompletedProcess:
    cache = request.config.cache
    cache_dir = cache.mkdir("mypy") if cache else request.getfixturevalue("tmp_path")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache_dir), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _path(module: str) -> Path:
    rel = module.removeprefix("topl.").replace(".", "/")
    return ROOT / f"{rel}.py" if (ROOT / f"{rel}.py").exists() else ROOT / rel / "__init__.py"


def test_mypy_is_clean_on_the_typed_spine():
    # mypy's own cache (.mypy_cache in the checkout, [tool.mypy] unchanged): the one the `mypy`
    # step of .ci/run, and a developer's `mypy`, just wrote; read cold it costs ~12 s of CPU more.
    # mypy re-checks whatever changed since (its cache holds each file's hash).
    r = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # every listed module was found and checked (topl is read as installed: py.typed markers)
    assert f"no issues found in {len(CONFIG['modules'])} source files" in out, out


SPEC_MISUSE = """
from topl.launcher.compose.hydra import compose_job
from topl.launcher.contract import evaluate
from topl.launcher.render.invocation import render

composed = compose_job([])
spec = composed.to_object()
evaluate(spec.cluster)
render(composed)
spec.cluster.nodes = "2"
"""


def test_a_misused_spec_is_caught(request):
    """Not vacuous: were the spine Any (unannotated, or topl not found) this would pass."""
    # without the project's config (its module list excludes a program text): imports as there
    r = _mypy(
        request,
        "--config-file=",
        "--follow-imports=silent",
        "--ignore-missing-imports",
        "-c",
        SPEC_MISUSE,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert re.search(r'"evaluate" has incompatible type "ClusterSpec"; expected "JobSpec"', out)
    assert re.search(r'"render" has incompatible type "Composed"; expected "JobSpec"', out)
    assert re.search(r'expression has type "str", variable has type "int"', out)
    assert "Found 3 errors" in out, out


KERNELS_MISUSE = """
import torch

from topl.kernels.algorithms import vanilla_policy_loss
from topl.kernels.dump import manifest_for
from topl.kernels.model import Model
from topl.kernels.probe import probe

x = torch.zeros(2, 3)
loss, metrics = vanilla_policy_loss(x, x, x, x, 0.2, 0.28, 3.0, "token-mean")
metrics["actor/pg_loss"] = "0"
model = Model.random(None)
manifest_for("topl-rollout", model, dims={"v": "1"})
probe(model, "exact", requests=[])
"""


def test_a_misused_kernel_is_caught(request):
    """The engines' annotations are real too (torch is Any: the metrics, dumps and the alignment
    are what mypy can hold them to)."""
    # the project's torch / triton skip (reading torch cold would be ~40 s), nothing else of it
    ini = request.getfixturevalue("tmp_path") / "mypy.ini"
    ini.write_text(
        "[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n"
        "[mypy-torch,torch.*,triton,triton.*]\nfollow_imports = skip\n"
    )
    r = _mypy(request, f"--config-file={ini}", "-c", KERNELS_MISUSE)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert re.search(r'expression has type "str", target has type "float"', out), out
    assert re.search(r'Dict entry 0 has incompatible type "str": "str"; expected "str": "int"', out)
    assert re.search(
        r'Argument 2 to "probe" has incompatible type "str"; expected "Alignment"', out
    )
    assert "Found 3 errors" in out, out


def test_every_spec_parameter_is_a_jobspec():
    """A parameter named `s` / `spec` in a checked module is annotated `JobSpec` (contract rules,
    render, command, plan, fix, ...): mypy then follows the spec through every signature."""
    bad, seen = [], 0
    for module in CONFIG["modules"]:
        path = _path(module)
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                if a.arg not in SPEC_PARAMS or (rel, node.name) in NOT_JOBSPEC:
                    continue
                seen += 1
                got = ast.unparse(a.annotation) if a.annotation else None
                if got != "JobSpec":
                    bad.append(f"{rel}:{node.lineno} {node.name}({a.arg}: {got})")
    assert not bad, "\n".join(bad)
    assert seen >= 90  # the rules alone take ~60


def test_ci_runs_the_pinned_mypy_after_ruff():
    commands = [
        l.strip()
        for l in (ROOT / ".ci" / "run").read_text().splitlines()
        if l.strip() and not l.lstrip().startswith("#")
    ]
    mypy = next(i for i, l in enumerate(commands) if re.search(r"(^|&& )mypy$", l))
    assert commands.index("ruff format --check .") < mypy
    assert mypy < next(i for i, l in enumerate(commands) if l.endswith('-m "not matrix"'))
    pin = re.search(r"mypy==[\w.]+", commands[mypy]).group(0)
    assert pin in PYPROJECT["project"]["optional-dependencies"]["test"]


def test_every_kernels_module_is_checked():
    """A new module under kernels/ joins the strict check, or this names it."""
    found = set()
    for path in (ROOT / "kernels").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        found.add("topl." + ".".join(parts))
    assert found <= set(CONFIG["modules"]), sorted(found - set(CONFIG["modules"]))
    assert "topl.kernels.task" in CONFIG["modules"]


def _is_triton_jit(node: ast.AST) -> bool:
    return any(ast.unparse(d) in ("triton.jit", "gluon.jit", "jit") for d in node.decorator_list)


def test_untyped_defs_are_triton_kernels_only():
    """The modules allowed unannotated functions ([tool.mypy.overrides]) hold nothing but
    `@triton.jit` / `@gluon.jit` kernels, whose parameters Triton reads itself: host code there is
    typed too."""
    relaxed = [
        m
        for o in CONFIG.get("overrides", [])
        if o.get("disallow_untyped_defs") is False
        for m in ([o["module"]] if isinstance(o["module"], str) else o["module"])
        if m.startswith("topl.kernels")
    ]
    assert relaxed == [
        "topl.kernels.gpu.attention_kernels",
        "topl.kernels.gpu.decode_states",
        "topl.kernels.gpu.prefill",
        "topl.kernels.gpu.prefill_items",
    ]
    for module in relaxed:
        tree = ast.parse(_path(module).read_text())
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        assert defs and all(_is_triton_jit(n) for n in defs), [
            n.name for n in defs if not _is_triton_jit(n)
        ]
