"""Gradient compression from Python: hccl_rs.TopK / Int8 exchanges and the
Reducer on the ranks of one process (Comm.init_all, simulator and loopback
TCP) against numpy references, and the DDP comm hooks (hccl_rs.hooks) and
the ModelReducer with ranks launched as processes, torchrun-style."""

import json
import threading

import pytest

from conftest import launch, need

np = need("numpy")
hccl_rs = need("hccl_rs")


def ref_topk(acc, k):
    """Indices of the k largest |acc|, ties to the lowest index (the
    library's documented rule), by numpy's stable sort."""
    return np.argsort(-np.abs(acc), kind="stable")[:k]


def floats(b):
    return np.frombuffer(b, np.float32)


def on_threads(comms, f):
    """f(comm) on one thread per rank (blocking ops release the GIL);
    returns each rank's result or exception."""
    out = [None] * len(comms)

    def run(c):
        try:
            out[c.rank] = f(c)
        except Exception as e:  # noqa: BLE001 (returned to the test)
            out[c.rank] = e

    ts = [threading.Thread(target=run, args=(c,)) for c in comms]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


@pytest.fixture(scope="module", params=["sim", "tcp"])
def worlds(request):
    ws = {p: hccl_rs.Comm.init_all(p, backend=request.param) for p in (2, 3, 4)}
    yield ws
    for comms in ws.values():
        for c in comms:
            c.destroy()


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("selection", ["exact", "sampled"])
def test_topk_equals_dense_all_reduce_of_the_masked_tensors(worlds, p, selection):
    comms = worlds[p]
    n, ratio = 200, 0.05
    topk = hccl_rs.TopK(ratio, selection=selection, sample_ratio=0.1)
    k = topk.k(n)
    assert k == 10 and hccl_rs.sparse_wins(p, n, k)
    fbs = [hccl_rs.ErrorFeedback() for _ in comms]
    res = [np.zeros(n, np.float32) for _ in comms]
    for step in range(4):
        # Integer values in a small range: many ties, every sum exact.
        g = [np.random.default_rng(100 * step + r).integers(-30, 31, n).astype(np.float32) for r in range(p)]
        masked, new_res = [], []
        for r in range(p):
            acc = g[r] + res[r]
            idx = ref_topk(acc, k)
            m = np.zeros(n, np.float32)
            m[idx] = acc[idx]
            masked.append(m)
            rest = acc.copy()
            rest[idx] = 0
            new_res.append(rest)
        out = [x.copy() for x in g]
        for w in [topk.all_reduce(c, out[c.rank], fbs[c.rank], async_op=True) for c in comms]:
            w.wait()
        dense = [m.copy() for m in masked]
        for w in [c.all_reduce(dense[c.rank], async_op=True) for c in comms]:
            w.wait()
        for r in range(p):
            np.testing.assert_array_equal(out[r], dense[r], err_msg=f"step {step} rank {r}: Top-K != dense AllReduce of the masked tensors")
            got = floats(fbs[r].residual())
            np.testing.assert_array_equal(got, new_res[r], err_msg=f"step {step} rank {r}: residual")
            assert fbs[r].last_path == "sparse" and fbs[r].last_k == k and fbs[r].last_payload_bytes == 8 * k
        # sent + new residual = gradient + old residual: the sum of what the
        # ranks sent, from the library's own outputs only.
        sent = sum(g[r] + res[r] - floats(fbs[r].residual()) for r in range(p))
        np.testing.assert_array_equal(out[0], sent)
        res = new_res


@pytest.mark.parametrize("p", [2, 4])
def test_every_rank_gets_the_same_bytes_summed_in_rank_order(worlds, p):
    comms = worlds[p]
    n = 1000
    topk = hccl_rs.TopK(0.02)
    k = topk.k(n)
    fbs = [hccl_rs.ErrorFeedback() for _ in comms]
    for step in range(3):
        g = [np.random.default_rng(7 * step + r).standard_normal(n).astype(np.float32) for r in range(p)]
        want_res = [floats(f.residual()) if f.len else np.zeros(n, np.float32) for f in fbs]
        out = [x.copy() for x in g]
        for w in [topk.all_reduce(c, out[c.rank], fbs[c.rank], async_op=True) for c in comms]:
            w.wait()
        assert all(o.tobytes() == out[0].tobytes() for o in out), f"step {step}: ranks hold different bytes"
        # The reference: each rank's masked accumulator, added rank 0 first in float32.
        total = np.zeros(n, np.float32)
        for r in range(p):
            acc = g[r] + want_res[r]
            m = np.zeros(n, np.float32)
            idx = ref_topk(acc, k)
            m[idx] = acc[idx]
            total = total + m
        assert out[0].tobytes() == total.tobytes()


