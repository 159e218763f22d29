//! The crate's one module with `unsafe`: opening `libascendcl.so` and
//! `libhccl.so` with `libloading`, the table of function pointers, and
//! safe wrappers over each call.
//!
//! **Soundness.** Device memory is never dereferenced here: a
//! [`DeviceMem`] is an address and a length that only CANN reads and
//! writes, so handing it to CANN through `&DeviceMem` creates no Rust
//! aliasing. Every wrapper that takes device memory checks that the
//! region it names lies inside its allocation before calling, and every
//! wrapper that enqueues work on a stream synchronizes that stream before
//! it returns, so no buffer (device or host) is used by CANN after the
//! borrow that gave it ends. Handles ([`Stream`], [`Comm`],
//! [`DeviceMem`], [`Event`]) keep the [`Library`] alive (an `Arc`) and
//! release their CANN object once, on drop.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::AscendError;
use crate::types::*;

type Res<T> = Result<T, AscendError>;

/// The required functions: `(library, name, type)`. Resolved when the
/// library is loaded; a missing one is [`AscendError::MissingSymbol`].
macro_rules! table {
    ($( $lib:ident $name:ident : fn($($arg:ty),*) -> $ret:ty; )*) => {
        /// Function pointers of every required symbol.
        #[allow(non_snake_case)]
        struct Table {
            $( $name: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        /// Every required symbol's name and library, in table order.
        pub const REQUIRED: &[(&str, &str)] = &[ $( (stringify!($lib), stringify!($name)), )* ];

        impl Table {
            fn resolve(acl: &Opened, hccl: &Opened) -> Res<Table> {
                Ok(Table {
                    $( $name: {
                        let lib = if stringify!($lib) == "acl" { acl } else { hccl };
                        let name = stringify!($name);
                        let f: unsafe extern "C" fn($($arg),*) -> $ret =
                            // SAFETY: `f`'s type is the C declaration of
                            // this symbol in CANN's headers (crate::types
                            // cites them); the pointer is used only while
                            // the library that holds it is open (the Table
                            // lives inside the Library that owns both).
                            unsafe { lib.sym(name)? };
                        f
                    }, )*
                })
            }
        }
    };
}

table! {
    acl aclInit: fn(*const c_char) -> AclError;
    acl aclFinalize: fn() -> AclError;
    acl aclrtSetDevice: fn(i32) -> AclError;
    acl aclrtResetDevice: fn(i32) -> AclError;
    acl aclrtGetDeviceCount: fn(*mut u32) -> AclError;
    acl aclrtGetSocName: fn() -> *const c_char;
    acl aclrtMalloc: fn(*mut *mut c_void, usize, i32) -> AclError;
    acl aclrtFree: fn(*mut c_void) -> AclError;
    acl aclrtMallocHost: fn(*mut *mut c_void, usize) -> AclError;
    acl aclrtFreeHost: fn(*mut c_void) -> AclError;
    acl aclrtGetMemInfo: fn(i32, *mut usize, *mut usize) -> AclError;
    acl aclrtMemcpy: fn(*mut c_void, usize, *const c_void, usize, i32) -> AclError;
    acl aclrtMemcpyAsync: fn(*mut c_void, usize, *const c_void, usize, i32, AclrtStream) -> AclError;
    acl aclrtCreateStream: fn(*mut AclrtStream) -> AclError;
    acl aclrtSynchronizeStream: fn(AclrtStream) -> AclError;
    acl aclrtDestroyStream: fn(AclrtStream) -> AclError;
    acl aclrtCreateEvent: fn(*mut AclrtEvent) -> AclError;
    acl aclrtDestroyEvent: fn(AclrtEvent) -> AclError;
    acl aclrtRecordEvent: fn(AclrtEvent, AclrtStream) -> AclError;
    acl aclrtSynchronizeEvent: fn(AclrtEvent) -> AclError;
    acl aclrtEventElapsedTime: fn(*mut f32, AclrtEvent, AclrtEvent) -> AclError;
    acl aclGetRecentErrMsg: fn() -> *const c_char;
    hccl HcclGetRootInfo: fn(*mut HcclRootInfo) -> HcclResult;
    hccl HcclCommInitRootInfo: fn(u32, *const HcclRootInfo, u32, *mut HcclComm) -> HcclResult;
    hccl HcclCommInitClusterInfo: fn(*const c_char, u32, *mut HcclComm) -> HcclResult;
    hccl HcclCommInitAll: fn(u32, *mut i32, *mut HcclComm) -> HcclResult;
    hccl HcclCommDestroy: fn(HcclComm) -> HcclResult;
    hccl HcclGetRankSize: fn(HcclComm, *mut u32) -> HcclResult;
    hccl HcclGetRankId: fn(HcclComm, *mut u32) -> HcclResult;
    hccl HcclGetCommAsyncError: fn(HcclComm, *mut HcclResult) -> HcclResult;
    hccl HcclGetErrorString: fn(HcclResult) -> *const c_char;
    hccl HcclAllReduce: fn(*mut c_void, *mut c_void, u64, HcclDataType, HcclReduceOp, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclBroadcast: fn(*mut c_void, u64, HcclDataType, u32, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclReduceScatter: fn(*mut c_void, *mut c_void, u64, HcclDataType, HcclReduceOp, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclScatter: fn(*mut c_void, *mut c_void, u64, HcclDataType, u32, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclAllGather: fn(*mut c_void, *mut c_void, u64, HcclDataType, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclReduce: fn(*mut c_void, *mut c_void, u64, HcclDataType, HcclReduceOp, u32, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclAlltoAll: fn(*const c_void, u64, HcclDataType, *const c_void, u64, HcclDataType, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclAlltoAllV: fn(*const c_void, *const c_void, *const c_void, HcclDataType, *const c_void, *const c_void, *const c_void, HcclDataType, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclBarrier: fn(HcclComm, AclrtStream) -> HcclResult;
    hccl HcclSend: fn(*mut c_void, u64, HcclDataType, u32, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclRecv: fn(*mut c_void, u64, HcclDataType, u32, HcclComm, AclrtStream) -> HcclResult;
    hccl HcclBatchSendRecv: fn(*mut HcclSendRecvItem, u32, HcclComm, AclrtStream) -> HcclResult;
}

/// The optional (newer) functions, looked up when first called; absent,
/// they are [`AscendError::NotSupported`].
pub const OPTIONAL: &[&str] = &[
    "HcclCommInitRootInfoConfig",
    "HcclCommInitClusterInfoConfig",
    "HcclAllGatherV",
    "HcclReduceScatterV",
    "HcclGetCommName",
];

type AllGatherVFn = unsafe extern "C" fn(
    *mut c_void,
    u64,
    *mut c_void,
    *const c_void,
    *const c_void,
    HcclDataType,
    HcclComm,
    AclrtStream,
) -> HcclResult;
type ReduceScatterVFn = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    *const c_void,
    *mut c_void,
    u64,
    HcclDataType,
    HcclReduceOp,
    HcclComm,
    AclrtStream,
) -> HcclResult;
type InitRootInfoConfigFn = unsafe extern "C" fn(
    u32,
    *const HcclRootInfo,
    u32,
    *const HcclCommConfig,
    *mut HcclComm,
) -> HcclResult;

/// An opened library and where it came from.
struct Opened {
    lib: libloading::Library,
    name: &'static str,
    path: String,
}

impl Opened {
    /// `dlopen` of `path` (a bare file name searches the system path).
    fn open(name: &'static str, path: &Path) -> Result<Opened, String> {
        // SAFETY: opening a shared library runs its initialisers; CANN's
        // and hccl-rs's libraries have no initialiser that depends on the
        // caller's state. The handle is closed only when Opened drops.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        Ok(Opened {
            lib,
            name,
            path: path.display().to_string(),
        })
    }

    /// The symbol `symbol` as a `T`.
    ///
    /// # Safety
    /// `T` must be the symbol's C type.
    unsafe fn sym<T: Copy>(&self, symbol: &'static str) -> Res<T> {
        // SAFETY: the caller's promise on `T`.
        match unsafe { self.lib.get::<T>(symbol.as_bytes()) } {
            Ok(s) => Ok(*s),
            Err(_) => Err(AscendError::MissingSymbol {
                lib: self.name,
                path: self.path.clone(),
                symbol,
            }),
        }
    }

    fn has(&self, symbol: &str) -> bool {
        // SAFETY: only checks that the symbol exists; the pointer is not
        // used.
        unsafe { self.lib.get::<*const c_void>(symbol.as_bytes()) }.is_ok()
    }
}

/// CANN's runtime and HCCL, opened at run time: both libraries and every
/// required function resolved ([`REQUIRED`]), so a library that lacks one
/// fails here, not in the middle of a run. Share it as an `Arc`.
pub struct Library {
    t: Table,
    /// The ACL library, when it is not `hccl` itself.
    _acl: Option<Opened>,
    hccl: Opened,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("hccl", &self.hccl.path)
            .finish_non_exhaustive()
    }
}

/// `ASCEND_HOME_PATH`: set by CANN's `set_env.sh` to the toolkit.
pub const ENV_HOME: &str = "ASCEND_HOME_PATH";
/// `ASCEND_TOOLKIT_HOME`: set by CANN's `set_env.sh` too (older toolkits).
pub const ENV_TOOLKIT: &str = "ASCEND_TOOLKIT_HOME";

impl Library {
    /// Opens CANN: `$ASCEND_HOME_PATH/lib64`, then
    /// `$ASCEND_TOOLKIT_HOME/lib64` (the first that holds `libhccl.so`),
    /// then the system path (`LD_LIBRARY_PATH`, `/etc/ld.so.cache`).
    ///
    /// # Errors
    /// [`AscendError::NotFound`] naming every place searched;
    /// [`AscendError::Open`], [`AscendError::MissingSymbol`].
    pub fn load() -> Res<Arc<Library>> {
        let mut searched = Vec::new();
        for var in [ENV_HOME, ENV_TOOLKIT] {
            match std::env::var_os(var).filter(|v| !v.is_empty()) {
                Some(v) => {
                    let dir = PathBuf::from(v).join("lib64");
                    if dir.join("libhccl.so").exists() {
                        return Library::load_from(&dir);
                    }
                    searched.push(format!("${var}/lib64 ({})", dir.display()));
                }
                None => searched.push(format!("${var}/lib64 ({var} is unset)")),
            }
        }
        searched.push("the system library path (LD_LIBRARY_PATH, /etc/ld.so.cache)".into());
        Library::open(
            Path::new("libascendcl.so"),
            Path::new("libhccl.so"),
            &searched.join(", "),
        )
    }

    /// Opens `dir/libascendcl.so` and `dir/libhccl.so`, and nothing else
    /// (tests, and programs that know where CANN is).
    ///
    /// # Errors
    /// As [`Library::load`], naming `dir`.
    pub fn load_from(dir: &Path) -> Res<Arc<Library>> {
        let hccl = dir.join("libhccl.so");
        if !hccl.exists() {
            return Err(AscendError::NotFound {
                lib: "libhccl.so",
                searched: dir.display().to_string(),
            });
        }
        Library::open(
            &dir.join("libascendcl.so"),
            &hccl,
            &dir.display().to_string(),
        )
    }

    fn open(acl: &Path, hccl: &Path, searched: &str) -> Res<Arc<Library>> {
        // NotFound: a path that is not there, or a bare name (the system
        // path) that dlopen itself did not find; anything else dlopen says
        // (a dependency it cannot find, a wrong architecture) is Open.
        let failed = |lib: &'static str, path: &Path, reason: String| {
            let bare = path.components().count() == 1;
            let itself = reason.contains(&format!("{}: cannot open", path.display()));
            if (bare && itself) || (!bare && !path.exists()) {
                AscendError::NotFound {
                    lib,
                    searched: searched.to_string(),
                }
            } else {
                AscendError::Open {
                    lib,
                    path: path.display().to_string(),
                    reason,
                }
            }
        };
        // The runtime first, so that libhccl.so's dependency on it
        // resolves to this one.
        let acl_res = Opened::open("libascendcl.so", acl);
        let hccl_lib =
            Opened::open("libhccl.so", hccl).map_err(|r| failed("libhccl.so", hccl, r))?;
        // hccl-rs's own prefix (`hccl-capi install`) makes libascendcl.so
        // a linker script naming libhccl.so, which holds both APIs: take
        // ACL from libhccl.so when libascendcl.so does not load and
        // libhccl.so exports it.
        let acl_lib = match acl_res {
            Ok(o) => Some(o),
            Err(_) if hccl_lib.has("aclInit") => None,
            Err(r) => return Err(failed("libascendcl.so", acl, r)),
        };
        let t = Table::resolve(acl_lib.as_ref().unwrap_or(&hccl_lib), &hccl_lib)?;
        Ok(Arc::new(Library {
            t,
            _acl: acl_lib,
            hccl: hccl_lib,
        }))
    }

    /// Where `libhccl.so` was opened from.
    pub fn hccl_path(&self) -> &str {
        &self.hccl.path
    }

    /// Whether ACL's functions were taken from `libhccl.so`: hccl-rs's
    /// own prefix (`hccl-capi install`), whose `libascendcl.so` is a
    /// linker script naming it. CANN's `libhccl.so` does not export them.
    pub fn acl_in_hccl(&self) -> bool {
        self._acl.is_none()
    }

    /// `aclGetRecentErrMsg()` ("" if none).
    pub fn recent_error(&self) -> String {
        // SAFETY: no arguments; returns NULL or a NUL-terminated string
        // owned by the runtime, copied at once.
        let p = unsafe { (self.t.aclGetRecentErrMsg)() };
        text(p)
    }

    /// `HcclGetErrorString(code)`.
    pub fn error_string(&self, code: HcclResult) -> String {
        // SAFETY: takes any code; returns NULL or a static string.
        let p = unsafe { (self.t.HcclGetErrorString)(code) };
        text(p)
    }

    fn acl(&self, func: &'static str, code: AclError) -> Res<()> {
        if code == ACL_SUCCESS {
            return Ok(());
        }
        Err(AscendError::Acl {
            func,
            code,
            recent: self.recent_error(),
        })
    }

    fn hccl(&self, func: &'static str, code: HcclResult) -> Res<()> {
        if code == HCCL_SUCCESS {
            return Ok(());
        }
        Err(AscendError::Hccl {
            func,
            code,
            text: self.error_string(code),
            recent: self.recent_error(),
        })
    }

    /// An optional symbol, looked up now.
    fn optional<T: Copy>(&self, func: &'static str) -> Res<T> {
        // SAFETY: each caller names `T` as the C declaration of `func`
        // (the `*Fn` types above follow hccl.h).
        unsafe { self.hccl.sym::<T>(func) }.map_err(|_| AscendError::NotSupported {
            func,
            path: self.hccl.path.clone(),
        })
    }

    /// Whether this CANN exports the optional function `func`.
    pub fn supports(&self, func: &str) -> bool {
        self.hccl.has(func)
    }

    /// `aclInit(NULL)`; `ACL_ERROR_REPEAT_INITIALIZE` (the program
    /// initialised ACL itself) is success.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn init(&self) -> Res<()> {
        // SAFETY: NULL is "no configuration file" in acl.h.
        let c = unsafe { (self.t.aclInit)(std::ptr::null()) };
        if c == ACL_ERROR_REPEAT_INITIALIZE {
            return Ok(());
        }
        self.acl("aclInit", c)
    }

    /// `aclFinalize()`.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn finalize(&self) -> Res<()> {
        // SAFETY: no arguments.
        let c = unsafe { (self.t.aclFinalize)() };
        self.acl("aclFinalize", c)
    }

    /// `aclrtSetDevice(id)`: this thread's device.
    ///
    /// # Errors
    /// [`AscendError::Acl`] (`ACL_ERROR_RT_INVALID_DEVICEID`, ...).
    pub fn set_device(&self, id: i32) -> Res<()> {
        // SAFETY: takes any integer.
        let c = unsafe { (self.t.aclrtSetDevice)(id) };
        self.acl("aclrtSetDevice", c)
    }

    /// `aclrtResetDevice(id)`.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn reset_device(&self, id: i32) -> Res<()> {
        // SAFETY: takes any integer.
        let c = unsafe { (self.t.aclrtResetDevice)(id) };
        self.acl("aclrtResetDevice", c)
    }

    /// `aclrtGetDeviceCount`: the NPUs this process sees.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn device_count(&self) -> Res<u32> {
        let mut n = 0u32;
        // SAFETY: writes one u32 to a live local.
        let c = unsafe { (self.t.aclrtGetDeviceCount)(&mut n) };
        self.acl("aclrtGetDeviceCount", c).map(|()| n)
    }

    /// `aclrtGetSocName()` ("" if the runtime has none).
    pub fn soc_name(&self) -> String {
        // SAFETY: no arguments; NULL or a string owned by the runtime.
        text(unsafe { (self.t.aclrtGetSocName)() })
    }

    /// `aclrtMalloc(len, ACL_MEM_MALLOC_HUGE_FIRST)` on this thread's
    /// device (at least one byte is allocated).
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn malloc(self: &Arc<Self>, len: usize) -> Res<DeviceMem> {
        let mut p = std::ptr::null_mut();
        // SAFETY: writes one pointer to a live local.
        let c = unsafe { (self.t.aclrtMalloc)(&mut p, len.max(1), ACL_MEM_MALLOC_HUGE_FIRST) };
        self.acl("aclrtMalloc", c)?;
        if p.is_null() {
            return Err(AscendError::Acl {
                func: "aclrtMalloc",
                code: ACL_ERROR_RT_MEMORY_ALLOCATION,
                recent: "returned NULL".into(),
            });
        }
        Ok(DeviceMem {
            lib: Arc::clone(self),
            ptr: p,
            len,
            host: false,
        })
    }

    /// `aclrtGetMemInfo(ACL_HBM_MEM)`: this thread's device's free and
    /// total memory, in bytes.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn mem_info(&self) -> Res<(usize, usize)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes one size_t to each of two live locals.
        let c = unsafe { (self.t.aclrtGetMemInfo)(ACL_HBM_MEM, &mut free, &mut total) };
        self.acl("aclrtGetMemInfo", c).map(|()| (free, total))
    }

    /// `aclrtMallocHost(len)`: page-locked host memory, as a
    /// [`DeviceMem`] that only CANN touches.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn malloc_host(self: &Arc<Self>, len: usize) -> Res<DeviceMem> {
        let mut p = std::ptr::null_mut();
        // SAFETY: writes one pointer to a live local.
        let c = unsafe { (self.t.aclrtMallocHost)(&mut p, len.max(1)) };
        self.acl("aclrtMallocHost", c)?;
        Ok(DeviceMem {
            lib: Arc::clone(self),
            ptr: p,
            len,
            host: true,
        })
    }

    /// `aclrtMemcpy` host to device: `src` into `dst` at `at`.
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a region outside `dst`; [`AscendError::Acl`].
    pub fn copy_to_device(&self, dst: &DeviceMem, at: usize, src: &[u8]) -> Res<()> {
        if src.is_empty() {
            return Ok(());
        }
        let d = dst.region("aclrtMemcpy", at, src.len())?;
        // SAFETY: `d` is inside dst's allocation (checked), `src` is a
        // live slice of that length; the copy is synchronous.
        let c = unsafe {
            (self.t.aclrtMemcpy)(
                d,
                dst.len - at,
                src.as_ptr().cast(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
            )
        };
        self.acl("aclrtMemcpy", c)
    }

    /// `aclrtMemcpyAsync` host to device on `stream`, then the stream's
    /// synchronisation: [`Library::copy_to_device`] ordered after the
    /// stream's earlier work.
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a region outside `dst`; [`AscendError::Acl`].
    pub fn copy_to_device_on(
        &self,
        dst: &DeviceMem,
        at: usize,
        src: &[u8],
        stream: &Stream,
    ) -> Res<()> {
        if src.is_empty() {
            return Ok(());
        }
        let d = dst.region("aclrtMemcpyAsync", at, src.len())?;
        // SAFETY: `d` is inside dst's allocation (checked), `src` is a live
        // slice of that length, and the stream is synchronised before the
        // borrow of `src` ends.
        let c = unsafe {
            (self.t.aclrtMemcpyAsync)(
                d,
                dst.len - at,
                src.as_ptr().cast(),
                src.len(),
                ACL_MEMCPY_HOST_TO_DEVICE,
                stream.raw,
            )
        };
        self.acl("aclrtMemcpyAsync", c)?;
        stream.synchronize()
    }

    /// `aclrtMemcpy` device to host: `dst.len()` bytes of `src` at `at`.
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a region outside `src`; [`AscendError::Acl`].
    pub fn copy_from_device(&self, dst: &mut [u8], src: &DeviceMem, at: usize) -> Res<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let s = src.region("aclrtMemcpy", at, dst.len())?;
        // SAFETY: `s` is inside src's allocation (checked), `dst` is a
        // live, exclusive slice of that length; the copy is synchronous.
        let c = unsafe {
            (self.t.aclrtMemcpy)(
                dst.as_mut_ptr().cast(),
                dst.len(),
                s,
                dst.len(),
                ACL_MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.acl("aclrtMemcpy", c)
    }

    /// `aclrtMemcpy` device to device: `len` bytes of `src` at `src_at`
    /// to `dst` at `dst_at` (the regions may not overlap).
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a region outside its buffer;
    /// [`AscendError::Acl`].
    pub fn copy_device(
        &self,
        (dst, dst_at): (&DeviceMem, usize),
        (src, src_at): (&DeviceMem, usize),
        len: usize,
    ) -> Res<()> {
        if len == 0 {
            return Ok(());
        }
        let d = dst.region("aclrtMemcpy", dst_at, len)?;
        let s = src.region("aclrtMemcpy", src_at, len)?;
        // SAFETY: both regions are inside their allocations (checked);
        // the copy is synchronous.
        let c = unsafe {
            (self.t.aclrtMemcpy)(d, dst.len - dst_at, s, len, ACL_MEMCPY_DEVICE_TO_DEVICE)
        };
        self.acl("aclrtMemcpy", c)
    }

    /// `aclrtCreateStream` on this thread's device.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn stream(self: &Arc<Self>) -> Res<Stream> {
        let mut s = std::ptr::null_mut();
        // SAFETY: writes one handle to a live local.
        let c = unsafe { (self.t.aclrtCreateStream)(&mut s) };
        self.acl("aclrtCreateStream", c)?;
        Ok(Stream {
            lib: Arc::clone(self),
            raw: s,
        })
    }

    /// `aclrtCreateEvent`.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn event(self: &Arc<Self>) -> Res<Event> {
        let mut e = std::ptr::null_mut();
        // SAFETY: writes one handle to a live local.
        let c = unsafe { (self.t.aclrtCreateEvent)(&mut e) };
        self.acl("aclrtCreateEvent", c)?;
        Ok(Event {
            lib: Arc::clone(self),
            raw: e,
        })
    }

    /// `HcclGetRootInfo`: a new root, on this rank.
    ///
    /// # Errors
    /// [`AscendError::Hccl`].
    pub fn root_info(&self) -> Res<HcclRootInfo> {
        let mut r = HcclRootInfo::zeroed();
        // SAFETY: writes HCCL_ROOT_INFO_BYTES into a live struct of that size.
        let c = unsafe { (self.t.HcclGetRootInfo)(&mut r) };
        self.hccl("HcclGetRootInfo", c).map(|()| r)
    }

    fn comm_of(self: &Arc<Self>, raw: HcclComm) -> Comm {
        Comm {
            lib: Arc::clone(self),
            raw,
        }
    }

    /// `HcclCommInitRootInfo(nranks, root, rank)` (blocks until every rank
    /// joined or HCCL's connect timeout), on this thread's device.
    ///
    /// # Errors
    /// [`AscendError::Hccl`].
    pub fn init_root_info(
        self: &Arc<Self>,
        nranks: u32,
        root: &HcclRootInfo,
        rank: u32,
    ) -> Res<Comm> {
        let mut comm = std::ptr::null_mut();
        // SAFETY: `root` is a live HcclRootInfo; writes one handle.
        let c = unsafe { (self.t.HcclCommInitRootInfo)(nranks, root, rank, &mut comm) };
        self.hccl("HcclCommInitRootInfo", c)?;
        Ok(self.comm_of(comm))
    }

    /// `HcclCommInitRootInfoConfig` (optional: CANN 8.0 and later).
    ///
    /// # Errors
    /// [`AscendError::NotSupported`]; [`AscendError::Hccl`].
    pub fn init_root_info_config(
        self: &Arc<Self>,
        nranks: u32,
        root: &HcclRootInfo,
        rank: u32,
        config: &HcclCommConfig,
    ) -> Res<Comm> {
        let f: InitRootInfoConfigFn = self.optional("HcclCommInitRootInfoConfig")?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `root` and `config` are live structs of CANN's layout;
        // writes one handle.
        let c = unsafe { f(nranks, root, rank, config, &mut comm) };
        self.hccl("HcclCommInitRootInfoConfig", c)?;
        Ok(self.comm_of(comm))
    }

    /// `HcclCommInitClusterInfo(rank_table, rank)`.
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a path with a NUL byte; [`AscendError::Hccl`].
    pub fn init_cluster_info(self: &Arc<Self>, rank_table: &Path, rank: u32) -> Res<Comm> {
        let path =
            CString::new(rank_table.display().to_string()).map_err(|_| AscendError::Arg {
                func: "HcclCommInitClusterInfo",
                detail: format!(
                    "the rank table path {} has a NUL byte",
                    rank_table.display()
                ),
            })?;
        let mut comm = std::ptr::null_mut();
        // SAFETY: `path` is a live NUL-terminated string; writes one handle.
        let c = unsafe { (self.t.HcclCommInitClusterInfo)(path.as_ptr(), rank, &mut comm) };
        self.hccl("HcclCommInitClusterInfo", c)?;
        Ok(self.comm_of(comm))
    }

    /// `HcclCommInitAll(devices.len(), devices)`: one communicator per
    /// device, in this process.
    ///
    /// # Errors
    /// [`AscendError::Hccl`].
    pub fn init_all(self: &Arc<Self>, devices: &[i32]) -> Res<Vec<Comm>> {
        let mut devs = devices.to_vec();
        let mut comms = vec![std::ptr::null_mut(); devs.len()];
        // SAFETY: both arrays are live and hold devices.len() entries.
        let c = unsafe {
            (self.t.HcclCommInitAll)(devs.len() as u32, devs.as_mut_ptr(), comms.as_mut_ptr())
        };
        self.hccl("HcclCommInitAll", c)?;
        Ok(comms.into_iter().map(|h| self.comm_of(h)).collect())
    }

    /// `HcclBatchSendRecv(items, comm, stream)`, then the stream's
    /// synchronisation: `items` are `(kind, buffer, offset, count, data
    /// type, peer)` with kind [`HCCL_SEND`] or [`HCCL_RECV`].
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a region outside its buffer or an unknown
    /// data type; [`AscendError::Hccl`]; the stream's error.
    pub fn batch_send_recv(
        &self,
        items: &[(i32, &DeviceMem, usize, u64, HcclDataType, u32)],
        comm: &Comm,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclBatchSendRecv";
        let mut raw = Vec::with_capacity(items.len());
        for &(kind, mem, at, count, dt, peer) in items {
            let p = mem.region(F, at, bytes_of(F, count, dt)?)?;
            raw.push(HcclSendRecvItem {
                send_recv_type: kind,
                buf: p,
                count,
                data_type: dt,
                remote_rank: peer,
            });
        }
        if raw.is_empty() {
            return Ok(());
        }
        // SAFETY: every item's region is inside its allocation (checked);
        // the array is live; the stream is synchronised before the borrows end.
        let c = unsafe {
            (self.t.HcclBatchSendRecv)(raw.as_mut_ptr(), raw.len() as u32, comm.raw, stream.raw)
        };
        self.hccl(F, c)?;
        stream.sync_for(comm)
    }
}

