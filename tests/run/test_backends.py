"""The backends are a registry behind one interface (launcher/run/backends/)."""

import ast
import dataclasses
import json

import pytest
from paths import ROOT

from topl.launcher.base.errors import ToplError
from topl.launcher.run import backends
from topl.launcher.spec.backend_traits import NAMES

LAUNCHER = ROOT / "launcher"


def test_cluster_backend_choices_are_the_registry():
    from topl.launcher.spec.job import ClusterSpec

    (f,) = [f for f in dataclasses.fields(ClusterSpec) if f.name == "backend"]
    assert tuple(f.metadata["one_of"]) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_each_backend_is_one_module_with_the_interface(name):
    b = backends.get(name)
    assert b.traits.name == name and (LAUNCHER / "run" / "backends" / f"{name}.py").is_file()
    for attr in ("remote", "here", "nodes", "addressed", "allocates"):
        assert isinstance(getattr(b.traits, attr), bool), attr
    for method in ("preflight", "doctor", "start", "detached", "handle", "driver_dir"):
        assert callable(getattr(b, method)), method


def test_an_unknown_backend_is_refused_by_the_spec(compose):
    from topl.launcher.contract import check

    (v,) = check(compose(["cluster.backend=pbs"]))
    assert v.rule == "TOP-SPEC-001" and "local, subprocess, ray_job, slurm" in v.message
    with pytest.raises(ToplError, match="cluster.backend=pbs: no such backend"):
        backends.get("pbs")


def test_no_module_branches_on_the_backend_name():
    """`cluster.backend == "..."` belongs in one place, the backend's module: everywhere else asks
    the backend (remote, here, nodes, detached, ...)."""
    hits = []
    for p in LAUNCHER.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Compare):
                names = [node.left, *node.comparators]
                if any(isinstance(n, ast.Attribute) and n.attr == "backend" for n in names) and any(
                    isinstance(n, ast.Constant) and n.value in NAMES for n in names
                ):
                    hits.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not hits, hits


def test_verls_driver_starts_where_each_backend_says(compose):
    """Where verl's relative checkpoint dir is (`topl launch --resume` pins it there): topl's own
    directory for its child and for sbatch (or the script's --chdir), unknown on a Ray head, none
    where no verl runs."""
    slurm = ["cluster.backend=slurm", "cluster.slurm.partition=debug", "cluster.slurm.time_min=5"]
    cases = {
        ("cluster.backend=subprocess",): "/w",
        (*slurm,): "/w",
        (*slurm, "cluster.slurm.sbatch=['--chdir=sub']"): "/w/sub",
        (*slurm, "cluster.slurm.sbatch=['--chdir=/scratch']"): "/scratch",
        (*slurm, "cluster.slurm.run=embedded"): None,
        ("cluster.backend=ray_job", "cluster.ray_address=http://h:8265"): None,
        ("cluster.backend=local",): None,
    }
    for overrides, where in cases.items():
        spec = compose(list(overrides)).to_object()
        assert backends.of(spec).driver_dir(spec, "/w") == where, overrides


def test_what_each_backend_says_about_itself():
    local, sub, ray = (backends.get(n) for n in ("local", "subprocess", "ray_job"))
    local_t, sub_t, ray_t = local.traits, sub.traits, ray.traits
    assert (local_t.remote, sub_t.remote, ray_t.remote) == (False, True, True)
    assert (sub_t.here, ray_t.here, ray_t.nodes, sub_t.nodes) == (True, False, True, False)
    assert ray.detached(follow=False) and not ray.detached(follow=True)
    assert not sub.detached(follow=False) and not local.detached(follow=False)


def test_the_ray_job_handle_is_the_submitted_job_id(tmp_path):
    ray = backends.get("ray_job")
    assert ray.handle(tmp_path) is None
    (tmp_path / "ray_job_id").write_text("raysubmit_abc\n")
    assert ray.handle(tmp_path) == "raysubmit_abc"


class FakeClient:
    """A Ray head through JobSubmissionClient's methods: the job agent missing for the first
    `busy` submits (as right after `ray start --head`), the job running for `running` polls."""

    busy, running, stopped = 0, 0, []

    def __init__(self, address):
        self.address = address

    def submit_job(self, **job):
        if FakeClient.busy > 0:
            FakeClient.busy -= 1
            raise RuntimeError(
                "Request failed with status code 500: No available agent to submit job"
            )
        FakeClient.job = job
        return "raysubmit_1"

    def get_job_status(self, job_id):
        from ray.job_submission import JobStatus

        if FakeClient.running != 0:
            FakeClient.running -= 1
            return JobStatus.RUNNING
        return JobStatus.SUCCEEDED

    def get_job_logs(self, job_id):
        from topl.launcher.run.backends.ray_doctor import MARK

        return "ray noise\n" + MARK + json.dumps([{"node": "n1 (10.0.0.1)", "findings": []}])

    def stop_job(self, job_id):
        FakeClient.stopped.append(job_id)


@pytest.fixture
def fake_head(monkeypatch):
    rjs = pytest.importorskip("ray.job_submission")
    monkeypatch.setattr(rjs, "JobSubmissionClient", FakeClient)
    FakeClient.busy, FakeClient.running, FakeClient.stopped = 0, 0, []
    return FakeClient


def test_the_per_node_doctor_retries_a_just_started_head(fake_head, compose):
    """Before, the doctor's own client failed at once on the head's first-seconds 500."""
    from topl.launcher.run.backends import ray_doctor

    fake_head.busy = 2
    spec = compose(["cluster.backend=ray_job", "cluster.ray_address=http://h:8265"]).to_object()
    nodes = ray_doctor.on_ray("http://h:8265", spec)
    assert nodes == [{"node": "n1 (10.0.0.1)", "findings": []}] and fake_head.busy == 0
    assert fake_head.job["entrypoint"].endswith(f"-m {ray_doctor.MODULE} --node")


def test_the_per_node_doctor_gives_up_at_its_deadline_and_stops_its_job(
    fake_head, compose, monkeypatch
):
    """Before, a doctor job that never ended polled forever."""
    from topl.launcher.run.backends import ray_doctor

    monkeypatch.setattr(ray_doctor, "JOB_WAIT_S", 0)
    fake_head.running = -1  # never ends
    spec = compose(
        ["cluster.backend=ray_job", "cluster.ray_address=http://h:8265", "cluster.ray_timeout_s=1"]
    ).to_object()
    with pytest.raises(ToplError, match="did not finish in time"):
        ray_doctor.on_ray("http://h:8265", spec)
    assert fake_head.stopped == ["raysubmit_1"]


def test_the_per_node_doctor_says_each_step_of_its_wait(fake_head, compose):
    """`topl doctor --ray` waited up to minutes with nothing on screen (issue 49)."""
    from topl.launcher.run.backends import ray_doctor

    spec = compose(["cluster.backend=ray_job", "cluster.ray_address=http://h:8265"]).to_object()
    steps: list[str] = []
    ray_doctor.on_ray("http://h:8265", spec, steps.append)
    assert [s.split(" ")[0] for s in steps] == ["reaching", "submitting", "waiting", "reading"]
    assert "raysubmit_1" in steps[2]
