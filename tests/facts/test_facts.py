"""The stack model: facts, their citations and evidence, and (marker `facts_sources`) the facts
re-read in the real packages. The rendering and rules they drive: test_facts_contract.py."""

import json
import os
import re
import sys

import pytest
import yaml
from paths import ROOT

from topl.launcher import facts

PROFILES = {p.stem: yaml.safe_load(p.read_text()) for p in (ROOT / "conf" / "stack").glob("*.yaml")}
STRICT = ["recipe=qwen3_4b_grpo_a3_strict"]
VLLM = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def test_declared_versions_read_as_pep440():
    assert str(facts.version("mindspeed", "core_r0.16.0")) == "0.16.0"
    assert str(facts.version("mindspeed", "2.3.0_core_r0.12.1")) == "0.12.1"  # not 2.3.0
    assert str(facts.version("cann", "9.0.0.B160")) == "9.0.0.dev160"  # a build, not 9.0.0
    assert str(facts.version("cann", "8.5.RC1")) == "8.5rc1"
    assert str(facts.version("torch", "2.9.0+cpu")) == "2.9.0"
    for beta in ("9.0.0-beta.1", "9.0.0.beta1", "9.0.0.beta.1", "9.0.0beta1"):
        assert str(facts.version("cann", beta)) == "9.0.0b1", beta


def test_versions_order_as_each_vendor_orders_them():
    from topl.launcher.base.versions import read

    cann = ["8.5.RC1", "8.5.0", "9.0.0.B160", "9.0.0.B170", "9.0.0-beta.1", "9.0.0.beta2", "9.0.0"]
    assert sorted(cann[::-1], key=lambda v: read("cann", v)) == cann
    npu = ["2.8.0rc1", "2.8.0", "2.8.0.post2", "2.8.0.post4", "2.9.0rc1", "2.9.0", "2.9.0.post2"]
    assert sorted(npu[::-1], key=lambda v: read("torch_npu", v)) == npu
    va = ["0.21.0rc1", "0.22.1rc1", "0.23.0rc1", "0.23.0", "0.23.0.post1", "0.30.0rc2"]
    assert sorted(va[::-1], key=lambda v: read("vllm_ascend", v)) == va
    ms = ["core_r0.15.3", "core_r0.16.0", "core_r0.17.0", "master"]
    assert sorted(ms[::-1], key=lambda v: read("mindspeed", v)) == ms


@pytest.mark.parametrize(
    "package,text",
    [
        ("vllm_ascend", "0.18.0-foo"),  # was read as 0.18.0
        ("cann", "9.0.0-beta.1.B020"),  # a build of a beta: no known order
        ("cann", "8.3.RC1.alpha003"),
        ("cann", "CANN900B160"),
        ("mindspeed", "core_r0.16.x"),  # was read as 0.16
        ("torch_npu", "2.9.0.B120"),
    ],
)
def test_unknown_version_forms_are_refused_not_truncated(package, text):
    from topl.launcher.base.versions import VersionError, read

    with pytest.raises(VersionError, match=f"{package} version '{re.escape(text)}'.*forms read"):
        read(package, text)
    assert facts.version(package, text) is None
    assert package in facts.unreadable({package: text})


def test_version_parsing_is_cached():
    """`topl plan` reads the same few version strings for every point (issue 33)."""
    from topl.launcher.base import versions

    versions._read.cache_clear()
    for _ in range(50):
        facts.supports("set_deterministic_level", {"torch_npu": "2.8.0.post4"})
        versions.read("cann", "9.0.0.B160")
    info = versions._read.cache_info()
    assert info.misses <= 2 and info.hits >= 49, info


def test_versions_and_patches_decide():
    v = {"vllm_ascend": "0.18.0", "vllm_ascend_patches": []}
    assert not facts.supports("fa3_backend", v)
    assert facts.supports("fa3_backend", {**v, "vllm_ascend_patches": ["true_on_policy"]})
    assert facts.supports("fa3_backend", {"vllm_ascend": "0.23.0.post1"})
    assert not facts.supports("rl_config", {"vllm_ascend": "0.26.0rc1"})
    assert facts.supports("rl_config", {"vllm_ascend": "0.27.1rc1"})
    assert facts.supports("set_deterministic_level", {"torch_npu": "2.9.0.post2"})
    assert not facts.supports("set_deterministic_level", {"torch_npu": "2.9.0"})
    assert not facts.supports("per_request_seed", {"verl": "0.9.1", "verl_patches": []})


