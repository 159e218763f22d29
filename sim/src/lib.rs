//! Deterministic discrete-event simulator of multi-NPU fabrics.
//!
//! A [`Scenario`] is a [`hccl_topology::Fabric`], communicators (named
//! subsets of ranks) and a list of ops (collectives or hand-written
//! schedules). [`Scenario::run`] steps one `hccl_algos` executor per rank
//! inside a single-threaded event loop over virtual time (integer ns) and
//! returns a [`SimReport`]: per-op start/end times per rank, algbw/busbw,
//! per-link busy time and bytes, engine counters, a trace hash, and — if
//! ranks got stuck — a [`Stall`] with what each one waits for.
//!
//! - Network model: messages are flows along the fabric's routes; link
//!   bandwidth is shared max-min fairly, recomputed incrementally per
//!   connected component ([`flows`]); rendezvous matching, α per message,
//!   hop latencies, γ for reductions (`core` module docs).
//! - Modes: [`Mode::Timing`] (lengths only, for tens of thousands of ranks)
//!   and [`Mode::Data`] (real bytes, results equal the reference).
//! - Determinism: events ordered by `(time, seq)`, one seeded ChaCha8 RNG
//!   (for hooks), no wall clock, no hash-ordered collections — enforced by
//!   this crate's `clippy.toml` (`disallowed-types`/`disallowed-methods`).
//! - Training steps ([`workload`]): a model's per-layer compute and
//!   gradients, its buckets' collectives launched when ready, compute and
//!   communication overlapping on one timeline.
//! - Faults and hang reports plug in through [`Hooks`] and [`Stall`]:
//!   [`faults`] (fault plans, the argument-consistency check) and [`hang`]
//!   (hang reports with root causes).
#![forbid(unsafe_code)]
// Items of private modules say `pub(crate)`: what is `pub` is the API.
#![warn(unreachable_pub)]
#![deny(clippy::disallowed_types, clippy::disallowed_methods)]

mod collective;
mod consistency;
mod core;
pub mod cost;
mod data;
mod engine;
mod error;
pub mod faults;
pub mod flows;
mod fold;
pub mod hang;
mod hooks;
mod queue;
mod report;
mod scenario;
pub mod scenario_file;
pub mod selector;
mod small;
mod trace;
mod transport;
pub mod workload;

pub use collective::{busbw_factor, Collective, PlannedCollective};
pub use data::default_input;
pub use error::SimError;
pub use flows::{LinkId, LinkUsage};
pub use hooks::{Ctl, Delivered, Hooks, MessageFate, MessageInfo, NoHooks, OpStart};
pub use report::{
    EngineStats, OpResult, RankStatus, RankWait, SimReport, Stall, StallReason, StalledFlow,
    UnmatchedPost,
};
pub use scenario::{CommId, CostParams, FixedPlans, Mode, OpId, PlanSource, Scenario};
pub use trace::TraceHash;
pub use transport::SimTransport;
