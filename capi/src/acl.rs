//! The ACL runtime's C entry points (`acl/acl_rt.h`, `acl/acl_base.h`,
//! `acl/acl_prof.h`) on the host: thin `extern "C"` functions over
//! [`crate::device`], [`crate::memory`] and [`crate::stream`]. Argument
//! values (`aclrtMemcpyKind`, ...) are CANN's, see `include/acl/`.
//!
//! This module holds no `unsafe` block (it is allowed only for
//! `#[no_mangle]`); pointers go through [`crate::boundary`].

#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, OnceLock};

use crate::boundary::{self, HostAddr};
use crate::codes::*;
use crate::device;
use crate::handles::Handles;
use crate::log;
use crate::memory::{self, Kind, Span};
use crate::stream::{self, Event, Stream};

pub(crate) static STREAMS: Handles<Stream> = Handles::new();
static EVENTS: Handles<Event> = Handles::new();
static CONTEXTS: Handles<i32> = Handles::new();
static PROF_CONFIGS: Handles<()> = Handles::new();

/// The stream of handle `h` (NULL: the default stream).
pub(crate) fn stream_of(func: &str, h: *mut c_void) -> Result<Arc<Stream>, AclError> {
    if h.is_null() {
        return default_stream(func);
    }
    STREAMS.get(h).ok_or_else(|| {
        log::fail(
            func,
            ACL_ERROR_INVALID_PARAM,
            format_args!("stream {h:p} is not a stream of aclrtCreateStream (or was destroyed)"),
        )
    })
}

fn default_stream(func: &str) -> Result<Arc<Stream>, AclError> {
    static DEFAULT: OnceLock<Option<Arc<Stream>>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| Stream::new().ok().map(Arc::new))
        .clone()
        .ok_or_else(|| {
            log::fail(
                func,
                ACL_ERROR_RT_INTERNAL_ERROR,
                "cannot start the default stream",
            )
        })
}

fn event_of(func: &str, h: *mut c_void) -> Result<Arc<Event>, AclError> {
    EVENTS.get(h).ok_or_else(|| {
        log::fail(
            func,
            ACL_ERROR_INVALID_PARAM,
            format_args!("event {h:p} is not an event of aclrtCreateEvent (or was destroyed)"),
        )
    })
}

fn code(r: Result<(), AclError>) -> AclError {
    r.err().unwrap_or(ACL_SUCCESS)
}

/// An ACL entry point `f`: installs the log, runs `body` and returns its
/// code; an error is logged where it is made.
fn acl_api(f: &'static str, body: impl FnOnce(&'static str) -> Result<(), AclError>) -> AclError {
    log::init();
    code(body(f))
}

/// Writes an event's status to `status`: `done` if the stream reached it,
/// else `pending` (the query functions differ in their numbering).
fn event_status(
    f: &'static str,
    event: *mut c_void,
    status: *mut i32,
    done: i32,
    pending: i32,
) -> AclError {
    acl_api(f, |f| {
        let e = event_of(f, event)?;
        out(
            f,
            "status",
            status,
            if e.is_complete() { done } else { pending },
        )
    })
}

fn out<T>(func: &str, name: &str, p: *mut T, v: T) -> Result<(), AclError> {
    if boundary::write(p, v) {
        Ok(())
    } else {
        Err(log::fail(
            func,
            ACL_ERROR_INVALID_PARAM,
            format_args!("{name} is NULL"),
        ))
    }
}

// ---- init, devices, contexts ----

/// `aclInit(const char *configPath)`: the config file is not read. A
/// second call returns `ACL_ERROR_REPEAT_INITIALIZE` with a warning, not
/// an error line: CANN's runtime returns that code and logs it below error
/// level (hicann/runtime `src/acl/aclrt_impl/acl.cpp`, `aclInitImpl`: an
/// info line "repeatedly initialized"; older CANN's `acl.cpp`, a warning),
/// and callers that share a process treat it as success.
#[no_mangle]
pub extern "C" fn aclInit(config_path: *const c_char) -> AclError {
    log::init();
    let _ = config_path;
    if !device::init() {
        return log::warn(
            "aclInit",
            ACL_ERROR_REPEAT_INITIALIZE,
            "aclInit was called already (ACL_ERROR_REPEAT_INITIALIZE; ACL stays initialised)",
        );
    }
    ACL_SUCCESS
}

/// `aclFinalize()`: waits for every stream; a second call is
/// `ACL_ERROR_REPEAT_FINALIZE` (CANN's runtime).
#[no_mangle]
pub extern "C" fn aclFinalize() -> AclError {
    log::init();
    for s in STREAMS.all() {
        let _ = s.synchronize(None);
    }
    if !device::finalize() {
        return log::fail(
            "aclFinalize",
            ACL_ERROR_REPEAT_FINALIZE,
            "aclFinalize was called already",
        );
    }
    ACL_SUCCESS
}

/// `aclrtSetDevice(int32_t deviceId)`.
#[no_mangle]
pub extern "C" fn aclrtSetDevice(device_id: i32) -> AclError {
    log::init();
    match device::check(device_id) {
        Ok(()) => {
            device::set_current(Some(device_id));
            ACL_SUCCESS
        }
        Err(m) => log::fail("aclrtSetDevice", ACL_ERROR_INVALID_DEVICE, m),
    }
}

/// `aclrtResetDevice(int32_t deviceId)`.
#[no_mangle]
pub extern "C" fn aclrtResetDevice(device_id: i32) -> AclError {
    log::init();
    match device::check(device_id) {
        Ok(()) => {
            if device::current() == Some(device_id) {
                device::set_current(None);
            }
            ACL_SUCCESS
        }
        Err(m) => log::fail("aclrtResetDevice", ACL_ERROR_INVALID_DEVICE, m),
    }
}

