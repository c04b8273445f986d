"""NCCL's own all-reduce against the orders topl emulates, with NCCL's algorithm / protocol /
channel settings pinned and unpinned.

Each rank fills a tensor from its own seed; rank 0 rebuilds every rank's partial and compares the
all-reduced result bit for bit with: `seq` ((p0 + p1) + p2 ...), `tree` (pairwise, the aligned
reduction) and `ring` (gloo's chunked ring, kernels/primitives.py:row_parallel). One process per GPU;
every configuration runs in fresh processes (NCCL reads its env at communicator creation).
With 2 ranks every order is one addition, so all columns agree by arithmetic; >= 3 ranks show
which order NCCL picked.

    NCCL_NVLS_ENABLE=0 python scripts/bench_nccl.py --world 2 --out nccl.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from topl.kernels import primitives as P

CONFIGS = {
    "unpinned": {},
    "ring": {"NCCL_ALGO": "Ring"},
    "tree": {"NCCL_ALGO": "Tree"},
    "ring_simple_1ch": {
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "Simple",
        "NCCL_MIN_NCHANNELS": "1",
        "NCCL_MAX_NCHANNELS": "1",
    },
    "ll": {"NCCL_PROTO": "LL"},
    "ll128": {"NCCL_PROTO": "LL128"},
}
SIZES = (1_000, 100_000, 4_000_000)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# NVLink multicast stays off on lent machines (device notes); the user's env may add more pins.
BASE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def partial(rank: int, n: int, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(n, generator=g).to(dtype)


def orders(parts: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    seq = parts[0]
    for p in parts[1:]:
        seq = seq + p
    return {"seq": seq, "tree": P._tree(list(parts)), "ring": P.ring(parts)}


def _worker(rank: int, world: int, init: str, out: str, env: dict) -> None:
    os.environ.update({**BASE_ENV, **env})
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=rank, world_size=world)
    rows = []
    for dname, dtype in DTYPES.items():
        for n in SIZES:
            t = partial(rank, n, dtype).cuda()
            dist.all_reduce(t)
            if rank == 0:
                got = t.cpu()
                ref = orders([partial(r, n, dtype) for r in range(world)])
                row = {"dtype": dname, "elements": n}
                row.update({k: bool(torch.equal(got, v)) for k, v in ref.items()})
                row["max_abs_vs_seq"] = float((got.float() - ref["seq"].float()).abs().max())
                rows.append(row)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=torch.cuda.device_count())
    ap.add_argument("--out", default="nccl_orders.json")
    args = ap.parse_args()
    if args.world < 2 or torch.cuda.device_count() < args.world:
        raise SystemExit(
            f"needs {max(args.world, 2)} CUDA GPUs; this host has {torch.cuda.device_count()}"
        )
    result = {
        "world": args.world,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "configs": {},
    }
    for name, env in CONFIGS.items():
        init, out = tempfile.mktemp(), tempfile.mktemp()
        mp.spawn(_worker, args=(args.world, init, out, env), nprocs=args.world, join=True)
        with open(out) as f:
            result["configs"][name] = {"env": env, "rows": json.load(f)}
        rows = result["configs"][name]["rows"]
        match = {k: all(r[k] for r in rows) for k in ("seq", "tree", "ring")}
        print(f"{name:18s} {env or '(NCCL picks)'}  equal to: {match}", flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