/// A region of a device buffer: the buffer and a byte offset in it.
pub type At<'a> = (&'a DeviceMem, usize);

/// `count` elements of `dt` in bytes; [`AscendError::Arg`] for a data
/// type without a size here.
fn bytes_of(func: &'static str, count: u64, dt: HcclDataType) -> Res<usize> {
    let esz: u64 = match dt {
        HCCL_DATA_TYPE_INT8 | HCCL_DATA_TYPE_UINT8 => 1,
        HCCL_DATA_TYPE_INT16
        | HCCL_DATA_TYPE_UINT16
        | HCCL_DATA_TYPE_FP16
        | HCCL_DATA_TYPE_BFP16 => 2,
        HCCL_DATA_TYPE_INT32 | HCCL_DATA_TYPE_UINT32 | HCCL_DATA_TYPE_FP32 => 4,
        HCCL_DATA_TYPE_INT64 | HCCL_DATA_TYPE_UINT64 | HCCL_DATA_TYPE_FP64 => 8,
        _ => {
            return Err(AscendError::Arg {
                func,
                detail: format!("data type {dt} has no size here"),
            })
        }
    };
    count
        .checked_mul(esz)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| AscendError::Arg {
            func,
            detail: format!("{count} elements of data type {dt} overflow"),
        })
}

