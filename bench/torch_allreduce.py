"""torch.distributed fp32 sum AllReduce, 8 KiB .. 64 MiB; one line per size.

    python bench/torch_allreduce.py MIN_BYTES MAX_BYTES [BACKEND]

BACKEND: "gloo" (default) or "hccl_rs" (this repo's backend; the hccl_rs
package must be installed). Run as N processes with RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT in the environment (compare_tcp.sh and
compare_torch.sh start them). Prints: bytes time_us algbw_GB/s busbw_GB/s
(rank 0 only; mean time per op, max over ranks; G = 10^9, nccl-tests'
busbw = algbw * 2(n-1)/n).
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist


def main():
    lo, hi = int(sys.argv[1]), int(sys.argv[2])
    backend = sys.argv[3] if len(sys.argv) > 3 else "gloo"
    if backend != "gloo":
        import hccl_rs  # noqa: F401  (registers "hccl_rs")
    # numpy allocates the tensors, so the page-size rule is the same as in
    # the other programs (huge pages from 4 MiB unless BENCH_HUGEPAGES=0).
    np.core.multiarray._set_madvise_hugepage(os.environ.get("BENCH_HUGEPAGES") != "0")
    dist.init_process_group(backend)
    n = dist.get_world_size()
    size = lo
    while size <= hi:
        x = torch.from_numpy(np.ones(size // 4, dtype=np.float32))
        # Same rule as tcp_allreduce_bench: short ops get more iterations
        # (a few ms of 8 KiB ops measured a CPU still waking up).
        iters = max(5, min(2000, (256 << 20) // size))
        for _ in range(max(3, iters // 10)):
            dist.all_reduce(x)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            algbw = size / t.item() / 1e9
            print(f"{size} {t.item() * 1e6:.1f} {algbw:.3f} {algbw * 2 * (n - 1) / n:.3f}", flush=True)
        size *= 2
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
