"""`topl doctor [OVERRIDES] [--json] [--ray [ADDRESS]]`: here, or on every node of a Ray cluster."""

from __future__ import annotations

import sys

from topl.launcher.base.console import Progress, fit, make_console, no_progress
from topl.launcher.base.errors import ToplError
from topl.launcher.cli.argv import parse
from topl.launcher.cli.output import print_json, print_table
from topl.launcher.doctor.report import catalog, checks_markdown, nodes_here
from topl.launcher.run.backends.ray_doctor import on_ray


def run(spec, ray_address: str | None = None, progress: Progress | None = None) -> list[dict]:
    """[{node, findings}] for this machine, or for every node of the Ray cluster at `ray_address`
    (a Ray job per node: launcher/run/backends/ray_doctor.py); each step said to `progress`."""
    if ray_address:
        return on_ray(ray_address, spec, progress.phase if progress else None)
    if progress:
        progress.phase("checking this machine (torch, CANN, verl, vllm-ascend, the environment)")
    return nodes_here(spec, progress.detail if progress else no_progress)


def report(nodes: list[dict], as_json: bool, verbose: bool = False, spec=None) -> int:
    """Summary first, then what is wrong (errors, then warnings) with its fix; every check as a
    table with --verbose; --json for machines."""

    bad = any(f["severity"] == "error" for n in nodes for f in n["findings"])
    if as_json:
        print_json({"ok": not bad, "nodes": nodes})
        return 2 if bad else 0
    console = make_console()
    count = {s: sum(f["severity"] == s for n in nodes for f in n["findings"]) for s in SEVERITIES}
    where = (
        f" (stack={spec.cluster.versions.profile}, backend={spec.cluster.backend})" if spec else ""
    )
    console.print(
        f"topl doctor: {'FAILED' if bad else 'OK'}: {count['error']} error(s), "
        f"{count['warning']} warning(s), {count['ok']} ok on {len(nodes)} node(s){where}",
        markup=False,
        highlight=False,
    )
    for n in nodes:
        if verbose:
            rows = [
                (f["id"], f["severity"], f["what"], f["found"], f["needed"], f["fix"])
                for f in n["findings"]
            ]
            columns = ("id", "severity", "check", "found", "needed", "fix")
            print_table(f"topl doctor: {n['node']}", columns, rows, console=console)
            continue
        wrong = sorted(
            (f for f in n["findings"] if f["severity"] != "ok"),
            key=lambda f: SEVERITIES.index(f["severity"]),
        )
        if wrong and len(nodes) > 1:
            console.print(f"{n['node']}:", markup=False, highlight=False)
        for f in wrong:
            line = f"{f['severity'].upper()} {f['id']} {f['what']}: found {f['found']}, needed {f['needed']}"
            console.print(fit(line, console), markup=False, highlight=False)
            if f["fix"]:
                console.print(fit(f"  fix: {f['fix']}", console), markup=False, highlight=False)
    if not verbose:
        console.print(
            "every check: --verbose; for machines: --json; what each checks: topl doctor --list",
            markup=False,
            highlight=False,
        )
    return 2 if bad else 0


SEVERITIES = ("error", "warning", "ok")


def list_checks(as_json: bool, markdown: bool = False) -> int:
    """The doctor's registry: id, what, when, fix (`topl rules --doctor`, `topl doctor --list`)."""

    if as_json:
        print_json([{"id": c.id, "what": c.what, "when": c.when, "fix": c.fix} for c in catalog()])
    elif markdown:
        print(checks_markdown())
    else:
        rows = [(c.id, c.what, c.when, c.fix) for c in catalog()]
        print_table(f"topl doctor: {len(rows)} checks", ("id", "what", "when", "fix"), rows)
    return 0


def main(args: list[str]) -> int:
    from topl.launcher.compose.hydra import (
        compose_job,
    )  # lazy: Hydra and OmegaConf only when this runs

    flags, overrides = parse(args, flags=("--json", "--verbose", "--list"), optional=("--ray",))
    if flags.list:
        return list_checks(flags.json)
    composed = compose_job(overrides)
    address = flags.ray
    if address == "":  # --ray alone: the spec's cluster.ray_address
        address = composed.cfg.cluster.ray_address
        if not address:  # no silent target
            raise ToplError(
                "--ray without an address, and the spec names no Ray head",
                where="cluster.ray_address",
                fix="topl doctor --ray http://HEAD:8265 (or cluster.ray_address=...)",
            )
    spec = composed.to_object()
    with Progress("topl doctor") as progress:  # on stderr: seconds to minutes of imports and jobs
        nodes = run(spec, address, progress)
    return report(nodes, flags.json, flags.verbose, spec)


if __name__ == "__main__" and sys.argv[1:2] == ["--node"]:
    # an older topl's doctor job names this module: run the one in backends as `__main__`
    import runpy

    runpy.run_module("topl.launcher.run.backends.ray_doctor", run_name="__main__", alter_sys=True)
