"""Import rough edges (issue 49, item 8): a secret the script exports (WANDB_API_KEY) becomes
`${oc.env:NAME}` and no longer blocks the verdict, `check`, `render` or `recipes diff` until
exported (launch still refuses); an existing `-o` file is refused before the import runs; the
importer's own output does not replace what topl renders from a field (TOP-VERL-003)."""

import json

from helpers import run_topl_inproc as run
from paths import TESTS

CORPUS = TESTS / "data" / "scripts" / "verl"
GSM8K = CORPUS / "grpo_trainer__run_qwen3_4b_grpo_vllm_1k_npu.sh"  # accepted by the contract
SECRET = "abc123secretvalue"


def test_an_unset_secret_blocks_nothing_but_the_launch(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    script = tmp_path / "w.sh"
    script.write_text(f"export WANDB_API_KEY={SECRET}\n" + GSM8K.read_text())
    r = run("recipes", "import", str(script), "-o", "w.yaml", cwd=tmp_path)
    recipe = tmp_path / "w.yaml"
    assert "WANDB_API_KEY: ${oc.env:WANDB_API_KEY}" in recipe.read_text()
    last = r.stdout.strip().splitlines()[-1]
    assert "contract: accepted; export WANDB_API_KEY before `topl launch`" in last, last
    c = run("check", f"recipe={recipe}")
    assert c.returncode == 0 and "export WANDB_API_KEY before `topl launch`" in c.stdout
    j = run("check", f"recipe={recipe}", "--json")
    assert json.loads(j.stdout)["ok"] is True
    shown = run("render", f"recipe={recipe}")
    assert shown.returncode == 0
    assert "WANDB_API_KEY=${WANDB_API_KEY:?is a secret: export it first}" in shown.stdout
    d = run("recipes", "diff", str(script), str(recipe))
    assert d.returncode == 0 and "0 key(s) differ" in d.stdout, d.stdout + d.stderr
    everything = r.stdout + c.stdout + shown.stdout + d.stdout + recipe.read_text()
    assert SECRET not in everything
    launch = run("launch", f"recipe={recipe}", "--dry-run")  # what runs needs the value
    assert launch.returncode == 2 and "export WANDB_API_KEY" in launch.stderr


def test_an_unset_variable_that_is_not_a_secret_still_says_export(tmp_path, monkeypatch):
    monkeypatch.delenv("MY_DATA_ROOT", raising=False)
    f = tmp_path / "r.yaml"
    f.write_text(
        "# @package _global_\ncluster:\n  env:\n    MY_DATA_ROOT: ${oc.env:MY_DATA_ROOT}\n"
    )
    r = run("check", f"recipe={f}")
    assert r.returncode == 2 and "MY_DATA_ROOT is not set here" in r.stderr


def test_an_existing_output_is_refused_before_the_import_runs(tmp_path):
    (tmp_path / "out.yaml").write_text("mine\n")
    r = run("recipes", "import", str(tmp_path / "no_such.sh"), "-o", "out.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "out.yaml exists: not overwritten" in r.stderr, r.stderr
    assert "does not exist" not in r.stderr  # refused first: the import did not run
    assert (tmp_path / "out.yaml").read_text() == "mine\n"


def test_the_importers_output_keeps_topls_fields_rendering(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # the scripts' $HOME/verl/data/...
    r = run("recipes", "import", str(GSM8K), "-o", "g.yaml", cwd=tmp_path)
    text = (tmp_path / "g.yaml").read_text()
    assert "data_dir: $HOME/verl/data/gsm8k" in text and "data.train_files" not in text
    assert "contract: accepted" in r.stdout
    d = run("recipes", "diff", str(GSM8K), str(tmp_path / "g.yaml"))
    assert "0 key(s) differ" in d.stdout  # the same data files reach verl
    vs = json.loads(run("check", f"recipe={tmp_path / 'g.yaml'}", "--json").stdout)["violations"]
    # the ref's micro-batch the script leaves to verl (null) is unused under its dynamic batching
    assert not [v for v in vs if v["rule"] == "TOP-VERL-003"], vs
    eight = CORPUS / "grpo_trainer__run_qwen3-8b_npu.sh"  # sets ref.log_prob_micro_batch_size=32
    r = run("recipes", "import", str(eight), "-o", "e.yaml", cwd=tmp_path)
    vs = json.loads(run("check", f"recipe={tmp_path / 'e.yaml'}", "--json").stdout)["violations"]
    # nor its data files outside DIR/train.parquet (on train_files / val_files), nor verl's
    # enforce_eager=false left to verl (on rollout.graph_mode, as verl's cudagraph default)
    assert not [v for v in vs if v["rule"] == "TOP-VERL-003"], vs
    text = (tmp_path / "e.yaml").read_text()
    assert "log_prob_micro_batch_size_per_gpu: 32" in text
    assert "graph_mode: full_and_piecewise" in text and "enforce_eager" not in text, text
    assert "train_files:\n- $HOME/verl/data/dapo-math-17k.parquet" in text, text
    assert "round trip: exact" in r.stdout, r.stdout
    ppo = CORPUS / "ppo_trainer__run_qwen3-8b_npu.sh"  # enforce_eager=False written out
    run("recipes", "import", str(ppo), "-o", "p.yaml", cwd=tmp_path)
    vs = json.loads(run("check", f"recipe={tmp_path / 'p.yaml'}", "--json").stdout)["violations"]
    assert not [v for v in vs if v["rule"] == "TOP-VERL-003"], vs
    assert "graph_mode: full_and_piecewise" in (tmp_path / "p.yaml").read_text()


def test_a_graph_mode_renders_what_verl_runs_for_enforce_eager_false():
    """graph_mode=full_and_piecewise renders enforce_eager=false plus the cudagraph mode verl
    itself sets when the script gives none (verl@0.9.1:verl/workers/rollout/vllm_rollout/
    vllm_async_server.py: compilation_config.setdefault): what the importer relies on."""
    from topl.launcher.compose.hydra import compose_job
    from topl.launcher.render.invocation import overrides

    pairs = dict(overrides(compose_job(["rollout.graph_mode=full_and_piecewise"]).to_object()))
    assert pairs["actor_rollout_ref.rollout.enforce_eager"] is False
    cc = pairs["actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config"]
    assert json.loads(cc) == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
