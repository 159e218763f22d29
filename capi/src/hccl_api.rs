//! HCCL's C entry points (`hccl/hccl.h`): thin `extern "C"` functions.
//! Each checks its arguments at once (handles, enums, buffers, ranks;
//! `HCCL_E_PTR` / `HCCL_E_PARA` / `HCCL_E_NOT_SUPPORT` with a log line)
//! and enqueues the op on the stream, where it runs as one call of
//! [`hccl::Comm`]: no algorithm is here.
//!
//! This module holds no `unsafe` block (it is allowed only for
//! `#[no_mangle]`); pointers go through [`crate::boundary`].

#![allow(unsafe_code)]

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use hccl::comm::{DataType, ReduceOp};
use hccl::{Comm, CommError, RootInfo};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind, CollectiveKind as K};
use hccl_hw::tcp::root::ROOT_INFO_LEN;

use crate::boundary;
use crate::codes::*;
use crate::comms::{self, bytes_of, comm_of, dtype, ret, span, stream_of, CommEntry, Res};
use crate::group::{self, P2pSpec};
use crate::log;
use crate::memory::Span;

pub use hccl_ascend_sys::types::{
    COMM_NAME_MAX_LENGTH, HCCL_COMM_CONFIG_MAGIC_WORD, HCCL_ROOT_INFO_BYTES,
};
/// Offset of `hcclCommName` in `HcclCommConfig`: after the 24-byte header
/// and `hcclBufferSize`, `hcclDeterministic` (hccl_types.h, version >= 2).
const COMM_NAME_OFFSET: usize =
    std::mem::offset_of!(hccl_ascend_sys::types::HcclCommConfig, hccl_comm_name);

/// An HCCL entry point `f`: installs the log, runs `body` (the checks,
/// then the call or the enqueue) and returns its code; an error is logged
/// where it is made.
fn api(f: &'static str, body: impl FnOnce(&'static str) -> Res<()>) -> HcclResult {
    log::init();
    ret(body(f))
}

/// The communicator and stream of an op on a stream, checked.
fn comm_and_stream(
    f: &str,
    comm: *mut c_void,
    stream: *mut c_void,
) -> Res<(Arc<CommEntry>, Arc<crate::stream::Stream>)> {
    Ok((comm_of(f, comm)?, stream_of(f, stream)?))
}

/// This library runs its ranks over TCP or on the simulator: under
/// `HCCL_BACKEND=ascend` (the Ascend backend of hccl-rs's Rust API, which
/// loads CANN's libhccl.so) a communicator cannot be made here, and
/// `Comm`'s own refusal speaks of Rust calls a C program does not make.
fn refuse_ascend_backend(f: &str) -> Res<()> {
    match std::env::var("HCCL_BACKEND") {
        Ok(v) if v.trim().eq_ignore_ascii_case("ascend") => Err(log::fail(
            f,
            HCCL_E_NOT_SUPPORT,
            "HCCL_BACKEND=ascend, but this libhccl.so is hccl-rs's C API, whose ranks run over TCP or on the simulator (HCCL_BACKEND unset, tcp or sim), not on NPUs: unset HCCL_BACKEND, or link CANN's libhccl.so to run on NPUs",
        )),
        _ => Ok(()),
    }
}

fn cerr(e: CommError) -> HcclResult {
    of_error(&e)
}

fn out<T>(f: &str, name: &str, p: *mut T, v: T) -> Res<()> {
    if boundary::write(p, v) {
        Ok(())
    } else {
        Err(log::fail(f, HCCL_E_PTR, format_args!("{name} is NULL")))
    }
}

// ---- communicators ----

/// `HcclGetRootInfo(HcclRootInfo *rootInfo)`: starts this job's root
/// (`HCCL_IF_IP`, `HCCL_IF_BASE_PORT`, ... as for `Comm`) and writes its
/// address and session into the 4108 bytes.
#[no_mangle]
pub extern "C" fn HcclGetRootInfo(root_info: *mut c_void) -> HcclResult {
    api("HcclGetRootInfo", |f| {
        if root_info.is_null() {
            return Err(log::fail(f, HCCL_E_PTR, "rootInfo is NULL"));
        }
        let info = RootInfo::new().map_err(|e| {
            let e = CommError::from(e);
            log::fail(f, cerr(e.clone()), &e)
        })?;
        let mut blob = vec![0u8; HCCL_ROOT_INFO_BYTES];
        blob[..ROOT_INFO_LEN].copy_from_slice(&info.to_bytes());
        boundary::write_array(root_info.cast::<u8>(), &blob);
        Ok(())
    })
}

fn read_root_info(f: &str, p: *const c_void) -> Res<RootInfo> {
    let b = boundary::read_array(p.cast::<u8>(), ROOT_INFO_LEN)
        .ok_or_else(|| log::fail(f, HCCL_E_PTR, "rootInfo is NULL"))?;
    RootInfo::from_bytes(&b).map_err(|e| {
        log::fail(
            f,
            HCCL_E_PARA,
            format_args!("rootInfo is not from HcclGetRootInfo of this library: {e}"),
        )
    })
}

/// The comm name of an `HcclCommConfig` (None: not set), after checking
/// its header (`HcclCommConfigInit`'s size, magic word and version).
fn read_config(f: &str, p: *const c_void) -> Res<Option<String>> {
    if p.is_null() {
        return Err(log::fail(f, HCCL_E_PTR, "config is NULL"));
    }
    let head = boundary::read_array(p.cast::<u8>(), 16).unwrap_or_default();
    let size = u64::from_le_bytes(head[0..8].try_into().unwrap_or_default());
    let magic = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
    let version = u32::from_le_bytes(head[12..16].try_into().unwrap_or_default());
    if magic != HCCL_COMM_CONFIG_MAGIC_WORD {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("config's magic word is {magic:#x}, not {HCCL_COMM_CONFIG_MAGIC_WORD:#x}: call HcclCommConfigInit first"),
        ));
    }
    if (size as usize) < COMM_NAME_OFFSET || version == 0 {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!(
                "config's size {size} or version {version} is not one of HcclCommConfigInit"
            ),
        ));
    }
    // hcclBufferSize (MB) and hcclDeterministic: NOT_SET (0xffffffff) or
    // a value CANN's HCCL takes (CommConfig::Load: >= 1 MB; 0 or 1).
    let fields = boundary::read_array(p.cast::<u8>(), COMM_NAME_OFFSET).unwrap_or_default();
    let word = |at: usize| u32::from_le_bytes(fields[at..at + 4].try_into().unwrap_or_default());
    let (buffer, deterministic) = (word(24), word(28));
    if buffer == 0 {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            "config's hcclBufferSize is 0 MB (at least 1)",
        ));
    }
    if deterministic != u32::MAX && deterministic > 1 {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("config's hcclDeterministic is {deterministic}, not 0 or 1"),
        ));
    }
    if version < 2 || (size as usize) < COMM_NAME_OFFSET + COMM_NAME_MAX_LENGTH {
        return Ok(None);
    }
    let name_at = p
        .cast::<u8>()
        .wrapping_add(COMM_NAME_OFFSET)
        .cast::<c_char>();
    Ok(boundary::fixed_string(name_at, COMM_NAME_MAX_LENGTH).filter(|n| !n.is_empty()))
}

