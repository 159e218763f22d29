"""A ``torch.distributed`` backend on hccl-rs, for CPU tensors.

``import hccl_rs`` (or ``import hccl_rs.torch``) registers it as ``"hccl_rs"``,
and as ``"hccl"`` when no other package (torch_npu) has that name, so that::

    dist.init_process_group(backend="hccl", init_method="env://")

runs on a machine without NPUs. ``env://`` and ``tcp://`` work as with Gloo
(the store carries rank 0's root info; the data moves over hccl-rs's TCP
transport); ``RANK_ID`` and ``RANK_SIZE`` (Ascend's launch variables) stand in
for ``RANK`` and ``WORLD_SIZE`` when those are unset; a ``timeout`` other than
torch's default becomes ``HCCL_EXEC_TIMEOUT``. Every collective is async on
the communicator's stream; the ``Work`` objects are the ones DDP takes
(``wait``, ``is_completed``, ``get_future``).

Written against what torch 1.13 and 2.x share: ``ProcessGroup`` subclassed in
Python (as torch's own multi-threaded test group is) and
``Backend.register_backend``.
"""

import atexit
import datetime
import inspect
import itertools
import os
import queue
import threading


def _autoload():
    """Entry point of torch's backend autoloading (torch >= 2.5 calls it at
    the end of ``import torch``). Defined before this module imports torch:
    when ``import hccl_rs`` came first, torch calls it while this module is
    still at its ``import torch`` line (torch 2.15 then failed the import:
    "partially initialized module 'hccl_rs.torch' has no attribute
    '_autoload'"); the module registers the backend itself when it gets
    there."""
    if globals().get("_READY"):
        register()


import torch  # noqa: E402  (after _autoload, see there)
import torch.distributed as dist  # noqa: E402

from ._native import Comm, HcclError, get_root_info

__all__ = ["ProcessGroupHCCL", "register"]

ReduceOp = dist.ReduceOp

# torch's ReduceOp -> hccl_rs op names. BAND/BOR/BXOR and PREMUL_SUM have
# no HCCL counterpart.
_OPS = [(ReduceOp.SUM, "sum"), (ReduceOp.PRODUCT, "prod"), (ReduceOp.MAX, "max"), (ReduceOp.MIN, "min")]
if hasattr(ReduceOp, "AVG"):
    _OPS.append((ReduceOp.AVG, "avg"))
# For errors: torch 1.13's ReduceOp members print as object addresses.
_UNSUPPORTED = [(getattr(ReduceOp, n), n) for n in ("BAND", "BOR", "BXOR", "PREMUL_SUM") if hasattr(ReduceOp, n)]


# The fast way to an op's name: torch's ReduceOp hashes to its RedOpType
# value (1.13 and 2.x), and comparing two with `==` costs ~1.7 us per
# comparison in 1.13 (a pybind11 operator), about a tenth of a small
# all_reduce's whole Python path. Only ReduceOp objects and the RedOpType
# members (torch 2.x's `ReduceOp.SUM`) are looked up by hash; anything else
# takes the comparisons.
_OP_TYPES = {type(ReduceOp.SUM), type(dist.AllreduceOptions().reduceOp)}
_OP_BY_HASH = {hash(o): name for o, name in _OPS}


def _op_name(op):
    if type(op) in _OP_TYPES:
        name = _OP_BY_HASH.get(hash(op))
        if name is not None:
            return name
    for o, name in _OPS:
        if op == o:
            return name
    name = next((n for o, n in _UNSUPPORTED if op == o), str(op))
    raise ValueError(f"hccl_rs: ReduceOp {name} is not supported (HCCL has no counterpart); accepted: SUM, PRODUCT, MAX, MIN, AVG")


# A bool tensor's bytes are 0/1: a byte-wise sum or product could store 2
# in a bool, so SUM is logical or (max) and PRODUCT logical and (min), as
# torch's NCCL backend maps them.
_BOOL_OPS = {"sum": "max", "prod": "min", "max": "max", "min": "min"}


