"""The Triton GPU path sharded over real GPUs: a TP=2 training recompute against the rollout, one
process per GPU, the row-parallel partials summed by NCCL (tests/numerics/test_collectives.py's pairwise
tree). Skipped without 2 CUDA GPUs (CI has none).

Both processes hold the full weights and compute only their K slice (the emulation's `partial`),
so the sharded run and the one-device emulation share the kernels and differ only where the
partials meet: NCCL transport and order. With 2 ranks that order is one addition; see the module
docstring of tests/numerics/test_collectives.py for what 2 ranks cannot show.
"""

import tempfile
import types

import pytest
import torch

pytest.importorskip("triton")
if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs 2 CUDA GPUs", allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from test_collectives import Collective  # noqa: E402

from topl.kernels import primitives as P  # noqa: E402
from topl.kernels.alignment import Alignment  # noqa: E402
from topl.kernels.model import Model  # noqa: E402
from topl.kernels.probe import make_requests, probe  # noqa: E402

TILE = 64
ARCH = types.SimpleNamespace(  # small widths: Triton compiles once per process
    name="tp_small",
    num_layers=2,
    hidden_size=512,
    intermediate_size=1024,
    num_heads=8,
    num_kv_heads=4,
    head_dim=64,
    vocab_size=4096,
    rms_norm_eps=1e-6,
    rope_theta=1e6,
    tie_word_embeddings=False,
    max_position_embeddings=4096,
    attention="gqa",
    sliding_window=None,
    num_experts=0,
    experts_per_token=0,
    moe_intermediate_size=0,
)
# (name, alignment, train_tp, rollout_tp): the strict layouts, and one with the aligned reduction off
CASES = [
    ("tp2_tp2", Alignment(kv_tile=TILE), 2, 2),
    ("tp2_tp1", Alignment(kv_tile=TILE), 2, 1),
    ("tp2_tp1_unaligned", Alignment(kv_tile=TILE, tp_aligned_reduction=False), 2, 1),
]


def run_case(device: str, alignment, train_tp: int, rollout_tp: int):
    model = Model.random(ARCH, seed=0).to(device)
    reqs = make_requests(8, ARCH.vocab_size, seed=1, min_len=20, max_len=200, max_new=16)
    out = probe(
        model,
        alignment,
        requests=reqs,
        train_tp=train_tp,
        rollout_tp=rollout_tp,
        block_size=TILE,
        max_num_batched_tokens=256,
        micro_batch=4,
    )
    return out["max_abs_logprob_diff"], [r.output for r in reqs], [r.logprobs for r in reqs]


def _worker(rank, world, init, out):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=rank, world_size=world)
    P.ALLREDUCE = Collective(rank, world, tree=True, backend="nccl")
    got = {name: run_case(f"cuda:{rank}", a, t, r) for name, a, t, r in CASES}
    if rank == 0:
        torch.save(got, out)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def sharded():
    init, out = tempfile.mktemp(), tempfile.mktemp()
    mp.spawn(_worker, args=(2, init, out), nprocs=2, join=True)
    return torch.load(out)


@pytest.mark.parametrize("name, alignment, train_tp, rollout_tp", CASES, ids=[c[0] for c in CASES])
def test_tp2_over_nccl_matches_the_one_device_emulation(
    sharded, name, alignment, train_tp, rollout_tp
):
    """Every sampled token and log-prob of the 2-GPU run equals the emulation on one GPU."""
    diff, tokens, logprobs = sharded[name]
    e_diff, e_tokens, e_logprobs = run_case("cuda:0", alignment, train_tp, rollout_tp)
    assert tokens == e_tokens and logprobs == e_logprobs and diff == e_diff


def test_strict_tp2_training_equals_rollout_bitwise(sharded):
    """Under strict the TP=2 recompute gives the rollout's bits, at TP=2 and at TP=1 rollout; with
    the aligned reduction off the layouts disagree (two bf16 partials vs one fp32 accumulation)."""
    assert sharded["tp2_tp2"][0] == 0.0 and sharded["tp2_tp1"][0] == 0.0
    assert sharded["tp2_tp1_unaligned"][0] > 0.0
