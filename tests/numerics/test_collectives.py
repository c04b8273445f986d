"""The one-device TP/EP reduction-order emulation against real collectives.

Each test body runs over gloo (CPU processes; CI, 2 and 4 ranks) and over NCCL (one process per
GPU) where the host has enough GPUs: the numerics stay on the CPU and only the reduction crosses
NCCL, so a difference can only come from NCCL's order. With 2 ranks every element is one addition
(p0 + p1 == p1 + p0), so 2 GPUs prove the harness, transport and dtype handling, not the order;
that needs >= 3 ranks (docs/performance.md says what was run).
"""

import tempfile

import pytest
import torch
import torch.distributed as dist
from helpers import start_ranks

from topl.kernels import primitives as P
from topl.kernels.alignment import Alignment
from topl.kernels.model import Model, sides
from topl.kernels.training import TrainingEngine

SEQS = [
    [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5],
    [2, 7, 1, 8, 2, 8],
    [1, 6, 1, 8, 0, 3, 3, 9, 8, 8, 7, 4, 9],
]


def tiny(moe: bool):
    from types import SimpleNamespace

    # top-4: with only two terms a sum is the same in any order
    experts = (
        dict(num_experts=8, experts_per_token=4, moe_intermediate_size=32)
        if moe
        else dict(num_experts=0, experts_per_token=0, moe_intermediate_size=0)
    )
    arch = SimpleNamespace(
        num_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        vocab_size=32,
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        tie_word_embeddings=False,
        **experts,
    )
    return Model.random(arch, seed=0)


BACKENDS = ["gloo", "nccl"]


def need(backend: str, world: int) -> None:
    if backend == "nccl" and (not torch.cuda.is_available() or torch.cuda.device_count() < world):
        pytest.skip(f"nccl needs {world} GPUs")


class Collective:
    """The backend's all-reduce (tree=False), or a pairwise tree over send/recv then a broadcast.
    Over NCCL the partials go to this rank's GPU for the collective and come back unchanged."""

    def __init__(self, rank: int, size: int, tree: bool = False, backend: str = "gloo"):
        self.rank, self.size, self.tree = rank, size, tree
        self.device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        home = t.device
        t = self._reduce(t.to(self.device))
        return t.to(home)

    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        if not self.tree:
            dist.all_reduce(t)
            return t
        step = 1
        while step < self.size:  # ((p0 + p1) + (p2 + p3)): the order the aligned emulation uses
            if self.rank % (2 * step) == 0:
                other = torch.empty_like(t)
                dist.recv(other, self.rank + step)
                t = t + other
            elif self.rank % (2 * step) == step:
                dist.send(t, self.rank - step)
                break
            step *= 2
        dist.broadcast(t, 0)
        return t


def forward(model, tp: int, alignment: Alignment, order: str = "tree"):
    """Training-engine logits; with moe_fixed_combine off, the rollout side's expert-order combine.
    order="ring" (with tp_aligned_reduction off) reduces TP partials as gloo's ring does."""
    if order == "ring":
        alignment = Alignment(tp_aligned_reduction=False)
    side = sides(alignment, train_tp=tp, rollout_tp=tp, order=order)[
        0 if alignment.moe_fixed_combine else 1
    ]
    return torch.cat(TrainingEngine(model, side, micro_batch=3).forward_logits(SEQS))


def _worker(rank, world, init, out, kind, moe_order, backend):
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init}", rank=rank, world_size=world)
    torch.manual_seed(0)
    if kind == "row":
        g = torch.Generator().manual_seed(0)
        x, w = (
            torch.randn(37, 256, generator=g).to(torch.bfloat16),
            torch.randn(192, 256, generator=g).to(torch.bfloat16),
        )
        P.ALLREDUCE = Collective(rank, world, backend=backend)
        result = P.row_parallel(x, w, world, "ring", True)
    elif kind in ("tp", "tp_tree"):
        P.ALLREDUCE = Collective(rank, world, tree=kind == "tp_tree", backend=backend)
        result = forward(
            tiny(moe=False), world, Alignment(), "tree" if kind == "tp_tree" else "ring"
        )
    else:  # ep
        P.EXPERT_PARALLEL = Collective(rank, world, backend=backend)
        a = Alignment() if moe_order == "rank" else Alignment(moe_fixed_combine=False)
        result = forward(tiny(moe=True), 1, a)
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


def real(kind: str, world: int, moe_order: str = "rank", backend: str = "gloo") -> torch.Tensor:
    """Real ranks (tests/helpers.py: start_ranks) reducing over a real backend."""
    init, out = tempfile.mktemp(), tempfile.mktemp()
    start_ranks(_worker, (world, init, out, kind, moe_order, backend), world)
    return torch.load(out)


# four ranks on a 2-core machine are real multi-process runs: the slow tier (CI runs them)
WORLDS = [2, pytest.param(4, marks=pytest.mark.slow)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", WORLDS)
def test_row_parallel_layer_matches_emulated_ring(world, backend):
    need(backend, world)
    g = torch.Generator().manual_seed(0)
    x, w = (
        torch.randn(37, 256, generator=g).to(torch.bfloat16),
        torch.randn(192, 256, generator=g).to(torch.bfloat16),
    )
    got = real("row", world, backend=backend)
    assert torch.equal(got, P.row_parallel(x, w, world, "ring", True))
    if world == 4:  # the reduction order is real: unsharded and tree orders give other bits
        assert not torch.equal(got, P.linear(x, w, True))
        assert not torch.equal(got, P.row_parallel(x, w, world, "tree", True))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("kind, order", [("tp", "ring"), ("tp_tree", "tree")])
def test_tiny_model_forward_at_tp_matches_emulation(world, kind, order, backend):
    need(backend, world)
    got = real(kind, world, backend=backend)
    model = tiny(moe=False)
    assert torch.equal(got, forward(model, world, Alignment(), order))
    if world == 4:
        assert not torch.equal(got, forward(model, 1, Alignment()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", WORLDS)
def test_expert_parallel_with_fixed_combine_matches_one_device(world, backend):
    need(backend, world)
    model = tiny(moe=True)
    assert torch.equal(real("ep", world, "rank", backend), forward(model, 1, Alignment()))
    unfixed = real("ep", world, "expert", backend)
    assert not torch.equal(unfixed, forward(model, 1, Alignment(moe_fixed_combine=False)))
