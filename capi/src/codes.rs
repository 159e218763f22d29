//! The numbers of the C API: `HcclResult` and `aclError` codes, and
//! `HcclGetErrorString`'s words.
//!
//! Sources: `HcclResult` is CANN's `hccl/hccl_types.h` (CANN open source,
//! e.g. Ascend/pytorch `third_party/hccl/inc/hccl/hccl_types.h`); the
//! `aclError` values are CANN's `acl/acl_base.h` (`ACL_ERROR_*`, 1xxxxx
//! for caller errors, 2xxxxx for resources, 5xxxxx for internal ones) and
//! the runtime's codes (`ACL_ERROR_RT_*`, 107xxx / 207xxx / 507xxx) of
//! CANN's `acl/error_codes/rt_error_codes.h` (`507046
//! ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` is in its newer versions).

/// `HcclResult` as the C API returns it.
pub type HcclResult = u32;
/// `aclError` as the C API returns it.
pub type AclError = i32;

/// `HCCL_SUCCESS`.
pub const HCCL_SUCCESS: HcclResult = 0;
/// `HCCL_E_PARA`: a parameter error.
pub const HCCL_E_PARA: HcclResult = 1;
/// `HCCL_E_PTR`: a null (or unknown) pointer.
pub const HCCL_E_PTR: HcclResult = 2;
/// `HCCL_E_MEMORY`: a memory error.
pub const HCCL_E_MEMORY: HcclResult = 3;
/// `HCCL_E_INTERNAL`: an internal error.
pub const HCCL_E_INTERNAL: HcclResult = 4;
/// `HCCL_E_NOT_SUPPORT`: a feature this library does not have.
pub const HCCL_E_NOT_SUPPORT: HcclResult = 5;
/// `HCCL_E_RUNTIME`: a runtime (ACL) call failed.
pub const HCCL_E_RUNTIME: HcclResult = 15;
/// One past the last code hccl_types.h names (`HCCL_E_SUSPENDING` = 22).
pub const HCCL_E_RESERVED: HcclResult = 23;

/// `HcclGetErrorString`'s text for `code`: CANN's HCCL's words (CANN
/// open-source HCCL `op_base.cc` `HcclGetErrorString`, "unknow error"
/// spelled as there; 22 from `hccl_types.h`'s comment).
pub fn hccl_error_string(code: HcclResult) -> &'static str {
    match code {
        0 => "no error",
        1 => "parameter error",
        2 => "empty pointer",
        3 => "memory error",
        4 => "internal error",
        5 => "not support feature",
        6 => "not found specific resource",
        7 => "resource unavailable",
        8 => "call system interface error",
        9 => "timeout",
        10 => "open file fail",
        11 => "tcp connect fail",
        12 => "roce connect fail",
        13 => "tcp transfer fail",
        14 => "roce transfer fail",
        15 => "call runtime api fail",
        16 => "call driver api fail",
        17 => "call profiling api fail",
        18 => "call cce api fail",
        19 => "call network api fail",
        20 => "try again",
        21 => "error cqe",
        22 => "error communicator suspending",
        _ => "unknow error",
    }
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

/// `ACL_SUCCESS`.
pub const ACL_SUCCESS: AclError = 0;
/// `ACL_ERROR_INVALID_PARAM`: a bad argument.
pub const ACL_ERROR_INVALID_PARAM: AclError = 100_000;
/// `ACL_ERROR_UNINITIALIZE`: `aclInit` was not called.
pub const ACL_ERROR_UNINITIALIZE: AclError = 100_001;
/// `ACL_ERROR_REPEAT_INITIALIZE`: `aclInit` twice.
pub const ACL_ERROR_REPEAT_INITIALIZE: AclError = 100_002;
/// `ACL_ERROR_REPEAT_FINALIZE`: `aclFinalize` twice.
pub const ACL_ERROR_REPEAT_FINALIZE: AclError = 100_037;
/// `ACL_ERROR_BAD_ALLOC`: memory could not be allocated.
pub const ACL_ERROR_BAD_ALLOC: AclError = 200_000;
/// `ACL_ERROR_API_NOT_SUPPORT`: a call this runtime does not have.
pub const ACL_ERROR_API_NOT_SUPPORT: AclError = 200_001;
/// `ACL_ERROR_INVALID_DEVICE`: no such device.
pub const ACL_ERROR_INVALID_DEVICE: AclError = 200_002;
/// `ACL_ERROR_INVALID_RESOURCE_HANDLE`: an unknown stream or event.
pub const ACL_ERROR_INVALID_RESOURCE_HANDLE: AclError = 200_005;
/// `ACL_ERROR_RT_PARAM_INVALID`: the runtime's bad-argument code.
pub const ACL_ERROR_RT_PARAM_INVALID: AclError = 107_000;
/// `ACL_ERROR_RT_INVALID_DEVICEID`.
pub const ACL_ERROR_RT_INVALID_DEVICEID: AclError = 107_001;
/// `ACL_ERROR_RT_CONTEXT_NULL`: no device set on this thread.
pub const ACL_ERROR_RT_CONTEXT_NULL: AclError = 107_002;
/// `ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID`: an event never recorded or not
/// yet reached.
pub const ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID: AclError = 107_006;
/// `ACL_ERROR_RT_MEMORY_ALLOCATION`: out of (device) memory.
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: AclError = 207_001;
/// `ACL_ERROR_RT_MEMORY_FREE`: freeing memory that is not an allocation.
pub const ACL_ERROR_RT_MEMORY_FREE: AclError = 207_002;
/// `ACL_ERROR_RT_INTERNAL_ERROR`: a task on a stream failed (an HCCL op
/// whose `HcclResult` `HcclGetCommAsyncError` gives).
pub const ACL_ERROR_RT_INTERNAL_ERROR: AclError = 507_000;
/// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`: `aclrtSynchronizeStreamWithTimeout`
/// timed out.
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: AclError = 507_046;
/// `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT`: `aclrtSynchronizeEventWithTimeout`
/// timed out.
pub const ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: AclError = 507_047;
