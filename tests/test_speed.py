"""The everyday commands stay light: what `check` / `render` / `rules` / `plan` import, and `plan`'s
per-sweep reuse (no per-point compose, no per-point deep copy of the spec)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Heavy stacks the launcher must never load to validate or render: torch (seconds of import),
# DeepSpeed (pulls torch), Ray, transformers. The closed forms in memory_estimate are the rules.
HEAVY = ("torch", "deepspeed", "ray", "transformers", "triton", "vllm")


def _imported(*args: str) -> set[str]:
    """Top-level packages a CLI command imports, from `python -X importtime` (a child process:
    this test process has imported torch already)."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "topl.launcher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )
    assert p.returncode in (0, 2), p.stderr[-2000:]
    mods = set()
    for line in p.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            mods.add(name.split(".")[0])
    assert "topl" in mods  # the timing really was read
    return mods


@pytest.mark.parametrize(
    "args",
    [
        ["check"],
        ["check", "train=fsdp", "--json"],  # the ZeRO-3 rule: closed form, no DeepSpeed
        ["check", "recipe=qwen3_30b_a3b_grpo_a3_strict"],
        ["render", "--json"],
        ["rules", "--json"],
        ["plan", "rollout.tp=1,2", "train=fsdp,megatron"],
    ],
    ids=" ".join,
)
def test_no_heavy_imports(args):
    heavy = _imported(*args) & set(HEAVY)
    assert not heavy, f"`topl {' '.join(args)}` imports {sorted(heavy)}"


def test_fsdp_rule_never_imports_deepspeed(compose, monkeypatch):
    """Even where DeepSpeed is installed, TOP-MEM-001 on FSDP is the closed form."""
    import builtins

    from topl.launcher.contract import evaluate

    real = builtins.__import__

    def guard(name, *a, **k):
        assert not name.startswith(("deepspeed", "torch")), f"imported {name}"
        return real(name, *a, **k)

    spec = compose(["train=fsdp"]).to_object()
    monkeypatch.setattr(builtins, "__import__", guard)
    list(evaluate(spec))
