//! The report types: why the run stopped, what each stuck rank waits for,
//! the wait-for graph's edges and the root causes, as serde writes them.

use std::collections::BTreeMap;

use hccl_algos::schedule::StepId;
use serde::Serialize;

use crate::flows::LinkId;

/// Why the run stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum HangReason {
    /// No event was left while ranks were unfinished.
    QueueDrained,
    /// A rank was still in an op `timeout_ns` after starting it
    /// (`HCCL_EXEC_TIMEOUT`).
    Timeout {
        /// Fabric rank.
        rank: u32,
        /// Op index.
        op: usize,
        /// The timeout, ns.
        timeout_ns: u64,
    },
}

/// The state of one step a stuck rank waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitState {
    /// Posted, but the peer never posted the matching step.
    PeerNotPosted,
    /// Matched, but the message was dropped by the fault plan.
    Dropped,
    /// On the fabric (or queued behind a flow that is), stopped by links
    /// of bandwidth 0.
    DeadLink {
        /// The dead directed links.
        links: Vec<LinkId>,
    },
    /// Matched, but the peer crashed before the message entered the
    /// fabric, so it never will.
    PeerCrashed,
    /// The peer crashed (fault plan) without posting the matching step: it
    /// never will. Said instead of [`WaitState::PeerNotPosted`] so a report
    /// names the crash, not a missing receive or send.
    PeerCrashedBeforePosting,
    /// Matched and moving (a timeout hit while it was still in progress).
    InFlight,
}

/// One step a stuck rank has posted and waits to complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wait {
    /// Step index in the rank's schedule.
    pub step: StepId,
    /// `send`, `recv` or `recv_reduce`.
    pub action: &'static str,
    /// The peer's fabric rank.
    pub peer: u32,
    /// The peer's communicator rank.
    pub peer_comm_rank: u32,
    /// Schedule tag.
    pub tag: u32,
    /// Message bytes.
    pub bytes: u64,
    /// Why it has not completed.
    #[serde(flatten)]
    pub state: WaitState,
}

/// A rank that did not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StuckRank {
    /// Fabric rank.
    pub rank: u32,
    /// `waiting`, `crashed`, `failed` (argument check), `delayed` or `idle`.
    pub state: &'static str,
    /// Communicator of the op it is in.
    pub comm: Option<String>,
    /// The op (scenario index).
    pub op: Option<usize>,
    /// The op's label.
    pub label: Option<String>,
    /// The op's sequence number on its communicator.
    pub seq: Option<u64>,
    /// Its communicator rank in that op.
    pub comm_rank: Option<u32>,
    /// Communication steps posted and not complete.
    pub waits: Vec<Wait>,
    /// Steps pulled but waiting for their dependencies.
    pub blocked_steps: usize,
    /// Ops of its list not started yet.
    pub remaining_ops: Vec<usize>,
}

/// An edge of the wait-for graph: `from` cannot go on until `to` acts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitEdge {
    /// The waiting fabric rank.
    pub from: u32,
    /// The fabric rank waited on.
    pub to: u32,
    /// The op `from` is in.
    pub op: usize,
    /// The tags of the steps waiting, ascending.
    pub tags: Vec<u32>,
    /// The wait's state, as in [`WaitState`].
    pub state: String,
}

/// A directed link, named by its end nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkName {
    /// Link id (fabric edge index).
    pub id: LinkId,
    /// Source node name.
    pub from: String,
    /// Target node name.
    pub to: String,
}

/// A root cause the report can name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RootCause {
    /// Ranks called one op with different arguments (EI0005); every member
    /// still in the op failed.
    MismatchedArguments {
        /// Op index.
        op: usize,
        /// Its communicator.
        comm: String,
        /// Sequence number.
        seq: u64,
        /// The first differing field.
        field: String,
        /// Each value and the fabric ranks that used it.
        values: BTreeMap<String, Vec<u32>>,
        /// The failed ranks.
        failed: Vec<u32>,
    },
    /// A rank crashed (fault plan).
    CrashedRank {
        /// Fabric rank.
        rank: u32,
        /// When, ns.
        time_ns: u64,
        /// The op it was in or about to call.
        op: Option<usize>,
        /// Ranks waiting on it directly.
        waited_on_by: Vec<u32>,
    },
    /// Ranks wait in an op a member never called.
    NeverCalled {
        /// Fabric rank that did not call.
        rank: u32,
        /// The op.
        op: usize,
        /// Its communicator.
        comm: String,
        /// Sequence number.
        seq: u64,
        /// Why, when known (`skipped by the fault plan`, `finished`).
        why: String,
        /// Ranks waiting on it in that op.
        waited_on_by: Vec<u32>,
    },
    /// A rank's start of an op is delayed past `u64::MAX` ns (its
    /// `slow_rank` delays add up past the end of time): it never starts.
    DelayedForever {
        /// Fabric rank.
        rank: u32,
        /// The op it never starts.
        op: usize,
        /// Ranks waiting on it in that op.
        waited_on_by: Vec<u32>,
    },
    /// Messages stopped on links of bandwidth 0.
    DeadLink {
        /// The dead links.
        links: Vec<LinkName>,
        /// The stopped messages as (sender, receiver).
        messages: Vec<(u32, u32)>,
        /// Whether the fabric has another route between every such pair
        /// avoiding all dead links (the simulator, like a started RDMA
        /// connection, does not reroute).
        alternative_route: bool,
    },
    /// A message was dropped and its receiver waits for it.
    DroppedMessage {
        /// Sending fabric rank.
        src: u32,
        /// Receiving fabric rank.
        dst: u32,
        /// Op index.
        op: usize,
        /// Tag.
        tag: u32,
        /// Bytes.
        bytes: u64,
        /// When it was dropped, ns.
        time_ns: u64,
    },
    /// Ranks wait on each other in a cycle, each inside an op the next has
    /// not called: communicators used in different orders on different ranks.
    CommunicatorCycle {
        /// The ranks of the cycle, in wait order.
        ranks: Vec<u32>,
        /// The ops they are in (scenario index), one per rank.
        ops: Vec<usize>,
        /// The communicators of those ops.
        comms: Vec<String>,
    },
    /// The timeout expired while the op was still making progress: it is
    /// slower than `HCCL_EXEC_TIMEOUT` allows (degraded links, slow ranks).
    TooSlow {
        /// Fabric rank.
        rank: u32,
        /// Op index.
        op: usize,
        /// The timeout, ns.
        timeout_ns: u64,
    },
}

/// A hang report. [`HangReport::to_text`] for people; serialize for tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HangReport {
    /// The run's seed.
    pub seed: u64,
    /// Virtual time of the stop, ns: the timeout's expiry, or, when no
    /// event was left, the last real event (a timeout that was armed but
    /// ignored, for a rank that crashed or finished, does not count).
    pub time_ns: u64,
    /// The last op start or end, or fault action, ns: when things stopped
    /// moving (the stop itself can be later, e.g. at a pending timeout).
    pub last_activity_ns: u64,
    /// Why the run stopped.
    pub reason: HangReason,
    /// Root causes named, most specific first.
    pub root_causes: Vec<RootCause>,
    /// Every rank that did not finish, in rank order.
    pub ranks: Vec<StuckRank>,
    /// The wait-for graph.
    pub wait_for: Vec<WaitEdge>,
    /// Faults of the plan that never fired (see
    /// [`crate::faults::UnfiredFault`]), one line each; left out of the JSON
    /// when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unfired_faults: Vec<String>,
    /// A command that reproduces the run.
    pub replay: String,
}
