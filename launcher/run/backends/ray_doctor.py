"""The per-node doctor on a Ray cluster: a Ray job (through ray_client.Head, the launch's own client:
retries on a just-started head, every call and the whole wait bounded) that runs one task per
alive node, each running topl's checks there.

The job's entrypoint is `python -m topl.launcher.run.backends.ray_doctor --node`: this module is then
`__main__`, so Ray pickles `node_task` by value and a node without topl reports it instead of
failing the whole doctor job."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from topl.launcher.spec.job import JobSpec

MARK = "TOPL_DOCTOR_JSON="
NO_TOPL = "No module named 'topl"  # how Python says topl is not installed (ModuleNotFoundError)
MODULE = "topl.launcher.run.backends.ray_doctor"  # the doctor job's entrypoint (`-m MODULE --node`)
JOB_WAIT_S = 600  # how long the doctor job may run on a cluster, beyond cluster.ray_timeout_s


def node_task(spec_json: str) -> dict:
    """One node's checks, run there as a Ray task. In the doctor job this module is `__main__`, so
    Ray pickles the function by value: it needs only the standard library until it imports topl,
    and a node without topl says so instead of failing the whole doctor job."""
    import os
    import socket

    out = {"node": socket.gethostname(), "python": sys.executable}
    try:
        from topl.launcher.doctor.report import (
            run_checks,
        )  # lazy: Ray ships this module to nodes, which import topl only here
    except ImportError as e:
        return {**out, "error": f"{type(e).__name__}: {e}"}
    findings = run_checks(spec_from_json(spec_json), dict(os.environ), node=True)
    return {**out, "findings": [f.to_dict() for f in findings]}


def node_entry(result: dict, address: str) -> dict:
    """A node's report; a node where topl's checks could not run gets one error finding."""
    node = f"{result['node']} ({address})"
    if "findings" in result:
        return {"node": node, "findings": result["findings"]}
    from topl.launcher.base.errors import (
        ERROR,
    )  # lazy: Ray ships this module to nodes, which import topl only here
    from topl.launcher.doctor.registry import (
        Finding,
    )  # lazy: Ray ships this module to nodes, which import topl only here

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


def spec_to_json(spec: JobSpec) -> str:
    import dataclasses

    return json.dumps(dataclasses.asdict(spec))


def spec_from_json(text: str):
    """The resolved spec, rebuilt on a node (no recipe files or conf/ needed there)."""
    from omegaconf import OmegaConf

    from topl.launcher.spec.job import (
        JobSpec,
    )  # lazy: Ray ships this module to nodes, which import topl only here

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(JobSpec), json.loads(text)))


def on_ray(address: str, spec: JobSpec, phase: Callable[[str], None] | None = None) -> list[dict]:
    """Submit the per-node doctor as a Ray job with the job's runtime_env and driver Python (the
    head runs `cluster.python`, as it will run verl's driver); collect its report. `phase(text)`
    says each step of the wait (cli/doctor.py shows them)."""
    import shlex
    import time

    from topl.launcher.base.errors import (
        ToplError,
    )  # lazy: Ray ships this module to nodes, which import topl only here
    from topl.launcher.render.invocation import (
        render,
    )  # lazy: Ray ships this module to nodes, which import topl only here
    from topl.launcher.run.backends.ray_client import (
        Head,
        check_reachable,
    )  # lazy: Ray ships this module to nodes, which import topl only here

    say = phase or (lambda text: None)
    timeout = spec.cluster.ray_timeout_s
    say(f"reaching the Ray head at {address} (up to {timeout:g} s)")
    check_reachable(address, timeout)  # named, installed, answering: or one message
    head = Head(address, timeout)
    python = spec.cluster.python
    entry = f"{shlex.quote(python)} -m {MODULE} --node"
    env = {**render(spec).env, "TOPL_DOCTOR_SPEC": spec_to_json(spec)}  # the job's own runtime_env
    say("submitting the doctor job (one Ray task per node)")
    job = head.submit(entrypoint=entry, runtime_env={"env_vars": env})
    say(f"waiting for the doctor job {job} (up to {timeout + JOB_WAIT_S:g} s)")
    head.wait(job, time.monotonic() + timeout + JOB_WAIT_S)
    say("reading its report")
    logs = head.logs(job)
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


if __name__ == "__main__" and sys.argv[1:2] == ["--node"]:
    sys.exit(node_main())
