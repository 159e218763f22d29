//! Gradient compression for Python (the crate `hccl-compress`):
//! `hccl_rs.TopK` and `hccl_rs.Int8` (one bucket's compressed exchange
//! with error feedback, on a `hccl_rs.Comm`'s stream, blocking or async),
//! `hccl_rs.ErrorFeedback` (one bucket's residual), and `hccl_rs.Reducer`
//! (DDP's buckets for a plain training loop, on a communicator of its own).
//!
//! Buffers are float32 numpy arrays, memoryviews or contiguous CPU
//! `torch.Tensor`s (see `buffer`); an exchange works on the caller's
//! gradient in place, without a copy. The reducer copies each gradient
//! into its bucket (its buckets are Rust memory that its thread reduces)
//! and the reduced one back out.
//!
//! Errors: a bad configuration or a caller's mistake (a wrong length, a
//! parameter marked twice) raises `ValueError`; the ranks disagreeing on a
//! bucket or a bucket plan raise `HcclError` with code 1 (HCCL_E_PARA) on
//! every rank, naming both sides; the communicator's failures raise its
//! `HcclError`.

use std::sync::{Arc, Mutex, MutexGuard};

use hccl::comm::DataType;
use hccl::CommError;
use hccl_compress::{
    CompressError, Compression, ErrorFeedback as Feedback, Exchange, Path, ReducerConfig,
    Selection, StepStats,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::buffer::Mem;
use crate::comm::{get, Comm, Op};
use crate::error::{hccl_error, to_py};
use crate::work::Work;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A float32 buffer argument and its element count.
///
/// # Errors
/// `TypeError` for another element type; `ValueError` for a buffer not
/// aligned to 4 bytes (see also `get`).
fn f32_mem(obj: &Bound<'_, PyAny>, arg: &str, writable: bool) -> PyResult<(Mem, usize)> {
    let m = get(obj, arg, writable)?;
    if m.len() > 0 && m.dtype() != Some(DataType::Fp32) {
        let held = m.dtype().map_or("raw bytes".to_string(), |d| d.to_string());
        return Err(PyTypeError::new_err(format!(
            "{arg} holds {held}; compression takes float32 gradients (tensor.float(), numpy float32)"
        )));
    }
    if !m.aligned(4) {
        return Err(PyValueError::new_err(format!(
            "{arg}: the buffer is not aligned to its float32 elements (4 bytes)"
        )));
    }
    let n = m.len() / 4;
    Ok((m, n))
}

/// Bytes as f32 (checked aligned by `f32_mem`).
fn as_f32(b: &[u8]) -> Result<&[f32], CommError> {
    bytemuck::try_cast_slice(b).map_err(|e| CommError::Unsupported(format!("grad: {e}")))
}

/// Bytes as f32, writable.
fn as_f32_mut(b: &mut [u8]) -> Result<&mut [f32], CommError> {
    bytemuck::try_cast_slice_mut(b).map_err(|e| CommError::Unsupported(format!("grad: {e}")))
}

/// A compression error as the communicator error an exchange (`Work`)
/// carries: the communicator's own as it is, the others as HCCL_E_PARA
/// with `what` (the call) in front.
fn comm_error(what: &str, e: CompressError) -> CommError {
    match e {
        CompressError::Comm(c) => c,
        other => CommError::Shape {
            op: what.to_string(),
            detail: other.to_string(),
        },
    }
}

/// A compression error raised directly: the caller's mistakes as
/// `ValueError`, the ranks' disagreements as `HcclError` code 1, the
/// communicator's as its `HcclError`.
fn to_py_err(py: Python<'_>, what: &str, e: CompressError) -> PyErr {
    match e {
        CompressError::Comm(c) => to_py(py, &c),
        e @ (CompressError::Config { .. }
        | CompressError::Length { .. }
        | CompressError::Usage(_)) => PyValueError::new_err(format!("{what}: {e}")),
        e => hccl_error(py, 1, &format!("{what}: {e}")),
    }
}

/// A path as Python sees it: "dense", "sparse", "int8".
fn path_name(p: &Path) -> &'static str {
    match p {
        Path::Dense => "dense",
        Path::Sparse { .. } => "sparse",
        Path::Int8 => "int8",
    }
}

/// One bucket's error feedback and what its last exchange did.
#[derive(Default)]
struct FeedbackState {
    fb: Feedback,
    last: Option<Exchange>,
}

