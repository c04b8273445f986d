"""The compose cache (launcher/compose/cache.py): a hit answers what a fresh Hydra compose answers,
every input that decides a compose invalidates it, and a hit imports no Hydra.

What the compared paths share: the hit path builds the JobSpec from the entry's resolved JSON
(composed.py `_build`; OmegaConf.merge into the JobSpec schema where the config reads the
environment) and re-runs the environment/code checks; the miss path is Hydra's compose. Both then
go through the same contract and renderer."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from topl.launcher.base.errors import ToplError
from topl.launcher.compose import cache as compose_cache
from topl.launcher.compose import recipes
from topl.launcher.compose.hydra import compose_job
from topl.launcher.compose.meaning import settings
from topl.launcher.contract import check
from topl.launcher.render.invocation import render


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TOPL_CACHE_DIR", str(d))
    monkeypatch.delenv("TOPL_COMPOSE_CACHE", raising=False)
    return d / "compose"


def entries(cache):
    return sorted(cache.glob("*.json")) if cache.exists() else []


def hit(overrides):
    """Compose twice through the cache; the second must be a hit (no new entry, the same file)."""
    first = compose_cache.compose_cached(overrides)
    key = compose_cache.cache_dir() / f"{compose_cache._key(overrides)}.json"
    written = key.stat().st_mtime_ns
    second = compose_cache.compose_cached(overrides)
    assert key.stat().st_mtime_ns == written  # read, not written again
    return first, second


def same(a, b):
    # repr, not ==: an int where OmegaConf gives a float (1 == 1.0) would pass an equality
    assert repr(a.to_object()) == repr(b.to_object()) and a.to_object() == b.to_object()
    assert settings(a) == settings(b)  # check's notes: containers as written, leaves resolved
    assert (a.sources, a.choices, a.recipe, a.overrides) == (
        b.sources,
        b.choices,
        b.recipe,
        b.overrides,
    )
    va, vb = check(a), check(b)
    assert [v.to_dict() for v in va] == [v.to_dict() for v in vb]
    sa, sb = a.to_object(), b.to_object()
    if not [v for v in va if v.severity == "error"]:
        assert render(sa).to_dict(sa.cluster.python) == render(sb).to_dict(sb.cluster.python)
    assert OmegaConf.to_yaml(a.cfg) == OmegaConf.to_yaml(b.cfg)  # a hit's, built when asked for


def _cases(every: bool):
    names = sorted(recipes.available())
    names = names if every else [n for n in names if "30b" in n][:1] + names[:1]
    container_as_interpolation = [
        "cluster.env=${verl_overrides}",
        "+verl_overrides.LD_PRELOAD=${project}",
    ]
    return [[], ["train.tp=2", "rollout.max_num_seqs=64"], container_as_interpolation] + [
        [f"recipe={n}"] for n in names
    ]


@pytest.mark.parametrize("overrides", _cases(False), ids=str)
def test_a_hit_answers_what_hydra_answers(cache, overrides):
    fresh = compose_job(overrides)
    compose_cache.compose_cached(overrides)
    assert len(entries(cache)) == 1
    kept = compose_cache.compose_cached(overrides)
    assert len(entries(cache)) == 1
    same(fresh, kept)


def test_every_shipped_recipe_hits_with_the_same_verdicts_and_command(cache):
    for overrides in _cases(True):
        same(*hit(overrides))  # the first is Hydra's compose (a miss), the second the entry
    assert len(entries(cache)) == min(len(_cases(True)), compose_cache.MAX_ENTRIES)


def test_an_edited_or_shadowed_recipe_or_an_edited_include_misses(cache, tmp_path, monkeypatch):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    d1.mkdir()
    d2.mkdir()
    head = "# @package _global_\n"
    (d2 / "mine.yaml").write_text(head + "defaults:\n  - base_mine\ntrain:\n  tp: 2\n")
    (d2 / "base_mine.yaml").write_text(head + "rollout:\n  max_num_seqs: 64\n")
    monkeypatch.setenv("TOPL_RECIPE_PATH", f"{d1}{os.pathsep}{d2}")
    a, b = hit(["recipe=mine"])
    assert (b.cfg.train.tp, b.cfg.rollout.max_num_seqs) == (2, 64)
    (d2 / "base_mine.yaml").write_text(head + "rollout:\n  max_num_seqs: 32\n")  # an include
    assert compose_cache.compose_cached(["recipe=mine"]).cfg.rollout.max_num_seqs == 32
    (d2 / "mine.yaml").write_text(head + "defaults:\n  - base_mine\ntrain:\n  tp: 4\n")
    assert compose_cache.compose_cached(["recipe=mine"]).cfg.train.tp == 4
    (d1 / "mine.yaml").write_text(head + "train:\n  tp: 8\n")  # d1 comes first: shadows d2's
    got = compose_cache.compose_cached(["recipe=mine"])
    assert got.cfg.train.tp == 8 and got.recipe == str(d1 / "mine.yaml")
    same(compose_job(["recipe=mine"]), got)


def test_a_changed_conf_file_changes_the_key(cache):
    conf = Path(compose_cache.__file__).resolve().parents[2] / "conf" / "config.yaml"
    before = compose_cache._key([])
    st = conf.stat()
    try:
        os.utime(conf, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        assert compose_cache._key([]) != before
    finally:
        os.utime(conf, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert compose_cache._key([]) == before
    assert compose_cache._key(["train.tp=2"]) != before


def test_a_hit_reads_the_environment_again(cache, monkeypatch):
    ov = ["+cluster.env.TOPL_CACHE_T=${oc.env:TOPL_CACHE_T}"]
    monkeypatch.setenv("TOPL_CACHE_T", "one")
    assert hit(ov)[1].to_object().cluster.env["TOPL_CACHE_T"] == "one"
    monkeypatch.setenv("TOPL_CACHE_T", "two")
    assert compose_cache.compose_cached(ov).to_object().cluster.env["TOPL_CACHE_T"] == "two"
    monkeypatch.delenv("TOPL_CACHE_T")
    with pytest.raises(ToplError) as fresh:
        compose_job(ov)
    with pytest.raises(ToplError) as kept:
        compose_cache.compose_cached(ov)
    assert str(kept.value) == str(fresh.value) and "TOPL_CACHE_T is not set" in str(kept.value)
    assert len(entries(cache)) == 1


def test_failures_unsafe_runs_and_hydra_resolvers_are_not_kept(cache, monkeypatch):
    for bad in (["train.tpp=2"], ["train.tp=two"]):
        for _ in range(2):
            with pytest.raises(ToplError):
                compose_cache.compose_cached(bad)
    assert entries(cache) == []
    assert (
        compose_cache.compose_cached(["experiment=x-${now:%Y}"]).to_object().experiment[:4]
        == "x-20"
    )
    assert entries(cache) == []  # Hydra's `now` resolves only where Hydra is imported
    secret = "hf_" + "Q7x" * 12
    got = compose_cache.compose_cached([f"+cluster.env.HF_TOKEN={secret}"])
    assert got.to_object().cluster.env["HF_TOKEN"] == secret
    assert entries(cache) == []  # a secret typed into cluster.env never lands in a file
    monkeypatch.setenv("TOPL_COMPOSE_CACHE", "0")
    compose_cache.compose_cached([])
    assert entries(cache) == []


def test_untrusted_or_broken_entries_are_not_read(cache):
    compose_cache.compose_cached(["train.tp=2"])
    (entry,) = entries(cache)
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    data = json.loads(entry.read_text())
    data["cfg"]["train"]["tp"] = 8  # what another user could plant
    entry.write_text(json.dumps(data))
    entry.chmod(0o666)
    assert compose_cache.compose_cached(["train.tp=2"]).cfg.train.tp == 2  # not read: recomposed
    entry.chmod(0o600)
    data["cfg"]["train"]["_target_"] = "os.system"  # a planted code key is refused on a hit
    entry.write_text(json.dumps(data))
    with pytest.raises(ToplError, match="names code"):
        compose_cache.compose_cached(["train.tp=2"])
    del data["cfg"]["train"]["_target_"]
    data["resolved"]["verl_overrides"] = {"x": {"_target_": "os.system"}}  # where a hit reads
    entry.write_text(json.dumps(data))
    with pytest.raises(ToplError, match="names code"):
        compose_cache.compose_cached(["train.tp=2"])
    data["resolved"]["verl_overrides"] = {}
    del data["resolved"]["cluster"]  # not of a JobSpec's shape: a miss, composed afresh
    entry.write_text(json.dumps(data))
    assert compose_cache.compose_cached(["train.tp=2"]).to_object().train.tp == 2
    assert json.loads(entry.read_text())["resolved"]["cluster"]
    for broken in ("{not json", '{"format": 1, "cfg": "x"}', json.dumps({**data, "deps": []})):
        entry.write_text(broken)
        assert compose_cache.compose_cached(["train.tp=2"]).cfg.train.tp == 2
        assert json.loads(entry.read_text())["cfg"]["train"]["tp"] == 2  # written afresh


def test_only_the_newest_entries_stay(cache, monkeypatch):
    monkeypatch.setattr(compose_cache, "MAX_ENTRIES", 2)
    for tp in (1, 2, 4):
        compose_cache.compose_cached([f"train.tp={tp}"])
    assert len(entries(cache)) == 2


def test_a_cached_check_imports_no_hydra_omegaconf_or_yaml(cache):
    code = (
        "import sys; from topl.launcher.cli import main; rc = main(['check']);"
        "print('HYDRA' if any(m.split('.')[0] in ('hydra', 'omegaconf', 'yaml') for m in sys.modules)"
        " else 'NOHYDRA', rc)"
    )
    env = {**os.environ, "TOPL_CACHE_DIR": str(cache.parent)}
    runs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.stdout.split()[-2] for r in runs] == ["HYDRA", "NOHYDRA"], runs
    assert runs[0].stdout == runs[1].stdout.replace("NOHYDRA", "HYDRA")


def test_the_spec_spells_omegaconfs_missing_marker():
    import omegaconf

    from topl.launcher.spec import job as spec

    assert spec.MISSING == omegaconf.MISSING  # spec.py names it without importing OmegaConf


def test_a_hit_builds_no_dictconfig_unless_asked(cache):
    kept = hit(["recipe=qwen3_4b_grpo_a3_release_strict"])[1]
    s = kept.to_object()
    check(kept), render(s), settings(kept)
    assert kept._cfg is None  # the whole `check` / `render` ran on the kept data
    assert kept.cfg.alignment.kv_tile == s.alignment.kv_tile == s.rollout.block_size


def test_a_nested_or_relative_interpolation_is_resolved_afresh_on_every_hit(cache, monkeypatch):
    ov = [
        "run_root=oc.env",
        "project='${${run_root}:TOPL_CACHE_T2}'",
    ]  # the resolver's name is read
    monkeypatch.setenv("TOPL_CACHE_T2", "first")
    assert hit(ov)[1].to_object().project == "first"
    (entry,) = entries(cache)
    assert json.loads(entry.read_text())["resolved"] is None and "first" not in entry.read_text()
    monkeypatch.setenv("TOPL_CACHE_T2", "second")
    assert compose_cache.compose_cached(ov).to_object().project == "second"


@pytest.mark.parametrize(
    "edit",
    [
        ("cluster", "nodes", True),  # a bool where the field is an int
        ("rollout", "temperature", "hot"),
        ("model", "hf_path", "???"),  # OmegaConf's MISSING
        ("cluster", "env", ["A"]),
        ("verl_overrides", "x", "???"),
    ],
    ids=str,
)
def test_a_hand_edited_resolved_entry_is_a_miss_not_a_wrong_answer(cache, edit):
    compose_cache.compose_cached(["train.tp=2"])
    (entry,) = entries(cache)
    data = json.loads(entry.read_text())
    section, key, value = edit
    data["resolved"][section][key] = value
    entry.write_text(json.dumps(data))
    fresh = compose_job(["train.tp=2"]).to_object()
    assert repr(compose_cache.compose_cached(["train.tp=2"]).to_object()) == repr(fresh)
    again = json.loads(entry.read_text())["resolved"][section].get(key)
    assert repr(again) != repr(value)  # written afresh


def test_what_json_cannot_hold_is_composed_every_time(cache, tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_text("# @package _global_\nverl_overrides:\n  x: !!binary aGVsbG8=\n")
    keyed = tmp_path / "keyed.yaml"
    keyed.write_text("# @package _global_\nverl_overrides:\n  trainer.logger: [console, {1: x}]\n")
    for recipe in (binary, keyed):
        ov = [f"recipe={recipe}"]
        first, second = compose_cache.compose_cached(ov), compose_cache.compose_cached(ov)
        assert repr(first.to_object()) == repr(second.to_object())
        assert repr(second.to_object()) == repr(compose_job(ov).to_object())
    assert entries(cache) == []
