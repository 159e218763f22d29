//! Raw FFI to ACL and HCCL, loaded at run time (no CANN needed to build).
