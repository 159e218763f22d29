"""One rank of a multi-process test, started by conftest.launch like torchrun
starts a training script: ``python ranks.py CASE [ARGS] [--init=tcp://...
--rank=R]``. Each case asserts on its own rank and prints a JSON result line
(``RESULT {...}``) for the test to compare across ranks."""

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import hccl_rs  # noqa: F401  (registers backend "hccl")

CASES = {}


def case(f):
    CASES[f.__name__] = f
    return f


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def init(argv, backend="hccl"):
    """init_process_group from the environment (env://) or from --init/--rank."""
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--"))
    if "init" in opts:
        dist.init_process_group(backend, init_method=opts["init"], rank=int(opts["rank"]), world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group(backend=backend, init_method="env://")
    return [a for a in argv if not a.startswith("--")]


TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8}


def inp(rank, n, dtype):
    """Rank `rank`'s input: small integers, exact in every dtype."""
    return (torch.arange(n) % 5 + rank + 1).to(dtype)


def ref(p, n):
    """Every rank's input as float64 numpy rows."""
    return np.stack([inp(r, n, torch.float64).numpy() for r in range(p)])


def eq(t, want, what):
    got = t.to(torch.float64).numpy()
    assert np.array_equal(got, np.asarray(want, np.float64)), f"{what}: {got} != {want}"


@case
def collectives(argv):
    """Every collective (torch.distributed API) against numpy, every dtype given."""
    dtypes = init(argv)[0].split(",")
    r, p = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "hccl"
    n = 4 * p
    R = ref(p, n)
    for name in dtypes:
        dt = TORCH_DTYPES[name]
        x = inp(r, n, dt)
        # Integer products wrap (two's complement), as numpy's in the dtype.
        prod = R.prod(0) if dt.is_floating_point else R.astype(x.numpy().dtype).prod(0, dtype=x.numpy().dtype)
        ops = [(dist.ReduceOp.SUM, R.sum(0)), (dist.ReduceOp.MAX, R.max(0)), (dist.ReduceOp.MIN, R.min(0)), (dist.ReduceOp.PRODUCT, prod)]
        if dt.is_floating_point:
            ops.append((dist.ReduceOp.AVG, R.sum(0) / p))
        for op, want in ops:
            t = x.clone()
            dist.all_reduce(t, op=op)
            eq(t, want, f"all_reduce {op} {name}")
        # async all_reduce
        t = x.clone()
        w = dist.all_reduce(t, async_op=True)
        assert w.wait()
        eq(t, R.sum(0), f"async all_reduce {name}")
        # broadcast
        t = x.clone()
        dist.broadcast(t, src=p - 1)
        eq(t, R[p - 1], f"broadcast {name}")
        # all_gather (list) and into one tensor
        outs = [torch.zeros(n, dtype=dt) for _ in range(p)]
        dist.all_gather(outs, x)
        for i in range(p):
            eq(outs[i], R[i], f"all_gather {name}")
        flat = torch.zeros(n * p, dtype=dt)
        gather_base = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        gather_base(flat, x)
        eq(flat, R.reshape(-1), f"all_gather_into_tensor {name}")
        # reduce_scatter (list) and from one tensor
        out = torch.zeros(4, dtype=dt)
        dist.reduce_scatter(out, list(x.chunk(p)))
        eq(out, R.sum(0)[4 * r : 4 * r + 4], f"reduce_scatter {name}")
        rs_base = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        out = torch.zeros(4, dtype=dt)
        rs_base(out, x)
        eq(out, R.sum(0)[4 * r : 4 * r + 4], f"reduce_scatter_tensor {name}")
        # all_to_all (list) and single
        outs = [torch.zeros(4, dtype=dt) for _ in range(p)]
        dist.all_to_all(outs, list(x.chunk(p)))
        for i in range(p):
            eq(outs[i], R[i][4 * r : 4 * r + 4], f"all_to_all {name}")
        out = torch.zeros(n, dtype=dt)
        dist.all_to_all_single(out, x)
        eq(out, np.concatenate([R[i][4 * r : 4 * r + 4] for i in range(p)]), f"all_to_all_single {name}")
        # reduce, gather, scatter to/from root p-1
        root = p - 1
        t = x.clone()
        dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
        if r == root:
            eq(t, R.sum(0), f"reduce {name}")
        gl = [torch.zeros(n, dtype=dt) for _ in range(p)] if r == root else None
        dist.gather(x, gl, dst=root)
        if r == root:
            for i in range(p):
                eq(gl[i], R[i], f"gather {name}")
        out = torch.zeros(n, dtype=dt)
        dist.scatter(out, [inp(i + 10, n, dt) for i in range(p)] if r == root else None, src=root)
        eq(out, inp(r + 10, n, torch.float64).numpy(), f"scatter {name}")
        # send / recv around a ring (even ranks send first)
        if p > 1:
            got = torch.zeros(n, dtype=dt)
            if r % 2 == 0:
                dist.send(x, (r + 1) % p)
                dist.recv(got, (r - 1) % p)
            else:
                dist.recv(got, (r - 1) % p)
                dist.send(x, (r + 1) % p)
            eq(got, R[(r - 1) % p], f"send/recv {name}")
    dist.barrier()
    # new_group: the even ranks.
    evens = list(range(0, p, 2))
    g = dist.new_group(evens)
    if r in evens:
        t = torch.ones(3)
        dist.all_reduce(t, group=g)
        eq(t, [len(evens)] * 3, "new_group all_reduce")
    # An overlapping group made after it: members with different group
    # histories (rank 2 is in both) must still find one another.
    if p >= 3:
        upper = list(range(1, p))
        g2 = dist.new_group(upper)
        if r in upper:
            t = torch.ones(2)
            dist.all_reduce(t, group=g2)
            eq(t, [len(upper)] * 2, "overlapping new_group all_reduce")
    # 0-dim tensors (a loss, a flag), as with Gloo.
    s = torch.tensor(float(r + 1))
    dist.all_reduce(s)
    eq(s.reshape(1), [p * (p + 1) / 2], "0-dim all_reduce")
    s = torch.tensor(float(r))
    dist.broadcast(s, 0)
    eq(s.reshape(1), [0.0], "0-dim broadcast")
    # bool: SUM is logical or, PRODUCT logical and; every byte stays 0 or 1.
    b = torch.tensor([True, r == 0, False])
    dist.all_reduce(b)
    eq(b.view(torch.uint8), [1, 1, 0], "bool all_reduce SUM")
    b = torch.tensor([True, r == 0, False])
    dist.all_reduce(b, op=dist.ReduceOp.PRODUCT)
    eq(b.view(torch.uint8), [1, int(p == 1), 0], "bool all_reduce PRODUCT")
    # Rank 0 hosts the store: it leaves last.
    dist.barrier()
    dist.destroy_process_group()
    result(rank=r, ok=True)