/// Device memory from `aclrtMalloc` (or host memory from
/// `aclrtMallocHost`), freed on drop. Never dereferenced on the host: only
/// CANN's calls read and write it.
pub struct DeviceMem {
    lib: Arc<Library>,
    ptr: *mut c_void,
    len: usize,
    host: bool,
}

// SAFETY: a device address is valid in every thread of the process (ACL
// memory is per process, not per thread); the handle holds no thread-bound
// state and is only passed to CANN.
unsafe impl Send for DeviceMem {}
// SAFETY: as above; `&DeviceMem` gives no host access to the memory.
unsafe impl Sync for DeviceMem {}

impl DeviceMem {
    /// Bytes asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length request.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of `len` bytes at `at`, checked to lie inside.
    fn region(&self, func: &'static str, at: usize, len: usize) -> Res<*mut c_void> {
        match at.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.ptr.cast::<u8>().wrapping_add(at).cast()),
            _ => Err(AscendError::Arg {
                func,
                detail: format!(
                    "{len} bytes at offset {at} do not fit in a device buffer of {} bytes",
                    self.len
                ),
            }),
        }
    }
}

impl std::fmt::Debug for DeviceMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceMem({} bytes)", self.len)
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from aclrtMalloc / aclrtMallocHost of this
        // library and is freed once; every call that used it synchronised
        // its stream before returning.
        let c = unsafe {
            if self.host {
                (self.lib.t.aclrtFreeHost)(self.ptr)
            } else {
                (self.lib.t.aclrtFree)(self.ptr)
            }
        };
        if c != ACL_SUCCESS {
            eprintln!("hccl-ascend-sys: aclrtFree failed: ACL error {c}");
        }
    }
}

