"""Output shared by the commands: JSON for machines, rich tables and violations for people."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

# Plain-text helpers shared with the run layer and the backends live in launcher/base/console.py.
from topl.launcher.base.console import PIPE_WIDTH, make_console

if TYPE_CHECKING:
    from rich.console import JustifyMethod


def strict_json(data: Any) -> Any:
    """JSON's own values only: a non-finite float (a metric of inf or NaN) as its name ("inf",
    "-inf", "nan"); json.dumps would write Infinity / NaN, which strict JSON parsers refuse."""
    if isinstance(data, float) and not math.isfinite(data):
        return str(data)
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    return data


def print_json(data: Any, indent: int | None = 1) -> None:
    print(json.dumps(strict_json(data), indent=indent, default=str, allow_nan=False))


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    justify: dict[str, JustifyMethod] | None = None,
    console: Any = None,
    whole: Sequence[str] = ("id", "rule", "rules"),
) -> Any:
    """A table whose cells wrap rather than end in "…"; the `whole` columns (ids) are never split.
    Returns the console so a command can print its verdict lines after it."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    console = console or make_console()
    if not console.is_terminal:  # plain: aligned columns, nothing cut, no trailing blanks
        cells = [list(columns)] + [[Text.from_markup(str(c)).plain for c in r] for r in rows]
        console.print(title, markup=False, highlight=False)
        for line in plain_lines(cells, [c in whole for c in columns], PIPE_WIDTH):
            console.print(line, markup=False, highlight=False)
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
    # too narrow for every column: one block per row, each value on its own line under its
    # column's name (the first, an id or a number, heads the block), nothing cut
    console.print(f"[italic]{title}[/]", highlight=False)
    for row in rows:
        console.print(str(row[0]), highlight=False)
        for col, cell in zip(columns[1:], row[1:]):
            if str(cell):
                console.print(f"    {col}: {cell}", highlight=False)
    return console


def plain_lines(cells: list[list[str]], whole: list[bool], limit: int) -> list[str]:
    """Aligned columns no wider than `limit` in all: the widest columns that are not ids wrap
    (continuation lines stay in their column); nothing is cut."""
    import textwrap

    widths = [max(len(r[i]) for r in cells) for i in range(len(whole))]
    floor = 12
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        can = [i for i, w in enumerate(widths) if not whole[i] and w > floor]
        if not can:
            break
        widths[max(can, key=lambda i: widths[i])] -= 1
    out = []
    for r in cells:
        parts = [
            textwrap.wrap(c, w, break_on_hyphens=False) or [""] if not whole[i] else [c]
            for i, (c, w) in enumerate(zip(r, widths))
        ]
        for k in range(max(map(len, parts))):
            line = "  ".join((p[k] if k < len(p) else "").ljust(w) for p, w in zip(parts, widths))
            out.append(line.rstrip())
    return out
