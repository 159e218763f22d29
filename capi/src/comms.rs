//! The communicators the C API handed out, and the checks every HCCL
//! entry point shares: handles, enums, buffers. Everything here is safe
//! code over [`crate::boundary`] and [`crate::memory`].

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use hccl::comm::{DataType, ReduceOp};
use hccl::{Comm, CommError};

use crate::codes::*;
use crate::handles::Handles;
use crate::log;
use crate::memory::{self, MemError, Span};
use crate::stream::Stream;

/// One `HcclComm`.
pub(crate) struct CommEntry {
    pub(crate) comm: Comm,
    /// `HcclGetCommName`'s answer: the config's `hcclCommName`, else the
    /// communicator's own name.
    pub(crate) name: String,
    /// The first failed op's code (`HcclGetCommAsyncError`).
    pub(crate) failed: Mutex<Option<HcclResult>>,
    /// The handle of the communicator it was made from
    /// (`HcclCreateSubCommConfig`), whose live sub-communicators must
    /// have distinct names.
    pub(crate) parent: Option<usize>,
}

pub(crate) static COMMS: Handles<CommEntry> = Handles::new();

/// A result whose error is the code to return (already logged).
pub(crate) type Res<T> = Result<T, HcclResult>;

/// The code of `r`.
pub(crate) fn ret(r: Res<()>) -> HcclResult {
    r.err().unwrap_or(HCCL_SUCCESS)
}

/// Registers a new communicator; returns its handle.
pub(crate) fn register(comm: Comm, name: Option<String>) -> *mut c_void {
    register_sub(comm, name, None)
}

/// [`register`] of a communicator made from the one of handle `parent`.
pub(crate) fn register_sub(comm: Comm, name: Option<String>, parent: Option<usize>) -> *mut c_void {
    let name = name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| comm.name().to_string());
    COMMS.insert(Arc::new(CommEntry {
        comm,
        name,
        failed: Mutex::new(None),
        parent,
    }))
}

/// True if the communicator of handle `parent` has a live
/// sub-communicator named `name`.
pub(crate) fn has_sub(parent: usize, name: &str) -> bool {
    COMMS
        .all()
        .iter()
        .any(|e| e.parent == Some(parent) && e.name == name)
}

/// The communicator of handle `h`.
pub(crate) fn comm_of(f: &str, h: *mut c_void) -> Res<Arc<CommEntry>> {
    if h.is_null() {
        return Err(log::fail(f, HCCL_E_PTR, "comm is NULL"));
    }
    COMMS.get(h).ok_or_else(|| {
        log::fail(
            f,
            HCCL_E_PARA,
            format_args!(
                "comm {h:p} is not a communicator of this process (never made, or destroyed)"
            ),
        )
    })
}

/// The stream of an HCCL op: NULL is `HCCL_E_PTR` (HCCL needs a stream),
/// an unknown handle `HCCL_E_PARA`.
pub(crate) fn stream_of(f: &str, h: *mut c_void) -> Res<Arc<Stream>> {
    if h.is_null() {
        return Err(log::fail(f, HCCL_E_PTR, "stream is NULL"));
    }
    crate::acl::STREAMS.get(h).ok_or_else(|| {
        log::fail(
            f,
            HCCL_E_PARA,
            format_args!("stream {h:p} is not a stream of aclrtCreateStream (or was destroyed)"),
        )
    })
}

/// `HcclDataType` (hccl_types.h): 0 INT8 .. 11 BFP16 run; any other
/// value is `HCCL_E_NOT_SUPPORT`, as CANN's HCCL answers a data type it
/// does not take (CANN open-source HCCL `param_check.cc`).
pub(crate) fn dtype(f: &str, field: &str, v: i32) -> Res<DataType> {
    DataType::ALL
        .into_iter()
        .find(|d| *d as i32 == v)
        .ok_or_else(|| {
            log::fail(
                f,
                HCCL_E_NOT_SUPPORT,
                format_args!("{field} {v} is not a supported HcclDataType (0 INT8 .. 11 BFP16)"),
            )
        })
}

/// `HcclReduceOp`: 0 SUM, 1 PROD, 2 MAX, 3 MIN; another value is
/// `HCCL_E_NOT_SUPPORT` (CANN's HCCL).
pub(crate) fn reduce_op(f: &str, v: i32) -> Res<ReduceOp> {
    use hccl_ascend_sys::types::{
        HCCL_REDUCE_MAX, HCCL_REDUCE_MIN, HCCL_REDUCE_PROD, HCCL_REDUCE_SUM,
    };
    match v {
        HCCL_REDUCE_SUM => Ok(ReduceOp::Sum),
        HCCL_REDUCE_PROD => Ok(ReduceOp::Prod),
        HCCL_REDUCE_MAX => Ok(ReduceOp::Max),
        HCCL_REDUCE_MIN => Ok(ReduceOp::Min),
        _ => Err(log::fail(
            f,
            HCCL_E_NOT_SUPPORT,
            format_args!("op {v} is not a supported HcclReduceOp (0 SUM, 1 PROD, 2 MAX, 3 MIN)"),
        )),
    }
}

