"""DDP communication hooks that compress gradients on hccl-rs: Top-K with
error feedback (``topk(ratio)``) and INT8 with per-block scales (``int8()``),
for ``DistributedDataParallel.register_comm_hook`` with any backend (Gloo,
NCCL, ``"hccl"``)::

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    hook = hccl_rs.hooks.topk(0.01)       # collective: every rank calls it
    ddp.register_comm_hook(hook.state, hook)

Each DDP bucket is exchanged by ``hccl_rs.TopK`` / ``hccl_rs.Int8``
(``hccl_rs.TopK.all_reduce``): really sparse on the wire (the (index,
value) pairs travel by AllGather; a dense AllReduce where that moves fewer
bytes), the same bits on every rank, averaged over the ranks as DDP's
default hook. Ranks whose buckets disagree (in size or scheme) fail
together, naming both buckets, instead of gathering mismatched data.

The communicator. The hooks move their data with an ``hccl_rs.Comm``:

- when the DDP process group is an ``"hccl"`` (hccl_rs) group, its own
  communicator: the hook's exchanges queue on its stream, in order with
  DDP's own collectives;
- with any other backend, a communicator of the same ranks, built when the
  hook is made: rank 0 of the group starts a bootstrap
  (``hccl_rs.get_root_info()``), the group itself carries the root info to
  the others (``broadcast_object_list``), and every rank joins
  (``Comm.init_root_info``) over hccl-rs's TCP transport (``HCCL_IF_IP``
  and the other HCCL_* variables apply);
- or the one passed as ``comm=``.

So ``topk()`` / ``int8()`` are collective: every rank of the group calls
them, after ``init_process_group``.

Error feedback. The hook's state (``hook.state``, a ``CompressionState``;
``register_comm_hook(None, hook)`` uses it too) keeps one
``hccl_rs.ErrorFeedback`` per DDP bucket, keyed by the bucket's index and
checked against its parameters: when DDP rebuilds its buckets (after the
first step) each parameter's residual moves with it to its new bucket.

Buckets that are not contiguous float32 CPU tensors (CUDA, float16,
bfloat16) are exchanged through a float32 CPU copy and copied back.
Written against what torch 1.13 and 2.x share (``GradBucket.buffer``,
``index``, ``parameters``; ``torch.futures.Future``).
"""

import torch
import torch.distributed as dist

from ._native import Comm, ErrorFeedback, Int8, TopK, get_root_info
from .torch import ProcessGroupHCCL, _Work

__all__ = ["CompressionState", "comm_for", "int8", "topk"]


def _hccl_comm(pg):
    """The hccl_rs.Comm of `pg` if it is an hccl_rs group, else None."""
    if isinstance(pg, ProcessGroupHCCL):
        return pg.comm
    # torch 2.x: a ProcessGroup wrapping per-device backends.
    get_backend = getattr(pg, "_get_backend", None)
    if get_backend is not None:
        try:
            b = get_backend(torch.device("cpu"))
        except Exception:  # no CPU backend, or not a wrapper
            b = None
        if isinstance(b, ProcessGroupHCCL):
            return b.comm
    return None


def _group_root(pg):
    """The global rank of `pg`'s rank 0."""
    default = dist.distributed_c10d._get_default_group()
    if pg is default:
        return 0
    f = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return f(pg, 0)


def comm_for(process_group=None):
    """The ``hccl_rs.Comm`` of `process_group`'s ranks (default: the default
    group): the group's own if it is an hccl_rs group, else a new one
    bootstrapped through the group (collective: every member calls it)."""
    pg = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
    own = _hccl_comm(pg)
    if own is not None:
        return own
    rank, size = dist.get_rank(pg), dist.get_world_size(pg)
    box = [get_root_info() if rank == 0 else None]
    dist.broadcast_object_list(box, src=_group_root(pg), group=pg)
    return Comm.init_root_info(size, box[0], rank)


def _floats(b):
    """float32 bytes as a 1-D tensor (a copy)."""
    return torch.frombuffer(bytearray(b), dtype=torch.float32) if b else torch.zeros(0)


