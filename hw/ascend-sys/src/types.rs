//! CANN's public C types and values, one to one with its headers.
//!
//! Sources (the same ones hccl-rs's own C headers in `capi/include/` cite):
//! CANN 8.1.RC1's `include/hccl/hccl_types.h`, `include/hccl/hccl.h`,
//! `include/acl/acl_base.h` and `include/acl/acl_rt.h` (the toolkit copy
//! in the public repository `leideng/CANN-8.1.RC1`, commit 4332a013), and
//! `third_party/hccl/inc/hccl/hccl_types.h` / `third_party/acl/inc/acl/`
//! of `Ascend/pytorch` for the names newer CANN added; the runtime's
//! `ACL_ERROR_RT_*` codes are defined in `acl/error_codes/rt_error_codes.h`,
//! which `acl_base.h` includes (`507046 ACL_ERROR_RT_STREAM_SYNC_TIMEOUT`
//! and `507047` are in its newer versions). Every value here is a value of
//! those headers; nothing is hccl-rs's own. hccl-rs's C API (`hccl-capi`)
//! returns these same constants: this module is their one definition.

use std::ffi::{c_char, c_void};

/// `HcclResult` (`hccl_types.h`): 0 is `HCCL_SUCCESS`.
pub type HcclResult = i32;
/// `HcclComm` (`hccl_types.h`: `typedef void *HcclComm`).
pub type HcclComm = *mut c_void;
/// `HcclDataType` (`hccl_types.h`), as the C enum's `int`.
pub type HcclDataType = i32;
/// `HcclReduceOp` (`hccl_types.h`), as the C enum's `int`.
pub type HcclReduceOp = i32;
/// `aclError` (`acl_base.h`: `typedef int aclError`): 0 is `ACL_SUCCESS`.
pub type AclError = i32;
/// `aclrtStream` (`acl_base.h`: `typedef void *aclrtStream`).
pub type AclrtStream = *mut c_void;
/// `aclrtEvent` (`acl_base.h`: `typedef void *aclrtEvent`).
pub type AclrtEvent = *mut c_void;

/// `HCCL_SUCCESS` (`hccl_types.h`).
pub const HCCL_SUCCESS: HcclResult = 0;
/// `HCCL_E_PARA`: parameter error.
pub const HCCL_E_PARA: HcclResult = 1;
/// `HCCL_E_PTR`: empty pointer.
pub const HCCL_E_PTR: HcclResult = 2;
/// `HCCL_E_MEMORY`: memory error.
pub const HCCL_E_MEMORY: HcclResult = 3;
/// `HCCL_E_INTERNAL`: internal error.
pub const HCCL_E_INTERNAL: HcclResult = 4;
/// `HCCL_E_NOT_SUPPORT`: not supported.
pub const HCCL_E_NOT_SUPPORT: HcclResult = 5;
/// `HCCL_E_NOT_FOUND`: resource not found.
pub const HCCL_E_NOT_FOUND: HcclResult = 6;
/// `HCCL_E_UNAVAIL`: resource unavailable.
pub const HCCL_E_UNAVAIL: HcclResult = 7;
/// `HCCL_E_SYSCALL`: a system call failed.
pub const HCCL_E_SYSCALL: HcclResult = 8;
/// `HCCL_E_TIMEOUT`: timeout.
pub const HCCL_E_TIMEOUT: HcclResult = 9;
/// `HCCL_E_OPEN_FILE_FAILURE`: cannot open a file.
pub const HCCL_E_OPEN_FILE_FAILURE: HcclResult = 10;
/// `HCCL_E_TCP_CONNECT`: TCP connect failed.
pub const HCCL_E_TCP_CONNECT: HcclResult = 11;
/// `HCCL_E_ROCE_CONNECT`: RoCE connect failed.
pub const HCCL_E_ROCE_CONNECT: HcclResult = 12;
/// `HCCL_E_TCP_TRANSFER`: TCP transfer failed.
pub const HCCL_E_TCP_TRANSFER: HcclResult = 13;
/// `HCCL_E_ROCE_TRANSFER`: RoCE transfer failed.
pub const HCCL_E_ROCE_TRANSFER: HcclResult = 14;
/// `HCCL_E_RUNTIME`: a runtime call failed.
pub const HCCL_E_RUNTIME: HcclResult = 15;
/// `HCCL_E_DRV`: a driver call failed.
pub const HCCL_E_DRV: HcclResult = 16;
/// `HCCL_E_PROFILING`: a profiling call failed.
pub const HCCL_E_PROFILING: HcclResult = 17;
/// `HCCL_E_CCE`: a CCE call failed.
pub const HCCL_E_CCE: HcclResult = 18;
/// `HCCL_E_NETWORK`: a network call failed.
pub const HCCL_E_NETWORK: HcclResult = 19;
/// `HCCL_E_AGAIN`: try again.
pub const HCCL_E_AGAIN: HcclResult = 20;
/// `HCCL_E_REMOTE`: error on a remote rank (error CQE).
pub const HCCL_E_REMOTE: HcclResult = 21;
/// `HCCL_E_SUSPENDING`: the communicator is suspending.
pub const HCCL_E_SUSPENDING: HcclResult = 22;
/// `HCCL_E_RESERVED`: one past the last code (`hccl_types.h`).
pub const HCCL_E_RESERVED: HcclResult = 23;

