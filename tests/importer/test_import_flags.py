"""`topl recipes import` takes the flags its help, docs/seed.md and TOP-IMPORT-002's fix name:
`--force` (replace an earlier import) and `--launch N` (the N-th trainer launch of a script)."""

import json

from helpers import run_topl_inproc as run_topl

TWO = """#!/bin/bash
python3 -m verl.trainer.main_ppo trainer.total_epochs=3 data.train_batch_size=64
python3 -m verl.trainer.main_ppo trainer.total_epochs=7 data.train_batch_size=32
"""


def test_force_replaces_and_launch_picks_the_trainer(tmp_path):
    script = tmp_path / "two.sh"
    script.write_text(TWO)
    out = tmp_path / "r.yaml"
    first = run_topl(
        "recipes",
        "import",
        str(script),
        "model=qwen3_4b",
        "-o",
        str(out),
        "--launch",
        "2",
        "--json",
    )
    assert first.returncode in (0, 2), first.stderr
    d = json.loads(first.stdout)
    assert "epochs: 7" in out.read_text() and "unknown flag" not in first.stderr, d
    again = run_topl(
        "recipes", "import", str(script), "model=qwen3_4b", "-o", str(out), "--launch", "1"
    )
    assert again.returncode == 2 and "not overwritten" in again.stdout + again.stderr
    forced = run_topl(
        "recipes",
        "import",
        str(script),
        "model=qwen3_4b",
        "-o",
        str(out),
        "--launch",
        "1",
        "--force",
    )
    assert "unknown flag" not in forced.stdout + forced.stderr
    assert "epochs: 3" in out.read_text()
    bad = run_topl(
        "recipes",
        "import",
        str(script),
        "model=qwen3_4b",
        "-o",
        str(out),
        "--launch",
        "x",
        "--force",
    )
    assert bad.returncode == 2 and "expected a number" in bad.stdout + bad.stderr
    sup = run_topl("recipes", "import", str(script), "-o", str(out), "--launch", "²", "--force")
    assert sup.returncode == 2 and "expected a number" in sup.stderr, sup.stderr  # was int('²')