def _reduce_op(opts, tensor):
    """The op of an options object (AllreduceOptions, ...), or an op itself,
    for `tensor`'s dtype."""
    name = "sum" if opts is None else _op_name(getattr(opts, "reduceOp", opts))
    if tensor.dtype is not torch.bool:
        return name
    if name not in _BOOL_OPS:
        raise ValueError(f"hccl_rs: ReduceOp {name.upper()} is not supported on bool tensors; accepted: SUM, PRODUCT, MAX, MIN")
    return _BOOL_OPS[name]


def _root(opts):
    return 0 if opts is None else opts.rootRank


def _flat(tensors):
    """One contiguous 1-D tensor holding `tensors` one after another (a copy)."""
    return torch.cat([t.reshape(-1) for t in tensors]) if tensors else torch.empty(0)


def _unflat(flat, tensors):
    """Copies `flat`'s consecutive pieces into `tensors`."""
    at = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[at : at + n].view_as(t))
        at += n


# Works handed out and not yet waited or turned into a future. C++ callers
# (DDP's reducer, _verify_params_across_processes, _broadcast_coalesced) keep
# only the C++ half of a Python Work: its Python methods (wait, get_future)
# are found through the Python object, which must stay alive until they are
# called. Kept here until then; beyond _LIVE_MAX, finished ones are dropped.
_LIVE = {}
_LIVE_LOCK = threading.Lock()
_LIVE_MAX = 4096

# torch's "no timeout" (Work.wait's default in C++).
_NO_TIMEOUT = datetime.timedelta(0)


def _keep(work):
    # One dict store or pop is atomic under the GIL; only the sweep, which
    # iterates, takes the lock (and a snapshot: other threads keep storing).
    _LIVE[id(work)] = work
    if len(_LIVE) > _LIVE_MAX:
        with _LIVE_LOCK:
            done = [k for k, w in list(_LIVE.items()) if w._finished()]
            for k in done[: _LIVE_MAX // 2]:
                _LIVE.pop(k, None)


def _release(work):
    _LIVE.pop(id(work), None)


class _Completer:
    """Completes torch futures on a Python thread of its own, and stops it
    before the interpreter finalizes.

    hccl_rs calls a Work's done callback on the communicator's worker thread
    (a Rust thread); torch futures completed there aborted about one process
    exit in ten. Completing them on a Python daemon thread is not enough:
    ``Future.set_result`` releases the GIL while it runs the future's
    callbacks (DDP's reducer's), and a thread that takes the GIL back after
    the interpreter started finalizing is ended by CPython with
    ``pthread_exit``, whose unwinding through torch's GIL guard (a
    destructor) calls ``std::terminate``: "terminate called without an
    active exception" at exit, whenever a process exits (without
    ``destroy_process_group``) while this thread is still inside torch (torch
    issue 38228 describes the mechanism). So an ``atexit`` handler, which
    runs before finalization, lets the thread finish what it has and joins
    it; futures finishing after that are completed on the caller's thread.
    """

    # How long exit waits for the thread to finish the futures it has (a
    # callback that never returns must not hang the exit for ever).
    EXIT_WAIT_S = 60.0

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn):
        with self._lock:
            if self._closed:
                inline = True
            else:
                inline = False
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="hccl_rs-futures", daemon=True)
                    self._thread.start()
                    atexit.register(self.close)
                self._queue.put(fn)
        if inline:
            fn()

    def close(self):
        """Runs the futures queued so far, then stops the thread (atexit)."""
        with self._lock:
            if self._closed or self._thread is None:
                self._closed = True
                return
            self._closed = True
            self._queue.put(None)
        self._thread.join(self.EXIT_WAIT_S)

    def _run(self):
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            fn()


_COMPLETER = _Completer()