/// `aclrtGetDevice(int32_t *deviceId)`: this thread's device.
#[no_mangle]
pub extern "C" fn aclrtGetDevice(device_id: *mut i32) -> AclError {
    log::init();
    let f = "aclrtGetDevice";
    match device::current() {
        Some(d) => code(out(f, "deviceId", device_id, d)),
        None => log::fail(
            f,
            ACL_ERROR_RT_CONTEXT_NULL,
            "no device set on this thread (aclrtSetDevice)",
        ),
    }
}

/// `aclrtGetDeviceCount(uint32_t *count)`: `HCCL_HOST_DEVICES`, default 8.
#[no_mangle]
pub extern "C" fn aclrtGetDeviceCount(count: *mut u32) -> AclError {
    log::init();
    code(out("aclrtGetDeviceCount", "count", count, device::count()))
}

/// `const char *aclrtGetSocName()`: `HCCL_HOST_SOC_NAME`, default
/// `Ascend910B1`.
#[no_mangle]
pub extern "C" fn aclrtGetSocName() -> *const c_char {
    log::init();
    static NAME: OnceLock<CString> = OnceLock::new();
    NAME.get_or_init(|| CString::new(device::soc_name().replace('\0', "")).unwrap_or_default())
        .as_ptr()
}

/// `aclrtGetRunMode(aclrtRunMode *runMode)`: `ACL_HOST` (1).
#[no_mangle]
pub extern "C" fn aclrtGetRunMode(run_mode: *mut i32) -> AclError {
    log::init();
    code(out("aclrtGetRunMode", "runMode", run_mode, 1))
}

/// `aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode)`: 0 (saturation)
/// or 1 (INF/NaN) accepted, no effect on host arithmetic.
#[no_mangle]
pub extern "C" fn aclrtSetDeviceSatMode(mode: i32) -> AclError {
    log::init();
    if !(0..=1).contains(&mode) {
        return log::fail("aclrtSetDeviceSatMode", ACL_ERROR_INVALID_PARAM, format_args!("mode {mode} is not 0 (ACL_RT_OVERFLOW_MODE_SATURATION) or 1 (ACL_RT_OVERFLOW_MODE_INFNAN)"));
    }
    ACL_SUCCESS
}

/// `aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode)`: 0.
#[no_mangle]
pub extern "C" fn aclrtGetDeviceSatMode(mode: *mut i32) -> AclError {
    log::init();
    code(out("aclrtGetDeviceSatMode", "mode", mode, 0))
}

/// `aclrtSynchronizeDevice()`: waits for every stream; the first error.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeDevice() -> AclError {
    log::init();
    let mut first = None;
    for s in STREAMS.all() {
        if let Err(Some(e)) = s.synchronize(None) {
            first.get_or_insert(e);
        }
    }
    first_failure("aclrtSynchronizeDevice", first)
}

/// A failed task's line, but only the first line of a long one (a hang
/// report: its task logged it whole).
fn first_line(why: &str) -> String {
    match why.split_once('\n') {
        Some((first, _)) => format!("{first} (the rest is in the task's log line above)"),
        None => why.to_string(),
    }
}

/// The code of a device-wide synchronize: the first failed task's, logged
/// with its line (so `aclGetRecentErrMsg` gives it), else success.
fn first_failure(f: &str, first: Option<(AclError, String)>) -> AclError {
    match first {
        Some((e, why)) => log::fail(
            f,
            e,
            format_args!("a task on a stream failed: {}", first_line(&why)),
        ),
        None => ACL_SUCCESS,
    }
}

/// `aclrtCreateContext(aclrtContext *context, int32_t deviceId)`.
#[no_mangle]
pub extern "C" fn aclrtCreateContext(context: *mut *mut c_void, device_id: i32) -> AclError {
    log::init();
    let f = "aclrtCreateContext";
    if let Err(m) = device::check(device_id) {
        return log::fail(f, ACL_ERROR_INVALID_DEVICE, m);
    }
    if context.is_null() {
        return log::fail(f, ACL_ERROR_INVALID_PARAM, "context is NULL");
    }
    device::set_current(Some(device_id));
    code(out(
        f,
        "context",
        context,
        CONTEXTS.insert(Arc::new(device_id)),
    ))
}

/// `aclrtDestroyContext(aclrtContext context)`.
#[no_mangle]
pub extern "C" fn aclrtDestroyContext(context: *mut c_void) -> AclError {
    log::init();
    match CONTEXTS.remove(context) {
        Some(_) => ACL_SUCCESS,
        None => log::fail(
            "aclrtDestroyContext",
            ACL_ERROR_INVALID_PARAM,
            format_args!("{context:p} is not a context"),
        ),
    }
}

/// `aclrtSetCurrentContext(aclrtContext context)`: its device becomes
/// this thread's.
#[no_mangle]
pub extern "C" fn aclrtSetCurrentContext(context: *mut c_void) -> AclError {
    log::init();
    match CONTEXTS.get(context) {
        Some(d) => {
            device::set_current(Some(*d));
            ACL_SUCCESS
        }
        None => log::fail(
            "aclrtSetCurrentContext",
            ACL_ERROR_INVALID_PARAM,
            format_args!("{context:p} is not a context"),
        ),
    }
}

/// `aclrtGetCurrentContext(aclrtContext *context)`: a context of this
/// thread's device.
#[no_mangle]
pub extern "C" fn aclrtGetCurrentContext(context: *mut *mut c_void) -> AclError {
    log::init();
    let f = "aclrtGetCurrentContext";
    let Some(d) = device::current() else {
        return log::fail(f, ACL_ERROR_RT_CONTEXT_NULL, "no device set on this thread");
    };
    code(out(f, "context", context, CONTEXTS.insert(Arc::new(d))))
}

