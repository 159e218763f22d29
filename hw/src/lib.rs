//! Real transports for hccl-rs: TCP between processes and hosts. (On
//! Ascend NPUs, CANN's HCCL moves the bytes: the facade's `ascend` feature
//! over `hccl-ascend-sys`.)
//!
//! `unsafe` lives in one module, `shm::segment` (the atomics and byte
//! copies of memory mapped by two processes); everywhere else the crate
//! copies between user buffers and socket buffers or rings (or, for a
//! peer on the same host, lends pieces of the sender's buffer, which the
//! peer reads through `nix`'s safe `process_vm_readv` wrapper) instead of
//! sharing pointers with its I/O threads.
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod shm;
pub mod sync;
// tokio drops its networking under `--cfg loom`: loom builds check `sync` only.
#[cfg(not(loom))]
pub mod tcp;
