//! What a run returns: per-op times and bandwidths, link usage, engine
//! statistics, and — when ranks are stuck — the state a hang report needs.

use hccl_algos::schedule::{Op, Step, StepId};
use serde::Serialize;

use crate::flows::{LinkId, LinkUsage};

/// The result of one op of the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct OpResult {
    /// The op's label.
    pub label: String,
    /// Its communicator's name.
    pub comm: String,
    /// Sequence number on the communicator.
    pub seq: u64,
    /// Virtual start time per communicator rank, ns (`None`: never started).
    pub start_ns: Vec<Option<u64>>,
    /// Virtual end time per communicator rank, ns (`None`: never finished).
    pub end_ns: Vec<Option<u64>>,
    /// Latest end minus earliest start, ns, if every rank finished.
    pub time_ns: Option<u64>,
    /// nccl-tests' "size" of the op in bytes (0 when unknown).
    pub bytes: u64,
    /// `bytes / time`, GB/s (G = 10^9), if finished and `time > 0`.
    pub algbw_gbps: Option<f64>,
    /// `algbw × factor` with nccl-tests' bus-bandwidth factor (DESIGN.md).
    pub busbw_gbps: Option<f64>,
    /// Data mode: each communicator rank's output buffer after the op.
    #[serde(skip)]
    pub outputs: Option<Vec<Vec<u8>>>,
}

/// Counters of the engine for one run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EngineStats {
    /// Events popped from the queue.
    pub events: u64,
    /// Messages matched (send met receive).
    pub messages: u64,
    /// Flows started on the fabric (messages with bytes and links).
    pub flows: u64,
    /// Local steps posted (copy, reduce, divide).
    pub local_steps: u64,
    /// Max-min reallocations (one per instant with flow changes).
    pub reallocations: u64,
    /// Largest number of pending events at once.
    pub peak_queue: u64,
    /// Largest number of concurrent flows.
    pub peak_flows: u64,
    /// Largest connected component (flows) progressive filling had to solve.
    pub largest_component: u64,
    /// Estimate of the engine's heap bytes: its tables and queue at the end
    /// of the run plus one full executor window per rank (an upper bound of
    /// the executors' peak); excludes the fabric, the plans' generator state
    /// and data buffers.
    pub memory_bytes: u64,
    /// Symmetry folding ([`crate::Scenario::symmetry`]): the period `d` of
    /// the run (ranks `0..d` simulated, the others their images), or 0 for
    /// a full run. The other counters count the simulated ranks only.
    pub folded_period: u64,
}

/// Why the run stopped before every rank finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum StallReason {
    /// No event left while ranks were unfinished.
    QueueDrained,
    /// A rank outlived the exec timeout in an op.
    Timeout {
        /// Fabric rank.
        rank: u32,
        /// Op index.
        op: usize,
    },
}

/// Where a stuck rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum RankStatus {
    /// Never started an op (or between ops).
    Idle,
    /// Inside an op.
    Running,
    /// Delayed by a hook before an op.
    Delayed,
    /// Crashed by a hook.
    Crashed,
    /// Finished every op.
    Done,
}

/// A stuck rank's state, for hang reports.
#[derive(Debug, Clone, Serialize)]
pub struct RankWait {
    /// Fabric rank.
    pub rank: u32,
    /// Its status.
    pub status: RankStatus,
    /// The op it is in (or delayed before, or crashed in), scenario index.
    pub op: Option<usize>,
    /// Its communicator rank in that op.
    pub comm_rank: Option<u32>,
    /// Ops of its list it has not started (scenario indices, in order).
    pub remaining_ops: Vec<usize>,
    /// Steps posted but not complete: what it waits on (peer, tag, ...).
    pub in_flight: Vec<(StepId, Step)>,
    /// Steps pulled but not posted (their dependencies are unfinished).
    pub blocked: Vec<(StepId, Step)>,
}

/// A posted send or receive whose partner never came.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct UnmatchedPost {
    /// True for a send, false for a receive.
    pub is_send: bool,
    /// Sending fabric rank.
    pub src: u32,
    /// Receiving fabric rank.
    pub dst: u32,
    /// Communicator id.
    pub comm: u64,
    /// Op sequence number on the communicator.
    pub seq: u64,
    /// Schedule tag.
    pub tag: u32,
    /// Step of the poster.
    pub step: StepId,
    /// The posted step.
    pub op: Op,
}

/// A flow that stopped moving (rate 0: a dead link on its route).
#[derive(Debug, Clone, Serialize)]
pub struct StalledFlow {
    /// Sending fabric rank.
    pub src: u32,
    /// Receiving fabric rank.
    pub dst: u32,
    /// Schedule tag.
    pub tag: u32,
    /// Message bytes.
    pub bytes: u64,
    /// Links of its route (fabric edge indices) that have 0 bandwidth.
    pub dead_links: Vec<LinkId>,
}

/// The simulation's state when it stopped with ranks unfinished.
#[derive(Debug, Clone, Serialize)]
pub struct Stall {
    /// Virtual time of the stop, ns.
    pub time_ns: u64,
    /// Why it stopped.
    pub reason: StallReason,
    /// Every rank that did not finish, in rank order.
    pub ranks: Vec<RankWait>,
    /// Posted sends and receives never matched, by receiver then post order.
    pub unmatched: Vec<UnmatchedPost>,
    /// Flows that cannot progress.
    pub stalled_flows: Vec<StalledFlow>,
}

/// Everything a run produces.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    /// One per op, in scenario order.
    pub ops: Vec<OpResult>,
    /// Per directed link (fabric edge index): busy time and bytes.
    pub links: Vec<LinkUsage>,
    /// Engine counters.
    pub stats: EngineStats,
    /// FNV-1a of every processed event (time, kind, ids): equal for equal
    /// seeds and inputs, on any machine.
    pub trace_hash: u64,
    /// Virtual time when the run ended, ns.
    pub end_time_ns: u64,
    /// The seed the run used.
    pub seed: u64,
    /// `Some` when ranks were left unfinished (a hang).
    pub stall: Option<Stall>,
}
