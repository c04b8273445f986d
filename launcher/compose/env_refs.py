"""An `${oc.env:NAME}` that this shell does not set. A recipe reads a secret as
`cluster.env.NAME: ${oc.env:NAME}` (an imported script's WANDB_API_KEY too); the commands that
never pass it on (check, render, recipes diff, the import's verdict) compose without its value,
`topl launch` refuses until it is exported. Light: no Hydra import (check's path)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from topl.launcher.base import redact
from topl.launcher.base.errors import ToplError


class UnsetEnv(ToplError):
    """`${oc.env:NAME}` read in a shell where NAME is not set (compose/hydra.py:friendly_error)."""

    def __init__(self, name: str, message: str, **kw: str) -> None:
        self.name = name
        super().__init__(message, **kw)


# What such a secret reads as where it is not passed on (rules never read a secret's value; a
# printed command says `NAME=${NAME:?is a secret: export it first}`, `--json` shows it redacted).
UNSET_SECRET = "<unset here: read from the launching shell>"
T = TypeVar("T")


def without_secrets(compose: Callable[[], T]) -> tuple[T, list[str]]:
    """`compose()`, where a secret-named `${oc.env:NAME}` unset in this shell reads as
    UNSET_SECRET (set in this process's environment: the spec resolves it again when read), and
    the names so read. A variable that is not a secret (a path, a size) still has to be set."""
    names: list[str] = []
    while True:
        try:
            return compose(), names
        except UnsetEnv as e:
            if not redact.secret_name(e.name) or e.name in names:
                raise
            os.environ[e.name] = UNSET_SECRET
            names.append(e.name)


def unset_note(names: list[str]) -> str:
    """The line the commands print for those names."""
    shown = ", ".join(names)
    ref = "${oc.env:" + (names[0] if len(names) == 1 else "NAME") + "}"
    return (
        f"note: {shown} (a secret, `{ref}` in the recipe) is not set in this shell: checked "
        f"without its value; export {shown} before `topl launch`"
    )
