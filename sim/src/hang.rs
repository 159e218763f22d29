//! Hang reports: what each stuck rank waits for, the wait-for graph, and
//! the root causes the simulator can name, as text for people and JSON
//! (serde) for tools, with the seed and a one-line replay command.
//!
//! Built from a run's [`Stall`](crate::report::Stall) and the
//! [`FaultLog`](crate::faults::FaultLog) of the plan that ran.
//! Causes, in this order: arguments that differ between ranks (EI0005),
//! crashed ranks, ranks that never called an op the others wait in, dead
//! links on a message's route (and whether another route exists), dropped
//! messages, a wait cycle across communicators used in different orders,
//! and an op that outlived `HCCL_EXEC_TIMEOUT` while still moving.
//!
//! One module a job: `model` (the report types), `analysis` (the wait-for
//! graph and the root causes) and `render` (text and JSON).

mod analysis;
mod model;
mod render;

pub use model::*;
pub use render::{fmt_ns, fmt_tag};
