"""Helpers shared by the tests (on sys.path through pytest's `pythonpath = tests`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# verl's config composed for a command, and where the installed verl keeps it: tests/verl_compose.py
from verl_compose import _BASES, _PARSED, compose_verl, verl_config_dir  # noqa: F401

# The seed's 30B GRPO strict recipe with every rule green: the seed ran chunked prefill, dynamic
# batch size and verl's max_num_seqs 1024 (warnings on its stack, see docs/seed.md); the tests that
# need a clean strict baseline turn them off (dynamic batch size also for the ref, which the recipe's
# verl_overrides set: the KL reference batches as the actor does, TOP-VERL-002).
STRICT_A3 = [
    "recipe=qwen3_30b_a3b_grpo_a3_strict",
    "rollout.chunked_prefill=false",
    "rollout.prefix_caching=false",  # the seed ran verl 0.8.0's default (on): a warning on seed
    "train.use_dynamic_bsz=false",
    "+verl_overrides.actor_rollout_ref.ref.log_prob_use_dynamic_bsz=false",
    "rollout.max_num_seqs=64",
]


def run_topl(*args, cwd=None, env=None, timeout=300):
    """Run the real CLI in a child process (exit codes and stderr as a user sees them).

    PYTHONSAFEPATH keeps the repository root off sys.path: its `kernels/` folder would shadow the
    PyPI `kernels` package that transformers probes."""
    e = {**os.environ, "PYTHONSAFEPATH": "1", **(env or {})}
    e.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "topl.launcher.cli", *args],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# Built once per test process and shared by its tests (read only once built): verl's config
# folders per (release, patches) and the HF config folders per architecture. A fresh copy per
# test cost a copy and, worse, a fresh parse of every verl YAML file (compose_verl's cache is
# keyed on the path).
_SHARED: Path | None = None


def _shared_dir(name: str) -> Path:
    global _SHARED
    if _SHARED is None:
        import atexit
        import shutil
        import tempfile

        _SHARED = Path(tempfile.mkdtemp(prefix="topl-tests-"))
        atexit.register(shutil.rmtree, _SHARED, True)
    return _SHARED / name


def _arch(m) -> tuple:
    return (
        m.vocab_size,
        m.hidden_size,
        m.intermediate_size,
        m.num_layers,
        m.num_heads,
        m.num_kv_heads,
        m.head_dim,
        m.num_experts,
        m.experts_per_token,
        m.moe_intermediate_size,
    )


def shared_hf_config_dir(m) -> str:
    """`hf_config_dir` for the spec's architecture, one folder per architecture per process."""
    where = _shared_dir("hf-" + "-".join(map(str, _arch(m))))
    if not (where / "config.json").is_file():
        hf_config_dir(m, where)
    return str(where)


