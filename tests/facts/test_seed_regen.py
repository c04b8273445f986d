"""`scripts/seed_facts.py --recipes` reproduces the committed seed facts and recipes byte for byte
(regeneration is idempotent): run on the seed's scripts at the commit the facts cite.

Needs a git repository of psyloy/verl-ascend-recipe holding that commit (a checkout or a bare
clone): TOPL_SEED_REPO=/path. Skipped without one (the seed's scripts are not copied into topl).
"""

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from paths import ROOT

FACTS = ROOT / "tests" / "data" / "seed"

pytestmark = pytest.mark.slow  # twelve imports: ~30 s on a shared 2-core machine


def _seed_repo() -> tuple[str, str]:
    commit = yaml.safe_load((FACTS / "qwen3_4b_grpo_on.yaml").read_text())["source"]["commit"]
    repo = os.environ.get("TOPL_SEED_REPO", "")
    if not repo or not Path(repo).exists():
        pytest.skip("TOPL_SEED_REPO (a git repository of psyloy/verl-ascend-recipe) not set")
    has = subprocess.run(
        ["git", "-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True
    )
    if has.returncode:
        pytest.skip(f"TOPL_SEED_REPO={repo} lacks the seed commit {commit[:8]} the facts cite")
    return repo, commit


def _generator():
    spec = importlib.util.spec_from_file_location("seed_facts", ROOT / "scripts" / "seed_facts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_seed_facts_regenerates_the_committed_facts_and_recipes():
    repo, commit = _seed_repo()
    out = _generator().generate(repo, recipes=True, rev=commit)
    assert len(out) == 24  # 12 facts + 12 recipes
    recipes = sorted(p.name for p in (ROOT / "recipes").glob("seed_*.yaml"))
    assert recipes == sorted(p.name for p in out if p.parts[0] == "recipes")
    differ = [str(rel) for rel, text in out.items() if (ROOT / rel).read_text() != text]
    assert not differ, f"regenerating changes {differ}: run scripts/seed_facts.py and review"