# Read from each release's own file (sdists; wheels by range request) when these facts were fixed:
# docs/source/user_guide/feature_guide/flash_attention.md, torch_npu/npu/__init__.py.
FA3_DOCS = {  # vllm-ascend -> what its FA3 docs ask for
    "0.19.1rc1": None,  # no FA3 page
    "0.20.2rc1": "eager",
    "0.21.0rc1": "eager",
    "0.22.1rc1": "piecewise",
    "0.23.0.post1": "piecewise",
    "0.30.0rc2": "piecewise",
}
SET_DETERMINISTIC_LEVEL = {  # torch_npu wheel -> has def set_deterministic_level
    **dict.fromkeys(["2.6.0.post5", "2.7.1rc1", "2.7.1", "2.7.1.post2"], False),
    **dict.fromkeys(["2.7.1.post4", "2.7.1.post6", "2.7.1.post8", "2.7.1.post11"], True),
    **dict.fromkeys(["2.8.0rc1", "2.8.0", "2.8.0.post2"], False),
    **dict.fromkeys(["2.8.0.post4", "2.8.0.post5"], True),
    **dict.fromkeys(["2.9.0rc1", "2.9.0"], False),
    **dict.fromkeys(["2.9.0.post2", "2.9.0.post9", "2.9.1"], True),
    **dict.fromkeys(["2.10.0rc1", "2.10.0rc2"], False),
    **dict.fromkeys(["2.10.0", "2.10.0.post4", "2.11.0rc1", "2.12.0", "2.14.0"], True),
}


@pytest.mark.parametrize("release,docs", FA3_DOCS.items())
def test_fa3_docs_fact_follows_what_each_release_documents(release, docs):
    v = {"vllm_ascend": release}
    assert facts.supports("fa3_docs_eager_only", v) == (docs == "eager")
    assert facts.supports("fa3_docs_piecewise_only", v) == (docs == "piecewise")


@pytest.mark.parametrize("release,has", SET_DETERMINISTIC_LEVEL.items())
def test_set_deterministic_level_follows_each_wheel(release, has):
    assert facts.supports("set_deterministic_level", {"torch_npu": release}) == has


@pytest.mark.parametrize(
    "cann,orders",
    [
        ("8.5.0", False),
        ("9.0.0.B160", False),  # the seed's README build: ordered before 9.0.0's betas
        ("9.0.0-beta.1", False),  # its docs: strict behaves as true on A3
        ("9.0.0.beta1", False),
        ("9.0.0-beta.2", True),
        ("9.0.0.beta2", True),
        ("9.0", True),
        ("9.1.0", True),
    ],
)
def test_hccl_strict_order_on_a3_starts_at_9_0_0_beta_2(cann, orders):
    assert facts.supports("hccl_strict_orders_on_a3", {"cann": cann}) == orders


def test_every_fact_is_cited_or_says_why_not():
    for f in facts.FACTS:
        assert f.evidence or (f.source and f.unchecked), f.id
        assert "@" in facts.why(f.id) or f.unchecked, f.id


def test_doctor_markers_are_cited_in_a_real_release():
    """What the doctor looks for in an installed package is what the checker proves is there."""
    for f in facts.FACTS:
        if f.detect:
            module, rel, needle = f.detect
            assert any(e.present and needle in e.needle for e in f.evidence), f.id


RELEASES = json.loads((ROOT / "tests" / "data" / "facts_releases.json").read_text())["releases"]


def edge_evidence():
    from topl.launcher.facts import bounds

    out = []
    for f in facts.FACTS:
        src = bounds.source(f)
        got = bounds.branch_releases(src) if src.startswith("github:") else RELEASES.get(src, [])
        out += bounds.edge_evidence(f, got)
    return out


def test_downloads_stay_within_the_profiles_and_the_range_edges():
    """The checker reads the shipped profiles' releases, the releases at each fact's range edges
    and the vllm-ascend releases topl's alignment module covers or refuses (with the vLLM each
    pins: targets.VLLM_PIN), nothing else: 18 vllm-ascend sdists (~250 MB, sha256-pinned where
    the alignment reads them), the rest by range requests."""
    from topl.launcher.align.targets import VLLM_PIN

    declared = {(k, str(v)) for p in PROFILES.values() for k, v in p["versions"].items()}
    declared |= {("vllm_ascend", v) for v in VLLM_PIN} | {("vllm", v) for v in VLLM_PIN.values()}
    key = {"vllm-ascend": "vllm_ascend", "verl": "verl", "torch-npu": "torch_npu", "vllm": "vllm"}
    edges = {(e.package, e.version) for e in edge_evidence()}
    for f in facts.FACTS:
        for e in f.evidence:
            if not e.package.startswith("github:"):
                assert (key[e.package], e.version) in declared or (e.package, e.version) in edges
    sdists = {v for p, v in edges if p == "vllm-ascend"} | {
        str(p["versions"]["vllm_ascend"]) for p in PROFILES.values()
    }
    assert len(sdists | set(VLLM_PIN)) <= 18, sorted(sdists | set(VLLM_PIN))


