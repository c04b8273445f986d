"""`topl diagnose` (issue 31, 3): NaN / inf named per boundary, identical non-finite values equal,
dtype and shape before values, strict JSON, reasons with counts, no remedy that names switches
both dumps already have on."""

import json

import pytest
import torch
from helpers import run_topl

from topl.kernels import dump
from topl.kernels.alignment import Alignment
from topl.kernels.diagnose import diagnose
from topl.kernels.diagnose_stats import compare_boundary, systematic
from topl.kernels.model import Model
from topl.kernels.probe import make_requests, probe

STRICT = Alignment(kv_tile=8)
BOUNDARY = "layers.1.attn"


def _reject(token):
    raise ValueError(f"not strict JSON: {token}")


@pytest.fixture(scope="module")
def arch():
    from topl.launcher.compose.hydra import compose_job

    return compose_job(["model=tiny_dense"]).to_object().model


def make(tmp_path, arch, dtype=torch.bfloat16):
    model = Model.random(arch, seed=0, dtype=dtype)
    reqs = make_requests(4, arch.vocab_size, 1, max_len=20, max_new=6)
    probe(model, STRICT, requests=reqs, block_size=8, dump_dir=tmp_path)
    return tmp_path / "rollout", tmp_path / "training"


def edit(d, fn):
    """The same dump with `fn(rows)` applied (rows: boundary -> key -> tensor), saved in place."""
    manifest, rows = dump.load(d)
    fn(rows)
    rec = dump.Recorder()
    rec.rows = rows
    keys = manifest.pop("keys")
    assert keys
    dump.save(d, rec, manifest)
    return dump.load(d)


def poison(rows, value=float("nan")):
    """One element of every token of BOUNDARY and everything after it becomes `value`."""
    order = [b for b in dump.canonical_order(2) if b in rows]
    for b in order[order.index(BOUNDARY) :]:
        for k, t in rows[b].items():
            if t.is_floating_point():
                t = t.clone()
                t.view(-1)[min(3, t.numel() - 1)] = value
                rows[b][k] = t


def test_identical_nans_are_equal_and_named(tmp_path, arch):
    a, b = make(tmp_path, arch)
    da, db = edit(a, poison), edit(b, poison)
    r = diagnose(da, db)
    assert r["verdict"] == "equal" and r["first_divergence"] is None, r["reason"]
    assert "NaN" in r["reason"] and BOUNDARY in r["reason"]
    row = {x["boundary"]: x for x in r["boundaries"]}[BOUNDARY]
    assert row["nonfinite"]["A"]["nan"] == row["tokens"]
    assert row["nonfinite"]["A"]["first"]["element"] == 3
    json.dumps(r, allow_nan=False)


def test_nan_on_one_side_is_its_own_verdict_with_counts(tmp_path, arch):
    a, b = make(tmp_path, arch)
    da, db = edit(a, poison), dump.load(b)
    r = diagnose(da, db)
    assert r["verdict"] == "non-finite values" and r["first_divergence"] == BOUNDARY
    row = {x["boundary"]: x for x in r["boundaries"]}[BOUNDARY]
    assert f"{row['tokens']} NaN, 0 inf of {row['elements']} elements in A" in r["reason"]
    assert "B: all finite" in r["reason"]
    json.dumps(r, allow_nan=False)  # strict JSON, NaN present in the data


def test_cli_json_is_strict_with_infinities(tmp_path, arch):
    a, b = make(tmp_path, arch)
    edit(a, lambda rows: poison(rows, float("inf")))
    got = run_topl("diagnose", str(a), str(b), "--json")
    assert got.returncode == 0, got.stderr
    report = json.loads(got.stdout, parse_constant=_reject)
    assert report["verdict"] == "non-finite values"


def test_a_dump_stored_in_fp32_is_not_equal_to_bf16(tmp_path, arch):
    a, b = make(tmp_path, arch)

    def upcast(rows):
        for bd in rows:
            rows[bd] = {k: t.float() if t.is_floating_point() else t for k, t in rows[bd].items()}

    r = diagnose(edit(a, upcast), dump.load(b))
    assert r["verdict"] == "dtype difference", r["reason"]
    assert "torch.float32 vs torch.bfloat16" in r["reason"]


def test_bf16_against_fp32_runs_is_a_dtype_difference_not_a_conversion_bug(tmp_path, arch):
    a, _ = make(tmp_path / "bf16", arch)
    _, b = make(tmp_path / "fp32", arch, torch.float32)
    r = diagnose(dump.load(a), dump.load(b))
    assert r["verdict"] == "dtype difference" and "conversion" not in r["remedy"], r
    assert "torch.bfloat16" in r["reason"] and "torch.float32" in r["reason"]


def test_reasons_count_elements():
    b = torch.randn(4096, generator=torch.Generator().manual_seed(0)).bfloat16()
    a = b.clone()
    a.view(torch.int16)[7] += 10  # one element, 10 ULPs
    why = systematic(compare_boundary({(0, 0): a}, {(0, 0): b}))
    assert "1 of 4096 elements" in why and "%" not in why


def test_no_remedy_names_switches_already_on(tmp_path, arch):
    """A rounding-level difference planted where both dumps record every switch on: the remedy
    says so instead of naming alignment switches to turn on."""
    a, b = make(tmp_path, arch)

    def nudge(rows):
        order = [b for b in dump.canonical_order(2) if b in rows]
        for bd in order[order.index(BOUNDARY) :]:
            for k, t in rows[bd].items():
                if t.dtype == torch.bfloat16:
                    t = t.clone()
                    t.view(torch.int16).view(-1)[::2] += 1  # half the elements one ULP up
                    t.view(torch.int16).view(-1)[1::4] -= 2  # a quarter one ULP down
                    rows[bd][k] = t

    r = diagnose(edit(a, nudge), dump.load(b))
    assert r["verdict"] == "operator path" and r["first_divergence"] == BOUNDARY, r["reason"]
    assert r["switches"] == [] and "already on" in r["remedy"], r["remedy"]
    assert " of " in r["reason"] and "elements differ" in r["reason"]
