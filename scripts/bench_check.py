"""CPU cost of `check` on a shipped recipe, per stack, with the per-version verl schemas loaded
lazily (the first check of a stack pays its schema's load). A benchmark, not a timed test.

    python scripts/bench_check.py [recipe ...]
"""

from __future__ import annotations

import sys
import time


def main(names: list[str]) -> int:
    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.contract import check
    from topl.launcher.facts.verl_schema import _load

    names = names or ["qwen3_4b_grpo_a2_strict", "qwen3_30b_a3b_dapo_a3_off"]
    for stack in ("seed", "release", "prerelease"):
        for name in names:
            c = compose_job([f"recipe={name}", f"stack={stack}"])
            runs = []
            for _ in range(3):
                t = time.process_time()
                check(c)
                runs.append(time.process_time() - t)
            print(
                f"stack={stack:<10} {name:<28} first {runs[0] * 1000:6.1f} ms CPU, "
                f"then {min(runs[1:]) * 1000:6.1f} ms (schemas loaded: {_load.cache_info().currsize})"
            )
    t = time.process_time()
    _load.cache_clear()
    for v in ("0.8.0", "0.9.0", "0.9.1"):
        _load(v)
    print(f"loading all three schema files: {(time.process_time() - t) * 1000:.1f} ms CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
