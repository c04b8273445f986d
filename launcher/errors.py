"""Errors meant for people: what went wrong, where the value came from, how to fix it."""

from __future__ import annotations

# The one severity vocabulary: contract violations and doctor findings both use it.
ERROR, WARNING, OK = "error", "warning", "ok"


class ToplError(Exception):
    """A problem with the user's input. The CLI prints it without a traceback and exits 2."""

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        self.message, self.where, self.fix = message, where, fix
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"error: {self.message}"]
        if self.where:
            lines.append(f"  where: {self.where}")
        if self.fix:
            lines.append(f"  fix:   {self.fix}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """What `--json` prints under "error" (with "ok": false)."""
        return {"message": self.message, "where": self.where, "fix": self.fix}
