"""The field reference (docs/fields.md), generated from the spec's own field comments."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

from topl.launcher.spec.job import JobSpec

_FIELD = re.compile(r"^\s+(\w+)\s*:[^=#]+(?:=[^#]*)?#\s*(.+)$")
_BARE = re.compile(r"^\s+(\w+)\s*:[^=#]+=")  # a field whose comment is the line above (long lines)
_ABOVE = re.compile(r"^\s+#\s*(.+)$")


def _comments(cls) -> dict[str, str]:
    """field name -> the comment on its line in the class body (or on the line just above)."""
    out, above = {}, None
    for line in inspect.getsource(cls).splitlines():
        m, bare, comment = _FIELD.match(line), _BARE.match(line), _ABOVE.match(line)
        if m:
            out.setdefault(m.group(1), m.group(2).strip())
        elif bare and above:
            out.setdefault(bare.group(1), above)
        above = comment.group(1).strip() if comment else None
    return out


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return "required" if f.default == "???" else f"`{f.default!r}`"
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return "(group)" if dataclasses.is_dataclass(value) else f"`{value!r}`"
    return "required"


def rows(cls, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, doc) for every leaf field, nested groups included."""
    hints = typing.get_type_hints(cls)
    docs = _comments(cls)
    out = []
    for f in dataclasses.fields(cls):
        typ = hints[f.name]
        if dataclasses.is_dataclass(typ):
            out += rows(typ, f"{prefix}{f.name}.")
            continue
        name = typ.__name__ if isinstance(typ, type) else str(typ).replace("typing.", "")
        out.append((f"{prefix}{f.name}", name, _default(f), docs.get(f.name, "")))
    return out


def fields_markdown() -> str:

    lines = [
        "# Job spec fields",
        "",
        "Generated from `launcher/spec/job.py` (and `kernels/alignment.py`) by",
        "`python -m topl.launcher.spec.fields > docs/fields.md`;",
        "a test keeps it in sync. Group defaults come from `conf/<group>/*.yaml`.",
        "",
        "| key | type | default | what it means |",
        "|---|---|---|---|",
    ]
    for key, typ, default, doc in rows(JobSpec):
        lines.append(f"| `{key}` | {typ} | {default} | {doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(fields_markdown())
