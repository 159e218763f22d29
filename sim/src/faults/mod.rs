//! Fault injection (issue 4): a [`FaultPlan`] (JSON file or builder)
//! resolved against a scenario into [`FaultHooks`], which the engine calls
//! through [`crate::Hooks`]; the hooks keep a [`FaultLog`] of what they did,
//! which the hang report ([`crate::hang`]) reads to name root causes.
//!
//! ```no_run
//! # use hccl_sim::{Scenario, faults::{FaultPlan, LinkRef, run_with_faults}};
//! # fn demo(sc: &Scenario<'_>) -> Result<(), hccl_sim::faults::FaultError> {
//! let plan = FaultPlan::new()
//!     .link_down(LinkRef::nodes("npu3", "leaf0"), 10_000)
//!     .crash_at(5, 20_000);
//! let run = run_with_faults(sc, &plan)?;
//! if let Some(hang) = run.hang(sc, "hccl sim ...") {
//!     println!("{}", hang.to_text());
//! }
//! # Ok(()) }
//! ```

mod inject;
mod plan;
mod resolve;

pub use inject::{
    ArgsFailure, CrashRecord, DropRecord, FaultHooks, FaultLog, LinkChange, SkipRecord,
    UnfiredFault,
};
pub use plan::{Fault, FaultPlan, LinkRef};

use crate::error::SimError;
use crate::hang::HangReport;
use crate::report::SimReport;
use crate::scenario::Scenario;

/// HCCL's default `HCCL_EXEC_TIMEOUT`: 1836 s (CANN 8.0 environment variable
/// reference, "HCCL_EXEC_TIMEOUT": Atlas A2/A3 training products, range
/// `[0, 2147483647]` s, default 1836, 0 = never time out).
pub const DEFAULT_EXEC_TIMEOUT_S: u64 = 1836;

/// `HCCL_EXEC_TIMEOUT` semantics for the simulator: `seconds` of virtual
/// time an op may run on a rank; 0 means never (`None`).
pub fn exec_timeout_ns(seconds: u64) -> Option<u64> {
    (seconds > 0).then(|| seconds.saturating_mul(1_000_000_000))
}

/// What went wrong reading, resolving or running a fault plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultError {
    /// The file could not be read.
    #[error("fault plan {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// The text is not JSON.
    #[error("fault plan: line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the JSON parser says.
        message: String,
    },
    /// A field has a bad value, type or name.
    #[error("fault plan: {path} = {value}: {reason}")]
    Invalid {
        /// JSON path, e.g. `faults[2].nth`.
        path: String,
        /// The value found (JSON, shortened).
        value: String,
        /// The rule it breaks and what to do.
        reason: String,
    },
    /// A link names a node the fabric does not have.
    #[error("fault plan: {path} = \"{name}\": the fabric has no node of that name (nodes are named like {examples}; see `hccl topo show`)")]
    UnknownNode {
        /// JSON path.
        path: String,
        /// The name given.
        name: String,
        /// A few node names of the fabric.
        examples: String,
    },
    /// Two named nodes are not linked.
    #[error("fault plan: {path} = [\"{a}\", \"{b}\"]: no link joins these nodes; name two adjacent nodes")]
    NotLinked {
        /// JSON path.
        path: String,
        /// First node.
        a: String,
        /// Second node.
        b: String,
    },
    /// A link id past the fabric's links.
    #[error("fault plan: {path} = {id}: the fabric has links 0..{count}")]
    LinkOutOfRange {
        /// JSON path.
        path: String,
        /// The id given.
        id: u32,
        /// Number of directed links.
        count: usize,
    },
    /// A rank past the fabric's ranks.
    #[error("fault plan: {path} = {rank}: the fabric has ranks 0..{world_size}")]
    RankOutOfRange {
        /// JSON path.
        path: String,
        /// The rank given.
        rank: u32,
        /// Ranks of the fabric.
        world_size: u32,
    },
    /// An op index past the scenario's ops.
    #[error(
        "fault plan: {path} = {op}: the scenario has ops 0..{count} (the #i of `hccl sim` output)"
    )]
    OpOutOfRange {
        /// JSON path.
        path: String,
        /// The op given.
        op: usize,
        /// Number of ops.
        count: usize,
    },
    /// The rank does not take part in the op.
    #[error("fault plan: {path}: rank {rank} is not in communicator '{comm}' of op #{op}; name a member")]
    NotAMember {
        /// JSON path.
        path: String,
        /// Fabric rank.
        rank: u32,
        /// Op index.
        op: usize,
        /// Its communicator.
        comm: String,
    },
    /// `wrong_args` on an op that is not a collective call, or altered
    /// arguments that are themselves invalid.
    #[error("fault plan: {path}: {reason}")]
    BadArgs {
        /// JSON path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The simulation itself failed (bad scenario or schedule).
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// A finished run under a fault plan.
#[derive(Debug, Clone)]
pub struct FaultRun {
    /// The engine's report (its `stall` is set when ranks hung).
    pub report: SimReport,
    /// What the faults did.
    pub log: FaultLog,
}

impl FaultRun {
    /// The hang report if ranks did not finish, with `replay` as the
    /// command that reproduces it.
    pub fn hang(&self, sc: &Scenario<'_>, replay: &str) -> Option<HangReport> {
        HangReport::build(sc, &self.report, &self.log, replay)
    }
}

/// Runs `sc` under `plan`.
///
/// # Errors
/// [`FaultError`] if the plan does not fit the scenario, or
/// [`FaultError::Sim`] for a bad scenario; a hang is not an error but a
/// stall in [`FaultRun::report`].
pub fn run_with_faults(sc: &Scenario<'_>, plan: &FaultPlan) -> Result<FaultRun, FaultError> {
    let mut hooks = FaultHooks::new(sc, plan)?;
    let mut report = sc.run_with_hooks(&mut hooks)?;
    let log = hooks.into_log();
    report.trace_hash = fold_run_identity(report.trace_hash, sc, &log);
    Ok(FaultRun { report, log })
}

/// The engine's event hash extended with what the events alone do not
/// show: each op's communicator, sequence number and call arguments, and
/// the fault log (plan, crashes, drops, skips, altered calls, EI0005
/// failures). Two runs that stop before any event (e.g. a deadlock and an
/// argument mismatch) then still hash differently; the same run with the
/// same seed hashes the same (the log's JSON is deterministic).
fn fold_run_identity(engine_hash: u64, sc: &Scenario<'_>, log: &FaultLog) -> u64 {
    let mut h = crate::TraceHash::default();
    h.word(engine_hash);
    let mut text = String::new();
    for o in &sc.ops {
        let sig = o.source.collective().map(|c| c.args.signature());
        text.push_str(&format!("{}|{}|{}|{:?};", o.label, o.comm, o.seq, sig));
    }
    text.push_str(&serde_json::to_string(log).unwrap_or_default());
    for b in text.bytes() {
        h.byte(b);
    }
    h.value()
}