def _value(fut):
    """`fut`'s value; raises its exception if it has one (see
    ``_Work.get_future``)."""
    return fut.value()


class _Work(dist.Work):
    """The torch Work of one or more hccl_rs ops: ``then`` (a copy out of a
    staging buffer) runs once, after they all finished, before ``wait``
    returns or the future completes."""

    # Guards each Work's copy-out and future (rarely contended; one lock per
    # Work cost a lock allocation per op).
    _lock = threading.Lock()

    def __init__(self, natives, result, then=None):
        super().__init__()
        self._natives = [w for w in natives if w is not None] if None in natives else natives
        self._result = result
        self._then = then
        self._future = None
        _keep(self)

    def _finish(self):
        # Without a copy-out there is nothing to run once.
        if self._then is not None:
            with self._lock:
                then, self._then = self._then, None
                if then is not None:
                    then()

    def wait(self, timeout=None):
        secs = None
        if timeout is not None and timeout != _NO_TIMEOUT:
            secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
        try:
            for w in self._natives:
                w.wait(secs)
            self._finish()
        finally:
            _release(self)
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._natives)

    def _finished(self):
        # As is_completed, without starting held-back sends and receives.
        return all(getattr(w, "finished", w.is_completed)() for w in self._natives)

    def is_success(self):
        return all(w.is_success() for w in self._natives)

    def exception(self):
        for w in self._natives:
            e = w.exception()
            if e is not None:
                return e
        return None

    def result(self):
        return self._result

    def synchronize(self):
        pass

    def get_future(self):
        """A torch future of the ops: their result, or their error.

        torch's ``Future.set_exception`` (1.13 and 2.x) completes the C++
        future successfully, with the exception object as its value; only
        Python's ``wait``/``value`` raise it. C++ callers take that value
        for the result: DDP's reducer read the exception as the bucket's
        tensor list (an empty one) and took element 0 of it, and a survivor
        of a dead peer died with SIGSEGV in backward. A ``then`` callback
        that raises is how Python fails a future for C++ too (torch makes
        it a RuntimeError, "Got the following error when running the
        callback: HcclError: ..."), so the future handed out is `inner`'s
        ``then``, whose callback re-raises `inner`'s exception."""
        with self._lock:
            if self._future is not None:
                return self._future
            inner = torch.futures.Future()
            fut = self._future = inner.then(_value)
        last = self._natives[-1] if self._natives else None

        def done():
            # Ops of one communicator finish in call order: the last one
            # finishing means all did.
            err = self.exception()
            if err is not None:
                inner.set_exception(err)
                return
            try:
                self._finish()
            except Exception as e:  # a failed copy-out
                inner.set_exception(e)
                return
            inner.set_result(self._result)

        if last is None:
            done()
        else:
            last.add_done_callback(lambda: _COMPLETER.submit(done))
        _release(self)
        return fut


class _Refused:
    """The native-Work stand-in of a held send or receive that could not
    start (bad arguments): finished, failed with `error`."""

    def __init__(self, error):
        self._error = error

    def wait(self, secs=None):
        raise self._error

    def is_completed(self):
        return True

    def is_success(self):
        return False

    def exception(self):
        return self._error

    def add_done_callback(self, f):
        f()


class _HeldP2P:
    """A send or receive the group holds back (see
    ``ProcessGroupHCCL.send``), standing in for its native Work: asking for
    its outcome starts every held one, as one batch."""

    def __init__(self, group):
        self._group = group
        self._native = None

    def _started(self):
        if self._native is None:
            self._group._start_held()
        return self._native

    def finished(self):
        return self._native is not None and self._native.is_completed()

    def wait(self, secs=None):
        return self._started().wait(secs)

    def is_completed(self):
        return self._started().is_completed()

    def is_success(self):
        return self._started().is_success()

    def exception(self):
        return self._started().exception()

    def add_done_callback(self, f):
        return self._started().add_done_callback(f)