def test_every_range_is_read_at_its_edges_or_says_why():
    from topl.launcher.facts import bounds

    for f in facts.FACTS:
        src = bounds.source(f)
        mine = bounds.edge_evidence(f, RELEASES.get(src) or bounds.branch_releases(src))
        assert bool(bounds.unbounded(f)) != bool(mine), f.id
        if f.when is None and mine:  # in no release: the newest one still lacks it
            newest = max(RELEASES[src], key=lambda r: facts.version(f.package, r))
            assert {(e.version, e.present) for e in mine} == {(newest, False)}, f.id
        elif mine:  # both sides of every edge
            assert {e.present for e in mine} == {True, False}, f.id
    assert facts.fact("per_request_seed").when is None and not bounds.unbounded(
        facts.fact("per_request_seed")
    )


@pytest.mark.parametrize(
    "fid,pairs",
    [
        ("fa3_docs_piecewise_only", [("0.22.1rc1", "0.21.0rc1")]),
        ("fa3_docs_eager_only", [("0.20.2rc1", "0.19.1rc1"), ("0.21.0rc1", "0.22.1rc1")]),
        (
            "set_deterministic_level",
            [
                ("2.7.1.post4", "2.7.1.post2"),
                ("2.7.1.post11", "2.8.0rc1"),
                ("2.8.0.post4", "2.8.0.post2"),
                ("2.8.0.post5", "2.9.0rc1"),
                ("2.9.0.post2", "2.9.0"),
                ("2.9.1", "2.10.0rc1"),
                ("2.10.0", "2.10.0rc2"),
            ],
        ),
        (
            "mindspeed_bi_switches",
            [("core_r0.16.0", "core_r0.15.3"), ("core_r0.16.0", "core_r0.17.0")],
        ),
    ],
)
def test_range_edges_are_the_neighbouring_releases(fid, pairs):
    """(inside, outside) neighbours in the registry's release list, every place `when` flips."""
    from topl.launcher.facts import bounds

    f = facts.fact(fid)
    src = bounds.source(f)
    got = bounds.branch_releases(src) if src.startswith("github:") else RELEASES[src]
    assert bounds.edges(f.when, got, f.package) == pairs


def test_github_citations_are_proven_by_the_shipped_excerpts():
    """CI reaches PyPI only: every GitHub citation and edge is decided by launcher/facts/
    excerpts.json (commit, path, blob id, the needle's lines), as the real file would decide it."""
    from topl.launcher.facts import excerpts

    shipped = excerpts.load()
    ev = [e for f in facts.FACTS for e in f.evidence] + edge_evidence()
    github = [e for e in ev if e.package.startswith("github:")]
    assert len(github) > 20
    for e in github:
        assert excerpts.verdict(e, shipped) == e.present, e.cite
        assert shipped[excerpts.key(e)]["commit"] == excerpts.commit(e)


def test_an_excerpt_proves_only_what_it_holds():
    from topl.launcher.facts import excerpts
    from topl.launcher.facts.evidence import Evidence

    e = Evidence("github:o/r", "0123456789abcdef", "a.py", "def b")
    text = "x = 1\ndef b():\n    pass\n"
    ent = excerpts.entry([e], text)
    files = {excerpts.key(e): ent}
    assert ent["lines"] == {"2": "def b():"} and excerpts.matches(ent, text)
    assert excerpts.verdict(e, files) is True
    assert excerpts.verdict(Evidence("github:o/r", e.version, "a.py", "pass"), files) is None
    assert not excerpts.matches(ent, text + "#")
    files[excerpts.key(e)] = excerpts.entry([Evidence(*e.__dict__.values())], "x = 1\n")
    assert excerpts.verdict(e, files) is False  # recorded absent
    files[excerpts.key(e)] = {**ent, "commit": "another"}
    assert excerpts.verdict(e, files) is None  # an excerpt of another commit proves nothing