@case
def mismatch(argv):
    """Ranks call all_reduce with different shapes: every rank raises."""
    init(argv)
    r = dist.get_rank()
    try:
        dist.all_reduce(torch.zeros(10 + r))
    except hccl_rs.HcclError as e:
        result(rank=r, code=e.code, message=str(e))
        return
    raise AssertionError("all_reduce with mismatched shapes did not raise")


@case
def dead_peer(argv):
    """The last rank exits after init; the others' next all_reduce raises."""
    init(argv)
    r, p = dist.get_rank(), dist.get_world_size()
    dist.barrier()
    if r == p - 1:
        os._exit(3)
    try:
        dist.all_reduce(torch.ones(1000))
    except hccl_rs.HcclError as e:
        result(rank=r, code=e.code, message=str(e))
        return
    raise AssertionError("all_reduce with a dead peer did not raise")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def batch(step, size=16):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, 8, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def train(m, steps, shard=None):
    """SGD on MSE; `shard=(rank, p)` takes this rank's slice of each batch."""
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for s in range(steps):
        x, y = batch(s)
        if shard is not None:
            r, p = shard
            x, y = x.chunk(p)[r], y.chunk(p)[r]
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return m


@case
def ddp(argv):
    """DDP on a small model: prints the parameters after training."""
    steps = int(init(argv)[0])
    r, p = dist.get_rank(), dist.get_world_size()
    m = torch.nn.parallel.DistributedDataParallel(model())
    train(m, steps, (r, p))
    params = torch.cat([q.detach().reshape(-1) for q in m.module.parameters()])
    dist.barrier()
    dist.destroy_process_group()
    result(rank=r, params=params.tolist())


@case
def ddp_dead_peer(argv):
    """DDP training; the last rank is killed (SIGKILL, as a launcher or the
    OOM killer kills it) at the start of step 3: the others' backward
    raises, naming the lost rank, and they exit normally. DDP's reducer
    took the error for the bucket's tensors and the survivor died with
    SIGSEGV."""
    import signal

    init(argv)
    r, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(r)
    m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for step in range(1000):
        if r == p - 1 and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            opt.zero_grad()
            m(torch.randn(8, 64)).sum().backward()
            opt.step()
        except Exception as e:
            result(rank=r, step=step, type=type(e).__name__, message=str(e))
            return
    raise AssertionError("DDP training went on for 1000 steps after a peer was killed")


@case
def exit_in_callback(argv):
    """Exits (no destroy_process_group) while a torch future's callback of
    an all_reduce still runs on the backend's future thread: the window in
    which a DDP process's exit aborted ("terminate called without an active
    exception"), held open here for a second so that every exit hits it."""
    import time

    init(argv)
    w = dist.all_reduce(torch.ones(4), async_op=True)

    def busy(fut):
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass
        return fut.value()

    fut = w.get_future()
    fut.then(busy)
    fut.wait()  # returns before the callback has run
    result(rank=dist.get_rank(), ok=True)