/// `aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId,
/// int32_t peerDeviceId)`: 1 for two devices.
#[no_mangle]
pub extern "C" fn aclrtDeviceCanAccessPeer(can: *mut i32, device_id: i32, peer: i32) -> AclError {
    log::init();
    let f = "aclrtDeviceCanAccessPeer";
    for d in [device_id, peer] {
        if let Err(m) = device::check(d) {
            return log::fail(f, ACL_ERROR_INVALID_DEVICE, m);
        }
    }
    code(out(f, "canAccessPeer", can, i32::from(device_id != peer)))
}

/// `aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags)`.
#[no_mangle]
pub extern "C" fn aclrtDeviceEnablePeerAccess(peer: i32, flags: u32) -> AclError {
    log::init();
    let _ = flags;
    match device::check(peer) {
        Ok(()) => ACL_SUCCESS,
        Err(m) => log::fail("aclrtDeviceEnablePeerAccess", ACL_ERROR_INVALID_DEVICE, m),
    }
}

/// `aclrtGetVersion(int32_t *major, int32_t *minor, int32_t *patch)`:
/// 1.13.0, the ACL version of the headers (CANN 8.1.RC1's).
#[no_mangle]
pub extern "C" fn aclrtGetVersion(major: *mut i32, minor: *mut i32, patch: *mut i32) -> AclError {
    acl_api("aclrtGetVersion", |f| {
        out(f, "majorVersion", major, 1)
            .and_then(|()| out(f, "minorVersion", minor, 13))
            .and_then(|()| out(f, "patchVersion", patch, 0))
    })
}

/// `const char *aclGetRecentErrMsg()`: this thread's last failure.
#[no_mangle]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    log::recent()
}

// ---- memory ----

/// `aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`:
/// zeroed host memory, registered as device memory.
#[no_mangle]
pub extern "C" fn aclrtMalloc(dev_ptr: *mut *mut c_void, size: usize, policy: i32) -> AclError {
    log::init();
    malloc("aclrtMalloc", dev_ptr, size, Some(policy), Kind::Device)
}

/// `aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy)`.
#[no_mangle]
pub extern "C" fn aclrtMallocCached(
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: i32,
) -> AclError {
    log::init();
    malloc(
        "aclrtMallocCached",
        dev_ptr,
        size,
        Some(policy),
        Kind::Device,
    )
}

/// `aclrtMallocHost(void **hostPtr, size_t size)`.
#[no_mangle]
pub extern "C" fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) -> AclError {
    log::init();
    malloc("aclrtMallocHost", host_ptr, size, None, Kind::Host)
}

fn malloc(f: &str, p: *mut *mut c_void, size: usize, policy: Option<i32>, kind: Kind) -> AclError {
    if p.is_null() {
        return log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            "the pointer to the result is NULL",
        );
    }
    if size == 0 {
        return log::fail(f, ACL_ERROR_INVALID_PARAM, "size is 0");
    }
    // aclrtMemMallocPolicy: 0..=5 (HUGE_FIRST .. NORMAL_ONLY_P2P), maybe
    // OR-ed with the ACL_MEM_TYPE_* bits (0x100, 0x1000, ...).
    if let Some(pol) = policy.filter(|p| *p < 0 || (p & 0xff) > 5) {
        return log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("policy {pol} is not an aclrtMemMallocPolicy"),
        );
    }
    match memory::alloc(size, kind, device::DEVICE_MEMORY) {
        Some(a) => code(out(f, "devPtr", p, a as *mut c_void)),
        None => log::fail(
            f,
            ACL_ERROR_RT_MEMORY_ALLOCATION,
            format_args!(
                "cannot allocate {size} bytes ({} bytes of device memory in use of {})",
                memory::device_bytes(),
                device::DEVICE_MEMORY
            ),
        ),
    }
}

/// `aclrtFree(void *devPtr)`.
#[no_mangle]
pub extern "C" fn aclrtFree(dev_ptr: *mut c_void) -> AclError {
    log::init();
    free("aclrtFree", dev_ptr, Kind::Device)
}

/// `aclrtFreeHost(void *hostPtr)`.
#[no_mangle]
pub extern "C" fn aclrtFreeHost(host_ptr: *mut c_void) -> AclError {
    log::init();
    free("aclrtFreeHost", host_ptr, Kind::Host)
}

fn free(f: &str, p: *mut c_void, kind: Kind) -> AclError {
    if p.is_null() {
        return log::fail(f, ACL_ERROR_INVALID_PARAM, "the pointer is NULL");
    }
    match memory::free(p as usize, kind) {
        Ok(()) => ACL_SUCCESS,
        Err(m) => log::fail(f, ACL_ERROR_RT_MEMORY_FREE, m),
    }
}

/// `aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)`:
/// 64 GiB per device, less what is allocated.
#[no_mangle]
pub extern "C" fn aclrtGetMemInfo(attr: i32, free: *mut usize, total: *mut usize) -> AclError {
    log::init();
    let f = "aclrtGetMemInfo";
    // aclrtMemAttr: ACL_DDR_MEM 0 .. ACL_HBM_MEM_P2P_NORMAL 9.
    if !(0..=9).contains(&attr) {
        return log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("attr {attr} is not an aclrtMemAttr"),
        );
    }
    let t = device::DEVICE_MEMORY;
    code(
        out(f, "free", free, t.saturating_sub(memory::device_bytes()))
            .and_then(|()| out(f, "total", total, t)),
    )
}

/// One side of a copy: our memory, or the caller's host memory.
enum Side {
    Ours(Span),
    Host(HostAddr),
}