/// One rank's error-feedback state for one bucket (Top-K: the residual
/// and, with momentum correction, the momentum; INT8: the residual).
/// Empty (zeros) until the first exchange. Pass the same object to every
/// step's exchange of that bucket; a bucket of another length raises.
/// `ErrorFeedback(residual=None, momentum=None)` starts from float32
/// buffers (copied), to carry a residual over to a new bucket layout.
#[pyclass(frozen, module = "hccl_rs", name = "ErrorFeedback")]
pub(crate) struct ErrorFeedback {
    state: Arc<Mutex<FeedbackState>>,
}

impl ErrorFeedback {
    /// Runs `f` on the state with the GIL released (an async exchange may
    /// hold the state while it runs).
    fn with<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut FeedbackState) -> R + Send) -> R {
        let state = Arc::clone(&self.state);
        py.detach(move || f(&mut lock(&state)))
    }
}

/// A float32 buffer's elements, copied.
fn read_f32(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>, arg: &str) -> PyResult<Vec<f32>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    let (m, _) = f32_mem(obj, arg, false)?;
    as_f32(m.bytes())
        .map(<[f32]>::to_vec)
        .map_err(|e| to_py(py, &e))
}

#[pymethods]
impl ErrorFeedback {
    #[new]
    #[pyo3(signature = (residual=None, momentum=None))]
    fn new(
        py: Python<'_>,
        residual: Option<&Bound<'_, PyAny>>,
        momentum: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<ErrorFeedback> {
        let fb = Feedback::from_parts(
            read_f32(py, residual, "residual")?,
            read_f32(py, momentum, "momentum")?,
        );
        Ok(ErrorFeedback {
            state: Arc::new(Mutex::new(FeedbackState { fb, last: None })),
        })
    }

    /// Elements of the residual (0 before the first exchange).
    #[getter]
    fn len(&self, py: Python<'_>) -> usize {
        self.with(py, |s| s.fb.residual().len())
    }

    /// The residual as float32 bytes (native order): `numpy.frombuffer(b,
    /// numpy.float32)`; empty before the first exchange.
    fn residual<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let v = self.with(py, |s| s.fb.residual().to_vec());
        PyBytes::new(py, bytemuck::cast_slice(&v))
    }

    /// The momentum (Top-K with momentum correction) as float32 bytes;
    /// else empty.
    fn momentum<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let v = self.with(py, |s| s.fb.momentum().to_vec());
        PyBytes::new(py, bytemuck::cast_slice(&v))
    }

    /// Forgets the residual and momentum (zeros of any length again).
    fn reset(&self, py: Python<'_>) {
        self.with(py, |s| *s = FeedbackState::default());
    }

    /// The last exchange's path: "sparse" (AllGather of (index, value)
    /// pairs), "dense" (AllReduce, chosen by the byte rule), "int8"; None
    /// before the first. The same on every rank.
    #[getter]
    fn last_path(&self, py: Python<'_>) -> Option<&'static str> {
        self.with(py, |s| s.last.map(|e| path_name(&e.path)))
    }

    /// The last sparse exchange's pairs per rank (k); None otherwise.
    #[getter]
    fn last_k(&self, py: Python<'_>) -> Option<usize> {
        self.with(py, |s| match s.last.map(|e| e.path) {
            Some(Path::Sparse { k }) => Some(k),
            _ => None,
        })
    }

    /// Bytes this rank handed to the last exchange's data collective (its
    /// send buffer; the 24-byte bucket check not counted; not the bytes on
    /// the wire, which depend on the algorithm).
    #[getter]
    fn last_payload_bytes(&self, py: Python<'_>) -> Option<u64> {
        self.with(py, |s| s.last.map(|e| e.payload_bytes))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let (n, last) = self.with(py, |s| (s.fb.residual().len(), s.last));
        match last {
            None => format!("<hccl_rs.ErrorFeedback {n} elements>"),
            Some(e) => format!(
                "<hccl_rs.ErrorFeedback {n} elements, last exchange {} ({} bytes)>",
                path_name(&e.path),
                e.payload_bytes
            ),
        }
    }
}

/// One bucket's compressed exchange on `comm`'s stream (in call order with
/// its other ops): `grad` is summed (averaged) in place, `fb` updated.
#[allow(clippy::too_many_arguments)]
fn exchange(
    py: Python<'_>,
    what: &'static str,
    scheme: Compression,
    comm: &Comm,
    grad: &Bound<'_, PyAny>,
    fb: &ErrorFeedback,
    average: bool,
    async_op: bool,
) -> PyResult<Option<Work>> {
    let (mem, _) = f32_mem(grad, "grad", true)?;
    let state = Arc::clone(&fb.state);
    let op: Op = Box::new(move |c| {
        let mut mem = mem;
        let g = as_f32_mut(mem.bytes_mut())?;
        let mut st = lock(&state);
        let ex = scheme
            .all_reduce(c, g, &mut st.fb)
            .map_err(|e| comm_error(what, e))?;
        if average {
            let world = c.size() as f32;
            g.iter_mut().for_each(|x| *x /= world);
        }
        st.last = Some(ex);
        Ok(())
    });
    comm.go(py, what, async_op, op)
}

