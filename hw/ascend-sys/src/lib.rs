//! Placeholder, empty for now: the planned raw FFI to ACL and HCCL, loaded at
//! run time (so no CANN is needed to build). Nothing uses it yet.
