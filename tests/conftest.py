import os
import subprocess
import sys

import pytest

from topl.launcher.compose import compose_job

STRICT_A3 = ["recipe=qwen3_30b_a3b_grpo_a3_strict"]


def run_topl(*args, cwd=None, env=None, timeout=300):
    """Run the real CLI in a child process (exit codes and stderr as a user sees them)."""
    e = {**os.environ, **(env or {})}
    e.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "topl.launcher.cli", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def compose():
    return compose_job
