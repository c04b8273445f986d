"""`topl doctor [OVERRIDES] [--json] [--ray [ADDRESS]]`: here, or on every node of a Ray cluster."""

from __future__ import annotations

import json
import sys

MARK = "TOPL_DOCTOR_JSON="
NO_TOPL = "No module named 'topl"  # how Python says topl is not installed (ModuleNotFoundError)


def node_task(spec_json: str) -> dict:
    """One node's checks, run there as a Ray task. In the doctor job this module is `__main__`, so
    Ray pickles the function by value: it needs only the standard library until it imports topl,
    and a node without topl says so instead of failing the whole doctor job."""
    import os
    import socket

    out = {"node": socket.gethostname(), "python": sys.executable}
    try:
        from topl.launcher.doctor import run_checks
    except ImportError as e:
        return {**out, "error": f"{type(e).__name__}: {e}"}
    findings = run_checks(spec_from_json(spec_json), dict(os.environ), node=True)
    return {**out, "findings": [f.to_dict() for f in findings]}


def node_entry(result: dict, address: str) -> dict:
    """A node's report; a node where topl's checks could not run gets one error finding."""
    node = f"{result['node']} ({address})"
    if "findings" in result:
        return {"node": node, "findings": result["findings"]}
    from topl.launcher.doctor import ERROR, Finding

    python, err = result.get("python", "its Python"), result["error"]
    fix = (
        f"install topl on this node into {python}, the Python its Ray workers run (strict runs "
        "import topl.launcher.guard in every verl process there)"
        if NO_TOPL in err
        else "run `topl doctor` on that node to see the failure"
    )
    what = "topl's checks run on this node"
    return {
        "node": node,
        "findings": [Finding("TOP-DOC-NODE-001", ERROR, what, err, "yes", fix).to_dict()],
    }


def node_main() -> int:
    """Inside a Ray job: one task per alive node, each running the checks there."""
    import os

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init()
    check_node = ray.remote(num_cpus=0, max_retries=0)(node_task)
    spec_json = os.environ["TOPL_DOCTOR_SPEC"]
    nodes = [n for n in ray.nodes() if n["Alive"]]
    refs = [
        check_node.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(spec_json)
        for n in nodes
    ]
    results = []
    for n, ref in zip(nodes, refs):
        try:
            results.append(ray.get(ref))
        except Exception as e:  # noqa: BLE001 - the task died there: report it for that node
            last = (str(e).strip().splitlines() or [type(e).__name__])[-1]
            results.append({"node": n["NodeManagerAddress"], "error": last})
    report = [node_entry(r, n["NodeManagerAddress"]) for n, r in zip(nodes, results)]
    print(MARK + json.dumps(report), flush=True)
    return 0


def spec_to_json(spec) -> str:
    import dataclasses

    return json.dumps(dataclasses.asdict(spec))


def spec_from_json(text: str):
    """The resolved spec, rebuilt on a node (no recipe files or conf/ needed there)."""
    from omegaconf import OmegaConf

    from topl.launcher.spec import JobSpec

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(JobSpec), json.loads(text)))


def on_ray(address: str, spec) -> list[dict]:
    """Submit the per-node doctor as a Ray job with the job's runtime_env and driver Python (the
    head runs `cluster.python`, as it will run verl's driver); collect its report."""
    import shlex
    import time

    from topl.launcher.backends.ray_job import check_reachable
    from topl.launcher.errors import ToplError
    from topl.launcher.render import render

    check_reachable(
        address, spec.cluster.ray_timeout_s
    )  # named, installed, answering: or one message
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    python = spec.cluster.python
    entry = f"{shlex.quote(python)} -m topl.launcher.cli.doctor --node"
    env = {**render(spec).env, "TOPL_DOCTOR_SPEC": spec_to_json(spec)}  # the job's own runtime_env
    try:
        job = client.submit_job(entrypoint=entry, runtime_env={"env_vars": env})
    except Exception as e:  # noqa: BLE001 - Ray raises several types for an unreachable head
        raise ToplError(
            f"cannot reach the Ray cluster at {address}: {e}", where="cluster.ray_address"
        ) from None
    while client.get_job_status(job) not in (
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.STOPPED,
    ):
        time.sleep(0.5)
    logs = client.get_job_logs(job)
    line = next((l for l in logs.splitlines() if l.startswith(MARK)), None)
    if line is None and NO_TOPL in logs:
        raise ToplError(
            f"topl is not installed for {python} on the Ray head at {address} (cluster.python: the "
            "doctor job runs there as verl's driver will)",
            where="cluster.python",
            fix=f"install topl into {python} on the head and every node (strict runs import "
            "topl.launcher.guard in every verl process), or set cluster.python to a Python that "
            "has it",
        )
    if line is None:
        raise ToplError(
            f"the doctor job {job} produced no report",
            where=address,
            fix=f"its logs:\n{logs[-2000:]}",
        )
    return json.loads(line[len(MARK) :])


def run(spec, ray_address: str | None = None) -> list[dict]:
    """[{node, findings}] for this machine, or for every node of the Ray cluster."""
    import socket

    from topl.launcher.doctor import run_checks

    if ray_address:
        return on_ray(ray_address, spec)
    return [
        {
            "node": f"{socket.gethostname()} (local)",
            "findings": [f.to_dict() for f in run_checks(spec)],
        }
    ]


def report(nodes: list[dict], as_json: bool, verbose: bool = False, spec=None) -> int:
    """Summary first, then what is wrong (errors, then warnings) with its fix; every check as a
    table with --verbose; --json for machines."""
    from topl.launcher.cli.output import fit, make_console, print_json, print_table

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
    from topl.launcher.cli.output import print_json, print_table
    from topl.launcher.doctor import catalog, checks_markdown

    if as_json:
        print_json([{"id": c.id, "what": c.what, "when": c.when, "fix": c.fix} for c in catalog()])
    elif markdown:
        print(checks_markdown())
    else:
        rows = [(c.id, c.what, c.when, c.fix) for c in catalog()]
        print_table(f"topl doctor: {len(rows)} checks", ("id", "what", "when", "fix"), rows)
    return 0


def main(args: list[str]) -> int:
    from topl.launcher.cli.argv import parse
    from topl.launcher.compose import compose_job

    flags, overrides = parse(args, flags=("--json", "--verbose", "--list"), optional=("--ray",))
    if flags.list:
        return list_checks(flags.json)
    composed = compose_job(overrides)
    address = flags.ray
    if address == "":  # --ray alone: the spec's cluster.ray_address
        address = composed.cfg.cluster.ray_address
        if not address:  # no silent target
            from topl.launcher.errors import ToplError

            raise ToplError(
                "--ray without an address, and the spec names no Ray head",
                where="cluster.ray_address",
                fix="topl doctor --ray http://HEAD:8265 (or cluster.ray_address=...)",
            )
    spec = composed.to_object()
    return report(run(spec, address), flags.json, flags.verbose, spec)


if __name__ == "__main__" and sys.argv[1:2] == ["--node"]:
    sys.exit(node_main())
