//! `hccl_rs.Comm`: one rank's communicator (`hccl::Comm`) for Python.
//!
//! Every op takes buffers (see `buffer`), an element type from their
//! format or `dtype=`, and `async_op`: False runs it on the calling thread
//! with the GIL released and returns None; True queues it on the
//! communicator's stream and returns a `Work`. Either way ops run in call
//! order (`stream`). Counts come from the buffers' lengths, as torch's
//! collectives take them from tensor sizes.

use std::sync::{Arc, Mutex};

use hccl::comm::DataType;
use hccl::{BackendKind, CommError, P2pItem};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::ReduceOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use crate::buffer::{check_disjoint, separate, Mem, Pair};
use crate::dtype;
use crate::error::{hccl_error, to_py};
use crate::stream::Stream;
use crate::work::{Done, Work};

/// An op as the stream runs it.
pub(crate) type Op = Box<dyn FnOnce(&hccl::Comm) -> Result<(), CommError> + Send>;

/// Runs `$body` with `$t` the Rust element type of data type `$d`.
macro_rules! with_element {
    ($d:expr, $t:ident => $body:expr) => {
        match $d {
            DataType::Int8 => {
                type $t = i8;
                $body
            }
            DataType::Int16 => {
                type $t = i16;
                $body
            }
            DataType::Int32 => {
                type $t = i32;
                $body
            }
            DataType::Int64 => {
                type $t = i64;
                $body
            }
            DataType::Uint8 => {
                type $t = u8;
                $body
            }
            DataType::Uint16 => {
                type $t = u16;
                $body
            }
            DataType::Uint32 => {
                type $t = u32;
                $body
            }
            DataType::Uint64 => {
                type $t = u64;
                $body
            }
            DataType::Fp16 => {
                type $t = hccl::half::f16;
                $body
            }
            DataType::Bf16 => {
                type $t = hccl::half::bf16;
                $body
            }
            DataType::Fp32 => {
                type $t = f32;
                $body
            }
            DataType::Fp64 => {
                type $t = f64;
                $body
            }
        }
    };
}

/// Bytes as elements (checked aligned when the op was built).
fn elems<T: bytemuck::Pod>(b: &[u8]) -> Result<&[T], CommError> {
    bytemuck::try_cast_slice(b).map_err(|e| CommError::Unsupported(format!("buffer: {e}")))
}

/// Bytes as elements, writable.
fn elems_mut<T: bytemuck::Pod>(b: &mut [u8]) -> Result<&mut [T], CommError> {
    bytemuck::try_cast_slice_mut(b).map_err(|e| CommError::Unsupported(format!("buffer: {e}")))
}

/// The element type of an op's buffers: `dtype` if given (each typed
/// buffer's items must have its size: a uint16 buffer may carry bf16;
/// raw bytes carry any type), else the one type the buffers' formats
/// name, else uint8. Empty buffers do not count.
fn resolve(dtype: Option<&str>, mems: &[(&str, &Mem)]) -> PyResult<DataType> {
    let named = dtype.map(dtype::parse).transpose()?;
    let mut found: Option<(&str, DataType)> = None;
    for &(arg, m) in mems {
        let Some(d) = m.dtype().filter(|_| m.len() > 0) else {
            continue;
        };
        match (named, found) {
            (Some(n), _) if n.size() != d.size() => {
                return Err(PyTypeError::new_err(format!(
                    "{arg} holds {d} ({} bytes each), but dtype={n} has {} bytes",
                    d.size(),
                    n.size()
                )))
            }
            (None, Some((a0, d0))) if d0 != d => {
                return Err(PyTypeError::new_err(format!(
                    "{a0} holds {d0} and {arg} holds {d}: pass buffers of one type"
                )))
            }
            (None, None) => found = Some((arg, d)),
            _ => {}
        }
    }
    // Raw bytes ('B': numpy uint8, bytearray, bytes) alone are uint8.
    Ok(named.or(found.map(|f| f.1)).unwrap_or(DataType::Uint8))
}

/// Elements of `d` in `m`.
///
/// # Errors
/// `ValueError` if `m` is not a whole number of aligned elements.
fn count(arg: &str, m: &Mem, d: DataType) -> PyResult<u64> {
    let size = d.size() as usize;
    if !m.len().is_multiple_of(size) {
        return Err(PyValueError::new_err(format!(
            "{arg}: {} bytes is not a whole number of {d} elements ({size} bytes each)",
            m.len()
        )));
    }
    if !m.aligned(size) {
        return Err(PyValueError::new_err(format!(
            "{arg}: the buffer is not aligned to its {d} elements ({size} bytes)"
        )));
    }
    Ok((m.len() / size) as u64)
}