/// Top-K sparsification with error feedback (DGC, GRACE): each exchange
/// keeps the `ceil(ratio * n)` largest magnitudes of `grad + residual` and
/// carries the rest to the next step. The ranks' (u32 index, f32 value)
/// pairs travel by one AllGather and are added in rank order, so every
/// rank holds the same bits; when that would move more bytes than a dense
/// AllReduce (density above 8 / (8 P) = 1/P: `sparse_wins`), one dense
/// AllReduce of `grad + residual` runs instead and the residual is zero.
/// `selection`: "exact" (quickselect) or "sampled" (DGC's sampled
/// threshold on `sample_ratio` of the bucket, then exact among the
/// candidates: the same k elements); `momentum`: DGC's momentum
/// correction factor in [0, 1), or None.
#[pyclass(frozen, module = "hccl_rs", name = "TopK")]
pub(crate) struct TopK {
    inner: hccl_compress::TopK,
}

#[pymethods]
impl TopK {
    #[new]
    #[pyo3(signature = (ratio, *, selection="exact", sample_ratio=0.01, momentum=None))]
    fn new(
        ratio: f64,
        selection: &str,
        sample_ratio: f64,
        momentum: Option<f32>,
    ) -> PyResult<TopK> {
        let err = |e: CompressError| PyValueError::new_err(format!("TopK: {e}"));
        let sel = match selection {
            "exact" => Selection::Exact,
            "sampled" => Selection::Sampled { sample_ratio },
            s => {
                return Err(PyValueError::new_err(format!(
                    "TopK: selection = {s:?}; accepted: \"exact\", \"sampled\""
                )))
            }
        };
        let mut t = hccl_compress::TopK::new(ratio)
            .map_err(err)?
            .with_selection(sel)
            .map_err(err)?;
        if let Some(m) = momentum {
            t = t.with_momentum(m).map_err(err)?;
        }
        Ok(TopK { inner: t })
    }

    /// The fraction of each bucket sent.
    #[getter]
    fn ratio(&self) -> f64 {
        self.inner.ratio()
    }

    /// "exact" or "sampled".
    #[getter]
    fn selection(&self) -> &'static str {
        match self.inner.selection() {
            Selection::Exact => "exact",
            Selection::Sampled { .. } => "sampled",
        }
    }

    /// The momentum-correction factor, or None.
    #[getter]
    fn momentum(&self) -> Option<f32> {
        self.inner.momentum()
    }

    /// Elements sent of a bucket of `n`: ceil(ratio * n), at most n.
    fn k(&self, n: usize) -> usize {
        self.inner.k(n)
    }

    /// Sums `grad` (a float32 buffer, in place) over the ranks of `comm`
    /// through Top-K with error feedback `feedback` (this bucket's); divides
    /// by the number of ranks with `average=True`. Every rank calls it with
    /// the same ratio and bucket length (checked first, by a 24-byte
    /// AllGather: ranks that differ raise HcclError code 1 naming both
    /// buckets, on every rank). Runs on comm's stream in call order;
    /// `async_op=True` returns a Work (grad and feedback are in use until
    /// it completes). On error grad and feedback are unchanged.
    #[pyo3(signature = (comm, grad, feedback, *, average=false, async_op=false))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        comm: &Bound<'_, Comm>,
        grad: &Bound<'_, PyAny>,
        feedback: &Bound<'_, ErrorFeedback>,
        average: bool,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        let scheme = Compression::TopK(self.inner.clone());
        exchange(
            py,
            "TopK.all_reduce",
            scheme,
            comm.get(),
            grad,
            feedback.get(),
            average,
            async_op,
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<hccl_rs.TopK {}>",
            Compression::TopK(self.inner.clone()).describe()
        )
    }
}

/// INT8 quantisation with per-block scales and error feedback: each block
/// of `block` elements of `grad + residual` is sent as one float32 scale
/// (max |x| / 127) and one signed byte per element; the rounding error is
/// the next step's residual. The payloads travel by one AllGather and are
/// dequantised and summed in float32 in rank order (the same bits on every
/// rank).
#[pyclass(frozen, module = "hccl_rs", name = "Int8")]
pub(crate) struct Int8 {
    inner: hccl_compress::Int8,
}

