"""Open MPI MPI_Allreduce (mpi4py, fp32 sum), 8 KiB .. 64 MiB; one line per size.

Run by compare_tcp.sh under `mpirun -n N`.
Prints: bytes time_us algbw_GB/s busbw_GB/s (rank 0 only; max time over ranks).
"""
import os
import sys
import time

import numpy as np
from mpi4py import MPI


def main():
    lo, hi = int(sys.argv[1]), int(sys.argv[2])
    # Arrays from 4 MiB sit on transparent huge pages (numpy's default);
    # BENCH_HUGEPAGES=0 turns that off, as in tcp_allreduce_bench.
    np.core.multiarray._set_madvise_hugepage(os.environ.get("BENCH_HUGEPAGES") != "0")
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    size = lo
    while size <= hi:
        x = np.ones(size // 4, dtype=np.float32)
        y = np.empty_like(x)
        # Same rule as tcp_allreduce_bench: short ops get more iterations
        # (a few ms of 8 KiB ops measured a CPU still waking up).
        iters = max(5, min(2000, (256 << 20) // size))
        for _ in range(max(3, iters // 10)):
            comm.Allreduce(x, y, op=MPI.SUM)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.Allreduce(x, y, op=MPI.SUM)
        t = comm.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX)
        if comm.Get_rank() == 0:
            algbw = size / t / 1e9
            print(f"{size} {t * 1e6:.1f} {algbw:.3f} {algbw * 2 * (n - 1) / n:.3f}", flush=True)
        size *= 2


if __name__ == "__main__":
    main()