/// `aclrtMemcpyKind` (0 H2H, 1 H2D, 2 D2H, 3 D2D, 4 DEFAULT, 5
/// HOST_TO_BUF_TO_DEVICE, 6 INNER_D2D, 7 INTER_D2D): whether the
/// destination and the source must be device memory (`None`: either).
fn kind_sides(kind: i32) -> Option<(Option<bool>, Option<bool>)> {
    Some(match kind {
        0 => (Some(false), Some(false)),
        1 | 5 => (Some(true), Some(false)),
        2 => (Some(false), Some(true)),
        3 | 6 | 7 => (Some(true), Some(true)),
        4 => (None, None),
        _ => return None,
    })
}

fn side(
    f: &str,
    name: &str,
    p: *const c_void,
    len: usize,
    device: Option<bool>,
) -> Result<Side, AclError> {
    let a = p as usize;
    if len > 0 && a == 0 {
        return Err(log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("{name} is NULL"),
        ));
    }
    let ours = memory::is_ours(a);
    if device == Some(true) || ours {
        return memory::span(a, len)
            .map(Side::Ours)
            .map_err(|e| log::fail(f, ACL_ERROR_INVALID_PARAM, format_args!("{name} {e}")));
    }
    Ok(Side::Host(HostAddr(a)))
}

fn copy(dst: &Side, src: &Side, n: usize) -> Result<(), AclError> {
    let ok = match (dst, src) {
        (Side::Ours(d), Side::Ours(s)) => {
            if d.overlaps(s) {
                let v = s.bytes().to_vec();
                d.bytes_mut().copy_from_slice(&v);
            } else {
                d.bytes_mut().copy_from_slice(s.bytes());
            }
            true
        }
        (Side::Ours(d), Side::Host(s)) => {
            boundary::with_host(*s, n, |b| d.bytes_mut().copy_from_slice(b)).is_some()
        }
        (Side::Host(d), Side::Ours(s)) => boundary::host_write(*d, s.bytes()),
        (Side::Host(d), Side::Host(s)) => {
            boundary::host_read(*s, n).is_some_and(|v| boundary::host_write(*d, &v))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(ACL_ERROR_INVALID_PARAM)
    }
}

fn memcpy_sides(
    f: &str,
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
) -> Result<(Side, Side), AclError> {
    if count == 0 {
        return Ok((Side::Host(HostAddr(0)), Side::Host(HostAddr(0))));
    }
    let Some((dd, sd)) = kind_sides(kind) else {
        return Err(log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("kind {kind} is not an aclrtMemcpyKind (0..7)"),
        ));
    };
    if count > dest_max {
        return Err(log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("count {count} is more than destMax {dest_max}"),
        ));
    }
    let d = side(f, "dst", dst, count, dd)?;
    let s = side(f, "src", src, count, sd)?;
    Ok((d, s))
}

/// `aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
/// aclrtMemcpyKind kind)`: a count of 0 succeeds without looking at the
/// pointers (CANN's runtime).
#[no_mangle]
pub extern "C" fn aclrtMemcpy(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
) -> AclError {
    acl_api("aclrtMemcpy", |f| {
        memcpy_sides(f, dst, dest_max, src, count, kind).and_then(|(d, s)| copy(&d, &s, count))
    })
}

/// `aclrtMemcpyAsync(..., aclrtStream stream)`: the copy runs on the
/// stream, in order with its other work.
#[no_mangle]
pub extern "C" fn aclrtMemcpyAsync(
    dst: *mut c_void,
    dest_max: usize,
    src: *const c_void,
    count: usize,
    kind: i32,
    stream: *mut c_void,
) -> AclError {
    acl_api("aclrtMemcpyAsync", |f| {
        let (d, s) = memcpy_sides(f, dst, dest_max, src, count, kind)?;
        let st = stream_of(f, stream)?;
        st.enqueue(Box::new(move || copy(&d, &s, count)));
        Ok(())
    })
}

fn memset_span(
    f: &str,
    p: *mut c_void,
    max: usize,
    value: i32,
    count: usize,
) -> Result<Span, AclError> {
    if count > max {
        return Err(log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("count {count} is more than maxCount {max}"),
        ));
    }
    let _ = value;
    memory::span(p as usize, count)
        .map_err(|e| log::fail(f, ACL_ERROR_INVALID_PARAM, format_args!("devPtr {e}")))
}

/// `aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)`.
#[no_mangle]
pub extern "C" fn aclrtMemset(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
) -> AclError {
    log::init();
    code(
        memset_span("aclrtMemset", dev_ptr, max_count, value, count)
            .map(|s| s.bytes_mut().fill(value as u8)),
    )
}

/// `aclrtMemsetAsync(..., aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn aclrtMemsetAsync(
    dev_ptr: *mut c_void,
    max_count: usize,
    value: i32,
    count: usize,
    stream: *mut c_void,
) -> AclError {
    acl_api("aclrtMemsetAsync", |f| {
        let s = memset_span(f, dev_ptr, max_count, value, count)?;
        stream_of(f, stream)?.enqueue(Box::new(move || {
            s.bytes_mut().fill(value as u8);
            Ok(())
        }));
        Ok(())
    })
}

// ---- streams ----

fn create_stream(f: &str, p: *mut *mut c_void) -> AclError {
    if p.is_null() {
        return log::fail(f, ACL_ERROR_INVALID_PARAM, "stream is NULL");
    }
    match Stream::new() {
        Ok(s) => code(out(f, "stream", p, STREAMS.insert(Arc::new(s)))),
        Err(e) => log::fail(
            f,
            ACL_ERROR_RT_INTERNAL_ERROR,
            format_args!("cannot start the stream's thread: {e}"),
        ),
    }
}