fn init_root(
    f: &str,
    n: u32,
    root_info: *const c_void,
    rank: u32,
    name: Option<String>,
    comm: *mut *mut c_void,
) -> Res<()> {
    if comm.is_null() {
        return Err(log::fail(f, HCCL_E_PTR, "comm is NULL"));
    }
    if n == 0 || rank >= n {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("rank {rank} is not in 0..nRanks ({n})"),
        ));
    }
    let info = read_root_info(f, root_info)?;
    refuse_ascend_backend(f)?;
    let c = Comm::init_root_info(n, &info, rank).map_err(|e| log::fail(f, cerr(e.clone()), &e))?;
    out(f, "comm", comm, comms::register(c, name))
}

/// `HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo,
/// uint32_t rank, HcclComm *comm)`: blocks until every rank joined.
#[no_mangle]
pub extern "C" fn HcclCommInitRootInfo(
    n_ranks: u32,
    root_info: *const c_void,
    rank: u32,
    comm: *mut *mut c_void,
) -> HcclResult {
    log::init();
    ret(init_root(
        "HcclCommInitRootInfo",
        n_ranks,
        root_info,
        rank,
        None,
        comm,
    ))
}

/// `HcclCommInitRootInfoConfig(..., const HcclCommConfig *config, HcclComm
/// *comm)`: the config's comm name is kept; buffer size and determinism
/// do not apply here.
#[no_mangle]
pub extern "C" fn HcclCommInitRootInfoConfig(
    n_ranks: u32,
    root_info: *const c_void,
    rank: u32,
    config: *const c_void,
    comm: *mut *mut c_void,
) -> HcclResult {
    api("HcclCommInitRootInfoConfig", |f| {
        read_config(f, config).and_then(|name| init_root(f, n_ranks, root_info, rank, name, comm))
    })
}

fn init_cluster(
    f: &str,
    path: *const c_char,
    rank: u32,
    name: Option<String>,
    comm: *mut *mut c_void,
) -> Res<()> {
    let p =
        boundary::string(path).ok_or_else(|| log::fail(f, HCCL_E_PTR, "clusterInfo is NULL"))?;
    if comm.is_null() {
        return Err(log::fail(f, HCCL_E_PTR, "comm is NULL"));
    }
    refuse_ascend_backend(f)?;
    let c = Comm::init_cluster_info(&p, rank).map_err(|e| log::fail(f, cerr(e.clone()), &e))?;
    out(f, "comm", comm, comms::register(c, name))
}

/// `HcclCommInitClusterInfo(const char *clusterInfo, uint32_t rank,
/// HcclComm *comm)`: an HCCL rank table file (1.0 or 1.2).
#[no_mangle]
pub extern "C" fn HcclCommInitClusterInfo(
    cluster_info: *const c_char,
    rank: u32,
    comm: *mut *mut c_void,
) -> HcclResult {
    log::init();
    ret(init_cluster(
        "HcclCommInitClusterInfo",
        cluster_info,
        rank,
        None,
        comm,
    ))
}

/// `HcclCommInitClusterInfoConfig(const char *clusterInfo, uint32_t rank,
/// HcclCommConfig *config, HcclComm *comm)`.
#[no_mangle]
pub extern "C" fn HcclCommInitClusterInfoConfig(
    cluster_info: *const c_char,
    rank: u32,
    config: *mut c_void,
    comm: *mut *mut c_void,
) -> HcclResult {
    api("HcclCommInitClusterInfoConfig", |f| {
        read_config(f, config).and_then(|name| init_cluster(f, cluster_info, rank, name, comm))
    })
}

/// `HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms)`:
/// every rank in this process (TCP over loopback, or the simulator with
/// `HCCL_BACKEND=sim`); `comms[i]` is rank i, on `devices[i]`.
#[no_mangle]
pub extern "C" fn HcclCommInitAll(
    ndev: u32,
    devices: *mut i32,
    comms_out: *mut *mut c_void,
) -> HcclResult {
    api("HcclCommInitAll", |f| {
        if ndev == 0 {
            return Err(log::fail(f, HCCL_E_PARA, "ndev is 0"));
        }
        let devs = boundary::read_array(devices.cast_const(), ndev as usize)
            .ok_or_else(|| log::fail(f, HCCL_E_PTR, "devices is NULL"))?;
        if comms_out.is_null() {
            return Err(log::fail(f, HCCL_E_PTR, "comms is NULL"));
        }
        for (i, &d) in devs.iter().enumerate() {
            crate::device::check(d)
                .map_err(|m| log::fail(f, HCCL_E_PARA, format_args!("devices[{i}]: {m}")))?;
            if devs[..i].contains(&d) {
                return Err(log::fail(
                    f,
                    HCCL_E_PARA,
                    format_args!("devices[{i}] = {d} is listed twice"),
                ));
            }
        }
        refuse_ascend_backend(f)?;
        let cs = Comm::init_all(ndev).map_err(|e| log::fail(f, cerr(e.clone()), &e))?;
        let hs: Vec<*mut c_void> = cs.into_iter().map(|c| comms::register(c, None)).collect();
        boundary::write_array(comms_out, &hs);
        Ok(())
    })
}

