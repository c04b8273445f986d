"""Errors meant for people: what went wrong, where the value came from, how to fix it."""

from __future__ import annotations

# The one severity vocabulary: contract violations and doctor findings both use it. INFO: a rule
# that would warn in general, where the stack's own measurement (the seed's logdiff 0) outranks it:
# said once, in one line, neither counted as a warning nor cleared by `check --fix=warnings`.
ERROR, WARNING, INFO, OK = "error", "warning", "info", "ok"


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

    def to_dict(self) -> dict[str, str | None]:
        """What `--json` prints under "error" (with "ok": false)."""
        return {"message": self.message, "where": self.where, "fix": self.fix}


# What the `local` extra brings: the reference engines, probe and diagnose import these.
LOCAL_EXTRA = ("torch", "safetensors", "matplotlib")


def install_hint(extra: str) -> str:
    """The pip command that adds topl's `extra` to this install. topl is not on PyPI: the
    checkout it was installed from (pip's direct_url.json, PEP 610) where pip recorded one, else
    the checkout's folder as `.`."""
    import json  # lazy: only an error's fix text reads the install record
    from importlib import metadata

    where = "."
    for dist in metadata.distributions(name="topl"):  # a checkout's own topl.egg-info has none
        try:
            url = str(json.loads(dist.read_text("direct_url.json") or "{}").get("url", ""))
        except ValueError:
            continue
        if url.startswith("file://"):
            where = url[len("file://") :]
            break
    hint = f"pip install '{where}[{extra}]'"
    return hint if where != "." else f"{hint} in the topl checkout (topl is not on PyPI)"


def local_extra_error(what: str, module: str) -> ToplError:
    return ToplError(
        f"{what} needs {module}, which is not installed (the launcher-only install has no torch)",
        where=module,
        fix="pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu "
        f"&& {install_hint('local')}   (or use your own torch build)",
    )
