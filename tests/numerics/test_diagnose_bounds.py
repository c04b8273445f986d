"""`topl diagnose` reads dump folders from anywhere: what is not a dump (a layer count of 10⁹, a
boundary past the deepest model, a FIFO, a corrupt file, keys that do not match the tensors) is
one message and exit 2, found before any work, never a hang or a traceback (issue 48)."""

import json
import os
import threading

import pytest
import torch
from safetensors.torch import save_file

from topl.kernels import dump
from topl.launcher.cli import main as topl


def _dump(d, num_layers=1, boundaries=("embed",), keys=None):
    d.mkdir()
    save_file({b: torch.zeros(1, 2) for b in boundaries}, str(d / "dump.safetensors"))
    manifest = {
        "model": {"num_layers": num_layers},
        "keys": keys or {b: [[0, 0]] for b in boundaries},
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def _fifo(d, name):
    os.unlink(d / name)
    os.mkfifo(d / name)


BAD = {
    "huge_num_layers": lambda d: _dump(d, num_layers=10**9),
    "text_num_layers": lambda d: _dump(d, num_layers="9" * 5000),
    "layer_past_the_deepest_model": lambda d: _dump(d, boundaries=("layers.999999999.attn",)),
    "fifo_tensors": lambda d: _fifo(_dump(d), "dump.safetensors"),
    "corrupt_tensors": lambda d: (_dump(d) / "dump.safetensors").write_bytes(b"\xff" * 64),
    "manifest_not_json": lambda d: (_dump(d) / "manifest.json").write_text("{nope"),
    "manifest_a_list": lambda d: (_dump(d) / "manifest.json").write_text("[1]"),
    "keys_do_not_match": lambda d: _dump(d, keys={"other": [[0, 0]]}),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_what_is_not_a_dump_is_one_message(tmp_path, capsys, name):
    good = _dump(tmp_path / "good")
    bad = tmp_path / "bad"
    BAD[name](bad)
    box = []
    t = threading.Thread(target=lambda: box.append(topl(["diagnose", str(good), str(bad)])))
    t.daemon = True
    t.start()
    t.join(30)
    assert box == [2], f"diagnose hung or passed on {name}"
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(bad) in err


def test_a_real_dump_still_loads(tmp_path):
    manifest, rows = dump.load(_dump(tmp_path / "d", boundaries=("embed", "layers.0.attn")))
    assert set(rows) == {"embed", "layers.0.attn"} and manifest["model"]["num_layers"] == 1
