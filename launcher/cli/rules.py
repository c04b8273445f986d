"""`topl rules [--json | --markdown | --constraints | --doctor]`: the rule catalog (the contract's
rules, which `topl check` evaluates, and the run-time rules topl's guard checks in every verl
process), the field constraints declared next to each spec field (markdown), or the doctor's
checks of the installed stack (id, what, when, fix)."""

from __future__ import annotations

from topl.launcher.cli.argv import parse
from topl.launcher.cli.doctor import list_checks
from topl.launcher.cli.output import print_json, print_table
from topl.launcher.contract.core import RULES
from topl.launcher.contract.dryrun.deep import catalog as deep_rules
from topl.launcher.contract.runtime import CHECK, DEEP, RUNTIME_RULES
from topl.launcher.doctor.report import catalog as doctor_checks
from topl.launcher.spec.constraints import table
from topl.launcher.spec.job import JobSpec

RUN_TIME = "run time: topl's guard checks it in every verl process, not `topl check`"
DEEP_TIME = "dry run: `topl check --deep`, and `topl launch` before a remote submission"


def catalog(by_id: bool = True) -> list:
    """(rule, checked_by) for every rule a user can meet: the contract's, then the run-time ones."""

    rows = [(r, CHECK) for r in RULES] + [(r, r.checked_by) for r in RUNTIME_RULES + deep_rules()]
    return sorted(rows, key=lambda rc: rc[0].id) if by_id else rows


def _title(r, checked_by: str, md: bool = False) -> str:

    if checked_by == CHECK:
        return r.title
    when = DEEP_TIME if checked_by == DEEP else RUN_TIME
    return f"{r.title} (**{when}**)" if md else f"{r.title} ({when})"


def rules_markdown() -> str:
    lines = ["| rule | severity | what must hold | why | fix |", "|---|---|---|---|---|"]
    for r, by in catalog():
        why = " ".join(r.why.split())
        lines.append(f"| `{r.id}` | {r.severity} | {_title(r, by, md=True)} | {why} | {r.fix} |")
    return "\n".join(lines)


def main(args: list[str]) -> int:
    flags, _ = parse(args, flags=("--json", "--markdown", "--constraints", "--doctor"))
    if flags.doctor:  # the doctor's checks: what `topl doctor` looks at where the job runs
        return list_checks(flags.json, flags.markdown)
    if flags.json:
        rows = [
            {
                "rule": r.id,
                "severity": r.severity,
                "title": r.title,
                "keys": list(r.keys),
                "fix": r.fix,
                "why": r.why,
                "checked_by": by,  # "check": `topl check`; "guard": at run time, every process
            }
            for r, by in catalog(by_id=False)  # the order it always had, run-time rules last
        ]
        print_json(rows)
    elif flags.markdown:
        print(rules_markdown())
    elif flags.constraints:
        print(table(JobSpec))
    else:
        rules = catalog()
        rows = [(r.id, r.severity, _title(r, by), r.fix) for r, by in rules]
        n_run = sum(by == "guard" for _, by in rules)
        n_deep = sum(by == DEEP for _, by in rules)
        title = (
            f"topl consistency contract ({len(rules) - n_run - n_deep} rules) "
            f"+ {n_deep} of the dry run (--deep) + {n_run} checked at run time by topl's guard"
        )
        console = print_table(title, ("rule", "severity", "what must hold", "fix"), rows)

        console.print(
            f"and {len(doctor_checks())} doctor checks of the installed stack: topl rules --doctor",
            markup=False,
            highlight=False,
        )
    return 0
