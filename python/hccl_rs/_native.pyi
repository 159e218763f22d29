"""Type stubs of hccl_rs._native (the Rust extension; see hccl_rs/__init__.py)."""

from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

# A buffer-protocol object (numpy array, memoryview, bytearray) or a
# contiguous CPU torch.Tensor. Its format gives the element type unless
# dtype= names one ("fp32", "bf16", "float16", "HCCL_DATA_TYPE_INT8", ...).
Buffer = Any
# "sum", "prod", "max", "min", "avg" (or HCCL_REDUCE_SUM, ...).
Op = str

__version__: str

class HcclError(RuntimeError):
    """A failed HCCL call: ``code`` is its HcclResult code, ``message`` the message."""

    code: int
    message: str

class Work:
    """The handle of an async op (async_op=True); its buffers are in use until it completes."""

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until done; True, or raises its HcclError (TimeoutError after timeout s)."""
    def is_completed(self) -> bool: ...
    def is_success(self) -> bool: ...
    def exception(self) -> Optional[HcclError]: ...
    def add_done_callback(self, callback: Callable[[], Any]) -> None:
        """Calls callback() when the op finishes (at once if it has)."""

class Comm:
    """One rank's communicator; ops run one at a time in call order."""

    @staticmethod
    def from_env() -> "Comm":
        """From a launcher's variables (torchrun's MASTER_ADDR/RANK/WORLD_SIZE, mpirun's)."""
    @staticmethod
    def init_root_info(nranks: int, root_info: str, rank: int) -> "Comm":
        """HcclCommInitRootInfo: root_info from get_root_info() on one rank."""
    @staticmethod
    def init_cluster_info(rank_table: Union[str, PathLike], rank: int) -> "Comm":
        """HcclCommInitClusterInfo: an HCCL rank table (JSON 1.0 or 1.2)."""
    @staticmethod
    def init_all(ndev: int, backend: Optional[str] = None) -> list["Comm"]:
        """HcclCommInitAll: ndev ranks in this process ("tcp" loopback or "sim")."""
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def backend(self) -> str: ...
    def all_reduce(self, send: Buffer, recv: Optional[Buffer] = None, op: Op = "sum", *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def reduce_scatter(self, send: Buffer, recv: Buffer, op: Op = "sum", *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def all_gather(self, send: Buffer, recv: Buffer, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def broadcast(self, buf: Buffer, root: int = 0, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def reduce(self, send: Buffer, recv: Optional[Buffer] = None, op: Op = "sum", root: int = 0, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def scatter(self, send: Optional[Buffer], recv: Buffer, root: int = 0, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def gather(self, send: Buffer, recv: Optional[Buffer], root: int = 0, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def all_to_all(self, send: Buffer, recv: Buffer, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def barrier(self, *, async_op: bool = False) -> Optional[Work]: ...
    def all_gather_v(self, send: Buffer, recv: Buffer, recv_counts: Sequence[int], recv_displs: Sequence[int], *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def reduce_scatter_v(self, send: Buffer, send_counts: Sequence[int], send_displs: Sequence[int], recv: Buffer, op: Op = "sum", *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def all_to_all_v(self, send: Buffer, send_counts: Sequence[int], send_displs: Sequence[int], recv: Buffer, recv_counts: Sequence[int], recv_displs: Sequence[int], *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def send(self, buf: Buffer, dest: int, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def recv(self, buf: Buffer, src: int, *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def batch_send_recv(self, items: Sequence[Tuple[str, Buffer, int]], *, dtype: Optional[str] = None, async_op: bool = False) -> Optional[Work]: ...
    def split(self, color: Optional[int], key: int = 0) -> Optional["Comm"]: ...
    def async_error(self) -> Optional[HcclError]: ...
    def abort(self) -> None: ...
    def destroy(self) -> None: ...

class ErrorFeedback:
    """One rank's error-feedback state for one bucket (residual; Top-K's momentum).

    Empty until the first exchange; pass the same object to every step's
    exchange of that bucket (a bucket of another length raises). Built from
    float32 buffers (copied) to carry a residual over to a new bucket layout.
    """

    def __init__(self, residual: Optional[Buffer] = None, momentum: Optional[Buffer] = None) -> None: ...
    @property
    def len(self) -> int:
        """Elements of the residual (0 before the first exchange)."""
    def residual(self) -> bytes:
        """The residual as float32 bytes: numpy.frombuffer(b, numpy.float32)."""
    def momentum(self) -> bytes:
        """The momentum (Top-K with momentum correction) as float32 bytes, else empty."""
    def reset(self) -> None: ...
    @property
    def last_path(self) -> Optional[str]:
        """The last exchange's path: "sparse", "dense" (the byte rule chose AllReduce), "int8"."""
    @property
    def last_k(self) -> Optional[int]:
        """Pairs per rank of the last sparse exchange."""
    @property
    def last_payload_bytes(self) -> Optional[int]:
        """Bytes this rank handed to the last exchange's data collective."""

class TopK:
    """Top-K with error feedback (DGC, GRACE), exchanged as (index, value) pairs by AllGather.

    selection: "exact" (quickselect) or "sampled" (DGC's sampled threshold
    on sample_ratio of the bucket; the same k elements); momentum: DGC's
    momentum correction factor in [0, 1). Dense AllReduce instead when the
    pairs would move more bytes (sparse_wins).
    """

    def __init__(self, ratio: float, *, selection: str = "exact", sample_ratio: float = 0.01, momentum: Optional[float] = None) -> None: ...
    @property
    def ratio(self) -> float: ...
    @property
    def selection(self) -> str: ...
    @property
    def momentum(self) -> Optional[float]: ...
    def k(self, n: int) -> int:
        """Elements sent of a bucket of n: ceil(ratio * n), at most n."""
    def all_reduce(self, comm: Comm, grad: Buffer, feedback: ErrorFeedback, *, average: bool = False, async_op: bool = False) -> Optional[Work]:
        """Sums float32 grad in place over comm's ranks through Top-K with feedback (this bucket's)."""

class Int8:
    """INT8 per-block quantisation (scale max|x|/127 per block) with error feedback, by AllGather."""

    def __init__(self, block: int = 256) -> None: ...
    @property
    def block(self) -> int: ...
    def payload_bytes(self, n: int) -> int:
        """Bytes one rank sends for a bucket of n elements: 4 per block + n."""
    def all_reduce(self, comm: Comm, grad: Buffer, feedback: ErrorFeedback, *, average: bool = False, async_op: bool = False) -> Optional[Work]:
        """Sums float32 grad in place over comm's ranks through INT8 with feedback (this bucket's)."""

class Reducer:
    """DDP's buckets for a plain training loop, on a communicator split from comm.

    push(p, grad) copies a gradient in and marks it ready (complete buckets
    are reduced at once on the reducer's thread); finish() waits and returns
    {"paths", "payload_bytes", "exposed_s", "comm_s"}; grad(p, out) copies
    the reduced gradient out. The bucket plan is checked across ranks.
    """

    def __init__(self, comm: Comm, param_sizes: Sequence[int], *, compression: Union[None, TopK, Int8] = None, first_bucket_bytes: int = 1 << 20, bucket_cap_bytes: int = 25 << 20, average: bool = True, rebuild: bool = True) -> None: ...
    def push(self, p: int, grad: Buffer) -> None: ...
    def finish(self) -> Dict[str, Any]: ...
    def grad(self, p: int, out: Buffer) -> None: ...
    @property
    def buckets(self) -> List[List[int]]: ...
    @property
    def param_sizes(self) -> List[int]: ...
    def close(self) -> None: ...

def sparse_wins(world: int, n: int, k: int) -> bool:
    """True if k (index, value) pairs per rank by AllGather move fewer bytes than a dense AllReduce of n float32 (P*k*8 < 2*n*4)."""

def get_root_info() -> str:
    """HcclGetRootInfo: makes this process the root of the next bootstrap."""

def cli(argv: Sequence[str]) -> int:
    """Runs the hccl program with argv (python -m hccl_rs ...)."""

def at_exit() -> None:
    """The package's atexit handler (registered by ``import hccl_rs``): the
    communicators' worker threads stop taking the GIL before the
    interpreter finalizes; waits up to 60 s for those taking it now."""