class ProcessGroupHCCL(dist.ProcessGroup):
    """A torch ProcessGroup whose collectives are hccl-rs's, on CPU tensors.

    Built by ``init_process_group`` / ``new_group`` through the registered
    creator; every member bootstraps one ``hccl_rs.Comm`` (TCP) through the
    group's store.
    """

    def __init__(self, store, rank, size, timeout=None, name="hccl"):
        super().__init__(rank, size)
        self._name = name
        # torch hands each group a store of its own (a PrefixStore named by
        # the group, the same on every member), so one key serves; a counter
        # of this process's groups would differ between members that belong
        # to different sets of groups, and overlapping new_group calls hung.
        key = "hccl_rs/root_info"
        with _hccl_timeouts(timeout):
            if rank == 0:
                info = get_root_info()
                store.set(key, info)
            else:
                info = store.get(key).decode()
            self._native_comm = Comm.init_root_info(size, info, rank)
        self._held = []
        self._held_lock = threading.Lock()

    @property
    def _comm(self):
        # Every op goes through here: held sends and receives start first,
        # so ops still run in call order.
        if self._held:
            self._start_held()
        return self._native_comm

    @property
    def comm(self):
        """The group's ``hccl_rs.Comm`` (held sends and receives started)."""
        return self._comm

    def _start_held(self):
        """Starts the held sends and receives in call order: each run of
        one data type as one ``batch_send_recv`` (all its sends and
        receives posted at once, HCCL's HcclBatchSendRecv), one alone as
        itself. Runs stay apart because a batch moves its messages one
        data type at a time: a batch of two types could send its second
        message before its first, which a peer receiving them one by one
        waits for in turn."""
        with self._held_lock:
            held, self._held = self._held, []
            c = self._native_comm
            for _, run in itertools.groupby(held, key=lambda h: h[1].dtype):
                run = list(run)
                try:
                    if len(run) == 1:
                        kind, t, peer, _ = run[0]
                        op = c.send if kind == "send" else c.recv
                        w = op(t, peer, async_op=True)
                    else:
                        w = c.batch_send_recv([(kind, t, peer) for kind, t, peer, _ in run], async_op=True)
                except Exception as e:  # refused before it started: its Works fail
                    w = _Refused(e)
                for *_, h in run:
                    h._native = w

    # -- names ---------------------------------------------------------
    def getBackendName(self):  # noqa: N802 (the C++ virtual's name)
        return self._name

    def _get_backend_name(self):
        return self._name

    def name(self):
        return self._name

    # -- collectives ---------------------------------------------------
    def allreduce(self, tensors, opts=None):
        return _Work([self._comm.all_reduce(t, None, _reduce_op(opts, t), async_op=True) for t in tensors], tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):
        root = _root(opts)
        return _Work([self._comm.broadcast(t, root, async_op=True) for t in tensors], tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        works, thens = [], []
        for outs, inp in zip(output_tensors, input_tensors):
            w, then = self._allgather_list(outs, inp)
            works.append(w)
            thens.append(then)
        return _Work(works, output_tensors, lambda: [t() for t in thens])

    def _allgather_list(self, outs, inp):
        if len(outs) != self.size():
            raise ValueError(f"all_gather: {len(outs)} output tensors for {self.size()} ranks")
        counts = [t.numel() for t in outs]
        flat = torch.empty(sum(counts), dtype=inp.dtype)
        if all(c == inp.numel() for c in counts):
            w = self._comm.all_gather(inp.contiguous(), flat, async_op=True)
        else:
            displs = list(itertools.accumulate([0] + counts[:-1]))
            w = self._comm.all_gather_v(inp.contiguous(), flat, counts, displs, async_op=True)
        return w, lambda: _unflat(flat, outs)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def _allgather_base(self, output, input, opts=None):
        return _Work([self._comm.all_gather(input, output, async_op=True)], [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return _Work([self._comm.all_gather(i, o, async_op=True) for o, i in zip(outputs, inputs)], outputs)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        works = []
        for out, ins in zip(output_tensors, input_tensors):
            op = _reduce_op(opts, out)
            if len(ins) != self.size():
                raise ValueError(f"reduce_scatter: {len(ins)} input tensors for {self.size()} ranks")
            counts = [t.numel() for t in ins]
            flat = _flat(ins)
            if all(c == out.numel() for c in counts):
                works.append(self._comm.reduce_scatter(flat, out, op, async_op=True))
            else:
                displs = list(itertools.accumulate([0] + counts[:-1]))
                works.append(self._comm.reduce_scatter_v(flat, counts, displs, out, op, async_op=True))
        return _Work(works, output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _reduce_op(opts, output)
        return _Work([self._comm.reduce_scatter(input, output, op, async_op=True)], [output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return _Work([self._comm.reduce_scatter(i, o, _reduce_op(opts, o), async_op=True) for o, i in zip(outputs, inputs)], outputs)

    def reduce(self, tensors, opts=None):
        root = _root(opts)
        return _Work([self._comm.reduce(t, None, _reduce_op(opts, t), root, async_op=True) for t in tensors], tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        root = _root(opts)
        inp = input_tensors[0]
        if self.rank() != root:
            return _Work([self._comm.gather(inp, None, root, async_op=True)], output_tensors)
        outs = output_tensors[0]
        if len(outs) != self.size():
            raise ValueError(f"gather: {len(outs)} output tensors for {self.size()} ranks")
        flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype)
        w = self._comm.gather(inp, flat, root, async_op=True)
        return _Work([w], output_tensors, lambda: _unflat(flat, outs))

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = _root(opts)
        out = output_tensors[0]
        if self.rank() != root:
            return _Work([self._comm.scatter(None, out, root, async_op=True)], output_tensors)
        ins = input_tensors[0]
        if len(ins) != self.size():
            raise ValueError(f"scatter: {len(ins)} input tensors for {self.size()} ranks")
        flat = _flat(ins)
        return _Work([self._comm.scatter(flat, out, root, async_op=True)], output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if not output_split_sizes and not input_split_sizes:
            return _Work([self._comm.all_to_all(input, output, async_op=True)], [output])
        p = self.size()

        def counts(t, splits):
            if not splits:
                if t.shape[0] % p:
                    raise ValueError(f"all_to_all_single: dim 0 ({t.shape[0]}) does not split into {p} equal parts")
                splits = [t.shape[0] // p] * p
            row = t[0].numel() if t.dim() > 0 and t.shape[0] > 0 else max(1, t.numel() // max(1, t.shape[0] if t.dim() else 1))
            c = [s * row for s in splits]
            return c, list(itertools.accumulate([0] + c[:-1]))

        sc, sd = counts(input, input_split_sizes)
        rc, rd = counts(output, output_split_sizes)
        return _Work([self._comm.all_to_all_v(input, sc, sd, output, rc, rd, async_op=True)], [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        sc = [t.numel() for t in input_tensors]
        rc = [t.numel() for t in output_tensors]
        flat_in = _flat(input_tensors)
        dtype = output_tensors[0].dtype if output_tensors else flat_in.dtype
        flat_out = torch.empty(sum(rc), dtype=dtype)
        sd = list(itertools.accumulate([0] + sc[:-1]))
        rd = list(itertools.accumulate([0] + rc[:-1]))
        w = self._comm.all_to_all_v(flat_in, sc, sd, flat_out, rc, rd, async_op=True)
        return _Work([w], output_tensors, lambda: _unflat(flat_out, output_tensors))

    def barrier(self, opts=None):
        return _Work([self._comm.barrier(async_op=True)], [])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        self._comm.barrier()

    # torch >= 2.x calls these names of the single-tensor forms on a
    # ProcessGroup written in Python (2.15: dist.all_gather_into_tensor ->
    # group.all_gather_single, ...); older ones the names above.
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def gather_single(self, output, input, opts=None):
        """dist.gather_single (torch 2.15): the root's output holds every
        rank's input in rank order; elsewhere it is unused."""
        root = _root(opts)
        out = output if self.rank() == root else None
        return _Work([self._comm.gather(input, out, root, async_op=True)], [output])

    # -- point-to-point ------------------------------------------------
    def send(self, tensors, dstRank, tag=0):  # noqa: N803 (torch's names)
        """``isend``/``send``: held back until a Work of it (or of a later
        held send or receive) is waited on or asked about, or the next
        other op, then started with every other held one as one batch.
        ``batch_isend_irecv`` and an ``isend``/``irecv`` exchange then
        cannot wait for each other: one at a time, both ranks' sends of
        more than the eager bound (``HCCL_BUFFSIZE``) waited for receives
        queued behind them until ``HCCL_EXEC_TIMEOUT``."""
        return self._hold("send", tensors, dstRank)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        """``irecv``/``recv``: held back as ``send`` is."""
        return self._hold("recv", tensors, srcRank)

    def _hold(self, kind, tensors, peer):
        with self._held_lock:
            held = [_HeldP2P(self) for _ in tensors]
            self._held.extend((kind, t, peer, h) for t, h in zip(tensors, held))
        return _Work(held, tensors)

    def recv_anysource(self, tensors, tag=0):
        raise HcclError("hccl_rs: recv from any source is not supported (HCCL has no wildcard receive); name src")


class _hccl_timeouts:
    """Sets HCCL_EXEC_TIMEOUT (each op) and HCCL_CONNECT_TIMEOUT (the
    bootstrap) from torch's timeout while a communicator is built (it reads
    the variables then), unless the timeout is torch's default and the
    variable is set. torch's timeout covers its own store's bootstrap too, so
    without the second a rank waited 120 s for a missing rank where Gloo's
    gave up at the timeout."""

    VARS = ("HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT")

    def __init__(self, timeout):
        default = getattr(dist, "default_pg_timeout", None)
        secs = None if timeout is None else str(max(1, int(round(timeout.total_seconds()))))
        self.values = {v: secs for v in self.VARS if secs is not None and (timeout != default or v not in os.environ)}

    def __enter__(self):
        self.old = {v: os.environ.get(v) for v in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc):
        for v, old in self.old.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old


def _creator(name):
    def create(store, rank, size, timeout):
        return ProcessGroupHCCL(store, rank, size, timeout, name)

    return create


def _ascend_env():
    """Ascend's launch variables for torch's env:// (which reads RANK and
    WORLD_SIZE): RANK_ID as RANK, RANK_SIZE as WORLD_SIZE, when unset and
    a whole number. A malformed one is left where it is: ``Comm.from_env``
    reads RANK_ID / RANK_SIZE too and names it (the copy made it report
    RANK="x")."""
    for ours, torchs in (("RANK_ID", "RANK"), ("RANK_SIZE", "WORLD_SIZE")):
        if torchs not in os.environ and os.environ.get(ours, "").strip().isdigit():
            os.environ[torchs] = os.environ[ours]


def register():
    """Registers the backend as "hccl_rs", and as "hccl" if that name is
    free (torch_npu not loaded). Idempotent."""
    _ascend_env()
    B = dist.Backend
    kw = {}
    if "devices" in inspect.signature(B.register_backend).parameters:
        kw["devices"] = ["cpu"]
    for name in ("hccl_rs", "hccl"):
        if name.upper() in B._plugins and getattr(B._plugins[name.upper()].creator_fn, "_hccl_rs", False):
            continue  # ours already
        if hasattr(B, name.upper()) or name.upper() in B._plugins:
            continue  # someone else's (torch_npu's "hccl")
        fn = _creator(name)
        fn._hccl_rs = True
        B.register_backend(name, fn, **kw)


register()
_READY = True