#[pymethods]
impl Int8 {
    #[new]
    #[pyo3(signature = (block=256))]
    fn new(block: usize) -> PyResult<Int8> {
        hccl_compress::Int8::new(block)
            .map(|inner| Int8 { inner })
            .map_err(|e| PyValueError::new_err(format!("Int8: {e}")))
    }

    /// Elements per scale.
    #[getter]
    fn block(&self) -> usize {
        self.inner.block()
    }

    /// Bytes one rank sends for a bucket of `n`: 4 per block, 1 per element.
    fn payload_bytes(&self, n: usize) -> usize {
        self.inner.payload_bytes(n)
    }

    /// As TopK.all_reduce, through INT8 quantisation.
    #[pyo3(signature = (comm, grad, feedback, *, average=false, async_op=false))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        comm: &Bound<'_, Comm>,
        grad: &Bound<'_, PyAny>,
        feedback: &Bound<'_, ErrorFeedback>,
        average: bool,
        async_op: bool,
    ) -> PyResult<Option<Work>> {
        exchange(
            py,
            "Int8.all_reduce",
            Compression::Int8(self.inner),
            comm.get(),
            grad,
            feedback.get(),
            average,
            async_op,
        )
    }

    fn __repr__(&self) -> String {
        format!("<hccl_rs.Int8 block={}>", self.inner.block())
    }
}

/// Whether the sparse exchange of `k` pairs per rank moves fewer bytes
/// than a dense AllReduce of `n` float32 elements on `world` ranks (P k 8
/// < 2 n 4, i.e. density below 8 / (P b) with b = 8 bytes per pair): the
/// rule TopK applies, identically on every rank.
#[pyfunction]
pub(crate) fn sparse_wins(world: u32, n: usize, k: usize) -> bool {
    hccl_compress::sparse_wins(world, n, k)
}

/// DDP's bucketed gradient reduction for a plain training loop (no
/// DistributedDataParallel): parameters of `param_sizes` float32 elements
/// (model order) in buckets filled in reverse order, the first closing at
/// `first_bucket_bytes` (1 MiB), the others at `bucket_cap_bytes` (25 MiB);
/// rebuilt once after the first step in rank 0's observed ready order
/// (`rebuild`). `push(p, grad)` copies parameter p's gradient into its
/// bucket and marks it ready; a bucket whose gradients are all in is
/// reduced at once on the reducer's thread (in bucket order, every rank
/// alike) while backward goes on; `finish()` waits and returns the step's
/// stats; `grad(p, out)` copies the reduced (averaged with `average`)
/// gradient out. `compression`: None (AllReduce), a TopK or an Int8.
///
/// The reducer runs on a communicator of its own, split from `comm`
/// (collective: every rank builds it, with the same sizes and
/// configuration): its exchanges never interleave with ops called on
/// `comm`. The bucket plan (sizes, order, dtype, compression) is checked
/// across ranks when it is built and at the rebuild: ranks that differ
/// raise HcclError code 1 on every rank naming the first differing bucket.
/// One thread drives a reducer.
#[pyclass(frozen, module = "hccl_rs", name = "Reducer")]
pub(crate) struct Reducer {
    inner: Mutex<Option<hccl_compress::Reducer>>,
    sizes: Vec<usize>,
}

impl Reducer {
    /// Runs `f` on the reducer, or raises once it is closed.
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut hccl_compress::Reducer) -> Result<R, CompressError>,
    ) -> PyResult<R> {
        let mut g = lock(&self.inner);
        let r = g
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("Reducer: closed"))?;
        f(r).map_err(|e| to_py_err(py, "Reducer", e))
    }
}

/// The step's stats as a dict.
fn stats_dict<'py>(py: Python<'py>, s: &StepStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let paths: Vec<String> = s
        .paths
        .iter()
        .map(|p| match p {
            Path::Sparse { k } => format!("sparse k={k}"),
            p => path_name(p).to_string(),
        })
        .collect();
    d.set_item("paths", paths)?;
    d.set_item("payload_bytes", s.payload_bytes)?;
    d.set_item("exposed_s", s.exposed.as_secs_f64())?;
    d.set_item("comm_s", s.comm_time.as_secs_f64())?;
    Ok(d)
}

