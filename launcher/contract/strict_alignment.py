"""Strict mode, the alignment switches: all on, none off, a mitigation that is one (facts §2-§5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from topl.kernels.alignment import Alignment
from topl.launcher.base.errors import ERROR, WARNING
from topl.launcher.contract.core import rule
from topl.launcher.spec.job import is_strict

if TYPE_CHECKING:
    from topl.launcher.contract.core import Outcome
    from topl.launcher.spec.job import JobSpec


@rule(
    "TOP-ALN-001",
    ERROR,
    "strict alignment turns every switch on",
    ("alignment.mode", *(f"alignment.{k}" for k in Alignment.SWITCHES)),
    "set the switch back to true, or use alignment=off",
)
def all_switches(s: JobSpec) -> Outcome:
    """Any one switch off re-opens a path where the engines add in a different order (see `topl probe`)."""
    off = [k for k in Alignment.SWITCHES if not getattr(s.alignment, k)]
    if is_strict(s) and off:
        return f"alignment=strict with {', '.join(off)} off"


@rule(
    "TOP-ALN-002",
    WARNING,
    "alignment=off runs off-policy",
    ("alignment.mode",),
    "use alignment=strict for logdiff 0, or alignment=mitigated for TIS/MIS correction",
)
def off_policy(s: JobSpec) -> Outcome:
    """Without alignment the rollout's log-probs differ from the trainer's: the update is off-policy."""
    if s.alignment.mode == "off":
        return "log-probs of rollout and training will differ: the run is silently off-policy"


@rule(
    "TOP-ALN-003",
    ERROR,
    "mitigated mode configures verl's rollout correction",
    (
        "alignment.mode",
        "alignment.rollout_correction.rollout_is",
        "alignment.rollout_correction.rollout_rs",
        "alignment.rollout_correction.bypass_mode",
    ),
    "set alignment.rollout_correction.rollout_is=token (and bypass_mode=false to keep the diff metrics)",
)
def mitigation_set(s: JobSpec) -> Outcome:
    """TIS/MIS only act when an IS or RS level is set; bypass_mode skips the diff metrics entirely."""
    rc = s.alignment.rollout_correction
    if s.alignment.mode == "mitigated" and not (rc.rollout_is or rc.rollout_rs):
        return "alignment=mitigated but neither rollout_is nor rollout_rs is set"
    if s.alignment.mode == "mitigated" and rc.bypass_mode:
        return "bypass_mode=true: verl stops computing rollout_probs_diff metrics"