/// `aclrtCreateStream(aclrtStream *stream)`.
#[no_mangle]
pub extern "C" fn aclrtCreateStream(stream: *mut *mut c_void) -> AclError {
    log::init();
    create_stream("aclrtCreateStream", stream)
}

/// `aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority,
/// uint32_t flag)`: priority and flag have no effect.
#[no_mangle]
pub extern "C" fn aclrtCreateStreamWithConfig(
    stream: *mut *mut c_void,
    priority: u32,
    flag: u32,
) -> AclError {
    log::init();
    let _ = (priority, flag);
    create_stream("aclrtCreateStreamWithConfig", stream)
}

fn destroy_stream(f: &str, stream: *mut c_void) -> AclError {
    match STREAMS.remove(stream) {
        Some(s) => {
            s.close();
            ACL_SUCCESS
        }
        None => log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!("stream {stream:p} is not a stream (destroyed already?)"),
        ),
    }
}

/// `aclrtDestroyStream(aclrtStream stream)`: runs what is queued first.
#[no_mangle]
pub extern "C" fn aclrtDestroyStream(stream: *mut c_void) -> AclError {
    log::init();
    destroy_stream("aclrtDestroyStream", stream)
}

/// `aclrtDestroyStreamForce(aclrtStream stream)`: as
/// `aclrtDestroyStream` (queued work still runs).
#[no_mangle]
pub extern "C" fn aclrtDestroyStreamForce(stream: *mut c_void) -> AclError {
    log::init();
    destroy_stream("aclrtDestroyStreamForce", stream)
}

fn sync(f: &str, stream: *mut c_void, timeout: Option<std::time::Duration>) -> AclError {
    let s = match stream_of(f, stream) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match s.synchronize(timeout) {
        Ok(()) => ACL_SUCCESS,
        Err(Some((e, why))) => log::fail(
            f,
            e,
            format_args!(
                "a task on the stream failed (HcclGetCommAsyncError gives an HCCL op's code): {}",
                first_line(&why)
            ),
        ),
        Err(None) => log::fail(f, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "timed out"),
    }
}

/// `aclrtSynchronizeStream(aclrtStream stream)`: waits for every task
/// enqueued so far; the first failed one's error.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeStream(stream: *mut c_void) -> AclError {
    log::init();
    sync("aclrtSynchronizeStream", stream, None)
}

/// `aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t
/// timeout)`: in ms, -1 waits forever.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeStreamWithTimeout(stream: *mut c_void, timeout: i32) -> AclError {
    log::init();
    let f = "aclrtSynchronizeStreamWithTimeout";
    let t = match timeout {
        -1 => None,
        t if t > 0 => Some(std::time::Duration::from_millis(t as u64)),
        t => {
            return log::fail(
                f,
                ACL_ERROR_INVALID_PARAM,
                format_args!("timeout {t} is neither -1 nor positive"),
            )
        }
    };
    sync(f, stream, t)
}

/// `aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status)`:
/// 0 `ACL_STREAM_STATUS_COMPLETE`, 1 `ACL_STREAM_STATUS_NOT_READY`.
#[no_mangle]
pub extern "C" fn aclrtStreamQuery(stream: *mut c_void, status: *mut i32) -> AclError {
    acl_api("aclrtStreamQuery", |f| {
        stream_of(f, stream).and_then(|s| out(f, "status", status, i32::from(!s.is_idle())))
    })
}

/// `aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode)`: 0
/// (continue) or 1 (stop on failure) accepted; a stream here always
/// runs its later tasks.
#[no_mangle]
pub extern "C" fn aclrtSetStreamFailureMode(stream: *mut c_void, mode: u64) -> AclError {
    log::init();
    let f = "aclrtSetStreamFailureMode";
    if mode > 1 {
        return log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            format_args!(
                "mode {mode} is not 0 (ACL_CONTINUE_ON_FAILURE) or 1 (ACL_STOP_ON_FAILURE)"
            ),
        );
    }
    code(stream_of(f, stream).map(drop))
}

/// `aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)`: the
/// stream's later tasks wait for the event's last record.
#[no_mangle]
pub extern "C" fn aclrtStreamWaitEvent(stream: *mut c_void, event: *mut c_void) -> AclError {
    acl_api("aclrtStreamWaitEvent", |f| {
        let e = event_of(f, event)?;
        stream_of(f, stream)?.enqueue(e.waiter());
        Ok(())
    })
}

// ---- events ----

fn create_event(f: &str, p: *mut *mut c_void) -> AclError {
    if p.is_null() {
        return log::fail(f, ACL_ERROR_INVALID_PARAM, "event is NULL");
    }
    code(out(
        f,
        "event",
        p,
        EVENTS.insert(Arc::new(Event::default())),
    ))
}

/// `aclrtCreateEvent(aclrtEvent *event)`.
#[no_mangle]
pub extern "C" fn aclrtCreateEvent(event: *mut *mut c_void) -> AclError {
    log::init();
    create_event("aclrtCreateEvent", event)
}

/// `aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)`: every
/// event keeps its time here, whatever the flag.
#[no_mangle]
pub extern "C" fn aclrtCreateEventWithFlag(event: *mut *mut c_void, flag: u32) -> AclError {
    log::init();
    let _ = flag;
    create_event("aclrtCreateEventWithFlag", event)
}

/// `aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag)`.
#[no_mangle]
pub extern "C" fn aclrtCreateEventExWithFlag(event: *mut *mut c_void, flag: u32) -> AclError {
    log::init();
    let _ = flag;
    create_event("aclrtCreateEventExWithFlag", event)
}