/// An `aclrtStream`, destroyed on drop.
pub struct Stream {
    lib: Arc<Library>,
    raw: AclrtStream,
}

// SAFETY: CANN streams may be used from any thread that has the stream's
// device set (the backend sets it on each thread before a call).
unsafe impl Send for Stream {}

impl Stream {
    /// `aclrtSynchronizeStream`.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn synchronize(&self) -> Res<()> {
        // SAFETY: a live stream of this library.
        let c = unsafe { (self.lib.t.aclrtSynchronizeStream)(self.raw) };
        self.lib.acl("aclrtSynchronizeStream", c)
    }

    /// Synchronises after an HCCL op of `comm`: a failed task is the
    /// communicator's async error when it has one (its HCCL code), else
    /// the stream's ACL error.
    fn sync_for(&self, comm: &Comm) -> Res<()> {
        match self.synchronize() {
            Ok(()) => Ok(()),
            Err(e) => match comm.async_error() {
                Ok(Some(code)) => Err(AscendError::Hccl {
                    func: "aclrtSynchronizeStream",
                    code,
                    text: self.lib.error_string(code),
                    recent: self.lib.recent_error(),
                }),
                _ => Err(e),
            },
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: a live stream of this library, destroyed once.
        let _ = unsafe { (self.lib.t.aclrtDestroyStream)(self.raw) };
    }
}

