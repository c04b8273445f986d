"""scripts/check_vllm_ascend.py, the watcher for the next vllm-ascend release: on stand-in
sources (fast), and on the real sdists of two covered releases (tier facts_sources)."""

import json
import os
import sys

import pytest
from paths import ROOT

from topl.launcher.align import targets

sys.path.insert(0, str(ROOT / "scripts"))
import check_vllm_ascend as watch  # noqa: E402


def _sources(monkeypatch, release, drop_param=None):
    """The newest covered release's files, as topl's targets and facts expect them, under
    another release's name; `drop_param` removed from every definition that has it."""
    ts = targets.TARGETS[targets.NEWEST]

    def read_all(evidence):
        out = {}
        for e in evidence:
            if e.path == "Dockerfile":
                text = "ARG VLLM_TAG=v0.31.0\n"
            else:
                defs = [t for t in ts if t.module.replace(".", "/") + ".py" == e.path]
                text = _stubs(defs, drop_param) + _needles(e.path)
            out[(e.package, e.version, e.path)] = text
        return out, {}

    monkeypatch.setattr(watch, "read_all", read_all)
    monkeypatch.setattr(watch, "releases", lambda p: ["0.30.0rc2", release, "0.9.1"])


def _stubs(ts, drop):
    """A module defining these targets with their parameters (methods grouped by class)."""
    classes: dict = {}
    out = ""
    for t in ts:
        *cls, name = t.attr.split(".")
        fn = f"def {name}({', '.join(p for p in t.params if p != drop)}): pass\n"
        if cls:
            classes.setdefault(cls[0], []).append(fn)
        else:
            out += fn
    for c, fns in classes.items():
        out += f"class {c}:\n" + "".join(f"    {f}" for f in fns)
    return out


def _needles(path):
    """What the facts cite present in that file of the newest release (absent ones left out)."""
    from topl.launcher.facts.table import FACTS

    return "".join(
        f"\n# {e.needle}"
        for f in FACTS
        for e in f.evidence
        if e.version == targets.NEWEST and e.present and e.path == path
        and not e.needle.startswith("re:")
    )  # fmt: skip


def test_lists_only_releases_newer_than_the_newest_covered(monkeypatch, capsys):
    _sources(monkeypatch, "0.31.0rc1")
    assert watch.main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ["0.31.0rc1"]


def test_a_changed_signature_is_drift(monkeypatch, capsys):
    _sources(monkeypatch, "0.31.0rc1", drop_param="draft_moe_quant_type")
    assert watch.main(["0.31.0rc1", "--json"]) == 1
    rows = {r["what"]: r for r in json.loads(capsys.readouterr().out) if r["kind"] == "target"}
    comm = rows["comm_alltoall: vllm_ascend.ascend_forward_context:select_moe_comm_method"]
    assert comm["status"] == "changed" and comm["got"] == ["num_tokens", "vllm_config",
                                                           "is_draft_model"]  # fmt: skip
    assert {r["status"] for w, r in rows.items() if "comm_alltoall" not in w} == {"holds"}


@pytest.mark.facts_sources
@pytest.mark.skipif(
    not os.environ.get("TOPL_FACTS_SOURCES"),
    reason="downloads release files: set TOPL_FACTS_SOURCES=1 (.ci/run does)",
)
def test_reads_real_releases_against_the_newest_targets(capsys):
    """0.30.0rc2 holds against its own group; 0.27.1rc1, one group older, drifts where issue
    47's research says it does (the MoE MLP and the comm selector's parameters)."""
    assert watch.main(["0.30.0rc2"]) == 0
    assert "53 hold, 0 drifted" in capsys.readouterr().out
    assert watch.main(["0.27.1rc1", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    drift = {
        r["what"].split(":")[0] for r in rows if r["kind"] == "target" and r["status"] != "holds"
    }
    assert drift == {"moe_mlp", "comm_alltoall"}


def test_an_sdist_is_read_only_with_its_pinned_sha256(monkeypatch):
    """A different file under a pinned release's name is refused, not read (the index's own hash
    where topl pins none)."""
    import hashlib
    import io
    import tarfile

    from topl.launcher.facts import sources

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        data = b"class AscendFABackend: ...\n"
        info = tarfile.TarInfo("vllm_ascend-0.23.0/vllm_ascend/attention/fa3_v1.py")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    body = buf.getvalue()
    f = {"filename": "vllm_ascend-X.tar.gz", "url": "u", "hashes": {"sha256": "0" * 64}}
    monkeypatch.setattr(sources, "_files", lambda p, v: [f])
    monkeypatch.setattr(sources, "_get", lambda url, timeout=0: body)
    path = "vllm_ascend/attention/fa3_v1.py"
    with pytest.raises(ValueError, match="sha256"):
        sources._read_sdist("vllm-ascend", "0.23.0", {path})  # pinned: SDIST_SHA256
    with pytest.raises(ValueError, match="sha256"):
        sources._read_sdist("vllm-ascend", "0.31.0", {path})  # not pinned: the index's hash
    f["hashes"]["sha256"] = hashlib.sha256(body).hexdigest()
    assert "AscendFABackend" in sources._read_sdist("vllm-ascend", "0.31.0", {path})[path]
