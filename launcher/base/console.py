"""Console output below the command line: line widths, wrapping, rich consoles, violations.

The run layer and the backends print through these, as the commands do (launcher/cli/output.py
adds JSON and tables)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Iterable, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# The longest line topl prints to a pipe or file (a terminal: its width). Log viewers, CI pages
# and `less` read long lines badly; nothing is cut, longer text wraps.
PIPE_WIDTH = 200


def width_of(console: Console | None = None, stream: TextIO | None = None) -> int:
    if console is not None:
        return console.width if console.is_terminal else PIPE_WIDTH
    stream = stream or sys.stdout
    if stream.isatty():
        import shutil

        return shutil.get_terminal_size().columns
    return PIPE_WIDTH


def fit(
    text: str,
    console: Console | None = None,
    width: int | None = None,
    stream: TextIO | None = None,
) -> str:
    """`text` with every line longer than the width wrapped, continuations indented one step
    deeper than the line they continue; words are never cut unless one alone is too long."""
    import textwrap

    width = width or width_of(console, stream)
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        lead = " " * (len(line) - len(line.lstrip()) + 4)
        out.extend(
            textwrap.wrap(
                line,
                width,
                subsequent_indent=lead,
                break_on_hyphens=False,
                drop_whitespace=True,
            )
        )
    return "\n".join(out)


class Renders(Protocol):
    """What prints as a violation (contract/core.py:Violation)."""

    def render(self) -> str: ...


def print_violations(violations: Iterable[Renders], stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    for v in violations:
        print(fit(v.render(), stream=stream), file=stream)


def make_console(**kw: Any) -> Console:
    """A terminal gets rich's tables at its width; a pipe or file gets plain text: no colour, no box,
    no width limit, so nothing is cut or wrapped mid-word (`--json` is for machines)."""
    from rich.console import Console

    c = Console(**kw)
    if c.is_terminal:
        return c
    return Console(**{**kw, "width": 10_000, "color_system": None, "highlight": False})


class Progress:
    """What a long wait is doing, on stderr (stdout stays the command's answer, `--json` included):
    rich's status line on a terminal, updated in place; otherwise one line per phase (`detail`s,
    finer steps inside a phase, only reach the terminal's status line)."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self.name, self.stream = name, stream or sys.stderr
        self.status: Any = None
        self.phases: list[str] = []  # what was said, in order (tests read it)

    def __enter__(self) -> Progress:
        if self.stream.isatty():
            self.status = make_console(file=self.stream).status(f"{self.name}: starting")
            self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()

    def phase(self, text: str) -> None:
        self.phases.append(text)
        if self.status is not None:
            self.status.update(f"{self.name}: {text}")
        else:
            print(fit(f"{self.name}: {text}", stream=self.stream), file=self.stream, flush=True)

    def detail(self, text: str) -> None:
        if self.status is not None:
            self.status.update(f"{self.name}: {text}")


def no_progress(text: str) -> None:
    """The default phase reporter of a long step (backends, the doctor): nothing shown."""