/// The buffer of `obj`: its buffer protocol, or a `torch.Tensor`'s
/// memory (no copy; bfloat16 named, bool as uint8 bytes).
pub(crate) fn get(obj: &Bound<'_, PyAny>, arg: &str, writable: bool) -> PyResult<Mem> {
    if is_tensor(obj) {
        Mem::tensor(obj, arg)
    } else {
        Mem::get(obj, arg, writable)
    }
}

/// `torch.Tensor`, once a tensor has been seen (torch is imported then).
static TENSOR_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `sys.modules`, looked up once: the dict itself lives as long as the
/// interpreter (`sys.modules = {}` does not change what imports use).
static SYS_MODULES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

/// True for a `torch.Tensor`, a subclass defined outside torch included
/// (without importing torch): an `isinstance` against `torch.Tensor`,
/// found in `sys.modules` (a tensor exists only once torch is imported)
/// and cached from then on. Testing the type's module before the first
/// tensor made a subclass from another module fail as the process's first
/// tensor and pass after a plain one. Before torch is imported this is a
/// dict lookup that finds nothing (an `import sys` and a raised KeyError
/// per buffer cost a numpy program about 1 µs per op).
fn is_tensor(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    if let Some(t) = TENSOR_TYPE.get(py) {
        return obj.is_instance(t.bind(py)).unwrap_or(false);
    }
    let modules = SYS_MODULES.get_or_try_init(py, || {
        py.import(intern!(py, "sys"))?
            .getattr(intern!(py, "modules"))?
            .cast_into::<PyDict>()
            .map(Bound::unbind)
            .map_err(PyErr::from)
    });
    // Not imported yet, or still importing (no `Tensor` yet): not a tensor.
    let tensor = modules
        .ok()
        .and_then(|m| m.bind(py).get_item(intern!(py, "torch")).ok().flatten())
        .and_then(|m| m.getattr(intern!(py, "Tensor")).ok())
        .and_then(|t| t.cast_into::<PyType>().ok());
    match tensor {
        Some(t) => {
            let is = obj.is_instance(&t).unwrap_or(false);
            let _ = TENSOR_TYPE.set(py, t.unbind());
            is
        }
        None => false,
    }
}

/// Refuses a sum, product or average over a torch bool tensor: its
/// elements are 0/1 bytes, which a byte-wise sum could turn into 2 (the
/// torch backend maps SUM to max and PRODUCT to min, as torch's NCCL
/// backend does; a numpy bool array is refused by its format).
///
/// # Errors
/// `ValueError` naming the op and what to use instead.
fn refuse_bool_sums(mems: &[Mem], op: ReduceOp) -> PyResult<()> {
    if matches!(op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Avg)
        && mems.first().is_some_and(Mem::is_bools)
    {
        return Err(PyValueError::new_err(format!(
            "send: op \"{}\" on a bool tensor would store values other than 0 and 1; use op=\"max\" (logical or) or op=\"min\" (logical and), or a uint8 tensor",
            op.name()
        )));
    }
    Ok(())
}

/// An optional buffer: `None` is no memory.
fn get_opt(obj: Option<&Bound<'_, PyAny>>, arg: &str, writable: bool) -> PyResult<Mem> {
    obj.map_or_else(|| Ok(Mem::empty()), |o| get(o, arg, writable))
}

/// A collective on a send and a receive buffer (in place if they overlap
/// as the op's in-place layout).
fn pair_op(args: CollectiveArgs, pair: Pair) -> Op {
    Box::new(move |c| match pair {
        Pair::Separate(s, mut r) => c.collective(&args, s.bytes(), r.bytes_mut()),
        Pair::InPlace(mut one, _other) => c.collective_in_place(&args, one.bytes_mut()),
    })
}

/// A collective in place on one buffer.
fn in_place_op(args: CollectiveArgs, mut buf: Mem) -> Op {
    Box::new(move |c| c.collective_in_place(&args, buf.bytes_mut()))
}

