//! Sans-IO collective algorithms: data types, the schedule IR, the executor
//! and the [`transport::Transport`] trait.
//!
//! No sockets, no threads, no clock: every algorithm emits a
//! [`schedule::RankPlan`] per rank, which an [`exec::Executor`] runs over any
//! transport (the simulator in `hccl-sim`, TCP in `hccl-hw`; the Ascend backend's
//! schedule mode runs the same plans in waves over HCCL's batch calls).
//! No environment either: settings such as `HCCL_ALGO` come in as
//! arguments (`algos/clippy.toml` disallows the reads, denied here).
// `unsafe` only in `kernels::simd` (run-time instruction-set dispatch).
#![deny(unsafe_code)]
// Items of private modules say `pub(crate)`: what is `pub` is the API.
#![warn(unreachable_pub)]
#![deny(clippy::disallowed_methods)]

pub mod algo;
pub mod collective;
pub mod dtype;
pub mod exec;
pub mod kernels;
pub mod layout;
pub mod mem_transport;
pub mod precision;
pub mod reference;
pub mod schedule;
pub mod select;
pub mod transport;
pub mod verify;

pub use dtype::{DataType, ReduceOp};
pub use exec::Executor;
pub use precision::ReducePrecision;
pub use schedule::{BufKind, Deps, Op, Rank, RankPlan, RankSchedule, Region, Step, StepId};
