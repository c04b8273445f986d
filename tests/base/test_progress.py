"""Silent waits (issue 49, item 6): a long step says what it is doing on stderr, a rich status
line on a terminal and one line per phase otherwise; stdout stays the answer (`--json` too)."""

import io
import json

import pytest
from helpers import run_topl_inproc as run

from topl.launcher.base.console import Progress


def test_a_pipe_gets_one_line_per_phase_and_no_details():
    out = io.StringIO()
    with Progress("topl x", out) as p:
        p.phase("reaching the head")
        p.detail("one of many checks")  # a terminal's status line only
        p.phase("waiting for the job")
    assert out.getvalue() == "topl x: reaching the head\ntopl x: waiting for the job\n"


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_status_line_updated_in_place():
    out = Tty()
    with Progress("topl x", out) as p:
        assert p.status is not None  # rich's status (a spinner), not printed lines
        p.phase("reaching the head")
        p.detail("checking torch")
    assert p.phases == ["reaching the head"]
    assert "topl x: reaching the head\n" not in out.getvalue()


def test_doctor_says_what_it_checks_on_stderr_and_json_stays_json():
    r = run("doctor", "--json")
    json.loads(r.stdout)  # nothing but the report on stdout
    assert "topl doctor: checking this machine" in r.stderr


def test_a_remote_launch_says_it_is_reaching_the_head_before_it_waits(compose):
    from topl.launcher.base.errors import ToplError
    from topl.launcher.run.launch import preflight

    spec = compose(
        [
            "cluster.backend=ray_job",
            "cluster.ray_address=http://127.0.0.1:9",
            "cluster.ray_timeout_s=1",
        ]
    ).to_object()
    said = []
    with pytest.raises(ToplError):  # nothing answers there
        preflight(spec, lambda event, **data: said.append((event, data)))
    assert said[0] == ("phase", {"text": "reaching the Ray head at http://127.0.0.1:9 (up to 1 s)"})