/// `HcclCommDestroy(HcclComm comm)`: closes the communicator (after the
/// ops still queued on streams, if any).
#[no_mangle]
pub extern "C" fn HcclCommDestroy(comm: *mut c_void) -> HcclResult {
    api("HcclCommDestroy", |f| {
        comm_of(f, comm)?;
        let Some(e) = comms::COMMS.remove(comm) else {
            return Ok(());
        };
        match Arc::try_unwrap(e) {
            Ok(e) => e
                .comm
                .destroy()
                .map_err(|e| log::fail(f, cerr(e.clone()), &e)),
            Err(_) => {
                tracing::warn!("{f}: ops are still queued on a stream; the communicator closes after them (synchronize the stream before destroying)");
                Ok(())
            }
        }
    })
}

/// `HcclGetRankSize(HcclComm comm, uint32_t *rankSize)`.
#[no_mangle]
pub extern "C" fn HcclGetRankSize(comm: *mut c_void, rank_size: *mut u32) -> HcclResult {
    api("HcclGetRankSize", |f| {
        comm_of(f, comm).and_then(|c| out(f, "rankSize", rank_size, c.comm.size()))
    })
}

/// `HcclGetRankId(HcclComm comm, uint32_t *rank)`.
#[no_mangle]
pub extern "C" fn HcclGetRankId(comm: *mut c_void, rank: *mut u32) -> HcclResult {
    api("HcclGetRankId", |f| {
        comm_of(f, comm).and_then(|c| out(f, "rank", rank, c.comm.rank()))
    })
}

/// `HcclGetCommName(HcclComm comm, char *commName)`: `commName` has room
/// for `COMM_NAME_MAX_LENGTH` (128) bytes.
#[no_mangle]
pub extern "C" fn HcclGetCommName(comm: *mut c_void, comm_name: *mut c_char) -> HcclResult {
    api("HcclGetCommName", |f| {
        comm_of(f, comm).and_then(|c| {
            if boundary::write_string(comm_name, &c.name, COMM_NAME_MAX_LENGTH) {
                Ok(())
            } else {
                Err(log::fail(f, HCCL_E_PTR, "commName is NULL"))
            }
        })
    })
}

/// `HcclGetCommAsyncError(HcclComm comm, HcclResult *asyncError)`: the
/// first failed op's code, else a failure found while no op ran (a lost
/// peer, an abort), else `HCCL_SUCCESS`.
#[no_mangle]
pub extern "C" fn HcclGetCommAsyncError(
    comm: *mut c_void,
    async_error: *mut HcclResult,
) -> HcclResult {
    api("HcclGetCommAsyncError", |f| {
        comm_of(f, comm).and_then(|c| {
            let code = (*crate::stream::lock_opt(&c.failed))
                .or_else(|| c.comm.async_error().map(|e| of_error(&e)))
                .unwrap_or(HCCL_SUCCESS);
            out(f, "asyncError", async_error, code)
        })
    })
}

/// `const char *HcclGetErrorString(HcclResult code)`.
#[no_mangle]
pub extern "C" fn HcclGetErrorString(code: HcclResult) -> *const c_char {
    hccl_error_cstr(code).as_ptr()
}

static DETERMINISTIC: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// `HcclSetConfig(HcclConfig config, HcclConfigValue configValue)`:
/// `HCCL_DETERMINISTIC` (0) with 0 or 1 (hccl-rs's reductions are
/// deterministic either way).
#[no_mangle]
pub extern "C" fn HcclSetConfig(config: i32, value: i32) -> HcclResult {
    log::init();
    let f = "HcclSetConfig";
    if config != 0 {
        return log::fail(
            f,
            HCCL_E_PARA,
            format_args!("config {config} is not an HcclConfig (0 HCCL_DETERMINISTIC)"),
        );
    }
    if !(0..=1).contains(&value) {
        return log::fail(
            f,
            HCCL_E_PARA,
            format_args!("HCCL_DETERMINISTIC value {value} is not 0 or 1"),
        );
    }
    DETERMINISTIC.store(value, std::sync::atomic::Ordering::Relaxed);
    HCCL_SUCCESS
}

/// `HcclGetConfig(HcclConfig config, HcclConfigValue *configValue)`.
#[no_mangle]
pub extern "C" fn HcclGetConfig(config: i32, value: *mut i32) -> HcclResult {
    log::init();
    let f = "HcclGetConfig";
    if config != 0 {
        return log::fail(
            f,
            HCCL_E_PARA,
            format_args!("config {config} is not an HcclConfig (0 HCCL_DETERMINISTIC)"),
        );
    }
    ret(out(
        f,
        "configValue",
        value,
        DETERMINISTIC.load(std::sync::atomic::Ordering::Relaxed),
    ))
}

/// `uint32_t HcclGetCommConfigCapability()`: the configs below this
/// `HcclCommConfigCapability` value are accepted
/// (`HCCL_COMM_CONFIG_RESERVED` of CANN 8.1.RC1, 5: buffer size,
/// determinism, comm name, op expansion mode, init by environment; only
/// the comm name changes anything here).
#[no_mangle]
pub extern "C" fn HcclGetCommConfigCapability() -> u32 {
    5
}

// ---- collectives ----

/// Checks a collective's arguments and buffers and enqueues it: the
/// buffer lengths are what `args` needs on this rank. A `count` of 0
/// succeeds at once and enqueues nothing, as in CANN's HCCL (`None`: the
/// counts are arrays).
#[allow(clippy::too_many_arguments)]
fn collective(
    f: &'static str,
    count: Option<u64>,
    comm: *mut c_void,
    stream: *mut c_void,
    args: impl FnOnce(u32) -> Res<CollectiveArgs>,
    send: *const c_void,
    recv: *const c_void,
) -> Res<()> {
    if count == Some(0) {
        tracing::warn!("{f}: count is 0: nothing to do");
        return Ok(());
    }
    let (c, s) = comm_and_stream(f, comm, stream)?;
    let a = args(c.comm.size())?;
    a.validate().map_err(|e| log::fail(f, HCCL_E_PARA, e))?;
    let (inb, outb) = a.io_bytes(c.comm.rank());
    let esz = a.dtype.size() as usize;
    let sb = span(f, "sendBuf", send, inb as usize, esz)?;
    let rb = span(f, "recvBuf", recv, outb as usize, esz)?;
    let timed = Some(a.clone());
    comms::submit_timed(f, c, &s, timed, move |comm| {
        comm.collective(&a, Send::of(&sb, &rb).bytes(), rb.bytes_mut())
    });
    Ok(())
}

