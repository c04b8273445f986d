"""`topl` command line: launch, check, render, rules, recipes, probe.

Everything after the subcommand that is not a topl flag is a Hydra override; `topl launch` is a
real `@hydra.main` app, so `-m`, `--cfg job`, `--info` and the `.hydra/` folder work as in Hydra.
"""
from __future__ import annotations

import json
import os
import sys

from topl.launcher.errors import ToplError

USAGE = """usage: topl COMMAND [OVERRIDES...] [FLAGS]

commands:
  launch    validate, write a run directory, start the backend (Hydra app: -m, --cfg job, --info)
            flags: --dry-run (write the run dir, start nothing), --follow (ray_job: stream logs),
                   --skip-doctor (remote backends run `topl doctor` first; this skips it, loudly)
  check     validate only; exit 0 when no error, 2 when rejected        (--json)
  render    print the verl command the spec becomes                   (--json)
  rules     print the consistency contract's rule catalog   (--json, --markdown, --constraints)
  recipes   list recipes; `recipes show NAME`; `recipes diff A B`     (--json)
  plan      expand a sweep (a=1,2 b=range(1,5)), validate every point, launch nothing (--json, --all)
  doctor    check the installed stack here, or on every Ray node (--ray [ADDRESS]) (--json)
  probe     run the reference rollout and training engines, compare log-probs (--json, --dump DIR)
  diagnose  compare two boundary dumps: first divergence, operator path vs framework (--json, --plots DIR)

examples:
  topl launch                                   # the embedded default: true on-policy GRPO here
  topl check recipe=qwen3_30b_a3b_grpo_a3_strict rollout.tp=2
  topl render recipe=qwen3_30b_a3b_grpo_a3_strict --json
"""


def _take(args: list[str], *flags: str) -> tuple[set[str], list[str]]:
    got = {a for a in args if a in flags}
    return got, [a for a in args if a not in flags]


def _print_violations(violations, stream=sys.stderr) -> None:
    for v in violations:
        print(v.render(), file=stream)


def cmd_check(args: list[str]) -> int:
    from topl.launcher.compose import compose_job
    from topl.launcher.contract import check, errors

    flags, overrides = _take(args, "--json")
    vs = check(compose_job(overrides))
    ok = not errors(vs)
    if "--json" in flags:
        print(json.dumps({"ok": ok, "violations": [v.to_dict() for v in vs]}, indent=1, default=str))
    else:
        _print_violations(vs, sys.stdout)
        n_err = len(errors(vs))
        print(f"{'OK' if ok else 'REJECTED'}: {n_err} error(s), {len(vs) - n_err} warning(s)")
    return 0 if ok else 2


def cmd_render(args: list[str]) -> int:
    from topl.launcher.compose import compose_job
    from topl.launcher.contract import check, errors
    from topl.launcher.render import render

    flags, overrides = _take(args, "--json")
    composed = compose_job(overrides)
    vs = check(composed)
    if errors(vs):
        _print_violations(vs)
        print("topl render: the spec is rejected; fix the errors above", file=sys.stderr)
        return 2
    spec = composed.to_object()
    inv = render(spec)
    print(json.dumps(inv.to_dict(spec.cluster.python), indent=1) if "--json" in flags else inv.command(spec.cluster.python))
    return 0


def cmd_rules(args: list[str]) -> int:
    from topl.launcher.contract import RULES

    if "--json" in args:
        print(json.dumps([{"rule": r.id, "severity": r.severity, "title": r.title, "keys": list(r.keys),
                           "fix": r.fix, "why": r.why} for r in RULES], indent=1))
    elif "--markdown" in args:
        print(rules_markdown())
    elif "--constraints" in args:
        from topl.launcher.constraints import table
        from topl.launcher.spec import JobSpec

        print(table(JobSpec))
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


def rules_markdown() -> str:
    from topl.launcher.contract import RULES

    lines = ["| rule | severity | what must hold | why | fix |", "|---|---|---|---|---|"]
    for r in sorted(RULES, key=lambda r: r.id):
        why = " ".join(r.why.split())
        lines.append(f"| `{r.id}` | {r.severity} | {r.title} | {why} | {r.fix} |")
    return "\n".join(lines)


def cmd_recipes(args: list[str]) -> int:
    from topl.launcher.recipes_cli import main as recipes_main

    return recipes_main(args)


def cmd_probe(args: list[str]) -> int:
    from topl.kernels.probe_cli import main as probe_main

    return probe_main(args)


def cmd_plan(args: list[str]) -> int:
    from topl.launcher.plan_cli import main as plan_main

    return plan_main(args)


def cmd_doctor(args: list[str]) -> int:
    from topl.launcher.doctor_cli import main as doctor_main

    return doctor_main(args)


def cmd_diagnose(args: list[str]) -> int:
    from topl.kernels.diagnose_cli import main as diagnose_main

    return diagnose_main(args)


def cmd_launch(args: list[str]) -> int:
    from topl.launcher.launch import main as launch_main

    return launch_main(args)


COMMANDS = {"launch": cmd_launch, "check": cmd_check, "render": cmd_render, "rules": cmd_rules,
            "recipes": cmd_recipes, "probe": cmd_probe, "plan": cmd_plan,
            "doctor": cmd_doctor, "diagnose": cmd_diagnose}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"error: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[cmd](rest)
    except ToplError as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(e.render(), file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
