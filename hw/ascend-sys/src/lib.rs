//! Raw FFI to CANN's ACL runtime (`libascendcl.so`) and HCCL
//! (`libhccl.so`), **loaded at run time** with `libloading`, so that
//! `cargo build` and `cargo test` work on machines without CANN; cudarc's
//! run-time loading of CUDA is the model.
//!
//! | module | job |
//! | --- | --- |
//! | [`types`] | CANN's C types and values (`HcclResult`, `HcclDataType`, `HcclRootInfo`, `HcclCommConfig` and its `HcclCommConfigInit`, `aclError`, ...), each with its header |
//! | [`error`] | [`AscendError`]: missing library or symbol, "not supported by this CANN", and failed calls with function, code, `HcclGetErrorString` / `aclGetRecentErrMsg` text and what to check |
//! | `ffi` (the one module with `unsafe`) | [`Library`]: opens the libraries, resolves every required symbol up front ([`REQUIRED`]; newer ones in [`OPTIONAL`] when first called), and safe wrappers: [`DeviceMem`], [`Stream`], [`Event`], [`Comm`] |
//!
//! **Where the libraries come from** ([`Library::load`]):
//! `$ASCEND_HOME_PATH/lib64`, then `$ASCEND_TOOLKIT_HOME/lib64` (both set
//! by CANN's `set_env.sh`), then the system path; [`Library::load_from`]
//! opens one directory only. A missing library is
//! [`AscendError::NotFound`] ("libhccl.so not found in ...; source CANN's
//! set_env.sh"), never a link failure. hccl-rs's own host libraries
//! (`hccl-capi install`'s prefix) load the same way, which is how this
//! crate is tested without NPUs.
//!
//! **Safety model.** Device memory is an address CANN owns, never
//! dereferenced on the host; wrappers check that every region lies inside
//! its [`DeviceMem`] and synchronise the stream before they return, so no
//! borrow ends while CANN still uses it. This costs an
//! `aclrtSynchronizeStream` per call, which a collective library pays
//! anyway before it hands results back.
//!
//! Written against CANN 8.1.RC1's headers (sources in [`types`]).

// `unsafe` only in `ffi`, each block with `// SAFETY:`.
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod error;
#[allow(unsafe_code)]
mod ffi;
pub mod types;

pub use error::AscendError;
pub use ffi::{
    At, Comm, DeviceMem, Event, Library, Stream, ENV_HOME, ENV_TOOLKIT, OPTIONAL, REQUIRED,
};
