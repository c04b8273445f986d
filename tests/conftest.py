import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

# One torch (OpenMP) thread per test process unless OMP_NUM_THREADS says otherwise; torch reads it
# when it starts, children inherit it, and the local backend's default thread count reads it
# (launcher/run/backends/local.py:threads_for). The reference engines' tiny models gain nothing
# from more threads, and with two xdist workers on CI's two cores each worker's OpenMP threads
# spin at their barriers while the other worker computes: a 16-request probe took 17.7 s next to a
# second one, 1.1 s with one thread each. Tests about thread counts set theirs (local.threads).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# setuptools before anything imports pip in a worker (launcher/facts/sources.py reads pip's
# default index): pip's import turns setuptools' distutils shim off, and a setuptools imported
# after it (torch.utils.cpp_extension, from megatron-core in tests/align) then fails its own
# distutils assertion; which modules share a worker decides whether it shows.
import setuptools  # noqa: F401

from topl.launcher.compose.hydra import compose_job

# Test modules share fixtures and case tables by module name across stage folders (tests/plan's
# fix search reads tests/contract's cases): every stage folder is importable, whatever pytest
# collects first.
sys.path[:0] = sorted(
    p.path for p in os.scandir(os.path.dirname(__file__)) if p.is_dir() and p.name[0] not in "._"
)

# The slow tier (`-m slow`): what needs a fresh venv or a wheel build, a real Ray head, real
# training runs of the reference engines, or an end-to-end launch. `pytest` (the developer loop)
# leaves it out through pyproject's addopts; CI and the README's command (`pytest -m "not matrix"`)
# run it too. Tests on the `ray_head` fixture and the `facts_sources` test are slow without
# being listed.
SLOW_MODULES = {
    "test_packaging.py",  # builds the wheel, installs it into fresh venvs
    "test_launch_sweeps.py",  # `topl launch -m` end to end, launchers in other processes
    "test_local_algorithms.py",  # real reference-engine training runs per algorithm
    # real gloo (or NCCL) ranks in spawned processes against the emulation; the emulated
    # reductions they are compared with are unit-tested in one process (test_tp_pairs.py,
    # test_kernels_alignment.py)
    "test_collectives.py",
    # the dry run: one child per declared verl that imports it (~3-5 s of CPU each), over every
    # shipped recipe, the negative classes and a bounded hypothesis property (issue 46)
    "test_dryrun_verl.py",
    # the GPU kernels compiled for sm_90 on the CPU (~30 s cold; Triton's cache makes reruns fast)
    "test_gpu_compile.py",
}
SLOW_TESTS = {
    # a 16-request probe engine run (~20 s); the four one-request matrix points stay fast
    "test_numerics.py": {"test_matrix_quick_batch16"},
    # two real gloo ranks in spawned processes; the same tree in one process stays fast
    "test_tp_pairs.py": {"test_real_gloo_ranks_all_gather_where_their_block_is_not_a_subtree"},
    # real reference-engine training runs
    "test_local_job.py": {
        "test_strict_grpo_is_exactly_on_policy_and_learns",
        "test_off_reports_nonzero_diffs_and_continues",
        "test_strict_stops_on_the_first_nonzero_logdiff",
        "test_cli_launch_default_short",
    },
    # a child that imports verl and mlflow and writes a real MLflow store (~15 s)
    "test_identity.py": {"test_a_real_mlflow_store_written_by_verls_tracking_shows_the_run"},
    # every shipped recipe composed through the cache twice (~25 s)
    "test_compose_cache.py": {"test_every_shipped_recipe_hits_with_the_same_verdicts_and_command"},
    "test_front_door.py": {
        "test_local_job_metrics_identical_at_1_and_2_threads",
        "test_the_main_job_ends_with_what_to_try_next",  # the main job, end to end
    },
    # a real Ray (ray.init) or a child that imports verl (torch, ray, transformers: ~5 s each):
    # the guard, the alignment loader and the doctor's interpreter probes where they are the subject
    "test_guard.py": {
        "test_guard_in_ray_workers_records_each_process_and_refuses_a_missing_env_var",
        "test_guard_in_a_driver_records_and_refuses",
        "test_guard_without_manifest_never_breaks_a_job",
    },
    "test_align_load.py": {"test_import_verl_with_the_module_names_the_align_error"},
    "test_secrets.py": {
        "test_subprocess_ray_workers_inherit_the_secrets",
        "test_subprocess_child_gets_secrets_by_environment_not_argv",
    },
    "test_doctor.py": {
        "test_verl_import_is_checked_with_the_python_the_subprocess_backend_runs",
        "test_launch_refuses_on_doctor_error_unless_skipped",  # an end-to-end launch
    },
    # end-to-end launches on the subprocess / local backends, and a probe run through the CLI
    "test_launch.py": {
        "test_ctrl_c_stops_the_child_process_group",
        "test_subprocess_backend_streams_logs_env_and_exit_code",
    },
    "test_watch.py": {
        "test_launch_watch_shows_the_divergence_live_on_the_local_backend",
        "test_watch_once_json_on_a_finished_local_run",
        "test_watch_stops_a_job_on_the_first_nonzero_logdiff_from_verls_file_logger",
    },
    "test_diagnose.py": {"test_cli_probe_dump_then_diagnose"},
    # verl's compose + validate_config over many recipes at once (tests/compose/test_recipes.py does
    # each shipped recipe on its declared verl in the fast tier)
    "test_accepted_runs.py": {
        "test_stock_stack_strict_recipes_are_accepted_and_run_on_verl_091",
        "test_release_recipes_with_grad_offload_compose_on_verl_091",
    },
}