fn args(kind: CollectiveKind, count: u64, dt: DataType, n: u32) -> CollectiveArgs {
    CollectiveArgs::new(kind, count, dt, n)
}

/// The buffers, communicator and stream of a collective's C call.
struct Io {
    send: *const c_void,
    recv: *const c_void,
    comm: *mut c_void,
    stream: *mut c_void,
}

impl Io {
    fn new(send: *const c_void, recv: *const c_void, comm: *mut c_void, stream: *mut c_void) -> Io {
        Io {
            send,
            recv,
            comm,
            stream,
        }
    }
}

/// What a collective's C arguments say: `count` elements of `data_type`,
/// reduced with `op`, at `root` (C numbers, checked by [`simple`]).
struct Spec {
    kind: CollectiveKind,
    count: u64,
    data_type: i32,
    op: Option<i32>,
    root: Option<u32>,
}

impl Spec {
    fn new(kind: CollectiveKind, count: u64, data_type: i32) -> Spec {
        Spec {
            kind,
            count,
            data_type,
            op: None,
            root: None,
        }
    }

    fn op(self, op: i32) -> Spec {
        Spec {
            op: Some(op),
            ..self
        }
    }

    fn root(self, root: u32) -> Spec {
        Spec {
            root: Some(root),
            ..self
        }
    }
}

/// A collective of one count and data type, checked and enqueued.
fn simple(f: &'static str, spec: Spec, io: Io) -> Res<()> {
    let describe = |n| {
        let a = match spec.op {
            Some(op) => {
                let (dt, op) = comms::reduction(f, spec.data_type, op)?;
                args(spec.kind, spec.count, dt, n).with_op(op)
            }
            None => args(
                spec.kind,
                spec.count,
                dtype(f, "dataType", spec.data_type)?,
                n,
            ),
        };
        Ok(match spec.root {
            Some(r) => a.with_root(r),
            None => a,
        })
    };
    let count = Some(spec.count);
    collective(f, count, io.comm, io.stream, describe, io.send, io.recv)
}

/// `HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count,
/// HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream
/// stream)`.
#[no_mangle]
pub extern "C" fn HcclAllReduce(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    data_type: i32,
    op: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclAllReduce", |f| {
        let spec = Spec::new(K::AllReduce, count, data_type).op(op);
        simple(f, spec, Io::new(send, recv, comm, stream))
    })
}

/// `HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
/// HcclDataType dataType, HcclReduceOp op, HcclComm comm, aclrtStream
/// stream)`.
#[no_mangle]
pub extern "C" fn HcclReduceScatter(
    send: *mut c_void,
    recv: *mut c_void,
    recv_count: u64,
    data_type: i32,
    op: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclReduceScatter", |f| {
        let spec = Spec::new(K::ReduceScatter, recv_count, data_type).op(op);
        simple(f, spec, Io::new(send, recv, comm, stream))
    })
}

/// `HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount,
/// HcclDataType dataType, HcclComm comm, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn HcclAllGather(
    send: *mut c_void,
    recv: *mut c_void,
    send_count: u64,
    data_type: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclAllGather", |f| {
        let spec = Spec::new(K::AllGather, send_count, data_type);
        simple(f, spec, Io::new(send, recv, comm, stream))
    })
}

/// `HcclReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType
/// dataType, HcclReduceOp op, uint32_t root, HcclComm comm, aclrtStream
/// stream)`: only the root's `recvBuf` is used.
#[no_mangle]
pub extern "C" fn HcclReduce(
    send: *mut c_void,
    recv: *mut c_void,
    count: u64,
    data_type: i32,
    op: i32,
    root: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclReduce", |f| {
        let spec = Spec::new(K::Reduce, count, data_type).op(op).root(root);
        simple(f, spec, Io::new(send, recv, comm, stream))
    })
}

/// `HcclScatter(void *sendBuf, void *recvBuf, uint64_t recvCount,
/// HcclDataType dataType, uint32_t root, HcclComm comm, aclrtStream
/// stream)`: only the root's `sendBuf` is used.
#[no_mangle]
pub extern "C" fn HcclScatter(
    send: *mut c_void,
    recv: *mut c_void,
    recv_count: u64,
    data_type: i32,
    root: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclScatter", |f| {
        let spec = Spec::new(K::Scatter, recv_count, data_type).root(root);
        simple(f, spec, Io::new(send, recv, comm, stream))
    })
}

/// `HcclAlltoAll(const void *sendBuf, uint64_t sendCount, HcclDataType
/// sendType, const void *recvBuf, uint64_t recvCount, HcclDataType
/// recvType, HcclComm comm, aclrtStream stream)`: the send and receive
/// counts and types must be equal.
#[no_mangle]
pub extern "C" fn HcclAlltoAll(
    send: *const c_void,
    send_count: u64,
    send_type: i32,
    recv: *const c_void,
    recv_count: u64,
    recv_type: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclAlltoAll", |f| {
        collective(
            f,
            Some(send_count.max(recv_count)),
            comm,
            stream,
            |n| {
                let st = dtype(f, "sendType", send_type)?;
                let rt = dtype(f, "recvType", recv_type)?;
                if st != rt || send_count != recv_count {
                    return Err(log::fail(f, HCCL_E_PARA, format_args!("sendCount {send_count} / sendType {send_type} differ from recvCount {recv_count} / recvType {recv_type}")));
                }
                Ok(args(CollectiveKind::AllToAll, send_count, st, n))
            },
            send,
            recv,
        )
    })
}

/// `HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType,
/// uint32_t root, HcclComm comm, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn HcclBroadcast(
    buf: *mut c_void,
    count: u64,
    data_type: i32,
    root: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclBroadcast", |f| {
        if count == 0 {
            tracing::warn!("{f}: count is 0: nothing to do");
            return Ok(());
        }
        let (c, s) = comm_and_stream(f, comm, stream)?;
        let dt = dtype(f, "dataType", data_type)?;
        let a = args(CollectiveKind::Broadcast, count, dt, c.comm.size()).with_root(root);
        a.validate().map_err(|e| log::fail(f, HCCL_E_PARA, e))?;
        let b = elems_at(f, "buf", buf, ("count", count), dt)?;
        let timed = Some(a.clone());
        comms::submit_timed(f, c, &s, timed, move |comm| {
            comm.collective_in_place(&a, b.bytes_mut())
        });
        Ok(())
    })
}

