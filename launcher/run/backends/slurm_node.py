"""Inside a Slurm allocation: what the run's sbatch script (slurm_script.py) runs on its nodes,
as `python -m topl.launcher.run.backends.slurm_node COMMAND ...` with cluster.python.

- `doctor RUN_DIR`: topl's checks on this node (one srun task per node) into RUN_DIR/doctor/NODE.json;
  exit 1 on an error finding, so the job stops before Ray or verl starts.
- `embedded RUN_DIR`: topl's reference engines on this node (cluster.slurm.run=embedded).
- `free-port`: a TCP port free on this node; `token`: a Ray auth token for the job.
- `ray-start --head IP PORT` / `ray-start --worker HEAD:PORT`: `ray start --block` with free ports
  for the parts of a Ray node that listen on fixed defaults (two jobs on one node never collide).
- `ray-ready HEAD:PORT NODES SECONDS`: wait until NODES Ray nodes are alive, or exit 1.

The spec comes from RUN_DIR/spec.yaml, the resolved spec `topl launch` wrote (the run dir lies on a
filesystem every node sees: Slurm writes the job's log there too)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time
from pathlib import Path


def load_spec(run_dir: Path):
    """The run's resolved spec, typed again (no recipe files or conf/ needed on a node)."""
    from omegaconf import OmegaConf  # lazy: OmegaConf only for the commands that read the spec

    from topl.launcher.spec.job import JobSpec  # lazy: free-port and ray-start import no topl

    node = OmegaConf.merge(OmegaConf.structured(JobSpec), OmegaConf.load(run_dir / "spec.yaml"))
    return OmegaConf.to_object(node)


def doctor(run_dir: Path) -> int:
    from topl.launcher.doctor.report import run_checks  # lazy: the doctor only where it runs

    findings = [f.to_dict() for f in run_checks(load_spec(run_dir), dict(os.environ), node=True)]
    host = socket.gethostname()
    out = run_dir / "doctor"
    out.mkdir(mode=0o700, exist_ok=True)
    (out / f"{host}.json").write_text(json.dumps({"node": host, "findings": findings}, indent=1))
    bad = [f for f in findings if f["severity"] == "error"]
    for f in bad:
        print(
            f"topl doctor on {host}: ERROR {f['id']}: {f['what']}: found {f['found']}, "
            f"needed {f['needed']}; fix: {f['fix']}",
            file=sys.stderr,
        )
    return 1 if bad else 0


def embedded(run_dir: Path) -> int:
    from topl.launcher.run.backends.local import run_local  # lazy: torch only where it runs

    return run_local(load_spec(run_dir), run_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def ray_start(args: list[str]) -> int:
    """exec `ray start ... --block`: the srun step lives as long as the Ray node (Slurm ends it
    with the job). Ray's own defaults 8265 / 10001 / 52365 would collide between two jobs."""
    ray = Path(sys.executable).with_name("ray")
    argv = [str(ray) if ray.exists() else "ray", "start", "--block", "--disable-usage-stats"]
    argv += ["--include-dashboard=false", f"--dashboard-agent-listen-port={free_port()}"]
    if args[0] == "--head":
        ip, port = args[1], args[2]
        argv += ["--head", f"--node-ip-address={ip}", f"--port={port}"]
        argv += [f"--ray-client-server-port={free_port()}"]
    else:
        argv += [f"--address={args[1]}"]
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    argv += [f"--num-cpus={cpus}"] if cpus else []
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 1  # not reached


def ray_ready(address: str, nodes: int, seconds: float) -> int:
    """Every node's Ray has joined the head (ray.nodes(): Alive), or exit 1 at the deadline."""
    import ray  # lazy: Ray only in the step that waits for it

    deadline, alive, why = time.monotonic() + seconds, 0, "the head did not answer"
    while time.monotonic() < deadline:
        try:
            if not ray.is_initialized():
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            alive = sum(1 for n in ray.nodes() if n["Alive"])
            if alive >= nodes:
                ray.shutdown()
                print(f"topl: Ray ready at {address}: {alive} node(s)", flush=True)
                return 0
            why = f"{alive} of {nodes} node(s) joined"
        except Exception as e:  # noqa: BLE001 - the head is not up yet: try again
            why = f"{type(e).__name__}: {str(e)[:200]}"
        time.sleep(1.0)
    print(
        f"topl: Ray at {address} not ready after {seconds:g} s ({why}); see "
        "cluster.slurm.ray_ready_s and the job's log",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str]) -> int:
    cmd, args = argv[0], argv[1:]
    if cmd == "doctor":
        return doctor(Path(args[0]))
    if cmd == "embedded":
        return embedded(Path(args[0]))
    if cmd == "token":  # as Ray makes one (ray@2.60.0:python/ray/_private/authentication/
        # authentication_token_generator.py:generate_new_authentication_token)
        print(secrets.token_hex(32))
        return 0
    if cmd == "free-port":
        print(free_port())
        return 0
    if cmd == "ray-start":
        return ray_start(args)
    if cmd == "ray-ready":
        return ray_ready(args[0], int(args[1]), float(args[2]))
    print(f"slurm_node: unknown command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
