"""hccl_rs.Comm on numpy buffers: every collective against a numpy reference,
for several dtypes and 1-4 ranks, on the simulator and on loopback TCP (the
ranks of one process: Comm.init_all, driven with async_op=True, each
communicator on its own stream); blocking ops from Python threads; errors."""

import os
import subprocess
import sys
import threading

import pytest

from conftest import need

np = need("numpy")
hccl_rs = need("hccl_rs")

# (numpy dtype, hccl dtype= or None): bf16 travels as its uint16 bits.
DTYPES = [("float32", None), ("float64", None), ("int32", None), ("int8", None), ("float16", None), ("uint16", "bf16")]


def bf16(x):
    """float32 values (exact in bf16) as bf16 bit patterns (uint16)."""
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def data(rank, n, dtype, hccl):
    """Rank `rank`'s input: small integers, exact in every dtype."""
    v = (np.arange(n) % 7 + rank + 1).astype(np.float32)
    return bf16(v) if hccl == "bf16" else v.astype(dtype)


def value(a, hccl):
    return from_bf16(a) if hccl == "bf16" else a.astype(np.float64)


def run_all(comms, call):
    """call(comm) -> Work on every rank (async), then wait for all."""
    works = [call(c) for c in comms]
    for w in works:
        w.wait()


@pytest.fixture(scope="module", params=["sim", "tcp"])
def worlds(request):
    ws = {p: hccl_rs.Comm.init_all(p, backend=request.param) for p in (1, 2, 3, 4)}
    yield ws
    for comms in ws.values():
        for c in comms:
            c.destroy()