/// `HcclBarrier(HcclComm comm, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn HcclBarrier(comm: *mut c_void, stream: *mut c_void) -> HcclResult {
    api("HcclBarrier", |f| {
        let (c, s) = comm_and_stream(f, comm, stream)?;
        comms::submit(f, c, &s, |comm| comm.barrier());
        Ok(())
    })
}

// ---- V variants: typed calls of Comm, dispatched on the data type ----

macro_rules! typed {
    ($dt:expr, $T:ident => $body:expr) => {
        typed!(@ $dt, $T, $body; Int8 i8, Int16 i16, Int32 i32, Fp16 half::f16,
            Fp32 f32, Int64 i64, Uint64 u64, Uint8 u8, Uint16 u16, Uint32 u32,
            Fp64 f64, Bf16 half::bf16)
    };
    (@ $dt:expr, $T:ident, $body:expr; $($v:ident $t:ty),*) => {
        match $dt {
            $(DataType::$v => {
                type $T = $t;
                $body
            })*
        }
    };
}

/// The buffer `name` at `p` of `count` elements of `dt` (`field` names
/// the count in errors), aligned to the element size.
fn elems_at(
    f: &str,
    name: &str,
    p: *const c_void,
    (field, count): (&str, u64),
    dt: DataType,
) -> Res<Span> {
    span(
        f,
        name,
        p,
        bytes_of(f, field, count, dt)?,
        dt.size() as usize,
    )
}

/// The data type of an op with a send and a receive type, which must be
/// equal.
fn same_types(f: &str, send_type: i32, recv_type: i32) -> Res<DataType> {
    let dt = dtype(f, "sendType", send_type)?;
    if dtype(f, "recvType", recv_type)? != dt {
        return Err(log::fail(
            f,
            HCCL_E_PARA,
            format_args!("sendType {send_type} differs from recvType {recv_type}"),
        ));
    }
    Ok(dt)
}

/// `n` u64 counts or displacements of a caller's array.
fn counts(f: &str, field: &str, p: *const c_void, n: u32) -> Res<Vec<u64>> {
    boundary::read_array(p.cast::<u64>(), n as usize)
        .ok_or_else(|| log::fail(f, HCCL_E_PTR, format_args!("{field} is NULL")))
}

/// Elements a buffer with these blocks must hold: max(displ + count).
fn extent(f: &str, field: &str, counts: &[u64], displs: &[u64]) -> Res<u64> {
    counts
        .iter()
        .zip(displs)
        .try_fold(0u64, |m, (&c, &d)| {
            d.checked_add(c).map(|e| m.max(if c == 0 { 0 } else { e }))
        })
        .ok_or_else(|| {
            log::fail(
                f,
                HCCL_E_PARA,
                format_args!("{field}: a displacement plus its count overflows"),
            )
        })
}

/// An op's send buffer, copied first if it overlaps the receive buffer
/// (HCCL takes `sendBuf == recvBuf`; `Comm` takes slices that do not
/// alias).
struct Send<'a> {
    span: &'a Span,
    copy: Option<Vec<u8>>,
}

impl<'a> Send<'a> {
    fn of(send: &'a Span, recv: &Span) -> Send<'a> {
        let copy = send.overlaps(recv).then(|| send.bytes().to_vec());
        Send { span: send, copy }
    }

    fn bytes(&self) -> &[u8] {
        self.copy.as_deref().unwrap_or_else(|| self.span.bytes())
    }

    fn elems<T: bytemuck::Pod>(&self) -> &[T] {
        // An empty buffer (a count of 0 on this rank) may be a dangling
        // pointer of byte alignment, which a cast of wider elements refuses.
        match self.bytes() {
            [] => &[],
            b => bytemuck::cast_slice(b),
        }
    }
}

#[allow(clippy::mut_from_ref)]
fn elems_mut<T: bytemuck::Pod>(s: &Span) -> &mut [T] {
    match s.bytes_mut() {
        [] => &mut [],
        b => bytemuck::cast_slice_mut(b),
    }
}

/// `HcclAllGatherV(void *sendBuf, uint64_t sendCount, void *recvBuf, const
/// void *recvCounts, const void *recvDispls, HcclDataType dataType,
/// HcclComm comm, aclrtStream stream)`: counts and displacements are
/// `uint64_t` arrays of one entry per rank.
#[no_mangle]
pub extern "C" fn HcclAllGatherV(
    send: *mut c_void,
    send_count: u64,
    recv: *mut c_void,
    recv_counts: *const c_void,
    recv_displs: *const c_void,
    data_type: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclAllGatherV", |f| {
        let (c, s) = comm_and_stream(f, comm, stream)?;
        let dt = dtype(f, "dataType", data_type)?;
        let n = c.comm.size();
        let rc = counts(f, "recvCounts", recv_counts, n)?;
        let rd = counts(f, "recvDispls", recv_displs, n)?;
        let sb = elems_at(f, "sendBuf", send, ("sendCount", send_count), dt)?;
        let rlen = extent(f, "recvDispls", &rc, &rd)?;
        let rb = elems_at(f, "recvBuf", recv, ("recvCounts", rlen), dt)?;
        let timed = CollectiveArgs::v_counts(false, rc.clone(), dt).ok();
        comms::submit_timed(f, c, &s, timed, move |comm| {
            let send = Send::of(&sb, &rb);
            typed!(dt, T => {
                comm.all_gather_v(send.elems::<T>(), elems_mut::<T>(&rb), &rc, &rd)
            })
        });
        Ok(())
    })
}

/// `HcclReduceScatterV(void *sendBuf, const void *sendCounts, const void
/// *sendDispls, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
/// HcclReduceOp op, HcclComm comm, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn HcclReduceScatterV(
    send: *mut c_void,
    send_counts: *const c_void,
    send_displs: *const c_void,
    recv: *mut c_void,
    recv_count: u64,
    data_type: i32,
    op: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclReduceScatterV", |f| {
        let (c, s) = comm_and_stream(f, comm, stream)?;
        let (dt, rop): (DataType, ReduceOp) = comms::reduction(f, data_type, op)?;
        let n = c.comm.size();
        let sc = counts(f, "sendCounts", send_counts, n)?;
        let sd = counts(f, "sendDispls", send_displs, n)?;
        let slen = extent(f, "sendDispls", &sc, &sd)?;
        let sb = elems_at(f, "sendBuf", send, ("sendCounts", slen), dt)?;
        let rb = elems_at(f, "recvBuf", recv, ("recvCount", recv_count), dt)?;
        let timed = CollectiveArgs::v_counts(true, sc.clone(), dt)
            .ok()
            .map(|a| a.with_op(rop));
        comms::submit_timed(f, c, &s, timed, move |comm| {
            let send = Send::of(&sb, &rb);
            typed!(dt, T => {
                comm.reduce_scatter_v(send.elems::<T>(), &sc, &sd, elems_mut::<T>(&rb), rop)
            })
        });
        Ok(())
    })
}

