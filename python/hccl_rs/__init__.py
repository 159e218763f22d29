"""hccl-rs for Python: collective communication in the style of Huawei HCCL.

``hccl_rs.Comm`` is one rank's communicator (the Rust ``hccl::Comm``): every
collective (AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Scatter,
Gather, AllToAll, the V variants), point-to-point and batches, blocking or
async (``async_op=True`` returns a ``Work``), on numpy arrays, memoryviews,
bytearrays and contiguous CPU ``torch.Tensor``s, in place, without a copy.
Errors raise ``HcclError`` (``.code``: the HcclResult code; ``.message``).

``hccl_rs.torch`` is a ``torch.distributed`` backend on it, registered as
``"hccl_rs"`` and, unless another package (torch_npu) has that name, as
``"hccl"``. Importing ``hccl_rs`` registers it when torch is installed
(``HCCL_RS_TORCH=0`` skips that, and the import of torch it costs).
"""

import os as _os

from ._native import Comm, HcclError, Work, __version__, get_root_info

HcclError.__module__ = "hccl_rs"

__all__ = ["Comm", "HcclError", "Work", "get_root_info", "__version__"]


def _register_torch():
    if _os.environ.get("HCCL_RS_TORCH", "1") == "0":
        return
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return
    from . import torch as _torch_backend  # noqa: F401  (registers the backend)


_register_torch()