/// A buffer argument of an op: its Python name (for errors), the object
/// (`None`: no memory on this rank, such as a non-root's Scatter input) and
/// whether the op writes it.
type Arg<'a, 'py> = (&'a str, Option<&'a Bound<'py, PyAny>>, bool);

/// The memories of `args` (in order), the one element type they hold (see
/// `resolve`) and each one's element count.
///
/// # Errors
/// `TypeError` / `ValueError` naming the argument (see `get`, `resolve`,
/// `count`).
fn parse(dtype: Option<&str>, args: &[Arg<'_, '_>]) -> PyResult<(Vec<Mem>, DataType, Vec<u64>)> {
    let mems = args
        .iter()
        .map(|&(name, obj, writable)| get_opt(obj, name, writable))
        .collect::<PyResult<Vec<_>>>()?;
    let named: Vec<(&str, &Mem)> = args.iter().map(|a| a.0).zip(&mems).collect();
    let d = resolve(dtype, &named)?;
    let counts = named
        .iter()
        .map(|(name, m)| count(name, m, d))
        .collect::<PyResult<_>>()?;
    Ok((mems, d, counts))
}

/// The first two memories of `parse`'s list (empty ones past its end).
fn first_two(mems: Vec<Mem>) -> (Mem, Mem) {
    let mut it = mems.into_iter();
    let a = it.next().unwrap_or_else(Mem::empty);
    (a, it.next().unwrap_or_else(Mem::empty))
}

/// The send and receive memories of an op with no in-place form.
///
/// # Errors
/// `ValueError` if they overlap.
fn disjoint(mems: Vec<Mem>) -> PyResult<(Mem, Mem)> {
    let (send, recv) = first_two(mems);
    separate(send, recv)
}

/// The buffers of an op with an optional receive buffer (AllReduce,
/// Reduce): send and recv, or send alone, in place.
fn send_recv<'a, 'py>(
    send: &'a Bound<'py, PyAny>,
    recv: Option<&'a Bound<'py, PyAny>>,
) -> Vec<Arg<'a, 'py>> {
    match recv {
        None => vec![("send", Some(send), true)],
        Some(r) => vec![("send", Some(send), false), ("recv", Some(r), true)],
    }
}

/// An int argument as Python passed it: Python ints have no width, so the
/// ones the library takes as `u32` / `u64` arrive as `i128` and are
/// checked here (pyo3's own `OverflowError` named neither the argument
/// nor the value).
type PyInt = i128;

/// What is wrong with `v`, an int that is not in `0..=max`.
fn out_of_range(v: PyInt, max: u64) -> String {
    if v < 0 {
        "is negative".into()
    } else {
        format!("is above {max}")
    }
}

/// `v`, argument `arg` of `what`, as a `u32`.
///
/// # Errors
/// `HcclError` HCCL_E_PARA naming them when `v` is negative or above
/// `u32::MAX`, as the library reports other out-of-range values.
fn arg_u32(py: Python<'_>, what: &str, arg: &str, v: PyInt) -> PyResult<u32> {
    u32::try_from(v).map_err(|_| {
        let why = out_of_range(v, u64::from(u32::MAX));
        hccl_error(py, 1, &format!("{what}: {arg} = {v} {why}"))
    })
}

/// A V-variant's counts or displacements (`field` of `op`), in elements.
///
/// # Errors
/// `HcclError` HCCL_E_PARA naming the first entry that is negative or
/// above `u64::MAX`, in the library's form for its other bad entries
/// (`AllGatherV: recv_counts[0] = -2; ...`).
fn elements(py: Python<'_>, op: &str, field: &str, v: &[PyInt]) -> PyResult<Vec<u64>> {
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            u64::try_from(x).map_err(|_| {
                let why = out_of_range(x, u64::MAX);
                hccl_error(
                    py,
                    1,
                    &format!("{op}: {field}[{i}] = {x}; a number of elements {why}"),
                )
            })
        })
        .collect()
}

/// One rank's communicator (HCCL's `HcclComm`). Build it with
/// `Comm.from_env()`, `Comm.init_root_info(...)`, `Comm.init_cluster_info(...)`
/// or `Comm.init_all(...)`. Ops run one at a time in call order, from any
/// thread; blocking ops release the GIL while they run.
#[pyclass(frozen, module = "hccl_rs")]
pub(crate) struct Comm {
    /// `None` once destroyed.
    comm: Mutex<Option<Arc<hccl::Comm>>>,
    pub(crate) stream: Arc<Stream>,
    rank: u32,
    size: u32,
    name: String,
    backend: BackendKind,
}

impl Comm {
    fn wrap(c: hccl::Comm) -> Comm {
        Comm {
            rank: c.rank(),
            size: c.size(),
            name: c.name().to_string(),
            backend: c.backend(),
            comm: Mutex::new(Some(Arc::new(c))),
            stream: Arc::default(),
        }
    }

    /// The communicator (an error once destroyed).
    pub(crate) fn handle(&self, py: Python<'_>) -> PyResult<Arc<hccl::Comm>> {
        let c = self.comm.lock().unwrap_or_else(|p| p.into_inner()).clone();
        c.ok_or_else(|| hccl_error(py, 1, &format!("comm '{}' was destroyed", self.name)))
    }