/// `aclrtDestroyEvent(aclrtEvent event)`.
#[no_mangle]
pub extern "C" fn aclrtDestroyEvent(event: *mut c_void) -> AclError {
    log::init();
    match EVENTS.remove(event) {
        Some(_) => ACL_SUCCESS,
        None => log::fail(
            "aclrtDestroyEvent",
            ACL_ERROR_INVALID_PARAM,
            format_args!("event {event:p} is not an event"),
        ),
    }
}

/// `aclrtRecordEvent(aclrtEvent event, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn aclrtRecordEvent(event: *mut c_void, stream: *mut c_void) -> AclError {
    acl_api("aclrtRecordEvent", |f| {
        let e = event_of(f, event)?;
        e.record(&*stream_of(f, stream)?);
        Ok(())
    })
}

/// `aclrtResetEvent(aclrtEvent event, aclrtStream stream)`.
#[no_mangle]
pub extern "C" fn aclrtResetEvent(event: *mut c_void, stream: *mut c_void) -> AclError {
    acl_api("aclrtResetEvent", |f| {
        let e = event_of(f, event)?;
        stream_of(f, stream)?;
        e.reset();
        Ok(())
    })
}

/// `aclrtSynchronizeEvent(aclrtEvent event)`.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeEvent(event: *mut c_void) -> AclError {
    log::init();
    code(event_of("aclrtSynchronizeEvent", event).map(|e| {
        e.synchronize(None);
    }))
}

/// `aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout)`:
/// in ms, -1 waits forever.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeEventWithTimeout(event: *mut c_void, timeout: i32) -> AclError {
    acl_api("aclrtSynchronizeEventWithTimeout", |f| {
        let e = event_of(f, event)?;
        let t = match timeout {
            -1 => None,
            t if t > 0 => Some(std::time::Duration::from_millis(t as u64)),
            t => {
                return Err(log::fail(
                    f,
                    ACL_ERROR_INVALID_PARAM,
                    format_args!("timeout {t} is neither -1 nor positive"),
                ))
            }
        };
        if e.synchronize(t) {
            Ok(())
        } else {
            Err(log::fail(f, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, "timed out"))
        }
    })
}

/// `aclrtQueryEventWaitStatus(aclrtEvent event, aclrtEventWaitStatus
/// *status)`: 0 complete, 1 not ready.
#[no_mangle]
pub extern "C" fn aclrtQueryEventWaitStatus(event: *mut c_void, status: *mut i32) -> AclError {
    event_status("aclrtQueryEventWaitStatus", event, status, 0, 1)
}

/// `aclrtEventGetTimestamp(aclrtEvent event, uint64_t *timestamp)`:
/// microseconds since this library's start, when the stream reached the
/// event.
#[no_mangle]
pub extern "C" fn aclrtEventGetTimestamp(event: *mut c_void, timestamp: *mut u64) -> AclError {
    acl_api("aclrtEventGetTimestamp", |f| {
        let e = event_of(f, event)?;
        let Some(t) = e.time() else {
            return Err(log::fail(
                f,
                ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                "the event was not recorded, or its stream has not reached it",
            ));
        };
        out(
            f,
            "timestamp",
            timestamp,
            t.duration_since(stream::epoch()).as_micros() as u64,
        )
    })
}

/// `aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status)`: 0
/// `ACL_EVENT_STATUS_COMPLETE`, 1 `ACL_EVENT_STATUS_NOT_READY`.
#[no_mangle]
pub extern "C" fn aclrtQueryEvent(event: *mut c_void, status: *mut i32) -> AclError {
    event_status("aclrtQueryEvent", event, status, 0, 1)
}

/// `aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus
/// *status)`: 0 `ACL_EVENT_RECORDED_STATUS_NOT_READY`, 1
/// `ACL_EVENT_RECORDED_STATUS_COMPLETE`.
#[no_mangle]
pub extern "C" fn aclrtQueryEventStatus(event: *mut c_void, status: *mut i32) -> AclError {
    event_status("aclrtQueryEventStatus", event, status, 1, 0)
}

/// `aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent
/// endEvent)`: milliseconds between the times the streams reached them.
#[no_mangle]
pub extern "C" fn aclrtEventElapsedTime(
    ms: *mut f32,
    start: *mut c_void,
    end: *mut c_void,
) -> AclError {
    acl_api("aclrtEventElapsedTime", |f| {
        let (s, e) = (event_of(f, start)?, event_of(f, end)?);
        let (Some(a), Some(b)) = (s.time(), e.time()) else {
            return Err(log::fail(
                f,
                ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID,
                "an event was not recorded, or its stream has not reached it",
            ));
        };
        // HCCL_TIMING=sim: the simulated time of the ops between them.
        if crate::timing::enabled() {
            if let (Some(x), Some(y)) = (s.sim_time(), e.sim_time()) {
                return out(f, "ms", ms, (y as f64 - x as f64) as f32 / 1e6);
            }
        }
        out(f, "ms", ms, stream::elapsed_ms(a, b))
    })
}

// ---- profiling: accepted, nothing recorded (HCCL_PROFILING_ENABLE=1
// gives hccl-rs's own per-op records) ----

/// `aclprofInit(const char *profilerResultPath, size_t length)`.
#[no_mangle]
pub extern "C" fn aclprofInit(path: *const c_char, length: usize) -> AclError {
    log::init();
    let _ = (path, length);
    ACL_SUCCESS
}

/// `aclprofFinalize()`.
#[no_mangle]
pub extern "C" fn aclprofFinalize() -> AclError {
    ACL_SUCCESS
}

