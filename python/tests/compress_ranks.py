"""One rank of a multi-process compression test (hccl_rs.hooks, the
ModelReducer), started by conftest.launch(..., script="compress_ranks.py")
like torchrun starts a training script. Each case asserts on its own rank
and prints a JSON result line (``RESULT {...}``)."""

import sys

import numpy as np
import torch
import torch.distributed as dist

import hccl_rs
from hccl_rs import hooks
from hccl_rs.reducer import ModelReducer
from ranks import result

CASES = {}


def case(f):
    CASES[f.__name__] = f
    return f


class Bucket:
    """What a DDP comm hook reads of a GradBucket: index, flat buffer,
    parameters (laid out one after another in the buffer)."""

    def __init__(self, index, buf, params):
        self._index, self._buf, self._params = index, buf, params

    def index(self):
        return self._index

    def buffer(self):
        return self._buf

    def parameters(self):
        return self._params

    def is_last(self):
        return True


def ref_topk(acc, k):
    """Indices of the k largest |acc|, ties to the lowest index (numpy,
    independent of the library)."""
    return np.argsort(-np.abs(acc), kind="stable")[:k]


def grads(rank, step, n):
    """Integer-valued float32 gradients (exact in every sum below)."""
    g = np.random.default_rng(1000 * step + rank).integers(-40, 41, n)
    return g.astype(np.float32)


def floats(b):
    return np.frombuffer(b, np.float32)


@case
def hook_topk(argv):
    """hooks.topk on hand-made buckets: the result equals a dense AllReduce
    (over the DDP process group) of the masked tensors, the residual is the
    rest, every rank gets the same bytes, and a rebuilt bucket layout
    carries each parameter's residual."""
    backend, ratio = argv[0], float(argv[1])
    dist.init_process_group(backend=backend, init_method="env://")
    r, p = dist.get_rank(), dist.get_world_size()
    hook = hooks.topk(ratio)
    sizes = (120, 80)
    params = [torch.empty(n) for n in sizes]
    n = sum(sizes)
    k = hccl_rs.TopK(ratio).k(n)
    res = np.zeros(n, np.float32)
    for step in range(3):
        g = grads(r, step, n)
        acc = g + res
        idx = ref_topk(acc, k)
        masked = np.zeros(n, np.float32)
        masked[idx] = acc[idx]
        res = acc.copy()
        res[idx] = 0
        buf = torch.from_numpy(g.copy())
        out = hook(None, Bucket(0, buf, params)).wait()
        dense = torch.from_numpy(masked)
        dist.all_reduce(dense)
        assert torch.equal(out, dense / p), f"step {step}: hook {out} != dense all_reduce of the masked tensors / {p} {dense / p}"
        fb = hook.state.feedback[0][1]
        assert fb.last_path == "sparse" and fb.last_k == k, (fb.last_path, fb.last_k)
        assert np.array_equal(floats(fb.residual()), res), f"step {step}: residual differs from acc minus the sent elements"
    # Non-integer values: every rank holds the same bytes.
    buf = torch.from_numpy(np.random.default_rng(r).standard_normal(n).astype(np.float32))
    out = hook(None, Bucket(0, buf, params)).wait()
    mine = out.view(torch.int32).clone()
    every = [torch.zeros_like(mine) for _ in range(p)]
    dist.all_gather(every, mine)
    same = all(torch.equal(e, mine) for e in every)
    # DDP's rebuild: two buckets, the parameters regrouped; each parameter's
    # residual moves with it.
    before = floats(hook.state.feedback[0][1].residual()).copy()
    fb1 = hook.state.feedback_for(0, [params[1]])
    fb0 = hook.state.feedback_for(1, [params[0]])
    carried = np.array_equal(floats(fb1.residual()), before[sizes[0] :]) and np.array_equal(floats(fb0.residual()), before[: sizes[0]])
    dist.barrier()
    dist.destroy_process_group()
    result(rank=r, ok=True, same_bytes=same, carried=carried)