class CompressionState:
    """A compression hook's state: the scheme (``hccl_rs.TopK`` or
    ``hccl_rs.Int8``), the communicator, whether to average, and one
    ``ErrorFeedback`` per DDP bucket (``feedback``: bucket index -> (layout,
    ErrorFeedback), the layout being the bucket's parameters as (data_ptr,
    numel))."""

    def __init__(self, scheme, comm, average=True):
        self.scheme = scheme
        self.comm = comm
        self.average = average
        self.feedback = {}
        # Per parameter, the residual (and momentum) carried over a rebuild.
        self._carry = {}

    def feedback_for(self, index, params):
        """The ErrorFeedback of bucket `index` holding `params` (in bucket
        order); after DDP rebuilt its buckets, one carrying each parameter's
        residual to its place in the new bucket."""
        layout = tuple((p.data_ptr(), p.numel()) for p in params)
        entry = self.feedback.get(index)
        if entry is not None and entry[0] == layout:
            return entry[1]
        # A new layout (DDP rebuilt its buckets): the entries it replaces
        # (this index's, and any holding one of its parameters) go per
        # parameter; each parameter's residual then moves to its new place.
        # Entries of the new layout hold other parameters and stay.
        mine = set(layout)
        for i, (old_layout, fb) in list(self.feedback.items()):
            if i != index and mine.isdisjoint(old_layout):
                continue
            del self.feedback[i]
            res, mom = _floats(fb.residual()), _floats(fb.momentum())
            at = 0
            for key in old_layout:
                n = key[1]
                if res.numel():
                    self._carry[key] = (res[at : at + n], mom[at : at + n] if mom.numel() else None)
                at += n
        fb = self._build(layout)
        self.feedback[index] = (layout, fb)
        return fb

    def _build(self, layout):
        parts = [self._carry.pop(key, None) for key in layout]
        if all(p is None for p in parts):
            return ErrorFeedback()
        res = torch.cat([p[0] if p is not None else torch.zeros(key[1]) for p, key in zip(parts, layout)])
        if any(p is not None and p[1] is not None for p in parts):
            mom = torch.cat([p[1] if p is not None and p[1] is not None else torch.zeros(key[1]) for p, key in zip(parts, layout)])
            return ErrorFeedback(res, mom)
        return ErrorFeedback(res)


def _exchange(state, bucket):
    """Starts one bucket's compressed exchange; its future's value is the
    (averaged) bucket."""
    buf = bucket.buffer()
    fb = state.feedback_for(bucket.index(), bucket.parameters())
    direct = buf.device.type == "cpu" and buf.dtype == torch.float32 and buf.is_contiguous()
    work = buf if direct else buf.detach().to(device="cpu", dtype=torch.float32).contiguous()
    w = state.scheme.all_reduce(state.comm, work, fb, average=state.average, async_op=True)
    fut = _Work([w], work).get_future()
    if direct:
        return fut

    def back(f):
        buf.copy_(f.value())
        return buf

    return fut.then(back)


def _make_hook(scheme, process_group, comm, average):
    state = CompressionState(scheme, comm if comm is not None else comm_for(process_group), average)

    def hook(state_, bucket):
        # register_comm_hook(None, hook) passes None: the hook's own state.
        st = state_ if isinstance(state_, CompressionState) else state
        return _exchange(st, bucket)

    hook.state = state
    hook.__name__ = f"hccl_rs_{type(scheme).__name__.lower()}_hook"
    hook.__qualname__ = hook.__name__
    return hook


def topk(ratio, *, selection="exact", sample_ratio=0.01, momentum=None, process_group=None, comm=None, average=True):
    """A DDP comm hook exchanging each bucket by Top-K with error feedback,
    keeping `ratio` of it (``hccl_rs.TopK``: `selection` "exact" or
    "sampled", DGC's `momentum` correction). Collective (see the module
    docs for the communicator); ``hook.state`` is its CompressionState."""
    return _make_hook(TopK(ratio, selection=selection, sample_ratio=sample_ratio, momentum=momentum), process_group, comm, average)


def int8(block=256, *, process_group=None, comm=None, average=True):
    """A DDP comm hook exchanging each bucket by INT8 with per-block scales
    (`block` elements per scale) and error feedback (``hccl_rs.Int8``).
    Collective; ``hook.state`` is its CompressionState."""
    return _make_hook(Int8(block), process_group, comm, average)