/// `HCCL_REDUCE_SUM` (`hccl_types.h` `HcclReduceOp`).
pub const HCCL_REDUCE_SUM: HcclReduceOp = 0;
/// `HCCL_REDUCE_PROD`.
pub const HCCL_REDUCE_PROD: HcclReduceOp = 1;
/// `HCCL_REDUCE_MAX`.
pub const HCCL_REDUCE_MAX: HcclReduceOp = 2;
/// `HCCL_REDUCE_MIN`.
pub const HCCL_REDUCE_MIN: HcclReduceOp = 3;

/// `HCCL_DATA_TYPE_INT8` (`hccl_types.h` `HcclDataType`; 0..=11 are the
/// types of CANN 8.1.RC1 that hccl-rs has, numbered as there).
pub const HCCL_DATA_TYPE_INT8: HcclDataType = 0;
/// `HCCL_DATA_TYPE_INT16`.
pub const HCCL_DATA_TYPE_INT16: HcclDataType = 1;
/// `HCCL_DATA_TYPE_INT32`.
pub const HCCL_DATA_TYPE_INT32: HcclDataType = 2;
/// `HCCL_DATA_TYPE_FP16`.
pub const HCCL_DATA_TYPE_FP16: HcclDataType = 3;
/// `HCCL_DATA_TYPE_FP32`.
pub const HCCL_DATA_TYPE_FP32: HcclDataType = 4;
/// `HCCL_DATA_TYPE_INT64`.
pub const HCCL_DATA_TYPE_INT64: HcclDataType = 5;
/// `HCCL_DATA_TYPE_UINT64`.
pub const HCCL_DATA_TYPE_UINT64: HcclDataType = 6;
/// `HCCL_DATA_TYPE_UINT8`.
pub const HCCL_DATA_TYPE_UINT8: HcclDataType = 7;
/// `HCCL_DATA_TYPE_UINT16`.
pub const HCCL_DATA_TYPE_UINT16: HcclDataType = 8;
/// `HCCL_DATA_TYPE_UINT32`.
pub const HCCL_DATA_TYPE_UINT32: HcclDataType = 9;
/// `HCCL_DATA_TYPE_FP64`.
pub const HCCL_DATA_TYPE_FP64: HcclDataType = 10;
/// `HCCL_DATA_TYPE_BFP16`.
pub const HCCL_DATA_TYPE_BFP16: HcclDataType = 11;

/// `HCCL_ROOT_INFO_BYTES` (`hccl_types.h`): the size of `HcclRootInfo`.
pub const HCCL_ROOT_INFO_BYTES: usize = 4108;

/// `HcclRootInfo` (`hccl_types.h`: `struct { char internal[4108]; }`):
/// what `HcclGetRootInfo` writes on one rank and every rank passes to
/// `HcclCommInitRootInfo`. Opaque; send its bytes as they are.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclRootInfo {
    /// The blob (`internal`).
    pub internal: [c_char; HCCL_ROOT_INFO_BYTES],
}

impl HcclRootInfo {
    /// All zeros (what `HcclGetRootInfo` overwrites).
    pub fn zeroed() -> HcclRootInfo {
        HcclRootInfo {
            internal: [0; HCCL_ROOT_INFO_BYTES],
        }
    }

    /// The blob's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.internal.iter().map(|&c| c as u8).collect()
    }

    /// A root info from exactly [`HCCL_ROOT_INFO_BYTES`] bytes; `None` for
    /// another length.
    pub fn from_bytes(b: &[u8]) -> Option<HcclRootInfo> {
        if b.len() != HCCL_ROOT_INFO_BYTES {
            return None;
        }
        let mut r = HcclRootInfo::zeroed();
        for (d, s) in r.internal.iter_mut().zip(b) {
            *d = *s as c_char;
        }
        Some(r)
    }
}

