"""`topl plan [OVERRIDES with sweeps] [--json] [--all]`: the sweep's verdicts, nothing launched."""
from __future__ import annotations

import json

SHOWN = 200  # rows printed without --all


def main(args: list[str]) -> int:
    from topl.launcher.plan import plan, swept_keys

    as_json, show_all = "--json" in args, "--all" in args
    overrides = [a for a in args if a not in ("--json", "--all")]
    verdicts = plan(overrides)
    valid = sum(v.valid for v in verdicts)
    if as_json:
        print(json.dumps({"points": len(verdicts), "valid": valid, "verdicts": [v.to_dict() for v in verdicts]},
                         indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    keys = swept_keys(overrides)
    t = Table(title="topl plan")
    for col in ("#", *keys, "verdict", "rules", "train GB/dev", "rollout GB/dev", "devices"):
        t.add_column(col)
    for i, v in enumerate(verdicts[: None if show_all else SHOWN]):
        point = dict(o.split("=", 1) for o in v.overrides)
        t.add_row(str(i), *[point.get(k, "") for k in keys], "[green]valid[/]" if v.valid else "[red]invalid[/]",
                  " ".join(v.rules), f"{v.train_gb}", f"{v.rollout_gb}", str(v.devices))
    console = Console()
    console.print(t)
    if not show_all and len(verdicts) > SHOWN:
        console.print(f"(first {SHOWN} of {len(verdicts)} points; --all shows every one, --json for machines)")
    console.print(f"{len(verdicts)} points, {valid} valid")
    return 0
