"""`topl rules [--json | --markdown]`: the consistency contract's rule catalog."""
from __future__ import annotations

from topl.launcher.cli.argv import flag
from topl.launcher.cli.output import print_json


def rules_markdown() -> str:
    from topl.launcher.contract import RULES

    lines = ["| rule | severity | what must hold | why | fix |", "|---|---|---|---|---|"]
    for r in sorted(RULES, key=lambda r: r.id):
        why = " ".join(r.why.split())
        lines.append(f"| `{r.id}` | {r.severity} | {r.title} | {why} | {r.fix} |")
    return "\n".join(lines)


def main(args: list[str]) -> int:
    from topl.launcher.contract import RULES

    as_json, args = flag(args, "--json")
    as_markdown, args = flag(args, "--markdown")
    if as_json:
        rows = [
            {"rule": r.id, "severity": r.severity, "title": r.title, "keys": list(r.keys),
             "fix": r.fix, "why": r.why}
            for r in RULES
        ]
        print_json(rows)
    elif as_markdown:
        print(rules_markdown())
    else:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"topl consistency contract ({len(RULES)} rules)")
        for col in ("rule", "severity", "what must hold", "fix"):
            t.add_column(col)
        for r in sorted(RULES, key=lambda r: r.id):
            t.add_row(r.id, r.severity, r.title, r.fix)
        Console().print(t)
    return 0
