//! HCCL's C API on any host: `libhccl.so`, holding both HCCL's functions
//! (`hccl/hccl.h`) and a host ACL runtime (`acl/acl.h`: devices, memory,
//! streams, events, profiling), so that C and C++ programs written for
//! CANN build unmodified against the headers in `include/` and run on
//! hccl-rs's TCP transport or its simulator. The HCCL calls are one more
//! caller of [`hccl::Comm`]: no algorithm code is here.
//!
//! `hccl-capi install` (the binary of this crate) lays out a CANN-like
//! prefix: `include/`, `lib64/libhccl.so` and `lib64/libascendcl.so` (a
//! linker script naming `libhccl.so`, so `-lhccl -lascendcl` links one
//! library and the process has one registry of streams, memory and
//! communicators), and `set_env.sh`. See `capi/README.md`.
//!
//! | module | job |
//! | --- | --- |
//! | `boundary` | the only `unsafe`: C pointers to Rust values, each block with `// SAFETY:` |
//! | `handles` | opaque handles: a stale or foreign handle is an error code, never dereferenced |
//! | `memory` | device memory = host memory in a registry (bounds, wrong frees) |
//! | `stream` | streams (FIFO + worker thread) and events |
//! | `device` | device count, current device, SoC name ([`device::ENV_DEVICES`], [`device::ENV_SOC`]) |
//! | `acl` | the `acl*` entry points |
//! | `comms`, `group`, `hccl_api` | the `Hccl*` entry points: checks, then an op enqueued on the stream |
//! | [`codes`] | `HcclResult` and `aclError` numbers |
//! | [`prefix`] | the install layout |
//! | [`timing`] | `HCCL_TIMING=sim`: events measure the collectives' simulated time on a modelled cluster |
//!
//! Settings: `HCCL_HOST_DEVICES` (devices, default 8), `HCCL_HOST_SOC_NAME`
//! (default `Ascend910B1`), and every variable `Comm` reads
//! (`HCCL_BACKEND`, `HCCL_IF_IP`, `HCCL_EXEC_TIMEOUT`, ...).

#![deny(unsafe_code)]
#![warn(unreachable_pub)]

mod acl;
mod boundary;
pub mod codes;
mod comms;
pub mod device;
mod group;
mod handles;
mod hccl_api;
mod log;
mod memory;
pub mod prefix;
mod stream;
pub mod timing;

pub use hccl_api::{
    comm_ref, CommRef, COMM_NAME_MAX_LENGTH, HCCL_COMM_CONFIG_MAGIC_WORD, HCCL_ROOT_INFO_BYTES,
};

/// Every exported C function, by its C name, as a Rust function of this
/// crate (for Rust callers and the benchmark; C programs link them).
pub mod ffi {
    pub use crate::acl::*;
    pub use crate::hccl_api::*;
}