impl std::fmt::Debug for HcclRootInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HcclRootInfo({HCCL_ROOT_INFO_BYTES} bytes)")
    }
}

/// `HCCL_SEND` (`hccl_types.h` `HcclSendRecvType`).
pub const HCCL_SEND: i32 = 0;
/// `HCCL_RECV`.
pub const HCCL_RECV: i32 = 1;

/// `HcclSendRecvItem` (`hccl_types.h`): one item of `HcclBatchSendRecv`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HcclSendRecvItem {
    /// [`HCCL_SEND`] or [`HCCL_RECV`] (`sendRecvType`).
    pub send_recv_type: i32,
    /// Device memory sent from or received into (`buf`).
    pub buf: *mut c_void,
    /// Elements (`count`).
    pub count: u64,
    /// `dataType`.
    pub data_type: HcclDataType,
    /// The peer (`remoteRank`).
    pub remote_rank: u32,
}

/// `HCCL_COMM_CONFIG_INFO_BYTES` (`hccl_types.h`): the config's header.
pub const HCCL_COMM_CONFIG_INFO_BYTES: usize = 24;
/// `HCCL_COMM_CONFIG_MAGIC_WORD` (`hccl_types.h`).
pub const HCCL_COMM_CONFIG_MAGIC_WORD: u32 = 0xf0f0_f0f0;
/// `HCCL_COMM_CONFIG_VERSION` of CANN 8.1.RC1 (`hccl_types.h`).
pub const HCCL_COMM_CONFIG_VERSION: u32 = 5;
/// `HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET` (`hccl_types.h`).
pub const HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET: u32 = 0xffff_ffff;
/// `HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET` (`hccl_types.h`).
pub const HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET: u32 = 0xffff_ffff;
/// `HCCL_COMM_DEFAULT_OP_EXPANSION_MODE` (`hccl_types.h`).
pub const HCCL_COMM_DEFAULT_OP_EXPANSION_MODE: u32 = 0;
/// `HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET` (`hccl_types.h`).
pub const HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET: u32 = 0xffff_ffff;
/// `HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET` (`hccl_types.h`).
pub const HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET: u32 = 0xffff_ffff;
/// `COMM_NAME_MAX_LENGTH` (`hccl_types.h`).
pub const COMM_NAME_MAX_LENGTH: usize = 128;
/// `UDI_MAX_LENGTH` (`hccl_types.h`).
pub const UDI_MAX_LENGTH: usize = 128;

/// `HcclCommConfig`, version 5 (`hccl_types.h` of CANN 8.1.RC1; 300
/// bytes): a 24-byte header (`size_t size`, `uint32_t magicWord`,
/// `uint32_t version`, `uint64_t reserved`) then the fields. Make one with
/// [`HcclCommConfig::new`], CANN's inline `HcclCommConfigInit` (`hccl.h`)
/// written in Rust: it is not an exported symbol.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HcclCommConfig {
    /// The header (`reserved[HCCL_COMM_CONFIG_INFO_BYTES]`).
    pub reserved: [u8; HCCL_COMM_CONFIG_INFO_BYTES],
    /// `hcclBufferSize`, MB (offset 24).
    pub hccl_buffer_size: u32,
    /// `hcclDeterministic`, 0 or 1 (offset 28).
    pub hccl_deterministic: u32,
    /// `hcclCommName`, NUL-terminated (offset 32).
    pub hccl_comm_name: [c_char; COMM_NAME_MAX_LENGTH],
    /// `hcclUdi` (offset 160).
    pub hccl_udi: [c_char; UDI_MAX_LENGTH],
    /// `hcclOpExpansionMode` (offset 288).
    pub hccl_op_expansion_mode: u32,
    /// `hcclRdmaTrafficClass` (offset 292).
    pub hccl_rdma_traffic_class: u32,
    /// `hcclRdmaServiceLevel` (offset 296).
    pub hccl_rdma_service_level: u32,
}

impl HcclCommConfig {
    /// `HcclCommConfigInit(&config)` (`hccl.h`): the header (size, magic
    /// word, version) and every field "not set".
    pub fn new() -> HcclCommConfig {
        let mut reserved = [0u8; HCCL_COMM_CONFIG_INFO_BYTES];
        let size = std::mem::size_of::<HcclCommConfig>() as u64;
        // configInfo_t { size_t size; uint32_t magicWord; uint32_t version;
        // uint64_t reserved; } in the machine's byte order.
        reserved[0..8].copy_from_slice(&size.to_ne_bytes());
        reserved[8..12].copy_from_slice(&HCCL_COMM_CONFIG_MAGIC_WORD.to_ne_bytes());
        reserved[12..16].copy_from_slice(&HCCL_COMM_CONFIG_VERSION.to_ne_bytes());
        HcclCommConfig {
            reserved,
            hccl_buffer_size: HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET,
            hccl_deterministic: HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET,
            hccl_comm_name: [0; COMM_NAME_MAX_LENGTH],
            hccl_udi: [0; UDI_MAX_LENGTH],
            hccl_op_expansion_mode: HCCL_COMM_DEFAULT_OP_EXPANSION_MODE,
            hccl_rdma_traffic_class: HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET,
            hccl_rdma_service_level: HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET,
        }
    }