    /// Runs `op` now (returns None) or queues it (returns its Work).
    pub(crate) fn go(
        &self,
        py: Python<'_>,
        what: &str,
        async_op: bool,
        op: Op,
    ) -> PyResult<Option<Work>> {
        let comm = self.handle(py)?;
        if async_op {
            let done = Arc::new(Done::default());
            let d = Arc::clone(&done);
            // `op` owns the buffers: they are released (with the GIL) when
            // it returns, before `set` wakes the waiters.
            let place = self
                .stream
                .submit(Box::new(move || {
                    // A panic (a bug) fails this op instead of leaving
                    // its Work waiting forever.
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&comm)))
                        .unwrap_or_else(|_| {
                            Err(hccl::CommError::Broken(
                                "the op panicked (a bug in hccl-rs)".into(),
                            ))
                        });
                    d.set(r)
                }))
                .map_err(|m| hccl_error(py, 4, &m))?;
            return Ok(Some(Work {
                done,
                what: what.to_string(),
                stream: Arc::clone(&self.stream),
                place,
            }));
        }
        let stream = Arc::clone(&self.stream);
        py.detach(move || stream.run(|| op(&comm)))
            .map_err(|e| to_py(py, &e))?;
        Ok(None)
    }

    fn args(&self, kind: CollectiveKind, count: u64, d: DataType) -> CollectiveArgs {
        CollectiveArgs::new(kind, count, d, self.size)
    }

    /// `root` of a `kind` collective as a rank.
    ///
    /// # Errors
    /// `HcclError` HCCL_E_PARA, in the library's words for a root beyond
    /// the communicator, when it is negative or above `u32::MAX`.
    fn root(&self, py: Python<'_>, kind: CollectiveKind, root: PyInt) -> PyResult<u32> {
        u32::try_from(root).map_err(|_| {
            let (size, last) = (self.size, self.size.saturating_sub(1));
            let m = format!("{kind}: root = {root} is outside the communicator (world_size {size}); use a root in 0..={last}");
            hccl_error(py, 1, &m)
        })
    }

    /// `peer` of a point-to-point `op` (`Send`, `BatchSendRecv item 0
    /// (Recv)`, ...) as a rank.
    ///
    /// # Errors
    /// `HcclError` HCCL_E_PARA, in the library's words for a peer beyond
    /// the communicator, when it is negative or above `u32::MAX`.
    fn peer(&self, py: Python<'_>, op: &str, peer: PyInt) -> PyResult<u32> {
        u32::try_from(peer).map_err(|_| {
            let (rank, size) = (self.rank, self.size);
            let m = format!("{op}: peer rank {peer} is not another rank of this communicator (this is rank {rank} of {size}); pass a rank in 0..{size} other than {rank}");
            hccl_error(py, 1, &m)
        })
    }

    /// Parses the buffers `args` names, makes the op from them (`make` gets
    /// their memories, element type and counts; its errors raise before
    /// anything runs), then runs or queues it (`go`).
    fn run(
        &self,
        py: Python<'_>,
        what: &str,
        (dtype, async_op): (Option<&str>, bool),
        args: &[Arg<'_, '_>],
        make: impl FnOnce(Vec<Mem>, DataType, &[u64]) -> PyResult<Op>,
    ) -> PyResult<Option<Work>> {
        let (mems, d, counts) = parse(dtype, args)?;
        let op = make(mems, d, &counts)?;
        self.go(py, what, async_op, op)
    }

    /// `run` for a collective of `hccl::Comm::collective`: `args` names its
    /// one buffer (in place) or its send and receive buffers (in place
    /// where they overlap as the collective's in-place layout allows);
    /// `spec` makes its arguments from the buffers' counts and element type.
    fn collective(
        &self,
        py: Python<'_>,
        (dtype, async_op): (Option<&str>, bool),
        args: &[Arg<'_, '_>],
        spec: impl FnOnce(&[u64], DataType) -> PyResult<CollectiveArgs>,
    ) -> PyResult<Option<Work>> {
        let (mems, d, counts) = parse(dtype, args)?;
        let args = spec(&counts, d)?;
        if args.kind.is_reduction() {
            refuse_bool_sums(&mems, args.op)?;
        }
        let what = format!("{:?}", args.kind);
        let op = if mems.len() == 1 {
            in_place_op(args, first_two(mems).0)
        } else {
            let alias = args
                .clone()
                .with_in_place(true)
                .alias(self.rank)
                .map(|a| (a.input_at, a.output_at));
            let (send, recv) = first_two(mems);
            pair_op(args, Pair::new(send, recv, alias)?)
        };
        self.go(py, &what, async_op, op)
    }

    /// Blocks on `f` (a constructor) with the GIL released.
    fn build(
        py: Python<'_>,
        f: impl FnOnce() -> Result<hccl::Comm, CommError> + Send,
    ) -> PyResult<Comm> {
        py.detach(f).map(Comm::wrap).map_err(|e| to_py(py, &e))
    }
}

