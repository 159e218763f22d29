"""hccl-rs for Python: collective communication in the style of Huawei HCCL.

``hccl_rs.Comm`` is one rank's communicator (the Rust ``hccl::Comm``): every
collective (AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Scatter,
Gather, AllToAll, the V variants), point-to-point and batches, blocking or
async (``async_op=True`` returns a ``Work``), on numpy arrays, memoryviews,
bytearrays and contiguous CPU ``torch.Tensor``s, in place, without a copy.
Errors raise ``HcclError`` (``.code``: the HcclResult code; ``.message``).

Gradient compression (the Rust crate hccl-compress): ``TopK`` (Top-K with
error feedback, really sparse on the wire) and ``Int8`` (per-block INT8),
each exchanging one bucket with an ``ErrorFeedback``; ``Reducer``, DDP's
buckets for a plain training loop (``hccl_rs.reducer.ModelReducer`` hooks it
into a model's backward); ``hccl_rs.hooks``, DDP communication hooks
(``hooks.topk(ratio)``, ``hooks.int8()``) for any backend.

``hccl_rs.torch`` is a ``torch.distributed`` backend on it, registered as
``"hccl_rs"`` and, unless another package (torch_npu) has that name, as
``"hccl"``. Importing ``hccl_rs`` registers it when torch is installed
(``HCCL_RS_TORCH=0`` skips that, and the import of torch it costs).
"""

import atexit as _atexit
import os as _os

from ._native import (
    Comm,
    ErrorFeedback,
    HcclError,
    Int8,
    Reducer,
    TopK,
    Work,
    __version__,
    at_exit as _at_exit,
    get_root_info,
    sparse_wins,
)

# Before the interpreter finalizes, the communicators' worker threads stop
# taking the GIL (src/exit.rs). Registered first, so it runs after the
# atexit handlers registered later (hccl_rs.torch's future thread's join).
_atexit.register(_at_exit)

HcclError.__module__ = "hccl_rs"

__all__ = ["Comm", "ErrorFeedback", "HcclError", "Int8", "Reducer", "TopK", "Work", "get_root_info", "sparse_wins", "__version__"]


def _register_torch():
    if _os.environ.get("HCCL_RS_TORCH", "1") == "0":
        return
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    from . import torch as _torch_backend  # noqa: F401  (registers the backend)


_register_torch()