def hf_config_dir(m, where):
    """A local HF model folder (config.json only) with the spec's architecture facts."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    common = dict(
        vocab_size=m.vocab_size,
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_kv_heads,
        head_dim=m.head_dim,
    )
    cfg = (
        Qwen3MoeConfig(
            num_experts=m.num_experts,
            num_experts_per_tok=m.experts_per_token,
            moe_intermediate_size=m.moe_intermediate_size,
            **common,
        )
        if m.num_experts
        else Qwen3Config(**common)
    )
    cfg.architectures = ["Qwen3MoeForCausalLM" if m.num_experts else "Qwen3ForCausalLM"]
    cfg.save_pretrained(where)
    return str(where)


# ---- the verl a spec declares: its real config, composed, and its own validate_config.
# verl 0.9.1 is installed; other releases are unpacked from their wheels into ~/.cache/topl-verl
# (scripts/gen_verl_schema.py:release_root, `pip download --no-deps`, never installed) when
# TOPL_VERL_VERSIONS=1 (.ci/run sets it) or already cached. Nothing is dropped or rewritten: the
# seed's patch keys are added to the config from the cited facts (topl.launcher.facts.verl_schema),
# the DAPO trainer config from the recorded verl-recipe overlay.
PATCH_FILES = {"actor_rollout_ref.rollout.": "rollout/rollout.yaml"}  # where a patch adds a key


def installed_verl() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("verl") if verl_config_dir() else None
    except importlib.metadata.PackageNotFoundError:
        return None


def verl_release(version: str) -> Path | None:
    """The folder holding `verl/` of release `version`, or None where it is not at hand."""
    if version == installed_verl():
        return verl_config_dir().parents[2]
    cached = Path(os.environ.get("TOPL_VERL_CACHE") or Path.home() / ".cache" / "topl-verl")
    if (cached / version / "verl" / "trainer" / "config").is_dir():
        return cached / version
    if not os.environ.get("TOPL_VERL_VERSIONS"):
        return None
    from topl.launcher.contract.dryrun.releases import release_root

    return release_root(version)


def declared_config_dir(spec, where: Path) -> Path | None:
    """verl's trainer/config of the spec's declared release, its patches' keys added (facts),
    plus the DAPO trainer config the recipe overlay records; None where the release is absent."""
    import json
    import shutil

    import yaml

    from topl.launcher.facts.verl_schema import _load, nearest, schema_for

    sch = schema_for(spec)
    root = verl_release(sch.version)
    if root is None:
        return None
    # one folder per process (`where` is not used: see _shared_dir), renamed into place whole
    conf = _shared_dir(f"verl-{sch.version}-{'-'.join(sch.patches) or 'stock'}")
    if conf.is_dir():
        return conf
    final, conf = conf, conf.with_name(conf.name + ".part")
    shutil.rmtree(conf, ignore_errors=True)
    shutil.copytree(root / "verl" / "trainer" / "config", conf)
    for key in sch.cites:  # the keys a declared patch adds, from the cited facts
        prefix = next(p for p in PATCH_FILES if key.startswith(p))
        with open(conf / PATCH_FILES[prefix], "a") as f:
            f.write(f"\n{key[len(prefix) :]}: {json.dumps(sch.default(key))}\n")
    for name, c in _load(nearest(sch.version))["configs"].items():
        if "overlay" in c:
            (conf / f"{name}.yaml").write_text(
                yaml.safe_dump({"defaults": c["defaults"], **c["overlay"]}, sort_keys=False)
            )
    conf.rename(final)
    return final


# One child per verl release, kept for the test process (importing verl costs ~5 s of CPU, and
# it ran once per validated recipe): it reads a JSON line per config and answers with verl's own
# verdict. The release is first on its sys.path, as before; what it shares across configs is only
# the imported verl (the former one-child-per-batch path shared the same). The composed config
# travels as JSON of its unresolved container (interpolations kept as written), which the child
# turns back into the same OmegaConf config; a YAML file cost ~0.3 s of PyYAML per config there.
VALIDATE = """
import json, sys
from omegaconf import OmegaConf
from verl.utils.config import validate_config
reply, sys.stdout = sys.stdout, sys.stderr  # verl prints progress: keep the answers apart
for line in sys.stdin:
    item = json.loads(line)
    try:
        validate_config(OmegaConf.create(item["cfg"]), use_reference_policy=item["ref"],
                        use_critic=item["critic"])
        out = None
    except Exception as e:  # reported per config, with verl's own message
        out = f"{type(e).__name__}: {e}"
    reply.write(json.dumps(out) + "\\n")
    reply.flush()
