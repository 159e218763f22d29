"""Open MPI and hccl_rs in the same processes: fp32 sum AllReduce, batches
of each library's op interleaved in shuffled order, so that both see the
same machine at the same minutes (this VM's speed drifts up to 2x between
quarter hours, more than most gaps between the libraries).

    mpirun -n N python bench/mpi_side_by_side.py [ROUNDS] [MIN_BYTES] [MAX_BYTES]

Defaults: 9 rounds, 8 KiB .. 64 MiB (doubling). Run under mpirun's own
defaults (it binds 2 processes on 2 cores one per core and leaves 4
unbound); hccl_rs bootstraps from a root info that rank 0 makes and MPI
broadcasts, over loopback (HCCL_IF_IP, default 127.0.0.1). Both libraries
get the same numpy arrays (huge pages from 4 MiB, numpy's rule, as in
mpi_allreduce.py; BENCH_HUGEPAGES=0 turns that off) and are called from
Python: mpi4py's `Allreduce(x, y)` and `Comm.all_reduce(x, y)`, both out of
place. Each round runs one batch of each (16 MiB of ops, 5..400 ops) after
a barrier; a batch's time per op is the slowest rank's. Prints, per size
(rank 0): the median time per op of each library over the rounds (µs), the
median and quartiles of the per-round ratio Open MPI / hccl_rs (above 1:
hccl_rs is faster), and busbw of each (GB/s, nccl-tests' 2(n-1)/n).
"""
import os
import statistics
import sys

import numpy as np
from mpi4py import MPI

import hccl_rs
from interleave import interleaved, ratio_stats


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    lo = int(sys.argv[2]) if len(sys.argv) > 2 else 8 << 10
    hi = int(sys.argv[3]) if len(sys.argv) > 3 else 64 << 20
    np.core.multiarray._set_madvise_hugepage(os.environ.get("BENCH_HUGEPAGES") != "0")
    os.environ.setdefault("HCCL_IF_IP", "127.0.0.1")
    mpi = MPI.COMM_WORLD
    rank, n = mpi.Get_rank(), mpi.Get_size()
    info = mpi.bcast(hccl_rs.get_root_info() if rank == 0 else None, root=0)
    comm = hccl_rs.Comm.init_root_info(n, info, rank)
    if rank == 0:
        print(f"{'procs':>5} {'bytes':>10} | {'open mpi us':>11} {'hccl_rs us':>11} | "
              f"{'mpi/hccl_rs median (q1 q3)':>27} | busbw GB/s mpi hccl_rs", flush=True)
    size = lo
    while size <= hi:
        x = np.ones(size // 4, dtype=np.float32)
        y = np.empty_like(x)
        batch = max(5, min(400, (16 << 20) // size))
        libs = {
            "mpi": lambda: mpi.Allreduce(x, y, op=MPI.SUM),
            "hccl_rs": lambda: comm.all_reduce(x, y),
        }
        times = interleaved(libs, rounds, batch, mpi.Barrier,
                            lambda t: mpi.allreduce(t, op=MPI.MAX), seed=size)
        if rank == 0:
            ratio, q1, q3 = ratio_stats(times["mpi"], times["hccl_rs"])
            med = {k: statistics.median(v) for k, v in times.items()}
            bus = {k: size / t / 1e9 * 2 * (n - 1) / n for k, t in med.items()}
            print(f"{n:>5} {size:>10} | {med['mpi'] * 1e6:>11.1f} {med['hccl_rs'] * 1e6:>11.1f} | "
                  f"{ratio:>8.3f} ({q1:.3f} {q3:.3f})      | "
                  f"{bus['mpi']:.3f} {bus['hccl_rs']:.3f}", flush=True)
        size *= 2
    comm.destroy()


if __name__ == "__main__":
    main()