    /// Sets `hcclCommName` to `name`, cut to 127 bytes (room for the NUL).
    pub fn with_name(mut self, name: &str) -> HcclCommConfig {
        self.hccl_comm_name = [0; COMM_NAME_MAX_LENGTH];
        for (d, s) in self
            .hccl_comm_name
            .iter_mut()
            .zip(name.bytes().take(COMM_NAME_MAX_LENGTH - 1))
        {
            *d = s as c_char;
        }
        self
    }
}

impl Default for HcclCommConfig {
    fn default() -> HcclCommConfig {
        HcclCommConfig::new()
    }
}

impl std::fmt::Debug for HcclCommConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HcclCommConfig")
            .field("hccl_buffer_size", &self.hccl_buffer_size)
            .field("hccl_deterministic", &self.hccl_deterministic)
            .finish_non_exhaustive()
    }
}

/// `ACL_SUCCESS` (`acl_base.h`).
pub const ACL_SUCCESS: AclError = 0;
/// `ACL_ERROR_INVALID_PARAM` (`acl_base.h`).
pub const ACL_ERROR_INVALID_PARAM: AclError = 100_000;
/// `ACL_ERROR_UNINITIALIZE` (`acl_base.h`).
pub const ACL_ERROR_UNINITIALIZE: AclError = 100_001;
/// `ACL_ERROR_REPEAT_INITIALIZE` (`acl_base.h`): `aclInit` ran already.
pub const ACL_ERROR_REPEAT_INITIALIZE: AclError = 100_002;
/// `ACL_ERROR_REPEAT_FINALIZE` (`acl_base.h`): `aclFinalize` twice.
pub const ACL_ERROR_REPEAT_FINALIZE: AclError = 100_037;
/// `ACL_ERROR_BAD_ALLOC` (`acl_base.h`): memory could not be allocated.
pub const ACL_ERROR_BAD_ALLOC: AclError = 200_000;
/// `ACL_ERROR_API_NOT_SUPPORT` (`acl_base.h`).
pub const ACL_ERROR_API_NOT_SUPPORT: AclError = 200_001;
/// `ACL_ERROR_INVALID_DEVICE` (`acl_base.h`): no such device.
pub const ACL_ERROR_INVALID_DEVICE: AclError = 200_002;
/// `ACL_ERROR_INVALID_RESOURCE_HANDLE` (`acl_base.h`): an unknown stream
/// or event.
pub const ACL_ERROR_INVALID_RESOURCE_HANDLE: AclError = 200_005;
/// `ACL_ERROR_RT_PARAM_INVALID` (`rt_error_codes.h`).
pub const ACL_ERROR_RT_PARAM_INVALID: AclError = 107_000;
/// `ACL_ERROR_RT_INVALID_DEVICEID` (`rt_error_codes.h`).
pub const ACL_ERROR_RT_INVALID_DEVICEID: AclError = 107_001;
/// `ACL_ERROR_RT_CONTEXT_NULL` (`rt_error_codes.h`): no device set on this
/// thread.
pub const ACL_ERROR_RT_CONTEXT_NULL: AclError = 107_002;
/// `ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID` (`rt_error_codes.h`): an event
/// never recorded or not yet reached.
pub const ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID: AclError = 107_006;
/// `ACL_ERROR_RT_MEMORY_ALLOCATION` (`rt_error_codes.h`): out of (device)
/// memory.
pub const ACL_ERROR_RT_MEMORY_ALLOCATION: AclError = 207_001;
/// `ACL_ERROR_RT_MEMORY_FREE` (`rt_error_codes.h`): freeing memory that is
/// not an allocation.
pub const ACL_ERROR_RT_MEMORY_FREE: AclError = 207_002;
/// `ACL_ERROR_RT_INTERNAL_ERROR` (`rt_error_codes.h`): a failed task on a
/// stream (an HCCL op whose `HcclResult` `HcclGetCommAsyncError` gives).
pub const ACL_ERROR_RT_INTERNAL_ERROR: AclError = 507_000;
/// `ACL_ERROR_RT_STREAM_SYNC_TIMEOUT` (`rt_error_codes.h`, newer
/// versions): `aclrtSynchronizeStreamWithTimeout` timed out.
pub const ACL_ERROR_RT_STREAM_SYNC_TIMEOUT: AclError = 507_046;
/// `ACL_ERROR_RT_EVENT_SYNC_TIMEOUT` (`rt_error_codes.h`, newer versions):
/// `aclrtSynchronizeEventWithTimeout` timed out.
pub const ACL_ERROR_RT_EVENT_SYNC_TIMEOUT: AclError = 507_047;
/// `ACL_ERROR_RT_FAILURE` (`acl_base.h`).
pub const ACL_ERROR_RT_FAILURE: AclError = 500_003;
/// `ACL_ERROR_DRV_FAILURE` (`acl_base.h`).
pub const ACL_ERROR_DRV_FAILURE: AclError = 500_004;