# pytest-xdist (`-n 2 --dist loadgroup`, the README's command): a module runs on one worker (its
# module fixtures are built once), every test on the session's Ray head on one worker (one head),
# and the tests of these modules, each long and independent, spread over the workers.
SPREAD_MODULES = {
    "test_fix.py",
    "test_accepted_runs.py",
    "test_local_algorithms.py",
    "test_startup_cases.py",  # 171 independent `check` calls, no shared fixture
}
# Handed out first (xdist otherwise orders the groups by their number of tests, which put these
# two past the middle): the real Slurm (~80 s, mostly waiting on its daemons and jobs, which
# the other worker's CPU work overlaps) and the dry run (the longest group, ~100 s of CPU), so
# neither is the run's tail. The rest keep xdist's order.
FIRST_GROUPS = ("test_slurm_real.py", "test_dryrun_verl.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the order below is the queue's order


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        name = item.path.name
        on_ray = "ray_head" in getattr(item, "fixturenames", ())
        if (
            name in SLOW_MODULES
            or getattr(item, "originalname", item.name) in SLOW_TESTS.get(name, ())
            or on_ray
            or item.get_closest_marker("facts_sources")
        ):
            item.add_marker(pytest.mark.slow)
        if xdist and not item.get_closest_marker("xdist_group"):
            if on_ray:
                item.add_marker(pytest.mark.xdist_group("ray_head"))
            elif name not in SPREAD_MODULES:
                item.add_marker(pytest.mark.xdist_group(name))
    if xdist and hasattr(config, "workerinput"):  # a worker: its order is the scheduler's queue
        items[:] = _queue_order(items)


def pytest_xdist_node_collection_finished(node, ids):
    """A pytest / pytest-xdist pair where loadgroup does not group (pyproject's pin says which)
    spreads every group's tests over the workers: shared fixtures (the Ray head, the test Slurm,
    verl children) built on each, and tests that read another's results failing by chance. The
    controller sees the node ids a worker collected: each test outside SPREAD_MODULES was given a
    group above, which xdist writes into its id as `@group`."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    lost = [
        i for i in ids if "@" not in i and i.split("::")[0].split("/")[-1] not in SPREAD_MODULES
    ]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup does not group on pytest {pytest.__version__} "
            f"({lost[0]} has no @group): install pytest<9.2 (pyproject's `test` extra)"
        )


def _queue_order(items):
    """xdist's order of the groups (most tests first, loadscope-reorder's rule), FIRST_GROUPS ahead
    of all; a group's tests keep their order. Every worker sorts the same collection the same."""
    groups: dict[str, list] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        groups.setdefault(mark.args[0] if mark else item.nodeid, []).append(item)
    first = {g: i for i, g in enumerate(FIRST_GROUPS)}
    order = sorted(groups, key=lambda g: (first.get(g, len(first)), -len(groups[g])))
    return [item for g in order for item in groups[g]]


HYPOTHESIS_EXAMPLES = {"ci": 150, "dev": 30}