@case
def ddp_exit(argv):
    """DDP training steps, then exit without destroy_process_group."""
    init(argv)
    r, p = dist.get_rank(), dist.get_world_size()
    train(torch.nn.parallel.DistributedDataParallel(model()), 2, (r, p))
    result(rank=r, ok=True)


@case
def op_timeout(argv):
    """A group made with timeout=2 s (HCCL_EXEC_TIMEOUT): rank 0's
    all_reduce on it, which rank 1 never calls, raises HCCL_E_TIMEOUT; then
    both meet on the default group and exit without destroy_process_group
    (the broken group still alive)."""
    import time
    from datetime import timedelta

    init(argv)
    r = dist.get_rank()
    g = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    if r == 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(16), group=g)
        except hccl_rs.HcclError as e:
            result(rank=r, code=e.code, message=str(e), secs=time.monotonic() - t0)
        else:
            raise AssertionError("all_reduce that rank 1 never called did not raise")
    dist.barrier()
    if r == 1:
        result(rank=r, code=None)


@case
def p2p_exchange(argv):
    """Exchanges past the eager bound (run with HCCL_BUFFSIZE=1, 1 MB):
    ``batch_isend_irecv`` of 1.2 MB each way with the peer, then the same
    as ``isend`` and ``irecv`` waited in reverse order, then two float32
    and one int64 message one way, received one by one."""
    init(argv)
    r = dist.get_rank()
    peer = 1 - r
    n = 300_000
    x, y = torch.full((n,), float(r + 1)), torch.zeros(n)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, peer)]):
        w.wait()
    eq(y, torch.full((n,), float(peer + 1)), "batch_isend_irecv")
    y.zero_()
    ws = [dist.isend(x * 2, peer), dist.irecv(y, peer)]
    for w in reversed(ws):
        w.wait()
    eq(y, torch.full((n,), float(2 * (peer + 1))), "isend/irecv")
    a, b, c = torch.arange(n, dtype=torch.float32), torch.ones(n) * 3, torch.arange(n, dtype=torch.int64)
    if r == 0:
        ws = [dist.isend(a, 1), dist.isend(b, 1), dist.isend(c, 1)]
        for w in ws:
            w.wait()
    else:
        got = [torch.empty_like(a), torch.empty_like(b), torch.empty_like(c)]
        for g in got:
            dist.recv(g, 0)
        for g, want, what in zip(got, (a, b, c), ("first", "second", "int64")):
            eq(g, want, what)
    # Refused before it starts (a transposed tensor): the held pair's
    # Works both raise at wait, and the group goes on.
    ws = [dist.isend(torch.ones(4, 4).t(), peer), dist.irecv(torch.empty(16), peer)]
    for w in ws:
        try:
            w.wait()
        except ValueError as e:
            assert "not contiguous" in str(e), e
        else:
            raise AssertionError("a non-contiguous isend did not raise")
    z = torch.zeros(8)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((8,), float(r)), peer), dist.P2POp(dist.irecv, z, peer)]):
        w.wait()
    eq(z, torch.full((8,), float(peer)), "after a refused pair")
    result(ok=True)


@case
def exit_pending(argv):
    """Exits (no destroy, no wait) with an async all_reduce still running
    and its future's callback pending: rank 1 never calls it. The group's
    timeout is 300 s, so a process whose exit waited for the op would
    outlive the test's limit."""
    from datetime import timedelta

    init(argv)
    r = dist.get_rank()
    g = dist.new_group([0, 1], timeout=timedelta(seconds=300))
    if r == 0:
        w = dist.all_reduce(torch.ones(1 << 16), group=g, async_op=True)
        w.get_future().then(lambda f: f.value())
    dist.barrier()
    result(rank=r, ok=True)


@case
def guide(argv):
    """The guide's snippets, as written for NPUs with .npu() dropped: init from
    the environment (RANK_ID for RANK), an npu_allreduce-style helper, and the
    async all_reduce(...).wait() pattern overlapping a Python thread."""
    import threading

    dist.init_process_group(backend="hccl", init_method="env://")
    rank = dist.get_rank()
    world_size = dist.get_world_size()

    def npu_allreduce(tensor, op=dist.ReduceOp.SUM):
        dist.all_reduce(tensor, op=op)
        return tensor

    t = npu_allreduce(torch.ones(4) * (rank + 1))
    assert t.tolist() == [world_size * (world_size + 1) / 2] * 4, t

    # Overlap: a Python thread computes while the all_reduce runs.
    big = torch.ones(1 << 20)
    work = dist.all_reduce(big, async_op=True)
    done = []
    th = threading.Thread(target=lambda: done.append(sum(i * i for i in range(20000))))
    th.start()
    work.wait()
    th.join()
    assert done and big[0].item() == world_size and work.is_completed()
    dist.destroy_process_group()
    result(rank=rank, ok=True)


if __name__ == "__main__":
    if os.environ.get("HCCL_RS_DUMP"):
        import faulthandler
        faulthandler.dump_traceback_later(int(os.environ["HCCL_RS_DUMP"]), exit=True)
    CASES[sys.argv[1]](sys.argv[2:])
