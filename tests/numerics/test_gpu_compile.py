"""The GPU kernels compile for Hopper on a machine without a GPU.

Triton compiles ahead of time for a named target: its passes and the ptxas its wheel carries run on
the CPU. Each test drives the real host code (`attention()`, `bi_matmul()`, the norms) on CPU tensors,
told it runs on an H200 (compute capability 9.0, 132 SMs), with every kernel launch recorded instead
of run, and compiles each launch it asked for, for sm_90: a kernel Triton rejects, or one asking for
more shared memory than a Hopper SM gives one program, fails here rather than on a lent GPU. (Issue
52: Triton 3.6 rejected the one-warp fold only when compiled, which cost a device call.) What this
cannot see: the bits and the speed (tests/numerics/test_gpu.py and scripts/bench_gpu.py, on a GPU).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402 (after the skip)
from triton.compiler import ASTSource  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor  # noqa: E402
from triton.runtime.jit import mangle_type  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from topl.kernels.model import QWEN3_30B_A3B as Q  # noqa: E402

H, KVH, D = Q["num_heads"], Q["num_kv_heads"], Q["head_dim"]
SM90_SHARED = 232448  # bytes of shared memory one program may use on sm_90 (227 KiB)
TYPES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.int32: "i32", torch.float16: "fp16"}
OPTIONS = ("num_warps", "num_stages", "enable_fp_fusion", "maxnreg")
# kernels whose speed rests on MMAs in flight under other work: ptxas must not serialise their
# wgmma (C7511: prefill.py with a run-time branch around an MMA was no faster than `_attn` on the
# H200), and the bytes each may spill (prefill_items.py: a word of predicates at an item's start in
# one warpgroup and one loader register, outside the tile loops: read in its SASS, 2026-12-04)
PIPELINED = {"_prefill": 0, "_prefill_items": 12}


class Recorder:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **kw)` records the launch."""

    def __init__(self, fn: Any, launches: list[tuple[Any, tuple[Any, ...], dict[str, Any]]]):
        self.fn, self.launches = fn, launches

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kw: self.launches.append((self.fn, args, kw))


def _type(a: Any) -> str:
    if isinstance(a, torch.Tensor):
        return "*" + TYPES[a.dtype]
    if isinstance(a, TensorDescriptor):
        return f"tensordesc<{TYPES[a.base.dtype]}[{','.join(map(str, a.block_shape))}]>"
    if isinstance(a, GluonDescriptor):  # its shared layout is part of its type
        return str(mangle_type(a))
    if isinstance(a, bool):
        return "i1"
    if isinstance(a, int):
        return "i32" if -(2**31) <= a < 2**31 else "i64"
    assert isinstance(a, float), type(a)
    return "fp32"


