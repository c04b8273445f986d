"""`topl plan [OVERRIDES with sweeps] [--json] [--all]`: the sweep's verdicts, nothing launched."""

from __future__ import annotations

from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_table

SHOWN = 200  # rows printed without --all


def main(args: list[str]) -> int:
    from topl.launcher.plan import plan, swept_keys

    flags, overrides = parse(args, flags=("--json", "--all"))
    verdicts = plan(overrides)
    valid = sum(v.valid for v in verdicts)
    if flags.json:
        print_json(
            {"points": len(verdicts), "valid": valid, "verdicts": [v.to_dict() for v in verdicts]}
        )
        return 0
    keys = swept_keys(overrides)
    rows = []
    for i, v in enumerate(verdicts[: None if flags.all else SHOWN]):
        point = dict(o.split("=", 1) for o in v.overrides)
        verdict = "[green]valid[/]" if v.valid else "[red]invalid[/]"
        rows.append(
            (
                str(i),
                *[point.get(k, "") for k in keys],
                verdict,
                " ".join(v.rules),
                f"{v.train_gb}",
                f"{v.rollout_gb}",
                str(v.devices),
            )
        )
    columns = ("#", *keys, "verdict", "rules", "train GB/dev", "rollout GB/dev", "devices")
    console = print_table("topl plan", columns, rows)
    if not flags.all and len(verdicts) > SHOWN:
        console.print(
            f"(first {SHOWN} of {len(verdicts)} points; --all shows every one, --json for machines)"
        )
    console.print(f"{len(verdicts)} points, {valid} valid")
    return 0