/// `aclprofCreateConfig(uint32_t *deviceIdList, uint32_t deviceNums,
/// aclprofAicoreMetrics aicoreMetrics, const aclprofAicoreEvents
/// *aicoreEvents, uint64_t dataTypeConfig)`: a handle for start/stop.
#[no_mangle]
pub extern "C" fn aclprofCreateConfig(
    device_ids: *mut u32,
    device_nums: u32,
    metrics: i32,
    events: *const c_void,
    data_type_config: u64,
) -> *mut c_void {
    log::init();
    let _ = (device_ids, device_nums, metrics, events, data_type_config);
    PROF_CONFIGS.insert(Arc::new(()))
}

/// `aclprofDestroyConfig(const aclprofConfig *profilerConfig)`.
#[no_mangle]
pub extern "C" fn aclprofDestroyConfig(config: *const c_void) -> AclError {
    log::init();
    match PROF_CONFIGS.remove(config.cast_mut()) {
        Some(_) => ACL_SUCCESS,
        None => log::fail(
            "aclprofDestroyConfig",
            ACL_ERROR_INVALID_PARAM,
            "not a config of aclprofCreateConfig",
        ),
    }
}

/// `aclprofStart(const aclprofConfig *profilerConfig)`.
#[no_mangle]
pub extern "C" fn aclprofStart(config: *const c_void) -> AclError {
    log::init();
    prof_config("aclprofStart", config)
}

/// `aclprofStop(const aclprofConfig *profilerConfig)`.
#[no_mangle]
pub extern "C" fn aclprofStop(config: *const c_void) -> AclError {
    log::init();
    prof_config("aclprofStop", config)
}

fn prof_config(f: &str, config: *const c_void) -> AclError {
    match PROF_CONFIGS.get(config.cast_mut()) {
        Some(_) => ACL_SUCCESS,
        None => log::fail(
            f,
            ACL_ERROR_INVALID_PARAM,
            "not a config of aclprofCreateConfig",
        ),
    }
}

// ---- more of acl_rt.h / acl_base.h ----

/// `aclrtResetDeviceForce(int32_t deviceId)`: as `aclrtResetDevice`.
#[no_mangle]
pub extern "C" fn aclrtResetDeviceForce(device_id: i32) -> AclError {
    aclrtResetDevice(device_id)
}

/// `aclrtSynchronizeDeviceWithTimeout(int32_t timeout)`: in ms, -1 waits
/// forever; the first error of any stream.
#[no_mangle]
pub extern "C" fn aclrtSynchronizeDeviceWithTimeout(timeout: i32) -> AclError {
    log::init();
    let f = "aclrtSynchronizeDeviceWithTimeout";
    let t = match timeout {
        -1 => None,
        t if t > 0 => Some(std::time::Duration::from_millis(t as u64)),
        t => {
            return log::fail(
                f,
                ACL_ERROR_INVALID_PARAM,
                format_args!("timeout {t} is neither -1 nor positive"),
            )
        }
    };
    let deadline = t.map(|t| std::time::Instant::now() + t);
    let mut first = None;
    for s in STREAMS.all() {
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        match s.synchronize(left) {
            Ok(()) => {}
            Err(Some(e)) => {
                first.get_or_insert(e);
            }
            Err(None) => return log::fail(f, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, "timed out"),
        }
    }
    first_failure(f, first)
}

/// `aclrtQueryDeviceStatus(int32_t deviceId, aclrtDeviceStatus *status)`:
/// 0 (`ACL_RT_DEVICE_STATUS_NORMAL`) for every device.
#[no_mangle]
pub extern "C" fn aclrtQueryDeviceStatus(device_id: i32, status: *mut i32) -> AclError {
    log::init();
    let f = "aclrtQueryDeviceStatus";
    if let Err(m) = device::check(device_id) {
        return log::fail(f, ACL_ERROR_INVALID_DEVICE, m);
    }
    code(out(f, "deviceStatus", status, 0))
}

/// `aclrtDeviceDisablePeerAccess(int32_t peerDeviceId)`.
#[no_mangle]
pub extern "C" fn aclrtDeviceDisablePeerAccess(peer: i32) -> AclError {
    log::init();
    match device::check(peer) {
        Ok(()) => ACL_SUCCESS,
        Err(m) => log::fail("aclrtDeviceDisablePeerAccess", ACL_ERROR_INVALID_DEVICE, m),
    }
}

/// `aclrtSetOpWaitTimeout(uint32_t timeout)`: accepted; HCCL ops time out
/// after `HCCL_EXEC_TIMEOUT` here.
#[no_mangle]
pub extern "C" fn aclrtSetOpWaitTimeout(timeout: u32) -> AclError {
    let _ = timeout;
    ACL_SUCCESS
}

/// `aclrtSetOpExecuteTimeOut(uint32_t timeout)`: accepted, as
/// `aclrtSetOpWaitTimeout`.
#[no_mangle]
pub extern "C" fn aclrtSetOpExecuteTimeOut(timeout: u32) -> AclError {
    let _ = timeout;
    ACL_SUCCESS
}

/// `aclrtGetLastError(aclrtLastErrLevel level)`: every call here returns
/// its own error, so there is none left over: `ACL_SUCCESS`.
#[no_mangle]
pub extern "C" fn aclrtGetLastError(level: i32) -> AclError {
    let _ = level;
    ACL_SUCCESS
}

/// `aclrtPeekAtLastError(aclrtLastErrLevel level)`: as `aclrtGetLastError`.
#[no_mangle]
pub extern "C" fn aclrtPeekAtLastError(level: i32) -> AclError {
    let _ = level;
    ACL_SUCCESS
}

/// `aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy
/// policy)`: as `aclrtMalloc` (every allocation is 64-byte aligned).
#[no_mangle]
pub extern "C" fn aclrtMallocAlign32(
    dev_ptr: *mut *mut c_void,
    size: usize,
    policy: i32,
) -> AclError {
    log::init();
    malloc(
        "aclrtMallocAlign32",
        dev_ptr,
        size,
        Some(policy),
        Kind::Device,
    )
}