/// An `aclrtEvent`, destroyed on drop.
pub struct Event {
    lib: Arc<Library>,
    raw: AclrtEvent,
}

// SAFETY: as Stream.
unsafe impl Send for Event {}

impl Event {
    /// `aclrtRecordEvent(self, stream)` then `aclrtSynchronizeEvent`.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn record_and_wait(&self, stream: &Stream) -> Res<()> {
        // SAFETY: live event and stream of this library.
        let c = unsafe { (self.lib.t.aclrtRecordEvent)(self.raw, stream.raw) };
        self.lib.acl("aclrtRecordEvent", c)?;
        // SAFETY: a live event.
        let c = unsafe { (self.lib.t.aclrtSynchronizeEvent)(self.raw) };
        self.lib.acl("aclrtSynchronizeEvent", c)
    }

    /// `aclrtEventElapsedTime(start, self)`: milliseconds.
    ///
    /// # Errors
    /// [`AscendError::Acl`].
    pub fn elapsed_since(&self, start: &Event) -> Res<f32> {
        let mut ms = 0f32;
        // SAFETY: live events; writes one float to a live local.
        let c = unsafe { (self.lib.t.aclrtEventElapsedTime)(&mut ms, start.raw, self.raw) };
        self.lib.acl("aclrtEventElapsedTime", c).map(|()| ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: a live event of this library, destroyed once.
        let _ = unsafe { (self.lib.t.aclrtDestroyEvent)(self.raw) };
    }
}

