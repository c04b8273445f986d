"""The fused split-KV fold and the split-K matmul (issue 52): bits equal at every launch setting.

tests/numerics/test_gpu.py's grid runs split-KV decode over 4,918 rows with the default fold, the
separate `_combine` launch; the fused fold (the last program of a run folds, asked for with
`fused=True`) is not covered there. Same fixtures as tests/numerics/test_gpu.py (`_packed_and_paged`, LENS, sizes).
"""

import itertools

import pytest
import torch
from test_gpu import GATE_UP, LENS, O_PROJ, QKV, H, _packed_and_paged  # noqa: F401

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytestmark = cuda


def test_fused_fold_gives_the_training_bits_at_every_launch_setting():
    """The last program of each run folds the run's tile states (no second launch): every row of
    training-split and decode-split, at every load path, tiles per program, stages and unroll."""
    from topl.kernels.gpu.attention import attention

    q, k, v, starts, ck, cv, table, q_seq, q_pos = _packed_and_paged(LENS)
    ref = attention(q, k, v, q_seq, q_pos, kv_start=starts, split=False, whole=False, tma=False)
    rows = list(range(len(q_seq)))
    dtable = table[torch.tensor(q_seq, device="cuda")]
    for tma, tpp, st, u in itertools.product((None, False, True), (None, 1, 3), (1, 2), (8, 32)):
        kw = {"split": True, "fused": True, "tma": tma, "tiles_per_prog": tpp, "stages": st}
        kw["combine"] = (8, 128, u)
        for path, out in (
            ("train", attention(q, k, v, q_seq, q_pos, kv_start=starts, **kw)),
            ("decode", attention(q, ck, cv, rows, q_pos, block_table=dtable, **kw)),
        ):
            bad = (out != ref).any(-1).any(-1)
            assert not bad.any(), f"{path} {kw}: {int(bad.sum())} rows differ"


def test_small_decode_batches_give_the_training_bits_folded_either_way():
    """1-4 request decode batches, eager and graph-launched: the default split-KV (the separate
    two-phase fold) and the fused fold, call after call, give the training kernel's rows."""
    from topl.kernels.gpu.attention import attention

    q, k, v, starts, *_, q_seq, q_pos = _packed_and_paged(LENS, seed=2)
    ref = attention(q, k, v, q_seq, q_pos, kv_start=starts, split=False)
    last = [int(starts[s]) + n - 1 for s, n in enumerate(LENS)]
    picks = ([6], [6, 5], [4, 5, 6, 3], [0, 6, 1, 5])
    for pick, graph, fused in itertools.product(picks, (False, True), (None, True)):
        idx = torch.tensor([last[i] for i in pick], device="cuda")
        for _ in range(3):  # the arrival counts are left at zero for the next call
            out = attention(
                q[idx], k, v, list(range(len(pick))), q_pos[idx], kv_start=starts[pick],
                graph=graph, fused=fused,
            )  # fmt: skip
            assert torch.equal(out, ref[idx]), (pick, graph, fused)


@pytest.mark.parametrize("k, n", [QKV, O_PROJ, GATE_UP])
def test_bi_matmul_split_k_gives_the_bits_of_every_other_plan(k, n):
    """Small M splits K over programs (chunks of K_CHUNK, partials added in chunk order by the
    last program): every split, tile width and stage count gives the rows of the large-M TMA
    plan, call after call."""
    from topl.kernels.gpu.mm_plans import SMALL_BN
    from topl.kernels.gpu.ops import bi_matmul

    torch.manual_seed(0)
    x = torch.randn(1000, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    big = bi_matmul(x, w, graph=True)
    for m in (1, 16, 65, 128, 256):
        assert torch.equal(bi_matmul(x[:m], w), big[:m]), m
        assert torch.equal(bi_matmul(x[:m], w, graph=True), big[:m]), m
        for bn, cpp, st in itertools.product(SMALL_BN, (1, 2, 0), (2, 3)):
            for _ in range(2):
                got = bi_matmul(x[:m], w, plan=(64, bn, 128, 4, st), tma=False, split=cpp)
                assert torch.equal(got, big[:m]), (m, bn, cpp, st)
        # the transposed tile: tokens on the MMA's narrow side, pointer- or TMA-fed, split or not
        for bt, cpp, desc in itertools.product((16, 64), (1, 0), (False, True)):
            for _ in range(2):
                got = bi_matmul(
                    x[:m], w, plan=(bt, 64, 128, 4, 5), tma=False, split=cpp, swap=True, desc=desc
                )
                assert torch.equal(got, big[:m]), ("swap", m, bt, cpp, desc)


def test_the_k_chunk_is_the_reduction_order():
    """Only K_CHUNK (and K) sets an element's additions: another chunk gives other bits."""
    from topl.kernels.gpu.ops import bi_matmul

    torch.manual_seed(0)
    x = torch.randn(256, QKV[0], device="cuda", dtype=torch.bfloat16)
    w = torch.randn(QKV[1], QKV[0], device="cuda", dtype=torch.bfloat16) * 0.02
    plan = {"plan": (128, 128, 64, 8, 3), "tma": False, "split": 0}
    assert not torch.equal(bi_matmul(x, w, kc=512, **plan), bi_matmul(x, w, **plan))
