//! hccl-rs: collective communication in the style of Huawei HCCL.
//!
//! This crate is the facade: [`Comm`], one rank's handle on a group of
//! ranks, with HCCL's calls (`HcclAllReduce` is [`Comm::all_reduce`], and
//! so on; the table is in [`comm`]). Everything below it lives in its own
//! crate; the architecture is in `docs/DESIGN.md`.
//!
//! # Map of the code
//!
//! | where | job |
//! | --- | --- |
//! | [`comm`] | the communicator: constructors (rank table, root info, launcher variables, [`Comm::init_all`]), op ordering, argument checks, planning, the typed and byte-level collectives and point-to-point on any [`Buffer`] (host slices, or [`DeviceBuffer`]s: NPU memory on Ascend, host memory elsewhere), [`group`], split, abort and destroy |
//! | `comm`'s backends | what moves the bytes, behind one seam: TCP (`HCCL_BACKEND=tcp`, the default), the simulator (`HCCL_BACKEND=sim`) and, with `--features ascend`, CANN's HCCL on Ascend NPUs (`HCCL_BACKEND=ascend`); see [`BackendKind`] |
//! | [`profiling`] | per-op records and their JSON files (`HCCL_PROFILING_ENABLE`) |
//! | [`stream`] | a host stream: a FIFO of tasks run by its worker or by the thread that waits (the C API's `aclrtStream`, the Python package's) |
//! | [`flight`] | the flight recorder's dump format (JSON Lines; `docs/flight_recorder.md`) and its reader |
//! | [`logging`] | [`init_logging`]: the library's `tracing` events on stderr (`RUST_LOG`, `ASCEND_GLOBAL_LOG_LEVEL`) |
//! | `hccl_topology` | rank tables (HCCL 1.0 / 1.2), the cluster model, the fabric graph, machine presets |
//! | `hccl_algos` | dtypes, reduce kernels, the schedule IR, the algorithms, the verifier, the selector, the executor and the `Transport` trait (no I/O) |
//! | `hccl_sim` | the discrete-event simulator: link model, faults, hang reports |
//! | `hccl_hw` | the real transport: TCP between processes, hosts or threads |
//! | `hccl-cli` (`cli/`) | the `hccl` and `hccl-test` programs; not a dependency of this crate |
//!
//! The Ascend backend (`--features ascend`) opens CANN at run time through
//! `hccl_ascend_sys`; it is tested against hccl-rs's own `libhccl.so`
//! (`capi/tests/ascend.rs`), not yet on NPUs.
//!
//! # Example
//!
//! An AllReduce (sum) on 4 simulated ranks, one thread per rank: rank `r`
//! sends `[r, r, r]`, every rank receives `0 + 1 + 2 + 3 = 6` in each
//! element. With [`BackendKind::Tcp`] the same code runs over loopback TCP.
//!
//! ```
//! use hccl::comm::ReduceOp;
//! use hccl::{BackendKind, Comm};
//!
//! let comms = Comm::init_all_on(BackendKind::Sim, 4)?;
//! let results = std::thread::scope(|s| {
//!     let ranks: Vec<_> = comms
//!         .iter()
//!         .map(|c| {
//!             s.spawn(move || {
//!                 let send = vec![c.rank() as f32; 3];
//!                 let mut recv = vec![0f32; 3];
//!                 c.all_reduce(&send, &mut recv, ReduceOp::Sum).map(|()| recv)
//!             })
//!         })
//!         .collect();
//!     ranks.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
//! });
//! for recv in results {
//!     assert_eq!(recv?, vec![6.0; 3]);
//! }
//! # Ok::<(), hccl::CommError>(())
//! ```

// No unsafe code here (hccl-hw's same-host path uses nix's safe wrappers;
// docs/DESIGN.md lists the modules that have some); the facade forbids it.
#![forbid(unsafe_code)]
// Items of private modules say `pub(crate)`: what is `pub` is the API.
#![warn(unreachable_pub)]

pub mod comm;
pub mod flight;
pub mod logging;
pub mod profiling;
pub mod stream;

pub use comm::{
    group, BackendError, BackendKind, Buffer, BufferMut, Comm, CommError, DeviceBuffer, Element,
    Group, OpHandle, P2pItem, P2pKind, ReduceOp, RootInfo, SimSettings,
};
pub use logging::init_logging;

/// The `half` crate, whose `f16` and `bf16` are the fp16 and bf16 types
/// [`Element`] takes (`hccl::half::f16`): use these, so a program needs
/// no `half` of its own, of a version that could differ.
pub use half;
