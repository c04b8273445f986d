"""Secrets never land in files or output: redaction by name, by value and by shape; owner-only files."""

import importlib.util
import json
import stat
import sys

import pytest
from helpers import run_topl

from topl.launcher.base.redact import REDACTED, Redactor, secret_name

SECRETS = {
    "MY_API_KEY": "s3cret-api-key-1",
    "MYSQL_PWD": "hunter2-pwd",
    "GITHUB_PAT": "ghpat-value-77",
    "HF_TOKEN": "hf_" + "a" * 34,
}
DB_URL = "postgres://alice:db-pass-42@db.example:5432/x"


@pytest.mark.parametrize(
    "name,secret",
    [
        ("MY_API_KEY", True),
        ("MYSQL_PWD", True),
        ("GITHUB_PAT", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("PGPASSWORD", True),
        ("WANDB_API_KEY", True),
        ("HF_TOKEN", True),
        ("SMTP_PASS", True),
        ("PATH", False),
        ("PWD", False),
        ("OLDPWD", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("DATABASE_URL", False),
        ("HCCL_DETERMINISTIC", False),
        ("PYTHONPATH", False),
    ],
)
def test_secret_names(name, secret):
    assert secret_name(name) is secret


@pytest.mark.parametrize(
    "text,gone",
    [
        (f"DATABASE_URL={DB_URL}", "db-pass-42"),
        ("key AKIAABCDEFGHIJKLMNOP here", "AKIAABCDEFGHIJKLMNOP"),
        ("tok ghp_" + "x" * 36, "ghp_" + "x" * 36),
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "MIIE"),
        ("+ray_kwargs.ray_init.runtime_env.env_vars.MYSQL_PWD=abc12", "abc12"),
        ('{"GITHUB_PAT": "short1"}', "short1"),
        ("export MY_API_KEY='a b c'", "a b c"),
        ("MY_API_KEY: 'q w e'", "q w e"),
    ],
)
def test_credential_shapes_are_redacted_without_knowing_the_value(text, gone):
    out = Redactor().text(text)
    assert gone not in out and REDACTED in out


def test_redacted_json_stays_json():
    text = json.dumps({"env": {"GITHUB_PAT": "short1", "X": "postgres://u:pw-123456@h/db"}})
    assert json.loads(Redactor().text(text)) == {
        "env": {"GITHUB_PAT": REDACTED, "X": f"postgres://u:{REDACTED}@h/db"}
    }


def test_known_values_are_redacted_everywhere_and_plain_keys_are_kept():
    r = Redactor()
    r.remember({"MY_API_KEY": "s3cret-api-key-1", "USE_KEY": "1", "PATH": "/usr/bin"})
    out = r.text("project=s3cret-api-key-1 ppo_max_token_len_per_gpu=16384 path=/usr/bin n=1")
    assert out == f"project={REDACTED} ppo_max_token_len_per_gpu=16384 path=/usr/bin n=1"
    assert r.obj({"a": ["x s3cret-api-key-1"], "HF_TOKEN": "t"}) == {
        "a": [f"x {REDACTED}"],
        "HF_TOKEN": REDACTED,
    }


def _leaks(text: str) -> list[str]:
    return [s for s in [*SECRETS.values(), "db-pass-42"] if s in text]


def test_no_secret_in_run_dir_stdout_or_render(tmp_path):
    env = {**SECRETS, "DATABASE_URL": DB_URL}
    forwarded = [
        "+cluster.env.MY_API_KEY=${oc.env:MY_API_KEY}",
        "+cluster.env.EXTRA_TOKEN=typed-token-99",
    ]
    secrets = [*SECRETS.values(), "db-pass-42", "typed-token-99"]
    # a secret copied into a value that goes on verl's argv (trainer.project_name) is refused
    r = run_topl("check", *forwarded, "project=${oc.env:MYSQL_PWD}", cwd=tmp_path, env=env)
    assert r.returncode == 2 and "command line" in r.stderr and "hunter2" not in r.stderr
    r = run_topl("launch", "--dry-run", *forwarded, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    for rr in (
        r,
        run_topl("render", *forwarded, cwd=tmp_path, env=env),
        run_topl("render", "--json", *forwarded, cwd=tmp_path, env=env),
    ):
        assert rr.returncode == 0 and not [s for s in secrets if s in rr.stdout + rr.stderr], (
            rr.stdout
        )
    assert json.loads(rr.stdout)["env"]["EXTRA_TOKEN"] == REDACTED  # --json stays JSON
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir()]
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {
        "spec.yaml",
        "command.sh",
        "env.json",
        "topl.json",
        "config.yaml",
        "overrides.yaml",
    } <= {p.name for p in files}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        assert not [s for s in secrets if s in p.read_text()], p
    env_json = json.loads((run_dir / "env.json").read_text())
    assert (
        env_json["rendered"]["MY_API_KEY"] == REDACTED
        and env_json["launching_process"]["MYSQL_PWD"] == REDACTED
    )


def test_secrets_still_reach_the_job(tmp_path):
    """Redaction is for what topl writes and prints; the job's environment keeps the real value."""
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.run.backends.subprocess import child_env

    inv = Invocation("x", "ppo_trainer", [], {"MY_API_KEY": "s3cret-api-key-1"})
    assert child_env(inv, tmp_path)["MY_API_KEY"] == "s3cret-api-key-1"


# A stand-in for verl's entrypoint: records its argv and environment in a file of its own (the
# proof must not pass through topl's redaction); with FAKE_RAY it starts Ray as verl does
# (verl@0.9.1:verl/trainer/main_ppo.py:run_ppo: ray.init with the command's
# ray_kwargs.ray_init.runtime_env) and asks a Ray worker what it sees.
FAKE_VERL = """
import json, os, sys
names = os.environ["FAKE_NAMES"].split(":")
out = {"argv": sys.argv, "driver": {n: os.environ.get(n) for n in names}}
if os.environ.get("FAKE_RAY"):
    import ray
    P = "+ray_kwargs.ray_init.runtime_env.env_vars."
    env_vars = {}
    for a in sys.argv[1:]:
        if a.startswith(P):
            k, v = a[len(P):].split("=", 1)
            env_vars[k] = v[1:-1] if v[:1] == '"' else v
    joined = bool(os.environ.get("RAY_ADDRESS"))  # a Ray job's driver joins the job's cluster
    extra = {} if joined else {"address": "local", "num_cpus": 1, "include_dashboard": False}
    ray.init(runtime_env={"env_vars": env_vars}, **extra)

    @ray.remote(num_cpus=0)
    def probe():
        return {n: os.environ.get(n) for n in names}

    out["worker"] = ray.get(probe.remote())
    ray.shutdown()
with open(os.environ["FAKE_OUT"], "w") as f:
    json.dump(out, f)
"""
TYPED = "typed-token-99"


def _launch_with_secrets(tmp_path, *extra, env=None):
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fake_verl.py").write_text(FAKE_VERL)
    out = tmp_path / "fake_out.json"
    r = run_topl(
        "launch",
        "algorithm.entrypoint=fake_verl",
        f"cluster.python={sys.executable}",
        "collective=hccl_strict",
        f"+cluster.env.PYTHONPATH={pkg}",
        f"+cluster.env.FAKE_OUT={out}",
        "+cluster.env.FAKE_NAMES=MY_API_KEY:EXTRA_TOKEN:DATABASE_URL:HCCL_DETERMINISTIC",
        "+cluster.env.MY_API_KEY=${oc.env:MY_API_KEY}",
        f"+cluster.env.EXTRA_TOKEN={TYPED}",
        f"+cluster.env.DATABASE_URL={DB_URL}",
        *extra,
        cwd=tmp_path,
        env={**SECRETS, **(env or {})},
        timeout=400,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r, json.loads(out.read_text())


def _assert_nothing_leaked(tmp_path, r, seen):
    secrets = [*SECRETS.values(), "db-pass-42", TYPED]
    want = {
        "MY_API_KEY": SECRETS["MY_API_KEY"],
        "EXTRA_TOKEN": TYPED,
        "DATABASE_URL": DB_URL,
        "HCCL_DETERMINISTIC": "strict",
    }
    argv = " ".join(seen["argv"])  # what `ps` shows of the child
    assert not [s for s in secrets if s in argv], argv
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.HCCL_DETERMINISTIC=strict" in argv
    assert not [n for n in ("MY_API_KEY", "EXTRA_TOKEN", "DATABASE_URL") if f".{n}=" in argv]
    assert seen["driver"] == want  # ... and the job still has every value
    if "worker" in seen:
        assert seen["worker"] == want
    assert not [s for s in secrets if s in r.stdout + r.stderr]
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    names = set()
    for p in run_dir.rglob("*"):
        if p.is_file():
            names.add(p.relative_to(run_dir).as_posix())
            assert not [s for s in secrets if s in p.read_text(errors="replace")], p
    assert {"command.sh", "status.json", ".hydra/overrides.yaml", "verl.log"} <= names
    assert "MY_API_KEY=${MY_API_KEY:?" in (run_dir / "command.sh").read_text()  # by name


@pytest.fixture(scope="module")
def subprocess_launch(tmp_path_factory):
    """One launch on the subprocess backend for both tests below (a launch costs ~9 s, most of it
    the doctor's `import verl` child): its child records argv and env and, where Ray is
    installed, starts its own Ray as verl does and asks a worker too. The child's own proof
    never needed a second launch without Ray: the same argv, env and files are asserted on it."""
    tmp_path = tmp_path_factory.mktemp("subprocess-launch")
    ray = importlib.util.find_spec("ray") is not None
    env = {"FAKE_RAY": "1", "RAY_ADDRESS": ""} if ray else {}
    r, seen = _launch_with_secrets(tmp_path, "cluster.backend=subprocess", env=env)
    return tmp_path, r, seen


def test_subprocess_child_gets_secrets_by_environment_not_argv(subprocess_launch):
    _assert_nothing_leaked(*subprocess_launch)


def test_subprocess_ray_workers_inherit_the_secrets(subprocess_launch):
    """The Ray that verl's ray.init() starts from the child gives its workers the child's env."""
    tmp_path, r, seen = subprocess_launch
    if "worker" not in seen:
        pytest.skip("ray is not installed")
    _assert_nothing_leaked(tmp_path, r, seen)  # the worker's env included


def test_ray_job_workers_get_the_secrets_through_the_job_runtime_env(tmp_path, ray_head):
    """Also the driver's ray.init(runtime_env=...) repeating the job's env vars is accepted
    (RAY_OVERRIDE_JOB_RUNTIME_ENV); without it Ray refuses the merge and the job fails."""
    r, seen = _launch_with_secrets(
        tmp_path,
        "cluster.backend=ray_job",
        f"cluster.ray_address={ray_head}",
        "--follow",
        "+cluster.env.FAKE_RAY=1",
        "--skip-doctor",  # the per-node doctor runs the Ray workers' topl, not this checkout's
    )
    _assert_nothing_leaked(tmp_path, r, seen)


def test_subprocess_warns_when_verl_would_join_a_cluster_that_lacks_the_secret(capsys):
    from topl.launcher.render.invocation import Invocation
    from topl.launcher.run.backends.subprocess import warn_unreachable_secrets

    inv = Invocation("x", "ppo_trainer", [], {"MY_API_KEY": "s3cret-api-key-1", "N": "1"})
    warn_unreachable_secrets(inv, {"RAY_ADDRESS": "10.0.0.1:6379"})
    assert "MY_API_KEY" in capsys.readouterr().err
    warn_unreachable_secrets(inv, {})  # verl starts its own Ray: the workers inherit it
    warn_unreachable_secrets(Invocation("x", "c", [], {"N": "1"}), {"RAY_ADDRESS": "h:1"})
    assert capsys.readouterr().err == ""
