"""Output shared by the commands: JSON for machines, rich tables and violations for people."""

from __future__ import annotations

import json
import sys


def print_json(data) -> None:
    print(json.dumps(data, indent=1, default=str))


def print_violations(violations, stream=None) -> None:
    for v in violations:
        print(v.render(), file=stream or sys.stderr)


def make_console(**kw):
    """A terminal gets rich's tables at its width; a pipe or file gets plain text: no colour, no box,
    no width limit, so nothing is cut or wrapped mid-word (`--json` is for machines)."""
    from rich.console import Console

    c = Console(**kw)
    if c.is_terminal:
        return c
    return Console(**{**kw, "width": 10_000, "color_system": None, "highlight": False})


def print_table(
    title: str,
    columns,
    rows,
    justify: dict | None = None,
    console=None,
    whole=("id", "rule", "rules"),
):
    """A table whose cells wrap rather than end in "…"; the `whole` columns (ids) are never split.
    Returns the console so a command can print its verdict lines after it."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = console or make_console()
    if not console.is_terminal:  # plain: aligned columns, nothing cut, no trailing blanks
        cells = [list(columns)] + [[Text.from_markup(str(c)).plain for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        console.print(title)
        for r in cells:
            console.print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), markup=False)
        return console
    longest = [
        max(
            len(w)
            for w in [
                *col.split(),
                *(w for r in rows for w in Text.from_markup(str(r[i])).plain.split()),
            ]
        )
        for i, col in enumerate(columns)
    ]
    if sum(longest) + 2 * len(columns) <= console.width:  # every word fits: a table
        t = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for col, n in zip(columns, longest):
            t.add_column(
                col,
                justify=(justify or {}).get(col, "left"),
                overflow="fold",
                min_width=n if col in whole else None,
            )
        for row in rows:
            t.add_row(*row)
        console.print(t)
        return console
    # too narrow for every column: one block per row, each value on its own line, nothing cut
    console.print(f"[italic]{title}[/]", highlight=False)
    for row in rows:
        console.print("  ".join(str(c) for c in row[:2]), highlight=False)
        for col, cell in zip(columns[2:], row[2:]):
            if str(cell):
                console.print(f"    {col}: {cell}", highlight=False)
    return console