#[pymethods]
impl Comm {
    /// The communicator of a launcher's environment (torchrun's
    /// MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE, Open MPI's
    /// OMPI_COMM_WORLD_*, PMI_RANK / PMI_SIZE, Ascend's RANK_ID /
    /// RANK_SIZE). Blocks until every rank has joined (HCCL_CONNECT_TIMEOUT).
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Comm> {
        Comm::build(py, hccl::Comm::from_env)
    }

    /// Joins a communicator of `nranks` ranks as `rank` through a root info
    /// string (from `hccl_rs.get_root_info()` on one rank, passed to the
    /// others). HCCL's HcclCommInitRootInfo.
    #[staticmethod]
    fn init_root_info(
        py: Python<'_>,
        nranks: PyInt,
        root_info: &str,
        rank: PyInt,
    ) -> PyResult<Comm> {
        let nranks = arg_u32(py, "init_root_info", "nranks", nranks)?;
        let rank = arg_u32(py, "init_root_info", "rank", rank)?;
        let root: hccl::RootInfo = root_info
            .parse()
            .map_err(|e| PyValueError::new_err(format!("root_info: {e}")))?;
        Comm::build(py, move || hccl::Comm::init_root_info(nranks, &root, rank))
    }

    /// Joins the communicator an HCCL rank table (JSON 1.0 or 1.2) at
    /// `rank_table` describes, as `rank`. HCCL's HcclCommInitClusterInfo.
    #[staticmethod]
    fn init_cluster_info(
        py: Python<'_>,
        rank_table: std::path::PathBuf,
        rank: PyInt,
    ) -> PyResult<Comm> {
        let rank = arg_u32(py, "init_cluster_info", "rank", rank)?;
        Comm::build(py, move || hccl::Comm::init_cluster_info(rank_table, rank))
    }

    /// All `ndev` ranks in this process (HCCL's HcclCommInitAll): over
    /// loopback TCP, or on the simulator with backend="sim" (default:
    /// HCCL_BACKEND, else "tcp"). Drive each from its own thread, or use
    /// async_op=True: each communicator has its own stream. An ndev below
    /// 1 or an unknown backend raises HcclError HCCL_E_PARA naming it.
    #[staticmethod]
    #[pyo3(signature = (ndev, backend=None))]
    fn init_all(py: Python<'_>, ndev: PyInt, backend: Option<&str>) -> PyResult<Vec<Comm>> {
        let ndev = arg_u32(py, "init_all", "ndev", ndev)?;
        if ndev == 0 {
            let m = "init_all: ndev = 0; a communicator has at least one rank";
            return Err(hccl_error(py, 1, m));
        }
        let kind = match backend {
            // The library names HCCL_BACKEND, which it reads without one.
            Some(b) => BackendKind::parse(Some(b)).map_err(|e| match e {
                CommError::Env { value, reason, .. } => {
                    hccl_error(py, 1, &format!("init_all: backend={value:?}: {reason}"))
                }
                e => to_py(py, &e),
            }),
            None => BackendKind::from_env().map_err(|e| to_py(py, &e)),
        }?;
        let comms = py
            .detach(move || hccl::Comm::init_all_on(kind, ndev))
            .map_err(|e| to_py(py, &e))?;
        Ok(comms.into_iter().map(Comm::wrap).collect())
    }

    /// This rank (0..size).
    #[getter]
    fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    #[getter]
    fn size(&self) -> u32 {
        self.size
    }