def _compile_all(launches: list[tuple[Any, tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
    """Compile each distinct launch for sm_90; returns what was compiled: (kernel, constants)."""
    seen: set[tuple[Any, ...]] = set()
    for fn, args, kw in launches:
        opts = {k: kw[k] for k in OPTIONS if k in kw}
        const = {k: v for k, v in kw.items() if k not in OPTIONS}
        sig = {n: _type(a) for n, a in zip(fn.arg_names, args)}
        sig.update({n: "constexpr" for n in const})
        key = (fn.__name__, tuple(sig.items()), tuple(const.items()), tuple(opts.items()))
        if key in seen:
            continue
        seen.add(key)
        src = (GluonASTSource if fn.is_gluon() else ASTSource)(
            fn=fn, signature=sig, constexprs=const
        )
        try:
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
        except Exception as e:  # Triton's pass or ptxas error: say which launch
            raise AssertionError(f"{fn.__name__} {const} {opts} does not compile: {e}") from e
        assert k.metadata.shared <= SM90_SHARED, (fn.__name__, const, opts, k.metadata.shared)
        if fn.__name__ in PIPELINED:
            _assert_pipelined(k.asm["ptx"], f"{fn.__name__} {const}", PIPELINED[fn.__name__])
    return [(name, dict(const)) for name, _, const, _ in seen]


def _assert_pipelined(ptx: str, what: str, spill: int) -> None:
    """ptxas -v (the wheel's, as Triton ran it) on the kernel's PTX: no serialised wgmma, at most
    `spill` bytes spilled."""
    from triton.backends.nvidia.compiler import get_ptxas

    with tempfile.TemporaryDirectory(prefix="topl-ptx-") as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        argv = [
            get_ptxas(90).path,
            "-arch=sm_90a",
            "-v",
            str(src),
            "-o",
            str(src.with_suffix(".cubin")),
        ]
        log = subprocess.run(argv, capture_output=True, text=True, check=True).stderr
    assert "C7511" not in log, f"{what}: ptxas serialised the wgmma pipeline:\n{log}"
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert spills and all(int(n) <= spill for n in spills), f"{what}: spills:\n{log}"


@pytest.fixture
def on_h200(monkeypatch):
    """The host code's questions to CUDA answered as an H200 would; launches recorded."""
    props = types.SimpleNamespace(multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    from topl.kernels.gpu import attention, device, ops

    launches: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    for mod in (attention, ops):
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, triton.runtime.jit.JITFunction):
                monkeypatch.setattr(mod, name, Recorder(obj, launches))
    # the per-device caches (SM count, dummies, arrival counts) start empty and are restored after:
    # nothing made here for "cuda:0" on the CPU outlives the test
    for mod, name in (
        (device, "_SMS"),
        (device, "_DUMMY"),
        (attention, "_CNT"),
        (attention, "_ITEMS"),
        (ops, "_CNT"),
    ):
        monkeypatch.setattr(mod, name, {})
    return launches


def _bf16(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.bfloat16)


def test_attention_launches_compile_for_hopper(on_h200):
    """Training (packed) at every launch setting of CONFIGS, training and prefill (paged) at their
    defaults (prefill.py's warp-specialised kernel; prefill_items.py's for short runs) and in `_attn`
    with tensor-memory loads; decode
    split-KV with the separate fold at its default and at every fold layout the parity test runs, the fused fold (its default, short contexts), eager and
    graph-launched (tile states in Gluon, decode_states.py, and in `_attn` without it), and one pass."""
    from topl.kernels.gpu.attention import CONFIGS, attention

    n = 4096
    q, k, v = _bf16(n, H, D), _bf16(n, KVH, D), _bf16(n, KVH, D)
    seq, pos = [0] * n, list(range(n))
    start = torch.zeros(1, dtype=torch.int32)
    pages = _bf16(n // 128, 128, KVH, D)
    table = torch.arange(n // 128, dtype=torch.int32)[None]
    for (rows, warps, stages), tma in ((c, False) for c in CONFIGS):
        kw = {"q_tokens": rows // 8, "warps": warps, "stages": stages, "tma": tma, "split": False}
        attention(q, k, v, seq, pos, kv_start=start, **kw)
    # the default at this size: prefill.py's warp-specialised pass, training and prefill
    attention(q, k, v, seq, pos, kv_start=start)
    attention(q, pages, pages, seq, pos, block_table=table)
    # the same pass one program per SM (prefill_items.py), the default for short runs (PREFILL_ITEMS):
    # four 1,024-token sequences, packed and paged, with no `persistent` given
    seq4, pos4 = [i // 1024 for i in range(n)], [i % 1024 for i in range(n)]
    start4 = torch.arange(0, n, 1024, dtype=torch.int32)
    attention(q, k, v, seq4, pos4, kv_start=start4)
    attention(q, pages, pages, seq4, pos4, block_table=table.view(4, -1))
    # `_attn` with tensor-memory loads (gluon=False), training and prefill
    attention(q, k, v, seq, pos, kv_start=start, gluon=False)
    attention(q, pages, pages, seq, pos, block_table=table, gluon=False)
    folds = (None, (32, 8), (64, 16), (8, 128, 8), (1, 128, 32), (2, 64, 16), (4, 32, 8))
    folds += ((1, 16, 8), (1, 32, 32))
    for b, ctx in ((1, 16384), (4, 900), (16, 4096), (64, 4096), (40, 1024)):
        dq = _bf16(b, H, D)
        dpages = _bf16(b * ctx // 128 + b, 128, KVH, D)
        dtable = torch.arange(dpages.shape[0], dtype=torch.int32).view(b, -1)
        runs = ((False, None, None, None), (True, None, None, None), (True, None, False, None))
        runs += ((False, None, None, True), (True, None, None, True))  # the fused fold
        for graph, fold, gluon, fused in (*runs, *((True, f, None, None) for f in folds[1:])):
            attention(
                dq, dpages, dpages, list(range(b)), [ctx - 1] * b, block_table=dtable,
                q_tokens=64 // (H // KVH), max_pos=ctx - 1, graph=graph, combine=fold, gluon=gluon,
                fused=fused,
            )  # fmt: skip
    done = _compile_all(on_h200)
    paths = {(c["PAGED"], c["SPLIT"], c["TMA"], c["FUSED"]) for f, c in done if f == "_attn"}
    assert paths == {  # (paged, split-KV, tensor-memory loads, fused fold): the host reached each
        (False, False, False, False),  # training, pointer loads (every CONFIGS entry)
        (False, False, True, False),  # training at 4096 tokens, gluon=False
        (True, False, True, False),  # paged prefill, gluon=False; one-pass decode under graph (B64)
        (True, False, False, False),  # one-pass decode, eager, few tiles (B40 ctx1024)
        (True, True, False, False),  # split-KV decode, eager, the separate fold
        (True, True, True, False),  # split-KV decode under graph, without Gluon
        (True, True, False, True),  # the fused fold, eager
        (True, True, True, True),  # the fused fold under graph
    }
    assert any(f == "_decode_states" for f, _ in done)  # under graph, Gluon's tile states
    assert {c["PAGED"] for f, c in done if f == "_prefill"} == {False, True}
    assert {c["PAGED"] for f, c in done if f == "_prefill_items"} == {False, True}
    folds_done = {(c["GH"], c["DC"], c["U"]) for f, c in done if f == "_combine"}
    folds_done |= {(c["DC"], c["U"]) for f, c in done if f == "_fold_states"}
    assert folds_done == {(128, 8), *folds[1:]}  # (128, 8): Gluon's fold, the default


def test_matmul_and_norm_launches_compile_for_hopper(on_h200):
    """bi_matmul's plan at every M band (transposed small-M tiles, split-K, pointer and TMA tiles,
    eager and graph-launched) at the projections' shapes, and the two row kernels."""
    from topl.kernels.gpu.ops import bi_matmul, log_softmax, rms_norm

    for kdim, ndim in ((Q["hidden_size"], (H + 2 * KVH) * D), (H * D, Q["hidden_size"])):
        w = _bf16(ndim, kdim)
        for m in (1, 16, 65, 128, 256, 1000, 4096):
            for graph in (False, True):
                bi_matmul(_bf16(m, kdim), w, graph=graph)
    rms_norm(_bf16(16, Q["hidden_size"]), _bf16(Q["hidden_size"]), 1e-6)
    log_softmax(_bf16(4, 151936))
    done = {(f, c.get("SWAP"), c.get("SPLIT"), c.get("TMA")) for f, c in _compile_all(on_h200)}
    assert done >= {
        ("_bi_matmul", True, False, False),  # transposed tile, M <= 16 (qkv_proj)
        ("_bi_matmul", True, True, False),  # transposed tile split over K chunks (o_proj)
        ("_bi_matmul", True, False, True),  # transposed tile, TMA-fed (M <= 256, graph)
        ("_bi_matmul", False, False, False),  # pointer tiles (eager, M <= 2048)
        ("_bi_matmul_tma", None, None, None),  # persistent TMA kernel
        ("_rms_norm", None, None, None),
        ("_log_softmax", None, None, None),
    }
