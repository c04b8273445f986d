"""`topl doctor [OVERRIDES] [--json] [--ray [ADDRESS]]`: here, or on every node of a Ray cluster."""

from __future__ import annotations

import json
import sys

from topl.launcher.cli.output import print_json, print_table

MARK = "TOPL_DOCTOR_JSON="


def node_main() -> int:
    """Inside a Ray job: one task per alive node, each running the checks there."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init()

    @ray.remote(num_cpus=0)
    def check_node():
        import os
        import socket

        from topl.launcher.doctor import run_checks

        spec = spec_from_json(os.environ["TOPL_DOCTOR_SPEC"])
        return {
            "node": socket.gethostname(),
            "findings": [f.to_dict() for f in run_checks(spec, dict(os.environ))],
        }

    nodes = [n for n in ray.nodes() if n["Alive"]]
    refs = [
        check_node.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote()
        for n in nodes
    ]
    results = ray.get(refs)
    for n, r in zip(nodes, results):
        r["node"] = f"{r['node']} ({n['NodeManagerAddress']})"
    print(MARK + json.dumps(results), flush=True)
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
    """Submit the per-node doctor as a Ray job with the job's runtime_env; collect its report."""
    import time

    from topl.launcher.backends.ray_job import check_reachable
    from topl.launcher.errors import ToplError
    from topl.launcher.render import render

    check_reachable(
        address, spec.cluster.ray_timeout_s
    )  # named, installed, answering: or one message
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    entry = f"{sys.executable} -m topl.launcher.cli.doctor --node"
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


def report(nodes: list[dict], as_json: bool) -> int:
    bad = any(f["severity"] == "error" for n in nodes for f in n["findings"])
    if as_json:
        print_json({"ok": not bad, "nodes": nodes})
        return 2 if bad else 0
    console = None
    for n in nodes:
        rows = []
        for f in n["findings"]:
            color = {"error": "red", "warning": "yellow"}.get(f["severity"], "green")
            rows.append(
                (
                    f["id"],
                    f"[{color}]{f['severity']}[/]",
                    f["what"],
                    f["found"],
                    f["needed"],
                    f["fix"],
                )
            )
        columns = ("id", "severity", "check", "found", "needed", "fix")
        console = print_table(f"topl doctor: {n['node']}", columns, rows, console=console)
    if console is None:
        from rich.console import Console

        console = Console()
    n_err = sum(f["severity"] == "error" for n in nodes for f in n["findings"])
    console.print(f"{'FAILED' if bad else 'OK'}: {n_err} error(s) on {len(nodes)} node(s)")
    return 2 if bad else 0


def main(args: list[str]) -> int:
    from topl.launcher.cli.argv import parse
    from topl.launcher.compose import compose_job

    flags, overrides = parse(args, flags=("--json",), optional=("--ray",))
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
    return report(run(composed.to_object(), address), flags.json)


if __name__ == "__main__" and sys.argv[1:2] == ["--node"]:
    sys.exit(node_main())