@case
def hook_int8(argv):
    """hooks.int8 on integers that quantise exactly (every block's largest
    magnitude 127, so the scale is 1): equals the dense AllReduce, residual 0."""
    dist.init_process_group(backend=argv[0], init_method="env://")
    r, p = dist.get_rank(), dist.get_world_size()
    hook = hooks.int8(block=64)
    n = 256
    g = np.random.default_rng(r).integers(-127, 128, n).astype(np.float32)
    g[::64] = 127
    out = hook(None, Bucket(0, torch.from_numpy(g.copy()), [torch.empty(n)])).wait()
    dense = torch.from_numpy(g.copy())
    dist.all_reduce(dense)
    fb = hook.state.feedback[0][1]
    ok = torch.equal(out, dense / p) and not floats(fb.residual()).any() and fb.last_path == "int8"
    dist.barrier()
    dist.destroy_process_group()
    result(rank=r, ok=bool(ok))


@case
def hook_mismatch(argv):
    """Rank r's bucket has 100 + 20 r elements: every rank's future fails,
    naming both buckets."""
    dist.init_process_group(backend=argv[0], init_method="env://")
    r = dist.get_rank()
    hook = hooks.topk(0.1)
    n = 100 + 20 * r
    buf = torch.arange(n, dtype=torch.float32)
    try:
        hook(None, Bucket(0, buf, [torch.empty(n)])).wait()
    except Exception as e:
        untouched = torch.equal(buf, torch.arange(n, dtype=torch.float32))
        dist.barrier()
        dist.destroy_process_group()
        result(rank=r, message=str(e), untouched=untouched)
        return
    raise AssertionError("a hook with mismatched bucket sizes did not raise")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def batch(rank, step, size=32):
    g = torch.Generator().manual_seed(10_000 * rank + step)
    x = torch.randn(size, 16, generator=g)
    return x, (x[:, :4].sum(1, keepdim=True)).sin()


def all_params(m):
    return torch.cat([q.detach().reshape(-1) for q in m.parameters()])


@case
def ddp_hook(argv):
    """DDP with a compression hook trains: the loss of the last steps is
    below the first steps', and every rank ends with the same parameters."""
    backend, scheme, steps = argv[0], argv[1], int(argv[2])
    dist.init_process_group(backend=backend, init_method="env://")
    r, p = dist.get_rank(), dist.get_world_size()
    ddp = torch.nn.parallel.DistributedDataParallel(model())
    hook = hooks.topk(0.1) if scheme == "topk" else hooks.int8()
    ddp.register_comm_hook(hook.state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    losses = []
    for s in range(steps):
        x, y = batch(r, s)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    mine = all_params(ddp.module)
    every = [torch.zeros_like(mine) for _ in range(p)]
    dist.all_gather(every, mine)
    same = all(torch.equal(e, mine) for e in every)
    paths = sorted({fb.last_path for _, fb in hook.state.feedback.values()})
    dist.barrier()
    dist.destroy_process_group()
    result(rank=r, first=float(np.mean(losses[:5])), last=float(np.mean(losses[-5:])), same=same, paths=paths)


@case
def model_reducer(argv):
    """A plain loop with the ModelReducer (no torch.distributed): trains,
    and every rank ends with the same parameters."""
    scheme, steps = argv[0], int(argv[1])
    comm = hccl_rs.Comm.from_env()
    r, p = comm.rank, comm.size
    m = model()
    comp = {"none": None, "topk": hccl_rs.TopK(0.1), "int8": hccl_rs.Int8()}[scheme]
    red = ModelReducer(comm, m.parameters(), compression=comp, first_bucket_bytes=4096, bucket_cap_bytes=8192)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    losses, paths = [], set()
    for s in range(steps):
        x, y = batch(r, s)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        stats = red.synchronize()
        paths.update(q.split()[0] for q in stats["paths"])
        opt.step()
        losses.append(loss.item())
    mine = all_params(m)
    every = torch.zeros(p * mine.numel())
    comm.all_gather(mine, every)
    same = all(torch.equal(c, mine) for c in every.chunk(p))
    nbuckets = len(red.reducer.buckets)
    red.close()
    comm.barrier()
    comm.destroy()
    result(rank=r, first=float(np.mean(losses[:5])), last=float(np.mean(losses[-5:])), same=same, paths=sorted(paths), buckets=nbuckets)


if __name__ == "__main__":
    torch.set_num_threads(1)
    CASES[sys.argv[1]](sys.argv[2:])