#[pymethods]
impl Reducer {
    #[new]
    #[pyo3(signature = (comm, param_sizes, *, compression=None, first_bucket_bytes=1_048_576, bucket_cap_bytes=26_214_400, average=true, rebuild=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        comm: &Bound<'_, Comm>,
        param_sizes: Vec<usize>,
        compression: Option<&Bound<'_, PyAny>>,
        first_bucket_bytes: usize,
        bucket_cap_bytes: usize,
        average: bool,
        rebuild: bool,
    ) -> PyResult<Reducer> {
        let compression = match compression {
            None => Compression::None,
            Some(c) => {
                if let Ok(t) = c.cast::<TopK>() {
                    Compression::TopK(t.get().inner.clone())
                } else if let Ok(q) = c.cast::<Int8>() {
                    Compression::Int8(q.get().inner)
                } else {
                    return Err(PyTypeError::new_err(format!(
                        "Reducer: compression is a {}; accepted: None, hccl_rs.TopK(...), hccl_rs.Int8(...)",
                        c.get_type().name()?
                    )));
                }
            }
        };
        let config = ReducerConfig {
            first_bucket_bytes,
            bucket_cap_bytes,
            compression,
            average,
            rebuild,
        };
        let parent = comm.get().handle(py)?;
        let stream = Arc::clone(&comm.get().stream);
        let sizes = param_sizes.clone();
        let r = py.detach(move || {
            let own = stream
                .run(|| parent.split(Some(0), parent.rank()))?
                .ok_or_else(|| {
                    CompressError::Usage("the split gave this rank no communicator".into())
                })?;
            hccl_compress::Reducer::new(Arc::new(own), &sizes, config)
        });
        Ok(Reducer {
            inner: Mutex::new(Some(r.map_err(|e| to_py_err(py, "Reducer", e))?)),
            sizes: param_sizes,
        })
    }

    /// Copies parameter p's gradient (`grad`: float32, that parameter's
    /// number of elements) into its bucket and marks it ready; launches
    /// its bucket (and complete ones after it) once every bucket before it
    /// is launched. ValueError for a wrong length, p out of range, or p
    /// pushed twice in one step.
    fn push(&self, py: Python<'_>, p: usize, grad: &Bound<'_, PyAny>) -> PyResult<()> {
        let (m, n) = f32_mem(grad, "grad", false)?;
        let src = as_f32(m.bytes()).map_err(|e| to_py(py, &e))?;
        self.with(py, |r| {
            let slot = r.grad_mut(p)?;
            if slot.len() != n {
                return Err(CompressError::Length {
                    what: format!("the gradient of parameter {p}"),
                    expected: slot.len(),
                    got: n,
                });
            }
            slot.copy_from_slice(src);
            r.mark_ready(p)
        })
    }

    /// Launches the buckets not launched yet (a parameter never pushed
    /// goes with what its slot holds) and waits for all, the GIL released;
    /// after the first step, rebuilds the buckets. Returns the step's
    /// stats: {"paths": per bucket "dense" | "sparse k=K" | "int8",
    /// "payload_bytes": bytes handed to the data collectives,
    /// "exposed_s": seconds this call waited, "comm_s": seconds of
    /// exchanges on the reducer's thread}.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = py.detach(|| {
            let mut g = lock(&self.inner);
            match g.as_mut() {
                Some(r) => r.finish().map(Some),
                None => Ok(None),
            }
        });
        match r {
            Ok(Some(s)) => stats_dict(py, &s),
            Ok(None) => Err(PyValueError::new_err("Reducer: closed")),
            Err(e) => Err(to_py_err(py, "Reducer", e)),
        }
    }

    /// Copies parameter p's gradient (reduced, after finish()) into `out`
    /// (float32, that parameter's number of elements).
    fn grad(&self, py: Python<'_>, p: usize, out: &Bound<'_, PyAny>) -> PyResult<()> {
        let (mut m, n) = f32_mem(out, "out", true)?;
        let dst = as_f32_mut(m.bytes_mut()).map_err(|e| to_py(py, &e))?;
        self.with(py, |r| {
            let src = r.grad(p)?;
            if src.len() != n {
                return Err(CompressError::Length {
                    what: format!("out for parameter {p}"),
                    expected: src.len(),
                    got: n,
                });
            }
            dst.copy_from_slice(src);
            Ok(())
        })
    }

    /// The buckets' parameters, in bucket (launch) order.
    #[getter]
    fn buckets(&self, py: Python<'_>) -> PyResult<Vec<Vec<usize>>> {
        self.with(py, |r| Ok(r.buckets().to_vec()))
    }

    /// The parameters' sizes (elements), as given.
    #[getter]
    fn param_sizes(&self) -> Vec<usize> {
        self.sizes.clone()
    }

    /// Stops the reducer's thread and closes its communicator (also done
    /// when it is garbage-collected); later calls raise.
    fn close(&self, py: Python<'_>) {
        let r = lock(&self.inner).take();
        py.detach(move || drop(r));
    }

    fn __repr__(&self) -> String {
        format!("<hccl_rs.Reducer {} parameters>", self.sizes.len())
    }
}
