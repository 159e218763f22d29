//! The numbers of the C API: `HcclResult` and `aclError` codes, and
//! `HcclGetErrorString`'s words.
//!
//! The codes are CANN's, defined once in `hccl_ascend_sys::types` (with
//! each value's header: `hccl/hccl_types.h`, `acl/acl_base.h`,
//! `acl/error_codes/rt_error_codes.h`), which the Ascend backend calls CANN
//! with; this library returns the same constants. Only the constants are
//! used from that crate: nothing of it is loaded or called at run time.

pub use hccl_ascend_sys::types::{
    AclError, HcclResult, ACL_ERROR_API_NOT_SUPPORT, ACL_ERROR_BAD_ALLOC, ACL_ERROR_INVALID_DEVICE,
    ACL_ERROR_INVALID_PARAM, ACL_ERROR_INVALID_RESOURCE_HANDLE, ACL_ERROR_REPEAT_FINALIZE,
    ACL_ERROR_REPEAT_INITIALIZE, ACL_ERROR_RT_CONTEXT_NULL, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT,
    ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, ACL_ERROR_RT_INTERNAL_ERROR,
    ACL_ERROR_RT_INVALID_DEVICEID, ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_MEMORY_FREE,
    ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, ACL_ERROR_UNINITIALIZE,
    ACL_SUCCESS, HCCL_E_INTERNAL, HCCL_E_MEMORY, HCCL_E_NOT_SUPPORT, HCCL_E_PARA, HCCL_E_PTR,
    HCCL_E_RESERVED, HCCL_E_RUNTIME, HCCL_SUCCESS,
};

/// The `HcclResult` of `e` (`CommError::hccl_result`, a code of
/// `hccl_types.h`, 0..=22), as the C API returns it.
pub fn of_error(e: &hccl::CommError) -> HcclResult {
    HcclResult::try_from(e.hccl_result()).unwrap_or(HCCL_E_INTERNAL)
}

/// `HcclGetErrorString`'s text for `code`: CANN's HCCL's words (CANN
/// open-source HCCL `op_base.cc` `HcclGetErrorString`, "unknow error"
/// spelled as there; 22 from `hccl_types.h`'s comment).
pub fn hccl_error_string(code: HcclResult) -> &'static str {
    hccl_error_cstr(code).to_str().unwrap_or("unknow error")
}

/// The same text with a NUL, for C (`HcclGetErrorString` returns it).
pub fn hccl_error_cstr(code: HcclResult) -> &'static std::ffi::CStr {
    match code {
        0 => c"no error",
        1 => c"parameter error",
        2 => c"empty pointer",
        3 => c"memory error",
        4 => c"internal error",
        5 => c"not support feature",
        6 => c"not found specific resource",
        7 => c"resource unavailable",
        8 => c"call system interface error",
        9 => c"timeout",
        10 => c"open file fail",
        11 => c"tcp connect fail",
        12 => c"roce connect fail",
        13 => c"tcp transfer fail",
        14 => c"roce transfer fail",
        15 => c"call runtime api fail",
        16 => c"call driver api fail",
        17 => c"call profiling api fail",
        18 => c"call cce api fail",
        19 => c"call network api fail",
        20 => c"try again",
        21 => c"error cqe",
        22 => c"error communicator suspending",
        _ => c"unknow error",
    }
}
