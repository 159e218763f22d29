"""The efficiency table, measured: a small MLP trained on synthetic data on
the CPU by P processes over TCP (hccl_rs.Comm, loopback sockets only:
HCCL_SHM_DISABLE=1, HCCL_INTRA_CMA_ENABLE=0), in these configurations:

- baseline: after backward, one blocking AllReduce per gradient;
- overlap: hccl_rs.reducer.ModelReducer (DDP's buckets: first 1 MiB, then
  25 MiB; a bucket is reduced on the reducer's thread as soon as backward
  has filled it);
- overlap + Top-K 1% (hccl_rs.TopK(0.01), error feedback, exact selection);
- overlap + INT8 (hccl_rs.Int8(), blocks of 256);
- the Top-K ratio ablation: 0.1%, 1%, 10%.

Per configuration and rank: the median step time (forward, backward,
gradient sync, SGD step), the median exposed communication (the time after
backward until the reduced gradients are in p.grad: the AllReduce loop, or
ModelReducer.synchronize), the bytes this process's TCP sockets sent per
timed step (the kernel's bytes_sent, `ss -tinp`, read before and after the
timed steps: payload bytes on the wire, headers not counted) and the final
loss (the mean training loss of the last 5 steps, over the ranks). Every
configuration starts from the same seed and sees the same batches.

    python bench/efficiency.py [--ranks 2,4] [--runs 3] [--steps 40] [--json out.json]

runs each world size --runs times (every run starts P fresh processes that
go through all configurations, in an order rotated per run) and prints
Markdown tables of the medians over runs (step and exposed time: the
slowest rank's; bytes: the mean over ranks). Needs the hccl_rs extension
(cd python && maturin develop --release) and torch.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

CONFIGS = ["baseline", "overlap", "topk_1%", "int8", "topk_0.1%", "topk_10%"]
MAIN = ["baseline", "overlap", "topk_1%", "int8"]
ABLATION = ["topk_0.1%", "topk_1%", "topk_10%"]
LABEL = {
    "baseline": "baseline (AllReduce per gradient after backward)",
    "overlap": "overlap (buckets)",
    "topk_1%": "overlap + Top-K 1%",
    "int8": "overlap + INT8",
    "topk_0.1%": "overlap + Top-K 0.1%",
    "topk_10%": "overlap + Top-K 10%",
}


def bytes_sent():
    """Sum of bytes_sent over this process's TCP sockets (ss -tinp)."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    me = f"pid={os.getpid()},"
    total, ours = 0, False
    for line in out.splitlines():
        if not line[:1].isspace():
            ours = me in line
        if ours:
            for w in line.split():
                if w.startswith("bytes_sent:"):
                    total += int(w[len("bytes_sent:") :])
    return total


# -- one rank -------------------------------------------------------------


