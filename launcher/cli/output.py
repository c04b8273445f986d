"""Output shared by the commands: JSON for machines, rich tables and violations for people."""
from __future__ import annotations

import json
import sys


def print_json(data) -> None:
    print(json.dumps(data, indent=1, default=str))


def print_violations(violations, stream=None) -> None:
    for v in violations:
        print(v.render(), file=stream or sys.stderr)


def print_table(title: str, columns, rows, justify: dict | None = None, console=None):
    """A rich table; returns the console so a command can print its verdict lines after it."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify=(justify or {}).get(col, "left"))
    for row in rows:
        t.add_row(*row)
    console = console or Console()
    console.print(t)
    return console