    /// The communicator's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// "tcp", "sim" or "ascend".
    #[getter]
    fn backend(&self) -> &'static str {
        match self.backend {
            BackendKind::Tcp => "tcp",
            BackendKind::Sim => "sim",
            BackendKind::Ascend => "ascend",
        }
    }

    /// AllReduce: `recv[i]` = op over ranks of `send[i]`; recv=None (or the
    /// same buffer) reduces in place. op: sum, prod, max, min, avg.
    #[pyo3(signature = (send, recv=None, op="sum", *, dtype=None, async_op=false))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        op: &str,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let op = dtype::reduce_op(op)?;
        self.collective(py, (dtype, async_op), &send_recv(send, recv), |n, d| {
            Ok(self.args(CollectiveKind::AllReduce, n[0], d).with_op(op))
        })
    }

    /// ReduceScatter: rank r's recv = op over ranks of block r of send
    /// (send holds size blocks of len(recv) elements).
    #[pyo3(signature = (send, recv, op="sum", *, dtype=None, async_op=false))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: &str,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let op = dtype::reduce_op(op)?;
        let bufs = [("send", Some(send), false), ("recv", Some(recv), true)];
        self.collective(py, (dtype, async_op), &bufs, |n, d| {
            Ok(self
                .args(CollectiveKind::ReduceScatter, n[1], d)
                .with_op(op))
        })
    }

    /// AllGather: recv = every rank's send, in rank order.
    #[pyo3(signature = (send, recv, *, dtype=None, async_op=false))]
    fn all_gather(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let bufs = [("send", Some(send), false), ("recv", Some(recv), true)];
        self.collective(py, (dtype, async_op), &bufs, |n, d| {
            Ok(self.args(CollectiveKind::AllGather, n[0], d))
        })
    }

    /// Broadcast buf from root (a rank of this communicator), in place.
    #[pyo3(signature = (buf, root=0, *, dtype=None, async_op=false))]
    fn broadcast(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        root: PyInt,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let root = self.root(py, CollectiveKind::Broadcast, root)?;
        self.collective(
            py,
            (dtype, async_op),
            &[("buf", Some(buf), true)],
            |n, d| {
                Ok(self
                    .args(CollectiveKind::Broadcast, n[0], d)
                    .with_root(root))
            },
        )
    }

    /// Reduce to root: the root's recv = op over ranks of send (recv is
    /// ignored elsewhere; recv=None reduces into send, in place).
    #[pyo3(signature = (send, recv=None, op="sum", root=0, *, dtype=None, async_op=false))]
    #[allow(clippy::too_many_arguments)]
    fn reduce(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        op: &str,
        root: PyInt,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let root = self.root(py, CollectiveKind::Reduce, root)?;
        let op = dtype::reduce_op(op)?;
        self.collective(py, (dtype, async_op), &send_recv(send, recv), |n, d| {
            Ok(self
                .args(CollectiveKind::Reduce, n[0], d)
                .with_op(op)
                .with_root(root))
        })
    }

    /// Scatter from root: rank r's recv = block r of the root's send
    /// (size * len(recv) elements; None elsewhere).
    #[pyo3(signature = (send, recv, root=0, *, dtype=None, async_op=false))]
    fn scatter(
        &self,
        py: Python<'_>,
        send: Option<&Bound<'_, PyAny>>,
        recv: &Bound<'_, PyAny>,
        root: PyInt,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let root = self.root(py, CollectiveKind::Scatter, root)?;
        let bufs = [("send", send, false), ("recv", Some(recv), true)];
        self.collective(py, (dtype, async_op), &bufs, |n, d| {
            Ok(self.args(CollectiveKind::Scatter, n[1], d).with_root(root))
        })
    }

    /// Gather to root: the root's recv = every rank's send in rank order
    /// (None elsewhere).
    #[pyo3(signature = (send, recv, root=0, *, dtype=None, async_op=false))]
    fn gather(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        root: PyInt,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let root = self.root(py, CollectiveKind::Gather, root)?;
        let bufs = [("send", Some(send), false), ("recv", recv, true)];
        self.collective(py, (dtype, async_op), &bufs, |n, d| {
            Ok(self.args(CollectiveKind::Gather, n[0], d).with_root(root))
        })
    }

    /// AllToAll: block j of rank i's send lands in block i of rank j's
    /// recv; both hold size equal blocks.
    #[pyo3(signature = (send, recv, *, dtype=None, async_op=false))]
    fn all_to_all(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let bufs = [("send", Some(send), false), ("recv", Some(recv), true)];
        let p = u64::from(self.size);
        self.collective(py, (dtype, async_op), &bufs, |n, d| {
            if !n[0].is_multiple_of(p) {
                return Err(PyValueError::new_err(format!(
                    "send: {} elements do not split into {p} equal blocks",
                    n[0]
                )));
            }
            Ok(self.args(CollectiveKind::AllToAll, n[0] / p, d))
        })
    }

    /// Returns once every rank has entered the barrier.
    #[pyo3(signature = (*, async_op=false))]
    fn barrier(&self, py: Python<'_>, async_op: bool) -> PyResult<Option<Work>> {
        self.go(py, "Barrier", async_op, Box::new(|c| c.barrier()))
    }

    /// AllGatherV (HCCL's HcclAllGatherV): rank i's send (`recv_counts[i]`
    /// elements) lands in every rank's recv at element `recv_displs[i]`.
    #[pyo3(signature = (send, recv, recv_counts, recv_displs, *, dtype=None, async_op=false))]
    #[allow(clippy::too_many_arguments)]
    fn all_gather_v(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        recv_counts: Vec<PyInt>,
        recv_displs: Vec<PyInt>,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let recv_counts = elements(py, "AllGatherV", "recv_counts", &recv_counts)?;
        let recv_displs = elements(py, "AllGatherV", "recv_displs", &recv_displs)?;
        let bufs = [("send", Some(send), false), ("recv", Some(recv), true)];
        self.run(py, "AllGatherV", (dtype, async_op), &bufs, |m, d, _| {
            let (s, mut r) = disjoint(m)?;
            Ok(Box::new(move |c| {
                with_element!(d, T => c.all_gather_v::<[T], [T]>(
                    elems(s.bytes())?,
                    elems_mut(r.bytes_mut())?,
                    &recv_counts,
                    &recv_displs,
                ))
            }))
        })
    }

    /// ReduceScatterV (HCCL's HcclReduceScatterV): rank i's recv = op over
    /// ranks of their send block i (`send_counts[i]` elements at
    /// `send_displs[i]`).
    #[pyo3(signature = (send, send_counts, send_displs, recv, op="sum", *, dtype=None, async_op=false))]
    #[allow(clippy::too_many_arguments)]
    fn reduce_scatter_v(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        send_counts: Vec<PyInt>,
        send_displs: Vec<PyInt>,
        recv: &Bound<'_, PyAny>,
        op: &str,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let send_counts = elements(py, "ReduceScatterV", "send_counts", &send_counts)?;
        let send_displs = elements(py, "ReduceScatterV", "send_displs", &send_displs)?;
        let op = dtype::reduce_op(op)?;
        let bufs = [("send", Some(send), false), ("recv", Some(recv), true)];
        self.run(py, "ReduceScatterV", (dtype, async_op), &bufs, |m, d, _| {
            refuse_bool_sums(&m, op)?;
            let (s, mut r) = disjoint(m)?;
            Ok(Box::new(move |c| {
                with_element!(d, T => c.reduce_scatter_v::<[T], [T]>(
                    elems(s.bytes())?,
                    &send_counts,
                    &send_displs,
                    elems_mut(r.bytes_mut())?,
                    op,
                ))
            }))
        })
    }

    /// AllToAllV (HCCL's HcclAlltoAllV): `send_counts[j]` elements at
    /// `send_displs[j]` of send go to rank j; `recv_counts[i]` elements from
    /// rank i land at `recv_displs[i]` of recv.
    #[pyo3(signature = (send, send_counts, send_displs, recv, recv_counts, recv_displs, *, dtype=None, async_op=false))]
    #[allow(clippy::too_many_arguments)]
    fn all_to_all_v(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        send_counts: Vec<PyInt>,
        send_displs: Vec<PyInt>,
        recv: &Bound<'_, PyAny>,
        recv_counts: Vec<PyInt>,
        recv_displs: Vec<PyInt>,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let send_counts = elements(py, "AllToAllV", "send_counts", &send_counts)?;
        let send_displs = elements(py, "AllToAllV", "send_displs", &send_displs)?;
        let recv_counts = elements(py, "AllToAllV", "recv_counts", &recv_counts)?;
        let recv_displs = elements(py, "AllToAllV", "recv_displs", &recv_displs)?;
        let bufs = [("send", Some(send), false), ("recv", Some(recv), true)];
        self.run(py, "AllToAllV", (dtype, async_op), &bufs, |m, d, _| {
            let (s, mut r) = disjoint(m)?;
            Ok(Box::new(move |c| {
                with_element!(d, T => c.all_to_all_v::<[T], [T]>(
                    elems(s.bytes())?,
                    &send_counts,
                    &send_displs,
                    elems_mut(r.bytes_mut())?,
                    &recv_counts,
                    &recv_displs,
                ))
            }))
        })
    }

    /// Sends buf to rank dest (HCCL's HcclSend); dest receives it with
    /// recv of the same length and type.
    #[pyo3(signature = (buf, dest, *, dtype=None, async_op=false))]
    fn send(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        dest: PyInt,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let dest = self.peer(py, "Send", dest)?;
        let bufs = [("buf", Some(buf), false)];
        self.run(py, "Send", (dtype, async_op), &bufs, |m, d, n| {
            let (b, n) = (first_two(m).0, n[0]);
            Ok(Box::new(move |c| c.send_bytes(b.bytes(), n, d, dest)))
        })
    }

    /// Receives len(buf) elements from rank src into buf (HCCL's HcclRecv).
    #[pyo3(signature = (buf, src, *, dtype=None, async_op=false))]
    fn recv(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        src: PyInt,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let src = self.peer(py, "Recv", src)?;
        let bufs = [("buf", Some(buf), true)];
        self.run(py, "Recv", (dtype, async_op), &bufs, |m, d, n| {
            let (mut b, n) = (first_two(m).0, n[0]);
            Ok(Box::new(move |c| c.recv_bytes(b.bytes_mut(), n, d, src)))
        })
    }

    /// Sends and receives together (HCCL's HcclBatchSendRecv), so a ring
    /// exchange cannot deadlock: items are ("send" | "recv", buffer, peer).
    #[pyo3(signature = (items, *, dtype=None, async_op=false))]
    fn batch_send_recv(
        &self,
        py: Python<'_>,
        items: Vec<(String, Bound<'_, PyAny>, PyInt)>,
        dtype: Option<&str>,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let mut list = Vec::with_capacity(items.len());
        for (i, (kind, obj, peer)) in items.iter().enumerate() {
            let arg = format!("items[{i}]");
            let is_send = match kind.to_ascii_lowercase().as_str() {
                "send" => true,
                "recv" => false,
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "{arg}: kind {kind:?}; accepted: \"send\", \"recv\""
                    )))
                }
            };
            let which = if is_send { "Send" } else { "Recv" };
            let peer = self.peer(py, &format!("BatchSendRecv item {i} ({which})"), *peer)?;
            let (m, d, n) = parse(dtype, &[(&arg, Some(obj), !is_send)])?;
            list.push((is_send, first_two(m).0, n[0], d, peer));
        }
        let written: Vec<&Mem> = list.iter().filter(|i| !i.0).map(|i| &i.1).collect();
        let read: Vec<&Mem> = list.iter().filter(|i| i.0).map(|i| &i.1).collect();
        check_disjoint(&written, &read, "batch_send_recv")?;
        let f: Op = Box::new(move |c| {
            let mut p2p: Vec<P2pItem<'_>> = list
                .iter_mut()
                .map(|(is_send, m, n, d, peer)| {
                    if *is_send {
                        P2pItem::send_bytes(m.bytes(), *n, *d, *peer)
                    } else {
                        P2pItem::recv_bytes(m.bytes_mut(), *n, *d, *peer)
                    }
                })
                .collect();
            c.batch_send_recv(&mut p2p)
        });
        self.go(py, "BatchSendRecv", async_op, f)
    }

    /// Splits the communicator (HcclCommSplit): ranks with the same color
    /// form a new one, ordered by (key, rank); color=None takes no part and
    /// gets None. Every rank must call it.
    #[pyo3(signature = (color, key=0))]
    fn split(&self, py: Python<'_>, color: Option<PyInt>, key: PyInt) -> PyResult<Option<Comm>> {
        let color = color
            .map(|c| {
                u32::try_from(c).map_err(|_| {
                    let why = out_of_range(c, u64::from(u32::MAX));
                    let m = format!("split: color = {c} {why}; color=None takes no part");
                    hccl_error(py, 1, &m)
                })
            })
            .transpose()?;
        let key = arg_u32(py, "split", "key", key)?;
        let comm = self.handle(py)?;
        let stream = Arc::clone(&self.stream);
        let r = py.detach(move || stream.run(|| comm.split(color, key)));
        r.map(|c| c.map(Comm::wrap)).map_err(|e| to_py(py, &e))
    }

    /// The error that broke the communicator while no op ran, if any
    /// (HcclGetCommAsyncError), as an HcclError instance.
    fn async_error(&self, py: Python<'_>) -> PyResult<Option<PyErr>> {
        Ok(self.handle(py)?.async_error().map(|e| to_py(py, &e)))
    }

    /// Ends running and later ops on every rank (HcclCommAbort).
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.handle(py)?.abort();
        Ok(())
    }

    /// Waits for this rank's ops, then closes the communicator
    /// (HcclCommDestroy); later calls raise. Also done when it is
    /// garbage-collected.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.comm.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(comm) = taken else {
            return Ok(());
        };
        let stream = Arc::clone(&self.stream);
        py.detach(move || {
            stream.drain();
            // Another thread's op may still hold it: it closes when that ends.
            Arc::try_unwrap(comm).map_or(Ok(()), hccl::Comm::destroy)
        })
        .map_err(|e| to_py(py, &e))
    }

    fn __repr__(&self) -> String {
        format!(
            "<hccl_rs.Comm '{}' rank {} of {} ({})>",
            self.name,
            self.rank,
            self.size,
            self.backend()
        )
    }
}