@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype,hccl", DTYPES)
def test_every_collective_matches_numpy(worlds, p, dtype, hccl):
    comms = worlds[p]
    n = 6 * p
    ins = [data(r, n, dtype, hccl) for r in range(p)]
    vals = np.stack([value(x, hccl) for x in ins])
    kw = {"dtype": hccl, "async_op": True}

    # AllReduce (sum, max) into recv, and in place.
    for op, ref in (("sum", vals.sum(0)), ("max", vals.max(0))):
        outs = [np.zeros_like(x) for x in ins]
        run_all(comms, lambda c: c.all_reduce(ins[c.rank], outs[c.rank], op, **kw))
        for o in outs:
            np.testing.assert_array_equal(value(o, hccl), ref)
    bufs = [x.copy() for x in ins]
    run_all(comms, lambda c: c.all_reduce(bufs[c.rank], **kw))
    for b in bufs:
        np.testing.assert_array_equal(value(b, hccl), vals.sum(0))

    # ReduceScatter: rank r gets block r of the sum.
    outs = [np.zeros(n // p, ins[0].dtype) for _ in range(p)]
    run_all(comms, lambda c: c.reduce_scatter(ins[c.rank], outs[c.rank], "sum", **kw))
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(value(o, hccl), vals.sum(0)[r * n // p : (r + 1) * n // p])

    # AllGather.
    outs = [np.zeros(n * p, ins[0].dtype) for _ in range(p)]
    run_all(comms, lambda c: c.all_gather(ins[c.rank], outs[c.rank], **kw))
    for o in outs:
        np.testing.assert_array_equal(value(o, hccl), vals.reshape(-1))

    # Broadcast from the last rank.
    root = p - 1
    bufs = [x.copy() for x in ins]
    run_all(comms, lambda c: c.broadcast(bufs[c.rank], root, **kw))
    for b in bufs:
        np.testing.assert_array_equal(b, ins[root])

    # Reduce to root (prod of small ints stays exact).
    outs = [np.zeros_like(x) for x in ins]
    run_all(comms, lambda c: c.reduce(ins[c.rank], outs[c.rank], "min", root, **kw))
    np.testing.assert_array_equal(value(outs[root], hccl), vals.min(0))

    # Scatter from root: only the root passes send.
    outs = [np.zeros(n // p, ins[0].dtype) for _ in range(p)]
    run_all(comms, lambda c: c.scatter(ins[c.rank] if c.rank == root else None, outs[c.rank], root, **kw))
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, ins[root][r * n // p : (r + 1) * n // p])

    # Gather to root.
    out = np.zeros(n * p, ins[0].dtype)
    run_all(comms, lambda c: c.gather(ins[c.rank], out if c.rank == root else None, root, **kw))
    np.testing.assert_array_equal(value(out, hccl), vals.reshape(-1))

    # AllToAll: block j of rank i -> block i of rank j.
    outs = [np.zeros_like(x) for x in ins]
    run_all(comms, lambda c: c.all_to_all(ins[c.rank], outs[c.rank], **kw))
    b = n // p
    for j, o in enumerate(outs):
        want = np.concatenate([ins[i][j * b : (j + 1) * b] for i in range(p)])
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("p", [2, 3])
def test_v_variants_match_numpy(worlds, p):
    comms = worlds[p]
    counts = [r + 1 for r in range(p)]
    displs = list(np.cumsum([0] + counts[:-1]))
    total = sum(counts)
    # AllGatherV.
    ins = [np.full(counts[r], r + 1, np.float32) for r in range(p)]
    outs = [np.zeros(total, np.float32) for _ in range(p)]
    run_all(comms, lambda c: c.all_gather_v(ins[c.rank], outs[c.rank], counts, displs, async_op=True))
    for o in outs:
        np.testing.assert_array_equal(o, np.concatenate(ins))
    # ReduceScatterV.
    sends = [np.arange(total, dtype=np.int64) * (r + 1) for r in range(p)]
    outs = [np.zeros(counts[r], np.int64) for r in range(p)]
    run_all(comms, lambda c: c.reduce_scatter_v(sends[c.rank], counts, displs, outs[c.rank], "sum", async_op=True))
    ref = sum(sends)
    for r, o in enumerate(outs):
        np.testing.assert_array_equal(o, ref[displs[r] : displs[r] + counts[r]])
    # AllToAllV: rank i sends i + j + 1 elements to rank j.
    sc = [[i + j + 1 for j in range(p)] for i in range(p)]
    sends = [np.concatenate([np.full(sc[i][j], 10 * i + j, np.int32) for j in range(p)]) for i in range(p)]
    outs = [np.zeros(sum(sc[i][j] for i in range(p)), np.int32) for j in range(p)]

    def a2av(c):
        i = c.rank
        s = sc[i]
        rc = [sc[k][i] for k in range(p)]
        return c.all_to_all_v(sends[i], s, list(np.cumsum([0] + s[:-1])), outs[i], rc, list(np.cumsum([0] + rc[:-1])), async_op=True)

    run_all(comms, a2av)
    for j, o in enumerate(outs):
        np.testing.assert_array_equal(o, np.concatenate([np.full(sc[i][j], 10 * i + j, np.int32) for i in range(p)]))


def test_point_to_point_and_batches(worlds):
    comms = worlds[3]
    # A ring exchange in one batch per rank: send to r+1, receive from r-1.
    sends = [np.full(4, c.rank, np.float32) for c in comms]
    recvs = [np.zeros(4, np.float32) for _ in comms]
    run_all(comms, lambda c: c.batch_send_recv([("send", sends[c.rank], (c.rank + 1) % 3), ("recv", recvs[c.rank], (c.rank - 1) % 3)], async_op=True))
    for r, b in enumerate(recvs):
        np.testing.assert_array_equal(b, np.full(4, (r - 1) % 3, np.float32))
    # send / recv (async on rank 0 and 1, in either order of calls).
    got = np.zeros(3, np.int64)
    w1 = comms[1].recv(got, 0, async_op=True)
    w0 = comms[0].send(np.array([7, 8, 9], np.int64), 1, async_op=True)
    w0.wait()
    w1.wait()
    np.testing.assert_array_equal(got, [7, 8, 9])


def test_blocking_ops_from_threads_release_the_gil():
    # Four threads each block in an AllReduce: it only completes if every
    # thread gets to run it, that is, if each call releases the GIL.
    comms = hccl_rs.Comm.init_all(4, backend="tcp")
    bufs = [np.full(1000, c.rank, np.float64) for c in comms]
    errors = []

    def run(c):
        try:
            for _ in range(3):
                c.all_reduce(bufs[c.rank])
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in ts), errors
    # Each round multiplies by 4 after the first sum of 0+1+2+3 = 6.
    for b in bufs:
        np.testing.assert_array_equal(b, np.full(1000, 6 * 16, np.float64))


def test_async_work_reports_its_state():
    comms = hccl_rs.Comm.init_all(2, backend="sim")
    x = [np.ones(8, np.float32) for _ in comms]
    w0 = comms[0].all_reduce(x[0], async_op=True)
    # Rank 1 has not called it: rank 0's op cannot have finished.
    assert not w0.is_completed()
    seen = []
    w0.add_done_callback(lambda: seen.append(True))
    w1 = comms[1].all_reduce(x[1], async_op=True)
    assert w0.wait() and w1.wait(5.0)
    assert w0.is_completed() and w0.is_success() and w0.exception() is None
    assert seen == [True]
    np.testing.assert_array_equal(x[0], np.full(8, 2, np.float32))


def test_errors_raise_hccl_error_with_the_code_on_every_rank(worlds):
    comms = worlds[2]
    # Counts differ across ranks: both ranks fail (HCCL_E_REMOTE, 21).
    works = [c.all_reduce(np.zeros(3 + c.rank, np.float32), async_op=True) for c in comms]
    codes = []
    for w in works:
        with pytest.raises(hccl_rs.HcclError) as e:
            w.wait()
        codes.append(e.value.code)
        assert "count mismatch" in e.value.message and str(e.value) == e.value.message
        assert w.is_completed() and not w.is_success() and w.exception() is not None
    assert codes == [21, 21]
    # The communicator is broken now: later ops fail too.
    with pytest.raises(hccl_rs.HcclError):
        comms[0].all_reduce(np.zeros(3, np.float32), async_op=True).wait()


def test_bad_arguments_raise_before_anything_moves():
    (c,) = hccl_rs.Comm.init_all(1, backend="sim")
    with pytest.raises(TypeError, match="expected a buffer"):
        c.all_reduce([1.0, 2.0])
    with pytest.raises(ValueError, match="not C-contiguous"):
        c.all_reduce(np.zeros((4, 4), np.float32)[:, 0])
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        c.all_reduce(np.zeros(4, np.float32), ro)
    with pytest.raises(TypeError, match="holds fp32 and recv holds fp64"):
        c.all_reduce(np.zeros(4, np.float32), np.zeros(4, np.float64))
    with pytest.raises(TypeError, match="holds int32 .4 bytes each.*dtype=fp64"):
        c.all_reduce(np.zeros(4, np.int32), dtype="fp64")
    with pytest.raises(ValueError, match="op: unknown reduce op"):
        c.all_reduce(np.zeros(4, np.float32), op="band")
    with pytest.raises(ValueError, match="overlap"):
        a = np.zeros(8, np.float32)
        c.all_reduce(a[:6], a[2:])
    # Raw bytes with a dtype.
    b = bytearray(np.arange(4, dtype=np.float32).tobytes())
    c.all_reduce(b, dtype="fp32")
    assert np.frombuffer(b, np.float32).tolist() == [0, 1, 2, 3]
    # The library's own checks: HCCL_E_PARA, and the buffer untouched.
    buf = np.arange(4, dtype=np.float32)
    with pytest.raises(hccl_rs.HcclError, match="root = 3 is outside") as e:
        c.broadcast(buf, root=3)
    assert e.value.code == 1 and buf.tolist() == [0, 1, 2, 3]
    c.destroy()
    with pytest.raises(hccl_rs.HcclError, match="destroyed"):
        c.barrier()


def test_negative_and_oversized_ints_are_named_with_their_value():
    # pyo3 raised OverflowError ("out of range integral type conversion
    # attempted") naming neither. They are HCCL_E_PARA, in the words the
    # library has for the same argument out of range, before anything runs.
    comms = hccl_rs.Comm.init_all(2, backend="sim")
    c = comms[0]
    buf = np.arange(4, dtype=np.float32)
    out = np.zeros(8, np.float32)
    calls = [
        (lambda: c.broadcast(buf, root=-1), "broadcast: root = -1 is outside the communicator (world_size 2); use a root in 0..=1"),
        (lambda: c.reduce(buf, None, root=-1), "reduce: root = -1 is outside the communicator (world_size 2)"),
        (lambda: c.scatter(out, buf, root=2**40), "scatter: root = 1099511627776 is outside the communicator"),
        (lambda: c.gather(buf, out, root=-3), "gather: root = -3 is outside"),
        (lambda: c.send(buf, -1), "Send: peer rank -1 is not another rank of this communicator (this is rank 0 of 2)"),
        (lambda: c.recv(buf, -2), "Recv: peer rank -2 is not another rank"),
        (lambda: c.batch_send_recv([("recv", buf, 1), ("send", out, -1)]), "BatchSendRecv item 1 (Send): peer rank -1 is not"),
        (lambda: c.split(-5), "split: color = -5 is negative; color=None takes no part"),
        (lambda: c.split(0, -1), "split: key = -1 is negative"),
        (lambda: c.split(2**32), "split: color = 4294967296 is above 4294967295"),
        (lambda: c.all_gather_v(buf[:2], buf, [-2, 2], [0, 2]), "AllGatherV: recv_counts[0] = -2; a number of elements is negative"),
        (lambda: c.reduce_scatter_v(buf, [2, 2**64], [0, 2], out[:2]), "ReduceScatterV: send_counts[1] = 18446744073709551616; a number of elements is above 18446744073709551615"),
        (lambda: c.all_to_all_v(buf, [2, 2], [0, 2], out[:4], [2, 2], [0, -1]), "AllToAllV: recv_displs[1] = -1; a number of elements is negative"),
        (lambda: hccl_rs.Comm.init_all(-1, backend="sim"), "init_all: ndev = -1 is negative"),
        (lambda: hccl_rs.Comm.init_root_info(2, "unused", -1), "init_root_info: rank = -1 is negative"),
        (lambda: hccl_rs.Comm.init_root_info(-2, "unused", 0), "init_root_info: nranks = -2 is negative"),
    ]
    for call, message in calls:
        with pytest.raises(hccl_rs.HcclError) as e:
            call()
        assert e.value.code == 1 and e.value.message.startswith(message), (message, e.value.message)
    assert buf.tolist() == [0, 1, 2, 3] and not out.any()
    # Nothing ran: the communicator still works.
    bufs = [np.ones(4, np.float32) for _ in comms]
    run_all(comms, lambda c: c.all_reduce(bufs[c.rank], async_op=True))
    assert [b.tolist() for b in bufs] == [[2.0] * 4] * 2
    for c in comms:
        c.destroy()


def test_python_m_hccl_rs_runs_the_cli_benchmark():
    r = subprocess.run(
        [sys.executable, "-m", "hccl_rs", "test", "all_reduce", "-p", "2", "-b", "8K", "-e", "16K", "-f", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rows = [l.split() for l in r.stdout.splitlines() if l.strip() and not l.startswith("#")]
    assert [row[0] for row in rows[1:]] == ["8192", "16384"], r.stdout
    assert all(row[-1] == "success" for row in rows[1:]), r.stdout


EXIT_WITH_A_PENDING_OP = """
import numpy as np, hccl_rs
comms = hccl_rs.Comm.init_all(2, backend="tcp")
buf = np.ones(1 << 16, np.float32)
w = comms[0].all_reduce(buf, async_op=True)  # rank 1 never calls it
w.add_done_callback(lambda: print("callback", flush=True))
print("exiting", flush=True)
"""


def test_exit_with_a_pending_async_op_does_not_hang_or_abort():
    # At exit the interpreter drops comm 1, so comm 0's worker thread fails
    # the op (a lost peer) while Python finalizes: it must neither take the
    # GIL then (to run the callback, to release the numpy export: CPython
    # would end the thread mid-frame, aborting the process) nor keep the
    # process alive (HCCL_EXEC_TIMEOUT is 300 s).
    env = dict(os.environ, HCCL_EXEC_TIMEOUT="300", HCCL_IF_IP="127.0.0.1", HCCL_RS_TORCH="0")
    for _ in range(5):
        r = subprocess.run([sys.executable, "-c", EXIT_WITH_A_PENDING_OP], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
        assert "exiting" in r.stdout
def test_init_all_names_its_arguments():
    # backend= was reported as HCCL_BACKEND (the variable read without
    # it), and ndev 0 as unsupported (5) where HCCL says HCCL_E_PARA.
    with pytest.raises(hccl_rs.HcclError) as e:
        hccl_rs.Comm.init_all(2, backend="nccl")
    assert e.value.code == 1 and e.value.message.startswith('init_all: backend="nccl": accepted: tcp, sim, ascend'), e.value.message
    with pytest.raises(hccl_rs.HcclError) as e:
        hccl_rs.Comm.init_all(0, backend="sim")
    assert e.value.code == 1 and e.value.message.startswith("init_all: ndev = 0; a communicator has at least one rank"), e.value.message


FROM_ENV = """
import hccl_rs
try:
    hccl_rs.Comm.from_env()
except hccl_rs.HcclError as e:
    print(e.code, e.message)
"""


@pytest.mark.parametrize("torch_backend", ["1", "0"])
def test_from_env_names_ascends_rank_id(torch_backend):
    # With torch, importing hccl_rs copied RANK_ID into RANK (for torch's
    # env://), and from_env reported RANK="x".
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_", "PMI_", "RANK_ID", "RANK_SIZE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    env.update(RANK_ID="x", RANK_SIZE="1", MASTER_ADDR="127.0.0.1", HCCL_RS_TORCH=torch_backend)
    r = subprocess.run([sys.executable, "-c", FROM_ENV], env=env, capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith('1 RANK_ID="x": not a whole number'), (r.stdout, r.stderr[-2000:])


SUBCLASS_FIRST = """
import torch, hccl_rs
class Mine(torch.Tensor):
    pass
comms = hccl_rs.Comm.init_all(2, backend="sim")
bufs = [torch.full((4,), float(c.rank + 1)).as_subclass(Mine) for c in comms]
works = [c.all_reduce(b, async_op=True) for c, b in zip(comms, bufs)]
for w in works:
    w.wait()
print([b.tolist() for b in bufs])
"""


def test_a_tensor_subclass_is_a_tensor_as_the_first_buffer_of_a_process():
    # The first tensor used to be recognised by its type's module (torch.*),
    # so a subclass from another module failed as the first and passed later.
    need("torch")
    r = subprocess.run([sys.executable, "-c", SUBCLASS_FIRST], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([[3.0] * 4] * 2), r.stdout


def test_a_bool_tensor_refuses_sum_prod_and_avg_and_takes_max_and_min():
    # A bool tensor's elements are 0/1 bytes: a byte-wise sum would store 2.
    torch = need("torch")
    comms = hccl_rs.Comm.init_all(2, backend="sim")
    for op in ("sum", "prod", "avg"):
        with pytest.raises(ValueError, match=f'send: op "{op}" on a bool tensor'):
            comms[0].all_reduce(torch.tensor([True, False]), op=op)
    bufs = [torch.tensor([True, True, False]), torch.tensor([True, False, False])]
    run_all(comms, lambda c: c.all_reduce(bufs[c.rank], op="max", async_op=True))
    assert [b.tolist() for b in bufs] == [[True, True, False]] * 2
    bufs = [torch.tensor([True, True, False]), torch.tensor([True, False, False])]
    run_all(comms, lambda c: c.all_reduce(bufs[c.rank], op="min", async_op=True))
    assert [b.tolist() for b in bufs] == [[True, False, False]] * 2
