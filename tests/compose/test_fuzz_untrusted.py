"""Property-based fuzz over what users download and re-open: recipes (every nesting level a recipe
has) and run directories. Whatever they say: exit 0 or 2 (watch: its documented codes), one
message, no traceback, no file outside the run root, no canary touched, no process signalled, no
secret in any output, argv or file, no terminal escape printed.

Budget: the `ci` profile (fixed, derandomized, what CI runs); TOPL_FUZZ_PROFILE=dev for more."""

import contextlib
import io
import json
import os
import signal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topl.launcher.base import redact
from topl.launcher.cli import main
from topl.launcher.run import watch

# This module's own profiles, not tests/conftest.py's `ci` / `dev`: re-registering the profile
# loaded there reloads it (hypothesis), and every test collected after this module then ran on
# this budget (300 random examples under `dev`).
settings.register_profile(
    "fuzz-ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
settings.register_profile(
    "fuzz-dev", settings.get_profile("fuzz-ci"), max_examples=300, derandomize=False
)
BUDGET = settings.get_profile("fuzz-" + os.environ.get("TOPL_FUZZ_PROFILE", "ci"))
HANG_S = 60
SECRET = "fz-S3cret'\"value-7"  # quote characters: redaction must survive every quoting
ESC = "\x1b]0;x\x07\x1b[31m"


def run(args):
    """The CLI in this process (fast), with a hang turned into a failure."""
    out, err = io.StringIO(), io.StringIO()

    def hang(*_):
        raise TimeoutError(f"no answer in {HANG_S}s: {args}")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, out.getvalue(), err.getvalue()


def tree(root: Path, skip: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if skip not in p.parents and p != skip and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """A folder with a canary program / module and a secret in the environment."""
    d = tmp_path_factory.mktemp("fuzz")
    canary = d / "CANARY"
    (d / "pkg").mkdir()
    (d / "pkg" / "canary.py").write_text(f"open({str(canary)!r}, 'w').write('ran')\n")
    prog = d / "evil.sh"
    prog.write_text(f'#!/bin/sh\ntouch {canary}\nexec python3 "$@"\n')
    prog.chmod(0o755)
    return d


@pytest.fixture
def env(box, monkeypatch):
    monkeypatch.chdir(box)
    monkeypatch.setenv("MY_API_KEY", SECRET)
    monkeypatch.setenv("PYTHONPATH", f"{box / 'pkg'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr(redact, "_current", None)  # learns MY_API_KEY's value
    return box


def _atoms(box: Path):
    return st.sampled_from(
        [
            SECRET,
            "${oc.env:MY_API_KEY}",
            "${${k}:MY_API_KEY}",
            "${oc.env:${x}}",
            "${cluster.env.MY_API_KEY}",
            "${hydra:runtime.cwd}",
            "postgres://u:pw-fz-9@h/x",
            "ghp_" + "f" * 36,
            "canary",
            str(box / "evil.sh"),
            str(box / "CANARY"),
            "../../../escaped",
            "/etc",
            ESC,
            "x" * 300,
            "1,2",
            "a",
            1,
            True,
            None,
        ]
    )


KEYS = [
    "_target_",
    "()",
    "hydra",
    "job_logging",
    "handlers",
    "filename",
    "class",
    "sweeper",
    "params",
    "cluster",
    "python",
    "env",
    "external_modules",
    "algorithm",
    "entrypoint",
    "config_name",
    "extra_overrides",
    "verl_overrides",
    "hydra.job_logging.handlers.h.filename",
    "hydra.sweep.subdir",
    "hydra.job.name",
    "+hydra.run.dir",
    "actor_rollout_ref.model.external_lib",
    "custom_reward_function.path",
    "+ray_kwargs.ray_init.runtime_env.env_vars.TOPL_GUARD_DIR",
    "cluster.python",
    "cluster.env.LD_PRELOAD",
    "PYTHONPATH",
    "LD_PRELOAD",
    "BASH_ENV",
    "TOPL_GUARD",
    "TOPL_GUARD_DIR",
    "MY_API_KEY",
    "project",
    "experiment",
    "run_root",
    "seed",
    "trainer.project_name",
    "defaults",
]


def recipes(box: Path):
    leaf = _atoms(box)
    node = st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.dictionaries(st.sampled_from(KEYS), inner, max_size=4), st.lists(inner, max_size=3)
        ),
        max_leaves=12,
    )
    return st.dictionaries(st.sampled_from(KEYS), node, min_size=1, max_size=5)


def _check_outputs(box: Path, run_root: Path, before: set[str], rc: int, out: str, err: str):
    assert rc in (0, 2), (rc, err[-2000:])
    assert "Traceback" not in out + err
    if rc == 2:
        assert err.count("error:") <= 1 and (out + err).strip(), err[-2000:]
    assert not (box / "CANARY").exists()
    for text in (out, err):
        assert "S3cret" not in text and "pw-fz-9" not in text and "f" * 36 not in text
    assert tree(box, run_root) == before, "a file outside the run root"
    for p in run_root.rglob("*") if run_root.exists() else []:
        if p.is_file():
            text = p.read_text(errors="replace")
            assert "S3cret" not in text and "pw-fz-9" not in text, p
            argv = p.name in ("command.sh", "invocation.json")
            assert not (argv and "f" * 36 in text), p


def _run_recipe(box: Path, recipe: dict, cmd: list[str]) -> int:
    """`topl CMD recipe=...` on this recipe, every output and file checked; its exit code."""
    path = box / "fz.yaml"
    path.write_text("# @package _global_\n" + yaml.safe_dump(recipe, allow_unicode=True))
    run_root = box / "runs"
    before = tree(box, run_root)
    try:
        rc, out, err = run([*cmd, f"recipe={path}", f"run_root={run_root}"])
        _check_outputs(box, run_root, before, rc, out, err)
    finally:
        path.unlink()
    return rc


@BUDGET
@given(data=st.data())
def test_no_recipe_runs_code_leaks_or_writes_outside(env, data):
    recipe = data.draw(recipes(env))
    _run_recipe(
        env, recipe, data.draw(st.sampled_from([["check"], ["launch", "--dry-run"], ["render"]]))
    )


SWEPT = [
    "model",
    "cluster",
    "recipe",
    "+model",
    "hydra/job_logging",
    "cluster.env",
    "verl_overrides",
]


def sweep_params(box: Path):
    """hydra.sweeper.params as a recipe writes them: a key (a group, a dotted key, a map) and a
    value of Hydra's sweep grammar (options joined by `,`, a map in braces, a path)."""
    option = st.one_of(
        _atoms(box).map(lambda a: "null" if a is None else str(a).lower() if a is True else str(a)),
        st.sampled_from(["qwen3_4b", "../../../x/evil", "/etc/passwd", "{PYTHONPATH: /x}"]),
        st.sampled_from(["{reward.custom_reward_function.path: /x.py}", "{python: /x}"]),
    )
    value = st.lists(option, min_size=1, max_size=3).map(",".join)
    return st.dictionaries(st.sampled_from(KEYS + SWEPT), value, min_size=1, max_size=3)


@BUDGET
@given(data=st.data())
def test_no_sweep_parameter_of_a_recipe_runs_code_leaks_or_writes_outside(env, data):
    params = data.draw(sweep_params(env))
    cmd = data.draw(st.sampled_from([["check"], ["plan"], ["launch", "-m", "--dry-run"]]))
    rc = _run_recipe(env, {"hydra": {"sweeper": {"params": params}}}, cmd)
    for key, v in params.items():  # whatever a recipe sweeps, only names and data pass
        if rc == 0 and key.lstrip("+") in ("model", "cluster", "recipe"):
            assert "/" not in v and ".." not in v, (key, v)


STATUS_VALUES = st.sampled_from(
    [0, -1, 1, -os.getpid(), os.getpid(), 2**40, "1", None, [], {}, ESC, "running", True]
)


@st.composite
def run_dirs(draw):
    status = draw(
        st.one_of(
            st.dictionaries(
                st.sampled_from(["state", "pid", "host", "boot_id", "pid_start", "exe", "error"]),
                STATUS_VALUES,
                max_size=6,
            ).map(lambda d: {"state": "running", **d}),
            st.sampled_from([[1], "x", 3, None]),
        )
    )
    guard = draw(
        st.one_of(
            st.dictionaries(
                st.sampled_from(["role", "missing", "env", "versions", "pid"]),
                STATUS_VALUES,
                max_size=4,
            ),
            st.sampled_from([[1], "x"]),
        )
    )
    log = draw(
        st.lists(
            st.sampled_from(
                [
                    f"step:1 - {DIFF}:0.0 - a:{ESC}",
                    "TOPL-GUARD " + json.dumps({"host": ESC, "pid": -1}),
                    "TOPL-GUARD {",
                    ESC,
                    "step:x",
                    "\x00" * 5,
                    "y" * 5000,
                ]
            ),
            max_size=5,
        )
    )
    fifo = draw(st.sampled_from([None, "status.json", "verl.log", "spec.yaml", "metrics.jsonl"]))
    return status, guard, log, fifo


DIFF = "training/rollout_probs_diff_max"


@BUDGET
@given(case=run_dirs())
def test_watch_answers_every_run_dir_and_signals_nothing(tmp_path_factory, monkeypatch, case):
    status, guard, log, fifo = case
    root = tmp_path_factory.mktemp("rd")
    d = root / "run"
    (d / "guard").mkdir(parents=True)
    (d / "topl.json").write_text("{}")
    files = {
        "status.json": json.dumps(status),
        "verl.log": "\n".join(log) + "\n",
        "spec.yaml": "alignment: {mode: strict}\n",
        "metrics.jsonl": '{"step": 1, "data": {}}\n',
    }
    for name, text in files.items():
        if name == fifo:
            os.mkfifo(d / name)
        else:
            (d / name).write_text(text)
    (d / "guard" / "h-1.json").write_text(json.dumps(guard))
    sent, real = [], os.kill

    def kill(pid, sig):
        if sig == 0 and pid > 0:
            return real(pid, 0)
        sent.append((pid, sig))

    monkeypatch.setattr(os, "kill", kill)  # watch_status.py signals through os.kill
    monkeypatch.setattr(watch, "mark", lambda *a, **k: None)  # no 30 s wait for a fake topl
    before = tree(root, d)
    rc, out, err = run(["watch", str(d), "--once", "--interval", "0"])
    assert rc in (0, 1, 2, 3), (rc, err)
    assert "Traceback" not in out + err and "\x1b" not in out + err and "\x07" not in out + err
    assert sent == [], sent
    assert tree(root, d) == before


def test_the_global_hypothesis_profile_is_conftests_after_this_module_loads():
    """tests/conftest.py's `ci` / `dev` budget is what the other property tests run on."""
    from conftest import HYPOTHESIS_EXAMPLES, HYPOTHESIS_PROFILE

    if HYPOTHESIS_PROFILE not in HYPOTHESIS_EXAMPLES:
        pytest.skip(f"HYPOTHESIS_PROFILE={HYPOTHESIS_PROFILE} is not one of conftest's")
    assert settings.default.max_examples == HYPOTHESIS_EXAMPLES[HYPOTHESIS_PROFILE]
    assert settings.default.derandomize