def run_checker(monkeypatch, capsys, argv, reachable):
    sys.path.insert(0, str(ROOT / "scripts"))
    import check_facts

    def read_all(evidence):
        if reachable:
            raise AssertionError("not expected to read")
        return {}, {(e.package, e.version): "no network" for e in evidence}

    monkeypatch.setattr(check_facts, "read_all", read_all)
    monkeypatch.setattr(check_facts, "releases", lambda p: RELEASES[p])
    monkeypatch.setattr(check_facts.excerpts, "load", lambda: {})
    code = check_facts.main(argv)
    return code, capsys.readouterr().out


def test_check_facts_help_prints_help_and_reads_nothing(monkeypatch, capsys):
    with pytest.raises(SystemExit) as ex:
        run_checker(monkeypatch, capsys, ["--help"], reachable=True)
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert "--strict" in out and "--write-excerpts" in out


def test_check_facts_counts_skipped_as_not_proven(monkeypatch, capsys):
    code, out = run_checker(monkeypatch, capsys, [], reachable=False)
    last = out.strip().splitlines()[-1]
    assert code == 0 and "proven 0 " in last and "WRONG 0" in last
    assert re.search(r"not proven [1-9]\d*", last), last
    code, _ = run_checker(monkeypatch, capsys, ["--strict"], reachable=False)
    assert code == 1
    code, out = run_checker(monkeypatch, capsys, ["--json", "--strict"], reachable=False)
    assert code == 1 and {r["status"] for r in json.loads(out)} == {"skipped", "unchecked"}


def test_readme_stack_table_matches_the_facts():
    from topl.launcher.facts.stacks import stacks_markdown

    text = (ROOT / "docs" / "reference.md").read_text()
    table = text.split("<!-- stacks:begin -->")[1].split("<!-- stacks:end -->")[0].strip()
    assert table == stacks_markdown().strip(), "regenerate: python -m topl.launcher.facts.stacks"


def test_release_table_matches_the_targets():
    from topl.launcher.facts.stacks import releases_markdown

    text = (ROOT / "docs" / "stacks.md").read_text()
    table = text.split("<!-- releases:begin -->")[1].split("<!-- releases:end -->")[0].strip()
    assert table == releases_markdown().strip(), "regenerate: python scripts/regen_docs.py"


def test_rules_cite_their_sources():
    from topl.launcher.contract.core import RULES

    by_id = {r.id: r for r in RULES}
    for rid in ("TOP-STACK-002", "TOP-GRAPH-001", "TOP-CACHE-001", "TOP-LOGP-002", "TOP-SEED-001"):
        assert "Sources:" in by_id[rid].why and "@" in by_id[rid].why, rid


@pytest.mark.facts_sources
@pytest.mark.skipif(
    not os.environ.get("TOPL_FACTS_SOURCES"),
    reason="downloads release files: set TOPL_FACTS_SOURCES=1 (.ci/run does)",
)
def test_every_cited_fact_holds_in_the_real_packages():
    """Every citation and every range edge, read in the real releases; GitHub ones from a mirror
    or, as in CI, from the shipped excerpts. Nothing may stay unproven where PyPI answers."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from check_facts import check as check_facts

    rows = check_facts()
    wrong = [r for r in rows if r["status"] == "WRONG"]
    assert not wrong, wrong
    if not any(r["status"] == "ok" and r["via"] == "package" for r in rows):
        pytest.skip("no package index reachable: " + rows[0]["why"])
    skipped = [r for r in rows if r["status"] == "skipped"]
    assert not skipped, skipped  # --strict: not proven is a failure here
    assert any(r["kind"] == "edge" and r["status"] == "ok" for r in rows)


@pytest.mark.facts_sources
@pytest.mark.skipif(
    not os.environ.get("TOPL_FACTS_GIT_MIRROR"),
    reason="re-verifies the shipped excerpts: set TOPL_FACTS_GIT_MIRROR to git mirrors",
)
def test_shipped_excerpts_match_the_repositories():
    from topl.launcher.facts import excerpts
    from topl.launcher.facts.sources import read_all

    ev = [e for f in facts.FACTS for e in f.evidence] + edge_evidence()
    ev = [e for e in ev if e.package.startswith("github:")]
    texts, skipped = read_all(ev)
    assert not skipped, skipped
    shipped = excerpts.load()
    for e in ev:
        assert excerpts.matches(shipped[excerpts.key(e)], texts[(e.package, e.version, e.path)])