/// `ACL_MEMCPY_HOST_TO_HOST` (`acl_rt.h` `aclrtMemcpyKind`).
pub const ACL_MEMCPY_HOST_TO_HOST: i32 = 0;
/// `ACL_MEMCPY_HOST_TO_DEVICE`.
pub const ACL_MEMCPY_HOST_TO_DEVICE: i32 = 1;
/// `ACL_MEMCPY_DEVICE_TO_HOST`.
pub const ACL_MEMCPY_DEVICE_TO_HOST: i32 = 2;
/// `ACL_MEMCPY_DEVICE_TO_DEVICE`.
pub const ACL_MEMCPY_DEVICE_TO_DEVICE: i32 = 3;

/// `ACL_HBM_MEM` (`acl_rt.h` `aclrtMemAttr`: `ACL_DDR_MEM` 0,
/// `ACL_HBM_MEM` 1, ...): the NPU's own memory, which `aclrtMalloc`
/// takes from; the attribute [`crate::Library::mem_info`] asks about.
pub const ACL_HBM_MEM: i32 = 1;

/// `ACL_MEM_MALLOC_HUGE_FIRST` (`acl_rt.h` `aclrtMemMallocPolicy`): what
/// CANN's samples and hccl_test pass to `aclrtMalloc`.
pub const ACL_MEM_MALLOC_HUGE_FIRST: i32 = 0;

/// `ACL_EVENT_RECORDED_STATUS_NOT_READY` (`acl_rt.h`
/// `aclrtEventRecordedStatus`).
pub const ACL_EVENT_RECORDED_STATUS_NOT_READY: i32 = 0;
/// `ACL_EVENT_RECORDED_STATUS_COMPLETE`.
pub const ACL_EVENT_RECORDED_STATUS_COMPLETE: i32 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structs_have_cann_sizes() {
        // hccl_types.h: HcclRootInfo is 4108 bytes, HcclCommConfig version 5
        // is 300 bytes, HcclSendRecvItem is 32 bytes on LP64.
        assert_eq!(std::mem::size_of::<HcclRootInfo>(), 4108);
        assert_eq!(std::mem::size_of::<HcclCommConfig>(), 300);
        assert_eq!(std::mem::size_of::<HcclSendRecvItem>(), 32);
    }

    #[test]
    fn comm_config_init_writes_the_header_and_not_set_fields() {
        let c = HcclCommConfig::new().with_name("world");
        assert_eq!(
            u64::from_ne_bytes(c.reserved[0..8].try_into().unwrap()),
            300
        );
        assert_eq!(
            u32::from_ne_bytes(c.reserved[8..12].try_into().unwrap()),
            0xf0f0_f0f0
        );
        assert_eq!(
            u32::from_ne_bytes(c.reserved[12..16].try_into().unwrap()),
            5
        );
        assert_eq!(c.hccl_buffer_size, 0xffff_ffff);
        assert_eq!(c.hccl_deterministic, 0xffff_ffff);
        assert_eq!(
            c.hccl_comm_name[..6],
            [b'w', b'o', b'r', b'l', b'd', 0].map(|b| b as c_char)
        );
        let long = HcclCommConfig::new().with_name(&"x".repeat(300));
        assert_eq!(long.hccl_comm_name[127], 0, "NUL-terminated");
    }

    #[test]
    fn root_info_bytes_round_trip_and_refuse_another_length() {
        let b: Vec<u8> = (0..HCCL_ROOT_INFO_BYTES).map(|i| (i % 251) as u8).collect();
        assert_eq!(HcclRootInfo::from_bytes(&b).unwrap().to_bytes(), b);
        assert!(HcclRootInfo::from_bytes(&b[1..]).is_none());
    }
}
