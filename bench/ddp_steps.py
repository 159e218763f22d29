"""DDP training steps per second on CPU: torch.distributed Gloo or hccl_rs.

    python bench/ddp_steps.py BACKEND MODEL STEPS

BACKEND: "gloo" or "hccl_rs"; MODEL: "small" (the DDP test's model,
python/tests/ranks.py: Linear(8, 16), Tanh, Linear(16, 1); 161 parameters,
one 644-byte gradient AllReduce per step) or "mlp" (four Linear(512, 512)
with ReLU; 1.05 M parameters, 4.2 MB of gradients per step, in DDP's 25 MB
buckets: one AllReduce). Each rank trains on its own 16-sample batch (SGD,
MSE). Run as N processes with RANK / WORLD_SIZE / MASTER_* set
(compare_torch.sh starts them). After STEPS // 10 warm-up steps, STEPS
steps are timed; rank 0 prints: model steps seconds steps_per_s (the
slowest rank's time).
"""
import sys
import time

import torch
import torch.distributed as dist


def build(name):
    torch.manual_seed(0)
    if name == "small":
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)), 8
    if name == "mlp":
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1]), 512
    raise SystemExit(f"MODEL {name!r}: accepted: small, mlp")


def main():
    backend, name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if backend != "gloo":
        import hccl_rs  # noqa: F401  (registers "hccl_rs")
    # One intra-op thread: the ranks share the host's cores, and torch's
    # default (all cores per process) would oversubscribe them.
    torch.set_num_threads(1)
    dist.init_process_group(backend)
    model, width = build(name)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randn(16, width, generator=g)
    y = torch.randn(16, model[-1].out_features, generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()

    for _ in range(max(3, steps // 10)):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"{name} {steps} {t.item():.3f} {steps / t.item():.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