/// `HcclAlltoAllV(const void *sendBuf, const void *sendCounts, const void
/// *sdispls, HcclDataType sendType, const void *recvBuf, const void
/// *recvCounts, const void *rdispls, HcclDataType recvType, HcclComm comm,
/// aclrtStream stream)`: the two types must be equal.
#[no_mangle]
pub extern "C" fn HcclAlltoAllV(
    send: *const c_void,
    send_counts: *const c_void,
    sdispls: *const c_void,
    send_type: i32,
    recv: *const c_void,
    recv_counts: *const c_void,
    rdispls: *const c_void,
    recv_type: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclAlltoAllV", |f| {
        let (c, s) = comm_and_stream(f, comm, stream)?;
        let dt = same_types(f, send_type, recv_type)?;
        if !send.is_null() && send == recv {
            return Err(log::fail(
                f,
                HCCL_E_PARA,
                "sendBuf and recvBuf are the same buffer",
            ));
        }
        let n = c.comm.size();
        let sc = counts(f, "sendCounts", send_counts, n)?;
        let sd = counts(f, "sdispls", sdispls, n)?;
        let rc = counts(f, "recvCounts", recv_counts, n)?;
        let rd = counts(f, "rdispls", rdispls, n)?;
        let slen = extent(f, "sdispls", &sc, &sd)?;
        let rlen = extent(f, "rdispls", &rc, &rd)?;
        let sb = elems_at(f, "sendBuf", send, ("sendCounts", slen), dt)?;
        let rb = elems_at(f, "recvBuf", recv, ("recvCounts", rlen), dt)?;
        // The whole matrix is known only inside the op: timed as if every
        // rank sent what this one sends (hccl_test's alltoallv does).
        let timed = CollectiveArgs::all_to_all_v(vec![sc.clone(); n as usize], dt).ok();
        comms::submit_timed(f, c, &s, timed, move |comm| {
            let send = Send::of(&sb, &rb);
            typed!(dt, T => {
                comm.all_to_all_v(send.elems::<T>(), &sc, &sd, elems_mut::<T>(&rb), &rc, &rd)
            })
        });
        Ok(())
    })
}

/// `HcclAlltoAllVC(const void *sendBuf, const void *sendCountMatrix,
/// HcclDataType sendType, const void *recvBuf, HcclDataType recvType,
/// HcclComm comm, aclrtStream stream)`: `sendCountMatrix[i * n + j]`
/// elements go from rank i to rank j, blocks packed in rank order.
#[no_mangle]
pub extern "C" fn HcclAlltoAllVC(
    send: *const c_void,
    send_count_matrix: *const c_void,
    send_type: i32,
    recv: *const c_void,
    recv_type: i32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclAlltoAllVC", |f| {
        collective(
            f,
            None,
            comm,
            stream,
            |n| {
                let dt = dtype(f, "sendType", send_type)?;
                if dtype(f, "recvType", recv_type)? != dt {
                    return Err(log::fail(
                        f,
                        HCCL_E_PARA,
                        format_args!("sendType {send_type} differs from recvType {recv_type}"),
                    ));
                }
                let m = boundary::read_array(
                    send_count_matrix.cast::<u64>(),
                    (n as usize) * (n as usize),
                )
                .ok_or_else(|| log::fail(f, HCCL_E_PTR, "sendCountMatrix is NULL"))?;
                let rows = m.chunks(n as usize).map(<[u64]>::to_vec).collect();
                CollectiveArgs::all_to_all_v(rows, dt)
                    .map_err(|e| log::fail(f, HCCL_E_PARA, format_args!("sendCountMatrix: {e}")))
            },
            send,
            recv,
        )
    })
}

// ---- point-to-point ----

// HcclSend's and HcclRecv's C parameters, plus the name and the side.
#[allow(clippy::too_many_arguments)]
fn p2p_one(
    f: &'static str,
    send: bool,
    buf: *mut c_void,
    count: u64,
    data_type: i32,
    peer: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> Res<()> {
    if count == 0 {
        tracing::warn!("{f}: count is 0: nothing to do");
        return Ok(());
    }
    let (c, s) = comm_and_stream(f, comm, stream)?;
    let dt = dtype(f, "dataType", data_type)?;
    comms::rank_arg(f, if send { "destRank" } else { "srcRank" }, peer, &c, true)?;
    let b = elems_at(
        f,
        if send { "sendBuf" } else { "recvBuf" },
        buf,
        ("count", count),
        dt,
    )?;
    group::p2p(
        f,
        c,
        s,
        vec![P2pSpec {
            send,
            buf: b,
            count,
            dtype: dt,
            peer,
        }],
    );
    Ok(())
}

/// `HcclSend(void *sendBuf, uint64_t count, HcclDataType dataType,
/// uint32_t destRank, HcclComm comm, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn HcclSend(
    send: *mut c_void,
    count: u64,
    data_type: i32,
    dest_rank: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    log::init();
    ret(p2p_one(
        "HcclSend", true, send, count, data_type, dest_rank, comm, stream,
    ))
}

/// `HcclRecv(void *recvBuf, uint64_t count, HcclDataType dataType,
/// uint32_t srcRank, HcclComm comm, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn HcclRecv(
    recv: *mut c_void,
    count: u64,
    data_type: i32,
    src_rank: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    log::init();
    ret(p2p_one(
        "HcclRecv", false, recv, count, data_type, src_rank, comm, stream,
    ))
}

/// `HcclSendRecvItem` (hccl_types.h): type, buffer, count, data type,
/// remote rank; 32 bytes on LP64.
#[repr(C)]
#[derive(Clone, Copy)]
struct SendRecvItem {
    kind: i32,
    buf: *mut c_void,
    count: u64,
    data_type: i32,
    remote_rank: u32,
}

