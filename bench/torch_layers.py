"""What the Python and torch layers cost: `dist.all_reduce(x)` on the
hccl_rs backend against the same group's `Comm.all_reduce(x, y)` (the Rust
collective `hccl test --transport tcp` times, out of place, on the same
memory), in the same processes, batches interleaved in shuffled order.

    python bench/torch_layers.py [ROUNDS] [MIN_BYTES] [MAX_BYTES]

Run as N processes with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set
(compare_torch.sh starts them). Defaults: 15 rounds, 1 .. 16 MiB. Separate
runs of `hccl test` and of torch_allreduce.py differ by up to 2x on this VM
from minute to minute (bench/torch.md), more than the layers cost; here
both see the same minutes. Each round runs one batch of each (16 MiB of
ops, 5..400) after a barrier; a batch's time per op is the slowest rank's.
Prints per size (rank 0): the medians (µs) and the median and quartiles of
the per-round ratio Comm / dist (1: the layers cost nothing; 0.9: dist
takes 11 % longer).
"""
import os
import statistics
import sys

import numpy as np
import torch
import torch.distributed as dist

import hccl_rs  # noqa: F401  (registers the backend)
from interleave import interleaved, ratio_stats


def slowest(t):
    """The largest of every rank's `t`."""
    x = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    return x.item()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    lo = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    hi = int(sys.argv[3]) if len(sys.argv) > 3 else 16 << 20
    np.core.multiarray._set_madvise_hugepage(os.environ.get("BENCH_HUGEPAGES") != "0")
    dist.init_process_group("hccl_rs")
    comm = dist.distributed_c10d._get_default_group().comm
    n, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        print(f"{'procs':>5} {'bytes':>10} | {'dist us':>9} {'Comm us':>9} | Comm/dist median (q1 q3)", flush=True)
    size = lo
    while size <= hi:
        x = torch.from_numpy(np.ones(size // 4, dtype=np.float32))
        xn, y = x.numpy(), np.empty(size // 4, dtype=np.float32)
        batch = max(5, min(400, (16 << 20) // size))
        ways = {"dist": lambda: dist.all_reduce(x), "comm": lambda: comm.all_reduce(xn, y)}
        times = interleaved(ways, rounds, batch, dist.barrier, slowest, seed=size)
        if rank == 0:
            ratio, q1, q3 = ratio_stats(times["comm"], times["dist"])
            med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
            print(f"{n:>5} {size:>10} | {med['dist']:>9.1f} {med['comm']:>9.1f} | "
                  f"{ratio:.3f} ({q1:.3f} {q3:.3f})", flush=True)
        size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