def test_dense_path_when_pairs_cost_more_than_an_all_reduce(worlds):
    comms = worlds[4]
    n = 40
    topk = hccl_rs.TopK(0.5)  # density 1/2 > 1/P at 4 ranks
    assert not hccl_rs.sparse_wins(4, n, topk.k(n))
    fbs = [hccl_rs.ErrorFeedback() for _ in comms]
    g = [np.arange(n, dtype=np.float32) * (r + 1) for r in range(4)]
    out = [x.copy() for x in g]
    for w in [topk.all_reduce(c, out[c.rank], fbs[c.rank], average=True, async_op=True) for c in comms]:
        w.wait()
    np.testing.assert_array_equal(out[0], sum(g) / np.float32(4))
    assert [f.last_path for f in fbs] == ["dense"] * 4


@pytest.mark.parametrize("scheme", ["topk", "int8"])
def test_mismatched_bucket_sizes_raise_on_every_rank_naming_both(worlds, scheme):
    comms = worlds[2]
    make = {"topk": lambda: hccl_rs.TopK(0.1), "int8": lambda: hccl_rs.Int8(32)}[scheme]
    bufs = [np.arange(100 + 20 * r, dtype=np.float32) for r in range(2)]
    fbs = [hccl_rs.ErrorFeedback() for _ in comms]
    works = [make().all_reduce(c, bufs[c.rank], fbs[c.rank], async_op=True) for c in comms]
    errors = []
    for w in works:
        with pytest.raises(hccl_rs.HcclError) as e:
            w.wait()
        errors.append(e.value)
    for e in errors:
        assert e.code == 1, e
        assert "100 elements" in str(e) and "120 elements" in str(e), str(e)
    # A failed exchange leaves the gradient and the feedback as they were.
    for r in range(2):
        np.testing.assert_array_equal(bufs[r], np.arange(100 + 20 * r, dtype=np.float32))
        assert fbs[r].len == 0 and fbs[r].last_path is None


def test_int8_is_exact_on_integers_with_scale_one_and_bounded_otherwise(worlds):
    comms = worlds[3]
    n, block = 300, 50
    q = hccl_rs.Int8(block)
    assert q.payload_bytes(n) == n + 4 * 6
    g = [np.random.default_rng(r).integers(-127, 128, n).astype(np.float32) for r in range(3)]
    for x in g:
        x[::block] = -127  # every block's largest magnitude: scale 1
    fbs = [hccl_rs.ErrorFeedback() for _ in comms]
    out = [x.copy() for x in g]
    for w in [q.all_reduce(c, out[c.rank], fbs[c.rank], async_op=True) for c in comms]:
        w.wait()
    np.testing.assert_array_equal(out[0], sum(g))
    assert all(not floats(f.residual()).any() for f in fbs)
    # Any values: each rank's error is at most half a step of its block's
    # scale, and the sum is what the ranks sent (gradient minus residual).
    g = [np.random.default_rng(10 + r).standard_normal(n).astype(np.float32) for r in range(3)]
    fbs = [hccl_rs.ErrorFeedback() for _ in comms]
    out = [x.copy() for x in g]
    for w in [q.all_reduce(c, out[c.rank], fbs[c.rank], async_op=True) for c in comms]:
        w.wait()
    for r in range(3):
        res = floats(fbs[r].residual())
        scale = np.repeat(np.abs(g[r]).reshape(-1, block).max(1) / 127, block)
        assert (np.abs(res) <= scale * 0.5 * (1 + 1e-5)).all()
    sent = sum(g[r] - floats(fbs[r].residual()) for r in range(3))
    np.testing.assert_allclose(out[0], sent, rtol=1e-5, atol=1e-6)
    assert all(o.tobytes() == out[0].tobytes() for o in out)


def test_bad_configuration_and_buffers_are_named():
    with pytest.raises(ValueError, match="ratio = 0"):
        hccl_rs.TopK(0)
    with pytest.raises(ValueError, match="selection"):
        hccl_rs.TopK(0.1, selection="fastest")
    with pytest.raises(ValueError, match="momentum = 1"):
        hccl_rs.TopK(0.1, momentum=1.0)
    with pytest.raises(ValueError, match="block = 0"):
        hccl_rs.Int8(0)
    (c,) = hccl_rs.Comm.init_all(1, backend="sim")
    with pytest.raises(TypeError, match="float32"):
        hccl_rs.TopK(0.1).all_reduce(c, np.zeros(10), hccl_rs.ErrorFeedback())
    with pytest.raises(TypeError, match="compression"):
        hccl_rs.Reducer(c, [10], compression="topk")
    c.destroy()


def test_residual_of_another_bucket_raises():
    (c,) = hccl_rs.Comm.init_all(1, backend="sim")
    fb = hccl_rs.ErrorFeedback(np.ones(5, np.float32))
    g = np.arange(10, dtype=np.float32)
    with pytest.raises(hccl_rs.HcclError, match="residual"):
        hccl_rs.TopK(0.1).all_reduce(c, g, fb)
    np.testing.assert_array_equal(g, np.arange(10, dtype=np.float32))
    c.destroy()


SIZES = [300, 50, 1000, 7, 120]