fn vm_unsupported(f: &str) -> AclError {
    log::init();
    log::fail(
        f,
        ACL_ERROR_API_NOT_SUPPORT,
        "virtual memory management is not supported by hccl-rs's host runtime",
    )
}

/// `aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment,
/// void *expectPtr, uint64_t flags)`: not supported.
#[no_mangle]
pub extern "C" fn aclrtReserveMemAddress(
    vir: *mut *mut c_void,
    size: usize,
    alignment: usize,
    expect: *mut c_void,
    flags: u64,
) -> AclError {
    let _ = (vir, size, alignment, expect, flags);
    vm_unsupported("aclrtReserveMemAddress")
}

/// `aclrtReleaseMemAddress(void *virPtr)`: not supported.
#[no_mangle]
pub extern "C" fn aclrtReleaseMemAddress(vir: *mut c_void) -> AclError {
    let _ = vir;
    vm_unsupported("aclrtReleaseMemAddress")
}

/// `aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const
/// aclrtPhysicalMemProp *prop, uint64_t flags)`: not supported.
#[no_mangle]
pub extern "C" fn aclrtMallocPhysical(
    handle: *mut *mut c_void,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> AclError {
    let _ = (handle, size, prop, flags);
    vm_unsupported("aclrtMallocPhysical")
}

/// `aclrtFreePhysical(aclrtDrvMemHandle handle)`: not supported.
#[no_mangle]
pub extern "C" fn aclrtFreePhysical(handle: *mut c_void) -> AclError {
    let _ = handle;
    vm_unsupported("aclrtFreePhysical")
}

/// `aclrtMapMem(void *virPtr, size_t size, size_t offset,
/// aclrtDrvMemHandle handle, uint64_t flags)`: not supported.
#[no_mangle]
pub extern "C" fn aclrtMapMem(
    vir: *mut c_void,
    size: usize,
    offset: usize,
    handle: *mut c_void,
    flags: u64,
) -> AclError {
    let _ = (vir, size, offset, handle, flags);
    vm_unsupported("aclrtMapMem")
}

/// `aclrtUnmapMem(void *virPtr)`: not supported.
#[no_mangle]
pub extern "C" fn aclrtUnmapMem(vir: *mut c_void) -> AclError {
    let _ = vir;
    vm_unsupported("aclrtUnmapMem")
}

/// `aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
/// aclrtMemGranularityOptions option, size_t *granularity)`: not
/// supported.
#[no_mangle]
pub extern "C" fn aclrtMemGetAllocationGranularity(
    prop: *mut c_void,
    option: i32,
    granularity: *mut usize,
) -> AclError {
    let _ = (prop, option, granularity);
    vm_unsupported("aclrtMemGetAllocationGranularity")
}

/// `aclrtStreamGetId(aclrtStream stream, int32_t *streamId)`.
#[no_mangle]
pub extern "C" fn aclrtStreamGetId(stream: *mut c_void, stream_id: *mut i32) -> AclError {
    acl_api("aclrtStreamGetId", |f| {
        stream_of(f, stream).and_then(|s| out(f, "streamId", stream_id, s.id()))
    })
}

/// `aclrtLaunchCallback(aclrtCallback fn, void *userData,
/// aclrtCallbackBlockType blockType, aclrtStream stream)`: `fn(userData)`
/// runs on the stream's thread when the stream reaches it.
#[no_mangle]
pub extern "C" fn aclrtLaunchCallback(
    callback: Option<extern "C" fn(*mut c_void)>,
    user_data: *mut c_void,
    block_type: i32,
    stream: *mut c_void,
) -> AclError {
    acl_api("aclrtLaunchCallback", |f| {
        let Some(cb) = callback else {
            return Err(log::fail(f, ACL_ERROR_INVALID_PARAM, "fn is NULL"));
        };
        if !(0..=1).contains(&block_type) {
            return Err(log::fail(
                f,
                ACL_ERROR_INVALID_PARAM,
                format_args!("blockType {block_type} is not an aclrtCallbackBlockType"),
            ));
        }
        let data = HostAddr(user_data as usize);
        stream_of(f, stream)?.enqueue(Box::new(move || {
            cb(data.0 as *mut c_void);
            Ok(())
        }));
        Ok(())
    })
}

/// `float aclFloat16ToFloat(aclFloat16 value)`.
#[no_mangle]
pub extern "C" fn aclFloat16ToFloat(value: u16) -> f32 {
    half::f16::from_bits(value).to_f32()
}

/// `aclFloat16 aclFloatToFloat16(float value)`: round to nearest even.
#[no_mangle]
pub extern "C" fn aclFloatToFloat16(value: f32) -> u16 {
    half::f16::from_f32(value).to_bits()
}

/// `size_t aclDataTypeSize(aclDataType dataType)`: bytes per element of
/// CANN's `aclDataType` (acl_base.h); 0 for undefined, string, packed
/// sub-byte and unknown types.
#[no_mangle]
pub extern "C" fn aclDataTypeSize(data_type: i32) -> usize {
    match data_type {
        2 | 4 | 12 => 1,     // INT8, UINT8, BOOL
        1 | 6 | 7 | 27 => 2, // FLOAT16, INT16, UINT16, BF16
        0 | 3 | 8 | 33 => 4, // FLOAT, INT32, UINT32, COMPLEX32
        9..=11 | 16 => 8,    // INT64, UINT64, DOUBLE, COMPLEX64
        17 => 16,            // COMPLEX128
        _ => 0,
    }
}