/// `HcclBatchSendRecv(HcclSendRecvItem *sendRecvInfo, uint32_t itemNum,
/// HcclComm comm, aclrtStream stream)`: every item in flight at once.
#[no_mangle]
pub extern "C" fn HcclBatchSendRecv(
    items: *mut c_void,
    item_num: u32,
    comm: *mut c_void,
    stream: *mut c_void,
) -> HcclResult {
    api("HcclBatchSendRecv", |f| {
        let (c, s) = comm_and_stream(f, comm, stream)?;
        let n = c.comm.size();
        if item_num == 0 || item_num > 2 * n {
            return Err(log::fail(
                f,
                HCCL_E_PARA,
                format_args!("itemNum {item_num} is not in 1..=2 x rankSize ({})", 2 * n),
            ));
        }
        let list =
            boundary::read_array(items.cast::<SendRecvItem>().cast_const(), item_num as usize)
                .ok_or_else(|| log::fail(f, HCCL_E_PTR, "sendRecvInfo is NULL"))?;
        let mut specs: Vec<P2pSpec> = Vec::with_capacity(list.len());
        for (i, it) in list.iter().enumerate() {
            let send = match it.kind {
                0 => true,
                1 => false,
                k => {
                    return Err(log::fail(
                        f,
                        HCCL_E_PARA,
                        format_args!(
                        "sendRecvInfo[{i}].sendRecvType {k} is not HCCL_SEND (0) or HCCL_RECV (1)"
                    ),
                    ))
                }
            };
            let dt = dtype(f, &format!("sendRecvInfo[{i}].dataType"), it.data_type)?;
            comms::rank_arg(
                f,
                &format!("sendRecvInfo[{i}].remoteRank"),
                it.remote_rank,
                &c,
                true,
            )?;
            if specs
                .iter()
                .any(|s| s.send == send && s.peer == it.remote_rank)
            {
                return Err(log::fail(
                    f,
                    HCCL_E_PARA,
                    format_args!(
                        "sendRecvInfo[{i}]: a second {} with rank {} in one batch",
                        if send { "send" } else { "receive" },
                        it.remote_rank
                    ),
                ));
            }
            if it.buf.is_null() {
                return Err(log::fail(
                    f,
                    HCCL_E_PTR,
                    format_args!("sendRecvInfo[{i}].buf is NULL"),
                ));
            }
            let b = elems_at(
                f,
                &format!("sendRecvInfo[{i}].buf"),
                it.buf,
                ("count", it.count),
                dt,
            )?;
            specs.push(P2pSpec {
                send,
                buf: b,
                count: it.count,
                dtype: dt,
                peer: it.remote_rank,
            });
        }
        group::p2p(f, c, s, specs);
        Ok(())
    })
}

/// `HcclGroupStart()`.
#[no_mangle]
pub extern "C" fn HcclGroupStart() -> HcclResult {
    log::init();
    group::start();
    HCCL_SUCCESS
}

/// `HcclGroupEnd()`: enqueues the group's sends and receives.
#[no_mangle]
pub extern "C" fn HcclGroupEnd() -> HcclResult {
    log::init();
    if group::end() {
        HCCL_SUCCESS
    } else {
        log::fail(
            "HcclGroupEnd",
            HCCL_E_PARA,
            "no HcclGroupStart on this thread",
        )
    }
}

// ---- in the header, not here: HCCL_E_NOT_SUPPORT with a log line ----

fn unsupported(f: &str) -> HcclResult {
    log::init();
    log::fail(f, HCCL_E_NOT_SUPPORT, "not supported by hccl-rs's C API")
}

/// `subCommId` of a rank that is not in the new communicator (with
/// `rankIds` NULL), `INVALID_SUBCOMM_ID` of CANN's HCCL `op_base.cc`.
const INVALID_SUBCOMM_ID: u64 = 0xFFFF_FFFF;

/// `HcclCreateSubCommConfig(HcclComm *comm, uint32_t rankNum, uint32_t
/// *rankIds, uint64_t subCommId, uint32_t subCommRankId, HcclCommConfig
/// *config, HcclComm *subComm)`: a communicator of `*comm`'s ranks
/// `rankIds`, `rankIds[i]` being its rank `i`; only those ranks take part
/// (each passing its index as `subCommRankId`, and the same `rankIds`,
/// `subCommId` and config). A rank outside it may call it with `rankIds`
/// NULL and `subCommId` 0xFFFFFFFF: success, nothing made. Named by the
/// config's `hcclCommName`, else `<comm name>_sub_<subCommId>`, which no
/// live sub-communicator of `*comm` may have (CANN: "subCommId unique in
/// the global communicator"). It bootstraps as `HcclCommInitRootInfo` does:
/// its rank 0 makes the root and sends it to the others over `*comm`.
#[no_mangle]
pub extern "C" fn HcclCreateSubCommConfig(
    comm: *mut *mut c_void,
    rank_num: u32,
    rank_ids: *mut u32,
    sub_comm_id: u64,
    sub_comm_rank_id: u32,
    config: *mut c_void,
    sub_comm: *mut *mut c_void,
) -> HcclResult {
    api("HcclCreateSubCommConfig", |f| {
        // The checks in CANN's order (op_base.cc).
        if sub_comm.is_null() {
            return Err(log::fail(f, HCCL_E_PTR, "subComm is NULL"));
        }
        match (rank_ids.is_null(), sub_comm_id == INVALID_SUBCOMM_ID) {
            (true, true) => {
                tracing::info!("{f}: rankIds is NULL and subCommId is 0xFFFFFFFF: this rank is not in the sub-communicator");
                return Ok(());
            }
            (false, false) => {}
            _ => {
                return Err(log::fail(
                    f,
                    HCCL_E_PARA,
                    format_args!("rankIds ({rank_ids:p}) is NULL or subCommId ({sub_comm_id}) is 0xFFFFFFFF, but not both: a rank outside the sub-communicator passes both"),
                ))
            }
        }
        if rank_num == 0 {
            return Err(log::fail(f, HCCL_E_PARA, "rankNum is 0"));
        }
        if sub_comm_rank_id >= rank_num {
            return Err(log::fail(
                f,
                HCCL_E_PARA,
                format_args!(
                    "subCommRankId {sub_comm_rank_id} is not less than rankNum {rank_num}"
                ),
            ));
        }
        let cfg_name = read_config(f, config)?;
        let handle = boundary::read_array(comm.cast_const(), 1)
            .ok_or_else(|| log::fail(f, HCCL_E_PTR, "comm is NULL"))?[0];
        let parent = comm_of(f, handle)?;
        let ids = boundary::read_array(rank_ids.cast_const(), rank_num as usize)
            .ok_or_else(|| log::fail(f, HCCL_E_PTR, "rankIds is NULL"))?;
        let me = parent.comm.rank();
        if ids[sub_comm_rank_id as usize] != me {
            return Err(log::fail(
                f,
                HCCL_E_PARA,
                format_args!(
                    "rankIds[subCommRankId {sub_comm_rank_id}] is {}, not this rank ({me}); pass this rank's index in rankIds",
                    ids[sub_comm_rank_id as usize]
                ),
            ));
        }
        let name = cfg_name.unwrap_or_else(|| format!("{}_sub_{sub_comm_id}", parent.name));
        if comms::has_sub(handle as usize, &name) {
            return Err(log::fail(
                f,
                HCCL_E_PARA,
                format_args!("this communicator already has a sub-communicator named {name:?}: give each a distinct subCommId (or hcclCommName)"),
            ));
        }
        let c = parent
            .comm
            .sub_comm(&ids, &name)
            .map_err(|e| log::fail(f, cerr(e.clone()), &e))?;
        let h = comms::register_sub(c, Some(name), Some(handle as usize));
        out(f, "subComm", sub_comm, h)
    })
}

