"""Rules checked at run time, not by `topl check`: topl's guard (launcher/guard.py) checks them in
every verl process of a strict run. They join the catalog (`topl rules`, the README table) so
that every id a user can meet is documented; they are never in RULES, so check, plan and sweeps
never evaluate them (there is nothing to evaluate before the job's processes exist).
"""

from __future__ import annotations

from dataclasses import dataclass

from topl.launcher.base.errors import ERROR

GUARD = "guard"  # `checked_by` in `topl rules --json`: topl's guard, in every verl process
CHECK = "check"  # the contract's rules: `topl check` (and launch, plan) before launch
DEEP = "deep"  # the dry run: `topl check --deep`, and launch before a remote submission


@dataclass(frozen=True)
class RuntimeRule:
    id: str  # stable id, as the guard reports it
    severity: str  # what a strict process does: error = it refuses to start
    title: str  # one line: what must hold
    keys: tuple[str, ...]  # the spec keys that put the check in place
    fix: str
    why: str
    checked_by: str = GUARD


RUNTIME_RULES = [
    RuntimeRule(
        "TOP-GUARD-001",
        ERROR,
        "the guard's manifest (env TOPL_GUARD) is the JSON topl rendered",
        ("alignment.mode",),
        "launch through `topl launch` (or pass TOPL_GUARD exactly as `topl render` prints it); "
        "never set or edit TOPL_GUARD by hand",
        "A strict run loads topl's guard in every verl process (VERL_USE_EXTERNAL_MODULES, "
        "imported at `import verl`: verl@0.9.1:verl/__init__.py) with a manifest of the env vars "
        "and modules each process must have. A manifest that is not JSON was changed after "
        "rendering: the guard cannot tell what to check, so the process refuses to start rather "
        "than run unchecked. A missing env var or module the manifest names is reported under the "
        "contract rule that requires it (e.g. TOP-ALN-001 for VLLM_BATCH_INVARIANT).",
    ),
]