def _hypothesis_profiles():
    """`ci` (CI=true, .ci/run): the full fixed budget; `dev` (the default elsewhere): a smaller
    one, the same properties. HYPOTHESIS_PROFILE picks either."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        return
    common = dict(deadline=None, derandomize=True, database=None)
    settings.register_profile(
        "ci",
        max_examples=HYPOTHESIS_EXAMPLES["ci"],
        suppress_health_check=list(HealthCheck),
        **common,
    )
    settings.register_profile(
        "dev",
        max_examples=HYPOTHESIS_EXAMPLES["dev"],
        suppress_health_check=list(HealthCheck),
        **common,
    )
    default = "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"
    name = os.environ.get("HYPOTHESIS_PROFILE", default)
    settings.load_profile(name)
    return name


HYPOTHESIS_PROFILE = _hypothesis_profiles()


# `check` / `render` keep composed jobs (launcher/compose/cache.py): each test (children
# included) gets a folder of its own, never the user's ~/.cache/topl, and no test answers from an
# entry another test composed under its own monkeypatches.
_CACHE_FALLBACK = tempfile.mkdtemp(prefix="topl-test-cache-")  # for work outside a test
atexit.register(shutil.rmtree, _CACHE_FALLBACK, True)
os.environ.setdefault("TOPL_CACHE_DIR", _CACHE_FALLBACK)


@pytest.fixture(autouse=True)
def _own_compose_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TOPL_CACHE_DIR", str(tmp_path_factory.mktemp("compose-cache")))


@pytest.fixture
def verl_imports_here(monkeypatch):
    """In this process, the doctor's verl-import check (TOP-DOC-VERL-004) answers "imports"
    without its child: a child that imports the installed verl (torch, ray, transformers) costs
    ~5 s and is not what the tests using this are about (the verl-import tests of
    test_doctor.py and test_front_door.py run it)."""
    from topl.launcher.doctor import stack_checks as doctor_checks

    real = doctor_checks.import_error
    monkeypatch.setattr(
        doctor_checks,
        "import_error",
        lambda module, *a, **k: None if module == "verl" else real(module, *a, **k),
    )


@pytest.fixture
def compose():
    return compose_job


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="session")
def ray_head():
    """One local Ray head for the whole session (each start costs tens of seconds)."""
    pytest.importorskip("ray")
    from ray.job_submission import JobSubmissionClient

    port, gcs = _free_port(), _free_port()
    # a short folder: Ray's AF_UNIX sockets live under it (107 bytes at most), and pytest's
    # per-worker tmp paths under xdist were long enough that the dashboard never started
    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    head = subprocess.Popen(
        [
            # this interpreter's Ray (not whichever `ray` PATH finds): the head's workers then run
            # the Python, and the topl, under test
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={port}",
            # the job agent's fixed default (52365) collides with any other head on the machine
            f"--dashboard-agent-listen-port={_free_port()}",
            "--num-cpus=1",
            "--include-dashboard=true",
            f"--temp-dir={tmp}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        # the head's folder, not the checkout: a Ray job's driver starts where the head did (no
        # working_dir: ray@2.60.0:python/ray/dashboard/modules/job/job_supervisor.py:
        # JobSupervisor._exec_entrypoint passes no cwd), and verl's relative paths land there
        cwd=tmp,
        # a token in ~/.ray/auth_token turns token auth on when RAY_AUTH_MODE is unset
        # (ray@2.60.0:python/ray/_private/authentication/authentication_token_setup.py), and the
        # loopback test clients carry none: the head then never answers them
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    address = f"http://127.0.0.1:{port}"
    deadline = time.time() + float(os.environ.get("TOPL_RAY_HEAD_WAIT_S", 300))  # a busy machine
    last = None
    while time.time() < deadline and head.poll() is None:
        try:
            JobSubmissionClient(address).list_jobs()
            break
        except Exception as e:  # noqa: BLE001 - not up yet
            last = e
            time.sleep(1)
    else:
        os.killpg(head.pid, signal.SIGTERM)
        shutil.rmtree(tmp, ignore_errors=True)
        why = f"local Ray head did not come up (exit {head.poll()}): {last!r}"[:500]
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)  # CI must not pass by skipping every test on a real head
        pytest.skip(why)
    yield address
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=5)  # `ray start --block` can sit on SIGTERM for half a minute
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
    shutil.rmtree(tmp, ignore_errors=True)
