//! The log line of every refused or failed call: the library's
//! `tracing` events go to standard error once the first call of a C
//! program has installed `hccl::init_logging` (CANN's
//! `ASCEND_GLOBAL_LOG_LEVEL` and `ASCEND_SLOG_PRINT_TO_STDOUT` apply).

use std::sync::Once;

/// Installs the log subscriber once per process.
pub(crate) fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        hccl::init_logging();
    });
}

thread_local! {
    static RECENT: std::cell::RefCell<std::ffi::CString> = std::cell::RefCell::new(std::ffi::CString::default());
}

/// Logs `func: msg` as an error and keeps it as this thread's recent
/// message (`aclGetRecentErrMsg`); returns `code`.
pub(crate) fn fail<C: Copy>(func: &str, code: C, msg: impl std::fmt::Display) -> C {
    let line = format!("{func}: {msg}");
    tracing::error!("{line}");
    let c = std::ffi::CString::new(line.replace('\0', " ")).unwrap_or_default();
    RECENT.with(|r| *r.borrow_mut() = c);
    code
}

/// Logs `func: msg` as a warning and returns `code`: a call CANN answers
/// with a code but does not count as a failure (a repeated `aclInit`, whose
/// `ACL_ERROR_REPEAT_INITIALIZE` programs and frameworks ignore), so it is
/// not this thread's recent error message either.
pub(crate) fn warn<C: Copy>(func: &str, code: C, msg: impl std::fmt::Display) -> C {
    tracing::warn!("{func}: {msg}");
    code
}

/// This thread's last failure message (empty if none): a pointer valid
/// until this thread's next failure, as `aclGetRecentErrMsg` promises.
pub(crate) fn recent() -> *const std::ffi::c_char {
    RECENT.with(|r| r.borrow().as_ptr())
}

/// This thread's last failure message, as text ("" if none).
pub(crate) fn recent_text() -> String {
    RECENT.with(|r| r.borrow().to_string_lossy().into_owned())
}
