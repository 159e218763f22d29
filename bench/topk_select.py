#!/usr/bin/env python3
"""Top-K selection: hccl-compress's exact quickselect and DGC's sampled
threshold against torch.topk, on the same sizes and ratios.

Run from the repository root:

    cargo build --release -p hccl-compress --example select_bench
    python3 bench/topk_select.py [--sizes 262144,1048576,4194304,16777216] [--ratios 0.001,0.01,0.1] [--rounds 3]

Each round runs the Rust binary (median of 5 selections per size, ratio and
method, after a warm-up) and then torch.topk on |x| of a Gaussian tensor of
the same size (median of 5, after a warm-up), so both see the same machine
load; torch runs on one thread (torch.set_num_threads(1)), as the Rust
selection does. Prints a table of the medians over rounds and the ratios
torch / ours.
"""
import argparse
import json
import math
import statistics
import subprocess
import time

import torch


def torch_topk_ns(n, k, reps=5):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    times = []
    for i in range(reps + 1):
        t = time.perf_counter_ns()
        _, idx = torch.topk(x.abs(), k, sorted=False)
        dt = time.perf_counter_ns() - t
        assert idx.numel() == k
        if i:
            times.append(dt)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="262144,1048576,4194304,16777216")
    ap.add_argument("--ratios", default="0.001,0.01,0.1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default="target/release/examples/select_bench")
    a = ap.parse_args()
    torch.set_num_threads(1)
    sizes = [int(s) for s in a.sizes.split(",")]
    ratios = [float(r) for r in a.ratios.split(",")]
    res = {}
    for _ in range(a.rounds):
        out = subprocess.run([a.bin, a.sizes, a.ratios, "5"], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            res.setdefault((r["n"], r["ratio"], r["method"]), []).append(r["median_ns"])
        for n in sizes:
            for ratio in ratios:
                k = min(n, math.ceil(ratio * n))  # as TopK::k
                res.setdefault((n, ratio, "torch.topk"), []).append(torch_topk_ns(n, k))
    print("| elements | ratio | exact (ms) | sampled (ms) | torch.topk (ms) | torch / exact | torch / sampled |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        for ratio in ratios:
            m = {meth: statistics.median(res[(n, ratio, meth)]) / 1e6
                 for meth in ("exact", "sampled", "torch.topk")}
            print(f"| {n} | {ratio:g} | {m['exact']:.2f} | {m['sampled']:.2f} | "
                  f"{m['torch.topk']:.2f} | {m['torch.topk'] / m['exact']:.2f} | "
                  f"{m['torch.topk'] / m['sampled']:.2f} |")


if __name__ == "__main__":
    main()
