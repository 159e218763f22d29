//! [`AscendError`]: a library that is not there, a symbol it lacks, and
//! every failed HCCL or ACL call, with the function, the code, CANN's
//! own text and what to check.

use crate::types::*;

/// Everything loading CANN's libraries or calling them can fail with.
/// `Clone` (text only), so that a communicator can keep its first error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AscendError {
    /// A library is in none of the places searched.
    #[error("{lib} not found in {searched}; source CANN's set_env.sh (`source /usr/local/Ascend/ascend-toolkit/set_env.sh`, or set_env.sh of the toolkit's install path) so that ASCEND_HOME_PATH points at the toolkit, then check with `npu-smi info` that the driver sees the NPUs")]
    NotFound {
        /// `libhccl.so` or `libascendcl.so`.
        lib: &'static str,
        /// Where it was looked for, in order.
        searched: String,
    },
    /// A library was found but `dlopen` refused it.
    #[error("{lib} at {path} cannot be loaded: {reason}; check that it is CANN's library for this machine's architecture and that LD_LIBRARY_PATH (set by set_env.sh) holds the driver's libraries (/usr/local/Ascend/driver/lib64)")]
    Open {
        /// The library.
        lib: &'static str,
        /// Its path.
        path: String,
        /// `dlopen`'s message.
        reason: String,
    },
    /// A required function is not exported by the library: not CANN's
    /// library, or a CANN older than the one this crate was written
    /// against (8.1.RC1).
    #[error("{lib} at {path} has no symbol {symbol}: it is not CANN's library or its CANN is older than 8.1.RC1; source the set_env.sh of a CANN 8.1.RC1 or later toolkit")]
    MissingSymbol {
        /// The library.
        lib: &'static str,
        /// Its path.
        path: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// An optional (newer) function this CANN lacks, found missing when a
    /// call needed it.
    #[error(
        "{func} is not supported by this CANN ({path} does not export it); it needs a newer CANN"
    )]
    NotSupported {
        /// The function.
        func: &'static str,
        /// The library searched.
        path: String,
    },
    /// An HCCL call returned an error.
    #[error("{func} failed: HCCL error {code} ({text}){}; {}", recent_text(recent), hccl_hint(func, *code))]
    Hccl {
        /// The function (`HcclAllReduce`, ...).
        func: &'static str,
        /// Its `HcclResult`.
        code: HcclResult,
        /// `HcclGetErrorString(code)`.
        text: String,
        /// `aclGetRecentErrMsg()` right after the failure ("" if none).
        recent: String,
    },
    /// An ACL call returned an error.
    #[error("{func} failed: ACL error {code}{}; {}", recent_text(recent), acl_hint(*code))]
    Acl {
        /// The function (`aclrtSetDevice`, ...).
        func: &'static str,
        /// Its `aclError`.
        code: AclError,
        /// `aclGetRecentErrMsg()` right after the failure ("" if none).
        recent: String,
    },
    /// A safe wrapper refused its arguments before calling CANN (a region
    /// outside its device buffer, a list of the wrong length, ...).
    #[error("{func}: {detail}")]
    Arg {
        /// The function that was not called.
        func: &'static str,
        /// What is wrong, with the numbers.
        detail: String,
    },
}

fn recent_text(recent: &str) -> String {
    if recent.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", recent.trim())
    }
}

/// Whether `func` takes a data type, a count and buffers (the
/// collectives and point-to-point calls), whose parameter errors are
/// about those; the others build or query communicators.
fn takes_data(func: &str) -> bool {
    matches!(
        func,
        "HcclAllReduce"
            | "HcclBroadcast"
            | "HcclReduce"
            | "HcclAllGather"
            | "HcclAllGatherV"
            | "HcclReduceScatter"
            | "HcclReduceScatterV"
            | "HcclAlltoAll"
            | "HcclAlltoAllV"
            | "HcclScatter"
            | "HcclSend"
            | "HcclRecv"
            | "HcclBatchSendRecv"
    )
}

/// What to check for an `HcclResult` of `func`: the troubleshooting of
/// CANN's HCCL guide ("HCCL error codes" and "Troubleshooting") in a
/// line. A parameter or "not supported" code of a call that takes no data
/// type (`HcclCommInitRootInfo`, ...) is about that call, not a type.
pub fn hccl_hint(func: &str, code: HcclResult) -> &'static str {
    match code {
        HCCL_E_PARA | HCCL_E_PTR if takes_data(func) => "check the call's arguments (counts, data type, root, buffers allocated with aclrtMalloc on this rank's device)",
        HCCL_E_PARA | HCCL_E_PTR => "check the call's arguments (rank count, rank, root info, config) and the HCCL_* variables of this process; the recent error message above says which",
        HCCL_E_NOT_SUPPORT if takes_data(func) => "this CANN or this SoC does not take the data type, reduce op or call (aclrtGetSocName names the SoC)",
        HCCL_E_NOT_SUPPORT => "this HCCL does not support the call as made here: the recent error message above says why (a libhccl.so that is not CANN's, e.g. hccl-rs's own, has its own limits)",
        HCCL_E_MEMORY | HCCL_E_UNAVAIL => "device memory or resources ran out: check HCCL_BUFFSIZE and other processes on the NPU (`npu-smi info`)",
        HCCL_E_TIMEOUT => "a rank did not arrive in time (HCCL_CONNECT_TIMEOUT at init, HCCL_EXEC_TIMEOUT in an op): check that every rank was started and calls the same collectives in the same order",
        HCCL_E_OPEN_FILE_FAILURE => "the rank table file cannot be read: check its path and permissions",
        HCCL_E_TCP_CONNECT | HCCL_E_ROCE_CONNECT => "ranks cannot connect: check the rank table's device_ip against `hccn_tool -i <device> -ip -g`, the links (`hccn_tool -i <device> -link -g`), HCCL_IF_IP / HCCL_SOCKET_IFNAME, firewalls, and that every server runs the same CANN version",
        HCCL_E_TCP_TRANSFER | HCCL_E_ROCE_TRANSFER | HCCL_E_NETWORK => "a transfer failed: check the NPU network links (`hccn_tool -i <device> -link -g`) and that no peer process died",
        HCCL_E_RUNTIME | HCCL_E_DRV | HCCL_E_CCE => "the runtime or driver failed: run `npu-smi info` (every NPU must be listed and healthy) and check that driver, firmware and CANN versions match",
        HCCL_E_REMOTE => "another rank failed: read that rank's log (ASCEND_GLOBAL_LOG_LEVEL=1, logs under ~/ascend/log)",
        HCCL_E_INTERNAL => "HCCL failed inside: read the log (ASCEND_GLOBAL_LOG_LEVEL=1, ~/ascend/log) and check that every server runs the same CANN version",
        _ => "read the log (ASCEND_GLOBAL_LOG_LEVEL=1, ~/ascend/log)",
    }
}