"""
_VALIDATORS: dict[str, subprocess.Popen] = {}


def _validator(version: str) -> subprocess.Popen:
    proc = _VALIDATORS.get(version)
    if proc is not None and proc.poll() is None:
        return proc
    import atexit
    import tempfile

    root = verl_release(version)
    log = tempfile.NamedTemporaryFile("w+", prefix=f"verl-{version}-", suffix=".log", delete=False)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(root)}
    proc = subprocess.Popen(
        [sys.executable, "-c", VALIDATE],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    proc.log = log.name  # type: ignore[attr-defined]
    atexit.register(Path(log.name).unlink, missing_ok=True)  # runs after the kill (LIFO)
    atexit.register(proc.kill)
    _VALIDATORS[version] = proc
    return proc


def validate_many(version: str, items, where: Path) -> list:
    """verl `version`'s validate_config over [(composed cfg, use_ref, use_critic)], in a child
    process with that release first on sys.path; one error string (or None) per item (`where`:
    unused since the configs travel on the pipe, kept for the callers)."""
    import json

    from omegaconf import OmegaConf

    proc = _validator(version)
    out = []
    for cfg, ref, critic in items:
        tree = OmegaConf.to_container(cfg, resolve=False)
        proc.stdin.write(json.dumps({"cfg": tree, "ref": bool(ref), "critic": bool(critic)}))
        proc.stdin.write("\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        assert line, f"verl {version}'s validator died: " + Path(proc.log).read_text()[-3000:]
        out.append(json.loads(line))
    return out


def validate_on_declared(spec, invocation, where: Path) -> None:
    """Compose a rendered command, as rendered, against the spec's declared verl and run that
    verl's validate_config; pytest.skip where that release is not at hand."""
    import pytest

    conf = declared_config_dir(spec, where)
    if conf is None:
        pytest.skip(f"verl {spec.cluster.versions.verl} not cached: set TOPL_VERL_VERSIONS=1")
    cfg = compose_verl(invocation, conf)
    errs = validate_many(
        str(spec.cluster.versions.verl),
        [(cfg, spec.algorithm.use_kl_loss, spec.algorithm.use_critic)],
        where,
    )
    assert errs == [None], errs


def validate_if_installed(spec, invocation, where: Path) -> None:
    """`validate_on_declared` where the spec declares the installed verl; other releases are
    validated for every shipped recipe at once by tests/contract/test_accepted_runs.py (verl_versions,
    TOPL_VERL_VERSIONS=1: CI), not a second time per recipe."""
    import pytest

    declared = str(spec.cluster.versions.verl)
    if declared != installed_verl():
        pytest.skip(
            f"verl {declared}: tests/contract/test_accepted_runs.py validates it with the others"
        )
    validate_on_declared(spec, invocation, where)


# Ranks of the real process-group tests (test_collectives.py, test_tp_pairs.py) are fresh processes
# forked from multiprocessing's fork server, which imports these once per test process (a spawned
# rank imported torch again, ~2 s of CPU each). Named, not the test modules: the server starts
# without the parent's sys.path (accepted, never applied: cpython@3.11.7:Lib/multiprocessing/
# forkserver.py:main), so `tests/` is not on it and a failed preload is silently skipped. The server
# never runs a torch op or touches a GPU: its forks start as clean as spawned ones, and each rank
# still joins a real process group. One list for both files: the first call starts the server.
RANK_PRELOAD = [
    "pytest",
    "torch",
    "torch.distributed",
    "torch.multiprocessing",
    "topl.kernels.primitives",
    "topl.kernels.alignment",
    "topl.kernels.model",
    "topl.kernels.training",
    "topl.kernels.probe",
]


def start_ranks(fn, args: tuple, nprocs: int) -> None:
    """`fn(rank, *args)` in `nprocs` rank processes from the fork server; returns when all end."""
    import torch.multiprocessing as mp

    mp.set_forkserver_preload(RANK_PRELOAD)  # read when the server starts: the first call
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")


def run_topl_inproc(*args, cwd=None, env=None, timeout=None):
    """`run_topl` in this process: the same exit code, stdout and stderr, without a Python start
    and imports per call. For tests whose subject is not the process boundary (exit through
    signals, a child's environment at start-up, stdin). `env` is set in os.environ for the call
    and its PYTHONPATH put in front of sys.path, as a child would see them; `timeout` is ignored."""
    import contextlib
    import io

    from topl.launcher.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_path, saved_cwd = dict(os.environ), list(sys.path), os.getcwd()
    saved_modules = set(sys.modules)
    os.environ.update(env or {})
    os.environ.pop("HYDRA_FULL_ERROR", None)
    extra = [p for p in (env or {}).get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = extra
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(args))
            except SystemExit as e:  # Hydra's own exits
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:  # modules from `env`'s PYTHONPATH
            mod = sys.modules[name]
            if any(str(getattr(mod, "__file__", "") or "").startswith(p) for p in extra):
                del sys.modules[name]
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())


def no_site_python(tmp_path) -> str:
    """This interpreter without site-packages: a Python where topl is not installed."""
    py = tmp_path / "python-without-topl"
    py.write_text(f'#!/bin/sh\nexec {sys.executable} -S -I "$@"\n')
    py.chmod(0o755)
    return str(py)