/// The data type and reduce op of a reduction: as [`dtype`] and
/// [`reduce_op`], and PROD of INT16 or BFP16 is `HCCL_E_NOT_SUPPORT` on
/// an Ascend 910B SoC name, as CANN's HCCL refuses it there.
pub(crate) fn reduction(f: &str, dt: i32, op: i32) -> Res<(DataType, ReduceOp)> {
    let (d, o) = (dtype(f, "dataType", dt)?, reduce_op(f, op)?);
    if o == ReduceOp::Prod
        && matches!(d, DataType::Int16 | DataType::Bf16)
        && crate::device::refuses_prod_int16_bf16()
    {
        return Err(log::fail(
            f,
            HCCL_E_NOT_SUPPORT,
            format_args!(
                "HCCL_REDUCE_PROD of {d:?} is not supported on {} (as in CANN's HCCL; HCCL_HOST_SOC_NAME picks another SoC)",
                crate::device::soc_name()
            ),
        ));
    }
    Ok((d, o))
}

/// `count` elements of `dtype` in bytes, or `HCCL_E_PARA` on overflow.
pub(crate) fn bytes_of(f: &str, field: &str, count: u64, dtype: DataType) -> Res<usize> {
    count
        .checked_mul(dtype.size())
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| log::fail(f, HCCL_E_PARA, format_args!("{field} {count} is too large")))
}

/// The buffer `name` of `len` bytes at `p`: memory of `aclrtMalloc` (or
/// `aclrtMallocHost`), aligned to the element size `align`. A zero length
/// takes any pointer.
pub(crate) fn span(f: &str, name: &str, p: *const c_void, len: usize, align: usize) -> Res<Span> {
    let s = memory::span(p as usize, len).map_err(|e| {
        let code = if e == MemError::Null {
            HCCL_E_PTR
        } else {
            HCCL_E_PARA
        };
        log::fail(f, code, format_args!("{name} {e}"))
    })?;
    if len > 0 && !(p as usize).is_multiple_of(align) {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("{name} {p:p} is not aligned to its element size ({align} bytes)"),
        ));
    }
    Ok(s)
}

/// A rank argument (`root`, `destRank`, ...) in range; `not_self`: and
/// not this rank.
pub(crate) fn rank_arg(f: &str, field: &str, v: u32, c: &CommEntry, not_self: bool) -> Res<()> {
    let n = c.comm.size();
    if v >= n {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("{field} {v} is out of range: the communicator has {n} ranks"),
        ));
    }
    if not_self && v == c.comm.rank() {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("{field} {v} is this rank"),
        ));
    }
    Ok(())
}

/// What a failed op logs: its error, but a simulated hang's report only
/// the first time this process logs it (every rank of the tree fails with
/// the same report; one copy is enough).
fn op_error_text(e: &CommError) -> String {
    if let CommError::Hang { op, report } = e {
        static LOGGED: Mutex<Vec<(u64, u64, String)>> = Mutex::new(Vec::new());
        let key = (report.seed, report.time_ns, report.replay.clone());
        let mut logged = crate::stream::lock_opt(&LOGGED);
        if logged.contains(&key) {
            return format!(
                "{op}: simulator: the simulated op hung (the hang report is in the first such line above)"
            );
        }
        logged.push(key);
    }
    e.to_string()
}

/// Enqueues `op` on `stream`: it runs when the stream reaches it; a
/// failure is logged, kept for `HcclGetCommAsyncError`, and fails the
/// stream's next synchronize.
pub(crate) fn submit(
    f: &'static str,
    c: Arc<CommEntry>,
    stream: &Stream,
    op: impl FnOnce(&Comm) -> Result<(), CommError> + Send + 'static,
) {
    submit_timed(f, c, stream, None, op);
}

/// [`submit`] of a collective: under `HCCL_TIMING=sim`, once it succeeded
/// it advances the stream's simulated clock by its simulated time.
pub(crate) fn submit_timed(
    f: &'static str,
    c: Arc<CommEntry>,
    stream: &Stream,
    args: Option<hccl_algos::collective::CollectiveArgs>,
    op: impl FnOnce(&Comm) -> Result<(), CommError> + Send + 'static,
) {
    let clock = stream.clock();
    let args = args.filter(|_| crate::timing::enabled());
    stream.enqueue(Box::new(move || {
        // A panic (a bug) is this op's failure, reported as HCCL's
        // internal error by the stream and by `HcclGetCommAsyncError`.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op(&c.comm)));
        let code = match run {
            Ok(Ok(())) => {
                if let Some(a) = &args {
                    clock.add(crate::timing::op_ns(a));
                }
                return Ok(());
            }
            Ok(Err(e)) => log::fail(f, of_error(&e), op_error_text(&e)),
            Err(_) => log::fail(f, HCCL_E_INTERNAL, "the op panicked (a bug in hccl-rs)"),
        };
        crate::stream::lock_opt(&c.failed).get_or_insert(code);
        Err(ACL_ERROR_RT_INTERNAL_ERROR)
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_op_fails_its_stream_and_sets_the_async_error() {
        let comm = Comm::init_all_on(hccl::BackendKind::Sim, 1)
            .unwrap()
            .remove(0);
        let entry = Arc::new(CommEntry {
            comm,
            name: "t".into(),
            failed: Mutex::new(None),
            parent: None,
        });
        let stream = Stream::new().unwrap();
        submit("HcclAllReduce", Arc::clone(&entry), &stream, |_| {
            panic!("bug")
        });
        let (code, text) = stream.synchronize(None).unwrap_err().unwrap();
        assert_eq!(code, ACL_ERROR_RT_INTERNAL_ERROR);
        assert!(
            text.contains("HcclAllReduce") && text.contains("panicked"),
            "{text}"
        );
        assert_eq!(*entry.failed.lock().unwrap(), Some(HCCL_E_INTERNAL));
    }
}
