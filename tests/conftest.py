import os
import signal
import socket
import subprocess
import time

import pytest

from topl.launcher.compose import compose_job


@pytest.fixture
def compose():
    return compose_job


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    pytest.importorskip("ray")
    from ray.job_submission import JobSubmissionClient

    port, gcs = _free_port(), _free_port()
    tmp = tmp_path_factory.mktemp("ray")
    head = subprocess.Popen(
        [
            "ray",
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
        # a token in ~/.ray/auth_token turns token auth on when RAY_AUTH_MODE is unset
        # (ray@2.60.0:python/ray/_private/authentication/authentication_token_setup.py), and the
        # loopback test clients carry none: the head then never answers them
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    address = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            JobSubmissionClient(address).list_jobs()
            break
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(1)
    else:
        os.killpg(head.pid, signal.SIGTERM)
        pytest.skip("local Ray head did not come up")
    yield address
    os.killpg(head.pid, signal.SIGTERM)
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