/// An `HcclComm`, destroyed (`HcclCommDestroy`) on drop. Each collective
/// enqueues on the given stream and synchronises it before returning.
pub struct Comm {
    lib: Arc<Library>,
    raw: HcclComm,
}

// SAFETY: an HCCL communicator may be driven from any thread with its
// device set, one call at a time (callers hold it mutably or behind a lock).
unsafe impl Send for Comm {}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HcclComm")
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: a live communicator of this library, destroyed once.
        let c = unsafe { (self.lib.t.HcclCommDestroy)(self.raw) };
        if c != HCCL_SUCCESS {
            eprintln!("hccl-ascend-sys: HcclCommDestroy failed: HCCL error {c}");
        }
    }
}

/// Checks `count` elements of `dt` at each region, for `func`.
fn regions<const N: usize>(
    func: &'static str,
    list: [(At<'_>, u64); N],
    dt: HcclDataType,
) -> Res<[*mut c_void; N]> {
    let mut out = [std::ptr::null_mut(); N];
    for (o, ((mem, at), count)) in out.iter_mut().zip(list) {
        *o = mem.region(func, at, bytes_of(func, count, dt)?)?;
    }
    Ok(out)
}

/// The region `max(displ + count)` elements long of a V call's lists.
fn v_extent(func: &'static str, counts: &[u64], displs: &[u64], n: u32) -> Res<u64> {
    if counts.len() != n as usize || displs.len() != n as usize {
        return Err(AscendError::Arg {
            func,
            detail: format!(
                "counts and displacements need {n} entries each (one per rank), got {} and {}",
                counts.len(),
                displs.len()
            ),
        });
    }
    Ok(counts
        .iter()
        .zip(displs)
        .map(|(c, d)| c.saturating_add(*d))
        .max()
        .unwrap_or(0))
}

impl Comm {
    /// The library this communicator belongs to.
    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }

    /// `HcclGetRankSize`.
    ///
    /// # Errors
    /// [`AscendError::Hccl`].
    pub fn size(&self) -> Res<u32> {
        let mut n = 0;
        // SAFETY: a live communicator; writes one u32.
        let c = unsafe { (self.lib.t.HcclGetRankSize)(self.raw, &mut n) };
        self.lib.hccl("HcclGetRankSize", c).map(|()| n)
    }

    /// `HcclGetRankId`.
    ///
    /// # Errors
    /// [`AscendError::Hccl`].
    pub fn rank(&self) -> Res<u32> {
        let mut r = 0;
        // SAFETY: a live communicator; writes one u32.
        let c = unsafe { (self.lib.t.HcclGetRankId)(self.raw, &mut r) };
        self.lib.hccl("HcclGetRankId", c).map(|()| r)
    }

    /// `HcclGetCommAsyncError`: `Some(code)` after a failure found while
    /// no call returned it.
    ///
    /// # Errors
    /// [`AscendError::Hccl`] if the query itself fails.
    pub fn async_error(&self) -> Res<Option<HcclResult>> {
        let mut e = HCCL_SUCCESS;
        // SAFETY: a live communicator; writes one code.
        let c = unsafe { (self.lib.t.HcclGetCommAsyncError)(self.raw, &mut e) };
        self.lib.hccl("HcclGetCommAsyncError", c)?;
        Ok((e != HCCL_SUCCESS).then_some(e))
    }

    /// `HcclGetCommName` (optional).
    ///
    /// # Errors
    /// [`AscendError::NotSupported`]; [`AscendError::Hccl`].
    pub fn name(&self) -> Res<String> {
        type F = unsafe extern "C" fn(HcclComm, *mut c_char) -> HcclResult;
        let f: F = self.lib.optional("HcclGetCommName")?;
        // hccl.h: the buffer holds ROOTINFO_INDENTIFIER_MAX_LENGTH (128) bytes.
        let mut buf = [0 as c_char; COMM_NAME_MAX_LENGTH + 1];
        // SAFETY: a live communicator; writes at most 128 bytes and a NUL.
        let c = unsafe { f(self.raw, buf.as_mut_ptr()) };
        self.lib.hccl("HcclGetCommName", c)?;
        Ok(text(buf.as_ptr()))
    }

    fn done(&self, func: &'static str, code: HcclResult, stream: &Stream) -> Res<()> {
        self.lib.hccl(func, code)?;
        stream.sync_for(self)
    }

    /// `HcclAllReduce(send, recv, count, dt, op)` on `stream`, synchronised.
    ///
    /// # Errors
    /// [`AscendError::Arg`] for a region outside its buffer;
    /// [`AscendError::Hccl`]; the stream's error.
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce(
        &self,
        send: At<'_>,
        recv: At<'_>,
        count: u64,
        dt: HcclDataType,
        op: HcclReduceOp,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclAllReduce";
        let [s, r] = regions(F, [(send, count), (recv, count)], dt)?;
        // SAFETY: both regions hold `count` elements (checked); the
        // stream is synchronised before the borrows end.
        let c = unsafe { (self.lib.t.HcclAllReduce)(s, r, count, dt, op, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclBroadcast(buf, count, dt, root)`, synchronised.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn broadcast(
        &self,
        buf: At<'_>,
        count: u64,
        dt: HcclDataType,
        root: u32,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclBroadcast";
        let [b] = regions(F, [(buf, count)], dt)?;
        // SAFETY: the region holds `count` elements (checked); synchronised.
        let c = unsafe { (self.lib.t.HcclBroadcast)(b, count, dt, root, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclReduceScatter(send, recv, recv_count, dt, op)`: `send` holds
    /// `recv_count * size` elements.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_scatter(
        &self,
        send: At<'_>,
        recv: At<'_>,
        recv_count: u64,
        dt: HcclDataType,
        op: HcclReduceOp,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclReduceScatter";
        let n = u64::from(self.size()?);
        let [s, r] = regions(
            F,
            [(send, recv_count.saturating_mul(n)), (recv, recv_count)],
            dt,
        )?;
        // SAFETY: regions checked for the sizes HCCL reads and writes; synchronised.
        let c = unsafe {
            (self.lib.t.HcclReduceScatter)(s, r, recv_count, dt, op, self.raw, stream.raw)
        };
        self.done(F, c, stream)
    }

    /// `HcclScatter(send, recv, recv_count, dt, root)`: on the root `send`
    /// holds `recv_count * size` elements (elsewhere it is not read).
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub fn scatter(
        &self,
        send: At<'_>,
        recv: At<'_>,
        recv_count: u64,
        dt: HcclDataType,
        root: u32,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclScatter";
        let n = u64::from(self.size()?);
        let sc = if self.rank()? == root {
            recv_count.saturating_mul(n)
        } else {
            0
        };
        let [s, r] = regions(F, [(send, sc), (recv, recv_count)], dt)?;
        // SAFETY: regions checked for the sizes HCCL reads and writes; synchronised.
        let c =
            unsafe { (self.lib.t.HcclScatter)(s, r, recv_count, dt, root, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclAllGather(send, recv, send_count, dt)`: `recv` holds
    /// `send_count * size` elements.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn all_gather(
        &self,
        send: At<'_>,
        recv: At<'_>,
        send_count: u64,
        dt: HcclDataType,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclAllGather";
        let n = u64::from(self.size()?);
        let [s, r] = regions(
            F,
            [(send, send_count), (recv, send_count.saturating_mul(n))],
            dt,
        )?;
        // SAFETY: regions checked for the sizes HCCL reads and writes; synchronised.
        let c = unsafe { (self.lib.t.HcclAllGather)(s, r, send_count, dt, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclReduce(send, recv, count, dt, op, root)`: `recv` is written on
    /// the root only.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        send: At<'_>,
        recv: At<'_>,
        count: u64,
        dt: HcclDataType,
        op: HcclReduceOp,
        root: u32,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclReduce";
        let [s, r] = regions(F, [(send, count), (recv, count)], dt)?;
        // SAFETY: regions checked; synchronised.
        let c = unsafe { (self.lib.t.HcclReduce)(s, r, count, dt, op, root, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclAlltoAll(send, count, dt, recv, count, dt)`: both hold
    /// `count * size` elements.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn all_to_all(
        &self,
        send: At<'_>,
        recv: At<'_>,
        count: u64,
        dt: HcclDataType,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclAlltoAll";
        let n = u64::from(self.size()?);
        let all = count.saturating_mul(n);
        let [s, r] = regions(F, [(send, all), (recv, all)], dt)?;
        // SAFETY: regions checked; synchronised.
        let c =
            unsafe { (self.lib.t.HcclAlltoAll)(s, count, dt, r, count, dt, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclAlltoAllV`: per-peer counts and displacements (elements), one
    /// entry per rank each.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`]; lists of the wrong length.
    #[allow(clippy::too_many_arguments)]
    pub fn all_to_all_v(
        &self,
        (send, send_counts, send_displs): (At<'_>, &[u64], &[u64]),
        (recv, recv_counts, recv_displs): (At<'_>, &[u64], &[u64]),
        dt: HcclDataType,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclAlltoAllV";
        let n = self.size()?;
        let se = v_extent(F, send_counts, send_displs, n)?;
        let re = v_extent(F, recv_counts, recv_displs, n)?;
        let [s, r] = regions(F, [(send, se), (recv, re)], dt)?;
        // SAFETY: regions checked against the lists' extents; the lists are
        // live u64 arrays of `n` entries; synchronised.
        let c = unsafe {
            (self.lib.t.HcclAlltoAllV)(
                s,
                send_counts.as_ptr().cast(),
                send_displs.as_ptr().cast(),
                dt,
                r,
                recv_counts.as_ptr().cast(),
                recv_displs.as_ptr().cast(),
                dt,
                self.raw,
                stream.raw,
            )
        };
        self.done(F, c, stream)
    }

    /// `HcclAllGatherV` (optional): `recv` holds every rank's block at its
    /// displacement.
    ///
    /// # Errors
    /// [`AscendError::NotSupported`]; as [`Comm::all_to_all_v`].
    pub fn all_gather_v(
        &self,
        (send, send_count): (At<'_>, u64),
        (recv, recv_counts, recv_displs): (At<'_>, &[u64], &[u64]),
        dt: HcclDataType,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclAllGatherV";
        let f: AllGatherVFn = self.lib.optional(F)?;
        let re = v_extent(F, recv_counts, recv_displs, self.size()?)?;
        let [s, r] = regions(F, [(send, send_count), (recv, re)], dt)?;
        // SAFETY: regions checked; lists live with one entry per rank; synchronised.
        let c = unsafe {
            f(
                s,
                send_count,
                r,
                recv_counts.as_ptr().cast(),
                recv_displs.as_ptr().cast(),
                dt,
                self.raw,
                stream.raw,
            )
        };
        self.done(F, c, stream)
    }

    /// `HcclReduceScatterV` (optional).
    ///
    /// # Errors
    /// [`AscendError::NotSupported`]; as [`Comm::all_to_all_v`].
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_scatter_v(
        &self,
        (send, send_counts, send_displs): (At<'_>, &[u64], &[u64]),
        (recv, recv_count): (At<'_>, u64),
        dt: HcclDataType,
        op: HcclReduceOp,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclReduceScatterV";
        let f: ReduceScatterVFn = self.lib.optional(F)?;
        let se = v_extent(F, send_counts, send_displs, self.size()?)?;
        let [s, r] = regions(F, [(send, se), (recv, recv_count)], dt)?;
        // SAFETY: regions checked; lists live with one entry per rank; synchronised.
        let c = unsafe {
            f(
                s,
                send_counts.as_ptr().cast(),
                send_displs.as_ptr().cast(),
                r,
                recv_count,
                dt,
                op,
                self.raw,
                stream.raw,
            )
        };
        self.done(F, c, stream)
    }

    /// `HcclBarrier`, synchronised.
    ///
    /// # Errors
    /// [`AscendError::Hccl`]; the stream's error.
    pub fn barrier(&self, stream: &Stream) -> Res<()> {
        // SAFETY: live communicator and stream; synchronised.
        let c = unsafe { (self.lib.t.HcclBarrier)(self.raw, stream.raw) };
        self.done("HcclBarrier", c, stream)
    }

    /// `HcclSend(buf, count, dt, peer)`, synchronised.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn send(
        &self,
        buf: At<'_>,
        count: u64,
        dt: HcclDataType,
        peer: u32,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclSend";
        let [b] = regions(F, [(buf, count)], dt)?;
        // SAFETY: region checked; synchronised.
        let c = unsafe { (self.lib.t.HcclSend)(b, count, dt, peer, self.raw, stream.raw) };
        self.done(F, c, stream)
    }

    /// `HcclRecv(buf, count, dt, peer)`, synchronised.
    ///
    /// # Errors
    /// As [`Comm::all_reduce`].
    pub fn recv(
        &self,
        buf: At<'_>,
        count: u64,
        dt: HcclDataType,
        peer: u32,
        stream: &Stream,
    ) -> Res<()> {
        const F: &str = "HcclRecv";
        let [b] = regions(F, [(buf, count)], dt)?;
        // SAFETY: region checked; synchronised.
        let c = unsafe { (self.lib.t.HcclRecv)(b, count, dt, peer, self.raw, stream.raw) };
        self.done(F, c, stream)
    }
}

/// A C string CANN owns, copied ("" for NULL).
fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: CANN returns NUL-terminated strings that stay valid at least
    // until the next call on this thread; copied at once.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
