"""`topl rules [--json | --markdown | --constraints]`: the contract's rule catalog, or the field
constraints declared next to each spec field (markdown)."""

from __future__ import annotations

from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_table


def rules_markdown() -> str:
    from topl.launcher.contract import RULES

    lines = ["| rule | severity | what must hold | why | fix |", "|---|---|---|---|---|"]
    for r in sorted(RULES, key=lambda r: r.id):
        why = " ".join(r.why.split())
        lines.append(f"| `{r.id}` | {r.severity} | {r.title} | {why} | {r.fix} |")
    return "\n".join(lines)


def main(args: list[str]) -> int:
    from topl.launcher.contract import RULES

    flags, _ = parse(args, flags=("--json", "--markdown", "--constraints"))
    if flags.json:
        rows = [
            {
                "rule": r.id,
                "severity": r.severity,
                "title": r.title,
                "keys": list(r.keys),
                "fix": r.fix,
                "why": r.why,
            }
            for r in RULES
        ]
        print_json(rows)
    elif flags.markdown:
        print(rules_markdown())
    elif flags.constraints:
        from topl.launcher.constraints import table
        from topl.launcher.spec import JobSpec

        print(table(JobSpec))
    else:
        rows = [(r.id, r.severity, r.title, r.fix) for r in sorted(RULES, key=lambda r: r.id)]
        title = f"topl consistency contract ({len(RULES)} rules)"
        print_table(title, ("rule", "severity", "what must hold", "fix"), rows)
    return 0