def worker(args):
    import torch

    import hccl_rs
    from hccl_rs.reducer import ModelReducer

    torch.set_num_threads(1)
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    dims = [args.input] + [args.hidden] * args.layers + [args.classes]

    def model():
        torch.manual_seed(0)
        layers = []
        for a, b in zip(dims, dims[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    # Synthetic classification: Gaussian clusters (a random centre per
    # class, `separation` times a standard normal, plus unit noise); each
    # rank its own batches, the same for every configuration.
    centers = torch.randn(args.classes, args.input, generator=torch.Generator().manual_seed(1)) * args.separation
    total = args.warmup + args.steps
    batches = []
    for s in range(total):
        g = torch.Generator().manual_seed(100_000 * r + s)
        y = torch.randint(0, args.classes, (args.batch,), generator=g)
        batches.append((centers[y] + torch.randn(args.batch, args.input, generator=g), y))

    def run(name):
        m = model()
        params = list(m.parameters())
        opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
        red = None
        if name != "baseline":
            comp = None
            if name.startswith("topk_"):
                comp = hccl_rs.TopK(float(name[5:-1]) / 100)
            elif name == "int8":
                comp = hccl_rs.Int8()
            red = ModelReducer(comm, params, compression=comp, first_bucket_bytes=args.first_bucket_mb << 20, bucket_cap_bytes=args.bucket_cap_mb << 20)
        steps, exposed, losses, payload = [], [], [], []
        comm.barrier()
        for s in range(total):
            if s == args.warmup:
                comm.barrier()
                sent0 = bytes_sent()
            x, y = batches[s]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            t1 = time.perf_counter()
            if red is None:
                for q in params:
                    comm.all_reduce(q.grad)
                    q.grad.div_(p)
                pay = sum(4 * q.numel() for q in params)
            else:
                pay = red.synchronize()["payload_bytes"]
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            losses.append(loss.item())
            if s >= args.warmup:
                steps.append(t3 - t0)
                exposed.append(t2 - t1)
                payload.append(pay)
        sent = bytes_sent() - sent0
        if red is not None:
            red.close()
        return {
            "step_s": statistics.median(steps),
            "exposed_s": statistics.median(exposed),
            "wire_bytes_per_step": sent / args.steps,
            "payload_bytes_per_step": statistics.median(payload),
            "final_loss": statistics.mean(losses[-5:]),
            "first_loss": losses[0],
        }

    order = CONFIGS[args.rotate % len(CONFIGS) :] + CONFIGS[: args.rotate % len(CONFIGS)]
    out = {}
    for name in order:
        out[name] = run(name)
    # Every rank's numbers to rank 0 (float64 AllGather, in CONFIGS order).
    import numpy as np

    keys = ["step_s", "exposed_s", "wire_bytes_per_step", "payload_bytes_per_step", "final_loss", "first_loss"]
    mine = np.array([out[c][k] for c in CONFIGS for k in keys], np.float64)
    every = np.zeros(p * mine.size, np.float64)
    comm.all_gather(mine, every)
    every = every.reshape(p, len(CONFIGS), len(keys))
    if r == 0:
        res = {c: {k: every[:, i, j].tolist() for j, k in enumerate(keys)} for i, c in enumerate(CONFIGS)}
        print("RESULT " + json.dumps(res), flush=True)
    comm.barrier()
    comm.destroy()


# -- the driver -----------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(p, args, rotate):
    port = free_port()
    procs = []
    for r in range(p):
        env = dict(os.environ)
        env.update(
            RANK=str(r),
            WORLD_SIZE=str(p),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            HCCL_IF_IP="127.0.0.1",
            HCCL_SHM_DISABLE="1",
            HCCL_INTRA_CMA_ENABLE="0",
            HCCL_RS_TORCH="0",
        )
        cmd = [sys.executable, __file__, "--worker", f"--rotate={rotate}"] + [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in WORKER_ARGS]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    res = None
    for r, pr in enumerate(procs):
        out, err = pr.communicate(timeout=1800)
        if pr.returncode != 0:
            raise SystemExit(f"rank {r} of {p} exited {pr.returncode}:\n{err[-3000:]}")
        for line in out.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
    return res


WORKER_ARGS = ["steps", "warmup", "batch", "input", "hidden", "layers", "classes", "separation", "lr", "first_bucket_mb", "bucket_cap_mb"]


def med(xs):
    return statistics.median(xs)


def summarize(runs):
    """Per config: medians over runs of (slowest rank's step/exposed, mean
    over ranks of bytes, mean over ranks of the loss)."""
    s = {}
    for c in CONFIGS:
        per = [r[c] for r in runs]
        s[c] = {
            "step_ms": med([max(x["step_s"]) * 1e3 for x in per]),
            "exposed_ms": med([max(x["exposed_s"]) * 1e3 for x in per]),
            "wire_bytes": med([statistics.mean(x["wire_bytes_per_step"]) for x in per]),
            "payload_bytes": med([statistics.mean(x["payload_bytes_per_step"]) for x in per]),
            "final_loss": med([statistics.mean(x["final_loss"]) for x in per]),
            "first_loss": med([statistics.mean(x["first_loss"]) for x in per]),
        }
    return s


def mb(b):
    return f"{b / 1e6:.3f}" if b < 1e7 else f"{b / 1e6:.1f}"


def tables(by_p, args, nparams):
    print(f"\nMLP {args.input}-" + "-".join([str(args.hidden)] * args.layers) + f"-{args.classes} ({nparams / 1e6:.2f} M parameters, {4 * nparams / 1e6:.1f} MB of fp32 gradients), batch {args.batch} per rank, SGD lr {args.lr} momentum 0.9, Gaussian clusters (separation {args.separation}), {args.warmup} warm-up + {args.steps} timed steps, medians of {args.runs} runs\n")
    print("| ranks | configuration | step (ms) | exposed comm (ms) | sent on the wire per step and rank (MB) | payload per step and rank (MB) | final loss |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for p, s in by_p.items():
        for c in MAIN:
            x = s[c]
            print(f"| {p} | {LABEL[c]} | {x['step_ms']:.1f} | {x['exposed_ms']:.1f} | {mb(x['wire_bytes'])} | {mb(x['payload_bytes'])} | {x['final_loss']:.4f} |")
    print("\nTop-K ratio ablation (same runs; initial loss " + ", ".join(f"{s['baseline']['first_loss']:.4f} at {p} ranks" for p, s in by_p.items()) + "):\n")
    print("| ranks | Top-K ratio | final loss | sent on the wire per step and rank (MB) | step (ms) | exposed comm (ms) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for p, s in by_p.items():
        for c in ABLATION:
            x = s[c]
            print(f"| {p} | {c[5:]} | {x['final_loss']:.4f} | {mb(x['wire_bytes'])} | {x['step_ms']:.1f} | {x['exposed_ms']:.1f} |")
        print(f"| {p} | (dense: overlap) | {s['overlap']['final_loss']:.4f} | {mb(s['overlap']['wire_bytes'])} | {s['overlap']['step_ms']:.1f} | {s['overlap']['exposed_ms']:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rotate", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ranks", default="2,4", help="world sizes, comma-separated (default 2,4)")
    ap.add_argument("--runs", type=int, default=3, help="runs per world size (default 3)")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per configuration (default 40)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5; the reducer rebuilds its buckets after the first)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3, help="hidden layers (default 3)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--separation", type=float, default=0.2, help="class centres: this times a standard normal vector (default 0.2: half-way through learning at the last step)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--first-bucket-mb", type=int, default=1, help="DDP's first bucket (default 1 MiB)")
    ap.add_argument("--bucket-cap-mb", type=int, default=25, help="DDP's bucket cap (default 25 MiB)")
    ap.add_argument("--json", help="also write every run's numbers here")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    dims = [args.input] + [args.hidden] * args.layers + [args.classes]
    nparams = sum(a * b + b for a, b in zip(dims, dims[1:]))
    raw, by_p = {}, {}
    for p in [int(x) for x in args.ranks.split(",")]:
        runs = []
        for i in range(args.runs):
            t = time.time()
            runs.append(launch(p, args, i))
            print(f"# {p} ranks, run {i + 1}/{args.runs}: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
        raw[p] = runs
        by_p[p] = summarize(runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": raw, "medians": by_p}, f, indent=1)
    tables(by_p, args, nparams)


if __name__ == "__main__":
    main()