/// `HcclCommSuspend(HcclComm comm)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommSuspend(comm: *mut c_void) -> HcclResult {
    let _ = comm;
    unsupported("HcclCommSuspend")
}

/// `HcclCommResume(HcclComm comm)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommResume(comm: *mut c_void) -> HcclResult {
    let _ = comm;
    unsupported("HcclCommResume")
}

/// `HcclCommSetMemoryRange(HcclComm comm, void *baseVirPtr, size_t size,
/// size_t alignment, uint64_t flags)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommSetMemoryRange(
    comm: *mut c_void,
    base: *mut c_void,
    size: usize,
    alignment: usize,
    flags: u64,
) -> HcclResult {
    let _ = (comm, base, size, alignment, flags);
    unsupported("HcclCommSetMemoryRange")
}

/// `HcclCommUnsetMemoryRange(HcclComm comm, void *baseVirPtr)`: not
/// supported.
#[no_mangle]
pub extern "C" fn HcclCommUnsetMemoryRange(comm: *mut c_void, base: *mut c_void) -> HcclResult {
    let _ = (comm, base);
    unsupported("HcclCommUnsetMemoryRange")
}

/// `HcclCommActivateCommMemory(HcclComm comm, void *virPtr, size_t size,
/// size_t offset, aclrtDrvMemHandle handle, uint64_t flags)`: not
/// supported.
#[no_mangle]
pub extern "C" fn HcclCommActivateCommMemory(
    comm: *mut c_void,
    vir: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> HcclResult {
    let _ = (comm, vir, size, offset, handle, flags);
    unsupported("HcclCommActivateCommMemory")
}

/// `HcclCommDeactivateCommMemory(HcclComm comm, void *virPtr)`: not
/// supported.
#[no_mangle]
pub extern "C" fn HcclCommDeactivateCommMemory(comm: *mut c_void, vir: *mut c_void) -> HcclResult {
    let _ = (comm, vir);
    unsupported("HcclCommDeactivateCommMemory")
}

/// `HcclCommWorkingDevNicSet(HcclComm comm, uint32_t *ranks, bool
/// *useBackup, uint32_t nRanks)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommWorkingDevNicSet(
    comm: *mut c_void,
    ranks: *mut u32,
    use_backup: *mut bool,
    n_ranks: u32,
) -> HcclResult {
    let _ = (comm, ranks, use_backup, n_ranks);
    unsupported("HcclCommWorkingDevNicSet")
}

/// `HcclSetCommConfig(HcclComm comm, HcclConfig config, HcclConfigValue
/// configValue)`: not supported.
#[no_mangle]
pub extern "C" fn HcclSetCommConfig(comm: *mut c_void, config: i32, value: i32) -> HcclResult {
    let _ = (comm, config, value);
    unsupported("HcclSetCommConfig")
}

/// `HcclGetCommConfig(HcclComm comm, HcclConfig config, HcclConfigValue
/// *configValue)`: not supported.
#[no_mangle]
pub extern "C" fn HcclGetCommConfig(comm: *mut c_void, config: i32, value: *mut i32) -> HcclResult {
    let _ = (comm, config, value);
    unsupported("HcclGetCommConfig")
}

/// `HcclCommRegister(HcclComm comm, void *addr, uint64_t size, void
/// **handle, uint32_t flag)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommRegister(
    comm: *mut c_void,
    addr: *mut c_void,
    size: u64,
    handle: *mut *mut c_void,
    flag: u32,
) -> HcclResult {
    let _ = (comm, addr, size, handle, flag);
    unsupported("HcclCommRegister")
}

/// `HcclCommDeregister(HcclComm comm, void *handle)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommDeregister(comm: *mut c_void, handle: *mut c_void) -> HcclResult {
    let _ = (comm, handle);
    unsupported("HcclCommDeregister")
}

/// `HcclCommExchangeMem(HcclComm comm, void *windowHandle, uint32_t
/// *peerRanks, uint32_t peerRankNum)`: not supported.
#[no_mangle]
pub extern "C" fn HcclCommExchangeMem(
    comm: *mut c_void,
    handle: *mut c_void,
    peer_ranks: *mut u32,
    n: u32,
) -> HcclResult {
    let _ = (comm, handle, peer_ranks, n);
    unsupported("HcclCommExchangeMem")
}

/// The communicator behind an `HcclComm` handle, for Rust callers of this
/// crate (the benchmark compares the C path with `Comm` itself).
pub fn comm_ref(h: *mut c_void) -> Option<CommRef> {
    comms::COMMS.get(h).map(CommRef)
}

/// A shared reference to a registered communicator.
pub struct CommRef(Arc<CommEntry>);

impl std::ops::Deref for CommRef {
    type Target = Comm;
    fn deref(&self) -> &Comm {
        &self.0.comm
    }
}
