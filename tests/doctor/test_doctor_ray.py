"""The per-node doctor on a Ray cluster (launcher/run/backends/ray_doctor.py): on a real local Ray
head, and its node task where topl is not installed."""

import json
import subprocess
import sys

from helpers import no_site_python, run_topl


def test_per_node_doctor_on_a_real_ray_head(ray_head):
    r = run_topl(
        "doctor", "--ray", ray_head, f"cluster.python={sys.executable}", "--json", timeout=240
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert (
        len(out["nodes"]) == 1 and "(local)" not in out["nodes"][0]["node"]
    )  # reported by the node itself
    env = [f for f in out["nodes"][0]["findings"] if f["id"] == "TOP-DOC-ENV-001"]
    assert env and all(
        f["severity"] == "ok" for f in env
    )  # the job's runtime_env reached the node's task
    guard = [f for f in out["nodes"][0]["findings"] if f["id"] == "TOP-DOC-GUARD-001"]
    assert [f["severity"] for f in guard] == ["ok"]  # the strict default: checked on the node


def test_ray_head_whose_python_lacks_topl_is_one_clear_error(ray_head, tmp_path):
    r = run_topl("doctor", "--ray", ray_head, f"cluster.python={no_site_python(tmp_path)}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "topl is not installed" in r.stderr and "where: cluster.python" in r.stderr


def test_a_node_without_topl_reports_it_instead_of_failing_the_doctor_job():
    """Ray runs `node_task` on each node, pickled by value: run it where topl is not installed."""
    from topl.launcher.run.backends import ray_doctor as cli

    code = (
        f"import json, runpy; ns = runpy.run_path({cli.__file__!r}); "
        "print(json.dumps(ns['node_task']('{}')))"
    )
    r = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    entry = cli.node_entry(json.loads(r.stdout), "10.0.0.2")
    (f,) = entry["findings"]
    assert entry["node"].endswith("(10.0.0.2)") and f["id"] == "TOP-DOC-NODE-001"
    assert f["severity"] == "error" and "No module named 'topl'" in f["found"]
    assert f"install topl on this node into {sys.executable}" in f["fix"]


# Installed in a Ray worker's interpreter (runtime_env py_executable): topl cannot be imported there,
# as on a node where it is not installed; the driver (the doctor job itself) keeps it.
HIDE_TOPL_IN_RAY_WORKERS = """
import sys
class _NoTopl:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "topl" and sys.argv[0].endswith("default_worker.py"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoTopl())
"""


def test_ray_node_without_topl_is_reported_by_the_doctor_job(ray_head, tmp_path):
    import time

    from ray.job_submission import JobStatus, JobSubmissionClient

    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.run.backends.ray_doctor import MARK, MODULE, spec_to_json

    (tmp_path / "sitecustomize.py").write_text(HIDE_TOPL_IN_RAY_WORKERS)
    worker_python = tmp_path / "python"
    worker_python.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path} exec {sys.executable} "$@"\n')
    worker_python.chmod(0o755)
    client = JobSubmissionClient(ray_head)
    job = client.submit_job(
        entrypoint=f"{sys.executable} -m {MODULE} --node",
        runtime_env={
            "env_vars": {"TOPL_DOCTOR_SPEC": spec_to_json(compose_job([]).to_object())},
            "py_executable": str(worker_python),
        },
    )
    deadline = time.time() + 240
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        assert time.time() < deadline, client.get_job_logs(job)
        time.sleep(0.5)
    logs = client.get_job_logs(job)
    line = next((l for l in logs.splitlines() if l.startswith(MARK)), None)
    assert line, logs[-3000:]  # one node lacking topl does not sink the whole report
    ((node,),) = [[f for n in json.loads(line[len(MARK) :]) for f in n["findings"]]]
    assert node["id"] == "TOP-DOC-NODE-001" and node["severity"] == "error"
    assert "No module named 'topl'" in node["found"] and "install topl on this node" in node["fix"]
