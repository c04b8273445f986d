"""Constants the kernels keep so that GPU tests and benchmarks need no Hydra: equal to the conf."""

import dataclasses

from topl.kernels.model import QWEN3_30B_A3B


def test_qwen3_30b_a3b_constant_is_the_shipped_model_conf(compose):
    spec = compose(["model=qwen3_30b_a3b"]).to_object().model
    names = {f.name for f in dataclasses.fields(spec)} - {"name", "hf_path", "num_layers"}
    assert set(QWEN3_30B_A3B) == names
    assert QWEN3_30B_A3B == {k: getattr(spec, k) for k in names}