/// What to check for an `aclError` (CANN's `acl_base.h` code groups).
pub fn acl_hint(code: AclError) -> &'static str {
    match code {
        ACL_ERROR_RT_INVALID_DEVICEID | ACL_ERROR_INVALID_DEVICE => "the device id is not an NPU of this server: compare with `npu-smi info` and ASCEND_RT_VISIBLE_DEVICES",
        ACL_ERROR_UNINITIALIZE => "aclInit was not called (the backend calls it when it loads the library)",
        ACL_ERROR_RT_MEMORY_ALLOCATION | ACL_ERROR_BAD_ALLOC => "device memory ran out: check other processes on the NPU (`npu-smi info`)",
        ACL_ERROR_RT_INTERNAL_ERROR => "a task on the stream failed (for a collective, HcclGetCommAsyncError has its HCCL code): read the log (ASCEND_GLOBAL_LOG_LEVEL=1, ~/ascend/log)",
        ACL_ERROR_API_NOT_SUPPORT => "this CANN does not support the call",
        c if (500_000..600_000).contains(&c) => "the runtime or driver failed: run `npu-smi info` (every NPU listed and healthy) and check that driver and CANN versions match",
        c if (100_000..200_000).contains(&c) => "check the call's arguments",
        _ => "read the log (ASCEND_GLOBAL_LOG_LEVEL=1, ~/ascend/log)",
    }
}

impl AscendError {
    /// The `HcclResult` this error stands for: the code of a failed HCCL
    /// call; `HCCL_E_RUNTIME` for a failed ACL call;
    /// `HCCL_E_NOT_FOUND` for a missing library or symbol;
    /// `HCCL_E_NOT_SUPPORT` for a function this CANN lacks; `HCCL_E_PARA`
    /// for arguments refused before the call.
    pub fn hccl_result(&self) -> HcclResult {
        match self {
            AscendError::Hccl { code, .. } => *code,
            AscendError::Acl { .. } => HCCL_E_RUNTIME,
            AscendError::NotFound { .. }
            | AscendError::Open { .. }
            | AscendError::MissingSymbol { .. } => HCCL_E_NOT_FOUND,
            AscendError::NotSupported { .. } => HCCL_E_NOT_SUPPORT,
            AscendError::Arg { .. } => HCCL_E_PARA,
        }
    }

    /// True for a library or symbol that is not there (what
    /// `REQUIRE_ASCEND` turns from a skip into a failure).
    pub fn is_missing_library(&self) -> bool {
        matches!(self, AscendError::NotFound { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hccl_error_names_function_code_text_and_what_to_check() {
        let e = AscendError::Hccl {
            func: "HcclAllReduce",
            code: HCCL_E_TIMEOUT,
            text: "timeout".into(),
            recent: "rank 3 did not arrive\n".into(),
        };
        let t = e.to_string();
        assert!(
            t.starts_with("HcclAllReduce failed: HCCL error 9 (timeout): rank 3 did not arrive; "),
            "{t}"
        );
        assert!(t.contains("HCCL_EXEC_TIMEOUT"), "{t}");
        assert_eq!(e.hccl_result(), 9);
    }

    #[test]
    fn a_data_type_hint_is_given_only_for_calls_that_take_one() {
        let e = |func, code| {
            AscendError::Hccl {
                func,
                code,
                text: "not support feature".into(),
                recent: String::new(),
            }
            .to_string()
        };
        let op = e("HcclAllReduce", HCCL_E_NOT_SUPPORT);
        assert!(op.contains("data type"), "{op}");
        for func in [
            "HcclCommInitRootInfo",
            "HcclGetRootInfo",
            "HcclCommInitClusterInfo",
        ] {
            for code in [HCCL_E_NOT_SUPPORT, HCCL_E_PARA] {
                let t = e(func, code);
                assert!(!t.contains("data type"), "{t}");
                assert!(t.contains("recent error message"), "{t}");
            }
        }
    }

    #[test]
    fn an_acl_driver_error_points_at_npu_smi() {
        let e = AscendError::Acl {
            func: "aclrtSetDevice",
            code: 507_899,
            recent: String::new(),
        };
        let t = e.to_string();
        assert!(
            t.starts_with("aclrtSetDevice failed: ACL error 507899; "),
            "{t}"
        );
        assert!(t.contains("npu-smi info"), "{t}");
        assert_eq!(e.hccl_result(), HCCL_E_RUNTIME);
    }
}