@pytest.mark.parametrize("p", [2, 3])
def test_reducer_averages_every_parameter_over_two_steps(worlds, p):
    comms = worlds[p]

    def rank(c):
        red = hccl_rs.Reducer(c, SIZES, first_bucket_bytes=400, bucket_cap_bytes=2000)
        got = []
        for step in range(2):
            # Backward's order is the reverse of the parameters', but for
            # one pair swapped: the rebuild adopts rank 0's observed order.
            order = [4, 2, 3, 1, 0]
            for i in order:
                red.push(i, np.full(SIZES[i], (c.rank + 1) * (i + 1) + step, np.float32))
            stats = red.finish()
            outs = []
            for i, n in enumerate(SIZES):
                o = np.zeros(n, np.float32)
                red.grad(i, o)
                outs.append(o)
            got.append((outs, stats, [list(b) for b in red.buckets]))
        red.close()
        return got

    res = on_threads(comms, rank)
    for r in range(p):
        assert not isinstance(res[r], Exception), res[r]
        for step, (outs, stats, buckets) in enumerate(res[r]):
            for i, o in enumerate(outs):
                want = np.float32(sum((q + 1) * (i + 1) + step for q in range(p))) / np.float32(p)
                np.testing.assert_array_equal(o, np.full(SIZES[i], want, np.float32), err_msg=f"rank {r} step {step} parameter {i}")
            assert stats["payload_bytes"] == 4 * sum(SIZES)
            assert set(stats["paths"]) == {"dense"}
        # After the first step the buckets follow the observed order.
        assert [i for b in res[r][1][2] for i in b] == [4, 2, 3, 1, 0]


def test_reducer_with_topk_sends_sparse(worlds):
    comms = worlds[2]

    def rank(c):
        red = hccl_rs.Reducer(c, SIZES, compression=hccl_rs.TopK(0.01), first_bucket_bytes=400, bucket_cap_bytes=2000)
        for i in reversed(range(len(SIZES))):
            red.push(i, np.full(SIZES[i], c.rank + 1, np.float32))
        stats = red.finish()
        red.close()
        return stats

    for s in on_threads(comms, rank):
        assert not isinstance(s, Exception), s
        assert all(q.startswith("sparse k=") for q in s["paths"]), s
        assert s["payload_bytes"] < 4 * sum(SIZES) // 10


def test_reducer_plan_differing_on_one_rank_fails_on_every_rank(worlds):
    comms = worlds[3]

    def rank(c):
        sizes = list(SIZES)
        if c.rank == 2:
            sizes[3], sizes[4] = sizes[4], sizes[3]  # one rank's model differs
        return hccl_rs.Reducer(c, sizes, first_bucket_bytes=400, bucket_cap_bytes=2000)

    res = on_threads(comms, rank)
    for r, e in enumerate(res):
        assert isinstance(e, hccl_rs.HcclError), f"rank {r}: {e!r}"
        assert e.code == 1 and "bucket plan differs" in str(e) and "first differing bucket is bucket 0" in str(e), str(e)


def results(outs):
    return [json.loads(l[len("RESULT ") :]) for o in outs for l in o.splitlines() if l.startswith("RESULT ")]


def run(case, p, *args):
    need("torch")
    # Gloo on loopback, as hccl_rs (HCCL_IF_IP=127.0.0.1 from launch).
    return results(launch(case, p, *args, script="compress_ranks.py", env={"GLOO_SOCKET_IFNAME": "lo"}))


@pytest.mark.parametrize("backend", ["gloo", "hccl"])
def test_topk_hook_equals_dense_all_reduce_and_keeps_residuals(backend):
    rs = run("hook_topk", 2, backend, 0.05)
    assert [(r["ok"], r["same_bytes"], r["carried"]) for r in rs] == [(True, True, True)] * 2


def test_int8_hook_is_exact_on_scale_one_integers():
    assert [r["ok"] for r in run("hook_int8", 2, "gloo")] == [True, True]


@pytest.mark.parametrize("backend", ["gloo", "hccl"])
def test_hook_with_mismatched_buckets_fails_on_every_rank_naming_both(backend):
    rs = run("hook_mismatch", 2, backend)
    assert len(rs) == 2
    for r in rs:
        assert "100 elements" in r["message"] and "120 elements" in r["message"], r
        assert r["untouched"]


@pytest.mark.parametrize("backend,scheme", [("gloo", "topk"), ("hccl", "int8"), ("hccl", "topk")])
def test_ddp_with_a_compression_hook_trains(backend, scheme):
    rs = run("ddp_hook", 2, backend, scheme, 40)
    for r in rs:
        assert r["last"] < 0.9 * r["first"], r
        assert r["same"], r
        assert r["paths"] == (["sparse"] if scheme == "topk" else ["int8"]), r


@pytest.mark.parametrize("scheme", ["none", "topk", "int8"])
def test_model_reducer_trains_a_plain_loop(scheme):
    rs = run("model_reducer", 2, scheme, 40)
    for r in rs:
        assert r["last"] < 0.9 * r["first"], r
        assert r["same"] and r["buckets"] > 1, r
        assert r["paths"] == [{"none": "dense", "topk": "sparse", "int8": "int8"}[scheme]], r
