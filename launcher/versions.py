"""One version parser for the launcher (contract rules and the doctor)."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

UNKNOWN = Version("0")  # what a rule compares when a declared version does not parse


def parse(text: str | None) -> Version | None:
    """PEP 440 version of `text`; local and post parts (`2.7.1+cpu`, `.post1`) kept; None if not one."""
    try:
        return Version(str(text)) if text else None
    except InvalidVersion:
        return None
