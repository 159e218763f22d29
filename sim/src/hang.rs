//! Hang reports: what each stuck rank waits for, the wait-for graph, and
//! the root causes the simulator can name, as text for people and JSON
//! (serde) for tools, with the seed and a one-line replay command.
//!
//! Built from a run's [`Stall`] and the [`FaultLog`] of the plan that ran.
//! Causes, in this order: arguments that differ between ranks (EI0005),
//! crashed ranks, ranks that never called an op the others wait in, dead
//! links on a message's route (and whether another route exists), dropped
//! messages, a wait cycle across communicators used in different orders,
//! and an op that outlived `HCCL_EXEC_TIMEOUT` while still moving.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use hccl_algos::schedule::{Op, StepId};
use petgraph::graph::DiGraph;
use serde::Serialize;

use crate::faults::FaultLog;
use crate::flows::LinkId;
use crate::report::{RankStatus, RankWait, SimReport, Stall, StallReason};
use crate::scenario::Scenario;

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

struct Ctx<'s, 'f> {
    sc: &'s Scenario<'f>,
    stall: &'s Stall,
    log: &'s FaultLog,
}

impl Ctx<'_, '_> {
    fn comm_of(&self, op: usize) -> &crate::scenario::CommEntry {
        &self.sc.comms[self.sc.ops[op].comm]
    }

    fn wait_state(&self, r: &RankWait, op: usize, step: StepId, o: &Op, peer: u32) -> WaitState {
        let (is_send, src, dst, tag) = match *o {
            Op::Send { tag, .. } => (true, r.rank, peer, tag),
            Op::Recv { tag, .. } | Op::RecvReduce { tag, .. } => (false, peer, r.rank, tag),
            _ => return WaitState::InFlight,
        };
        let seq = self.sc.ops[op].seq;
        let comm = self.comm_of(op).id;
        let unmatched = self.stall.unmatched.iter().any(|u| {
            u.is_send == is_send
                && u.src == src
                && u.dst == dst
                && u.tag == tag
                && u.step == step
                && u.seq == seq
                && u.comm == comm
        });
        let peer_crashed = self.log.crashes.iter().any(|c| c.rank == peer);
        if unmatched {
            return if peer_crashed {
                WaitState::PeerCrashedBeforePosting
            } else {
                WaitState::PeerNotPosted
            };
        }
        if !is_send
            && self
                .log
                .drops
                .iter()
                .any(|d| d.op == op && d.src == src && d.dst == dst && d.tag == tag)
        {
            return WaitState::Dropped;
        }
        let mut links: Vec<LinkId> = self
            .stall
            .stalled_flows
            .iter()
            .filter(|f| f.src == src && f.dst == dst)
            .flat_map(|f| f.dead_links.iter().copied())
            .collect();
        if !links.is_empty() {
            links.sort_unstable();
            links.dedup();
            return WaitState::DeadLink { links };
        }
        if peer_crashed {
            return WaitState::PeerCrashed;
        }
        WaitState::InFlight
    }

    fn stuck_rank(&self, r: &RankWait) -> StuckRank {
        let failed = self.log.failures.iter().any(|f| f.rank == r.rank);
        let state = match r.status {
            RankStatus::Crashed if failed => "failed",
            RankStatus::Crashed => "crashed",
            RankStatus::Running => "waiting",
            RankStatus::Delayed => "delayed",
            _ => "idle",
        };
        let mut waits = Vec::new();
        let alive = matches!(r.status, RankStatus::Running | RankStatus::Delayed);
        if let (Some(op), true) = (r.op, alive) {
            let members = &self.comm_of(op).members;
            for (step, s) in &r.in_flight {
                let Some(p) = s.op.peer() else { continue };
                let peer = members.get(p as usize).copied().unwrap_or(u32::MAX);
                waits.push(Wait {
                    step: *step,
                    action: match s.op {
                        Op::Send { .. } => "send",
                        Op::Recv { .. } => "recv",
                        _ => "recv_reduce",
                    },
                    peer,
                    peer_comm_rank: p,
                    tag: match s.op {
                        Op::Send { tag, .. }
                        | Op::Recv { tag, .. }
                        | Op::RecvReduce { tag, .. } => tag,
                        _ => 0,
                    },
                    bytes: s.op.bytes(),
                    state: self.wait_state(r, op, *step, &s.op, peer),
                });
            }
        }
        let op = r.op;
        StuckRank {
            rank: r.rank,
            state,
            comm: op.map(|i| self.comm_of(i).name.clone()),
            op,
            label: op.map(|i| self.sc.ops[i].label.clone()),
            seq: op.map(|i| self.sc.ops[i].seq),
            comm_rank: r.comm_rank,
            waits,
            blocked_steps: if alive { r.blocked.len() } else { 0 },
            remaining_ops: r.remaining_ops.clone(),
        }
    }
}

fn state_name(s: &WaitState) -> String {
    match s {
        WaitState::PeerNotPosted => "peer_not_posted".into(),
        WaitState::Dropped => "dropped".into(),
        WaitState::DeadLink { .. } => "dead_link".into(),
        WaitState::PeerCrashed => "peer_crashed".into(),
        WaitState::PeerCrashedBeforePosting => "peer_crashed_before_posting".into(),
        WaitState::InFlight => "in_flight".into(),
    }
}

impl HangReport {
    /// The report of `report`'s stall (`None` if every rank finished).
    /// `log` is the fault plan's log (`FaultLog::default()` without faults);
    /// `replay` the command to print.
    pub fn build(
        sc: &Scenario<'_>,
        report: &SimReport,
        log: &FaultLog,
        replay: &str,
    ) -> Option<HangReport> {
        let stall = report.stall.as_ref()?;
        let cx = Ctx { sc, stall, log };
        let ranks: Vec<StuckRank> = stall.ranks.iter().map(|r| cx.stuck_rank(r)).collect();
        let mut wait_for: Vec<WaitEdge> = Vec::new();
        for r in &ranks {
            let mut edges: BTreeMap<(u32, String), Vec<u32>> = BTreeMap::new();
            for w in &r.waits {
                edges
                    .entry((w.peer, state_name(&w.state)))
                    .or_default()
                    .push(w.tag);
            }
            for ((to, state), mut tags) in edges {
                tags.sort_unstable();
                tags.dedup();
                wait_for.push(WaitEdge {
                    from: r.rank,
                    to,
                    op: r.op.unwrap_or(0),
                    tags,
                    state,
                });
            }
        }
        let reason = match stall.reason {
            StallReason::QueueDrained => HangReason::QueueDrained,
            StallReason::Timeout { rank, op } => HangReason::Timeout {
                rank,
                op,
                timeout_ns: sc.exec_timeout_ns.unwrap_or(0),
            },
        };
        let root_causes = root_causes(&cx, &ranks, &wait_for, &reason);
        let op_times = report
            .ops
            .iter()
            .flat_map(|o| o.start_ns.iter().chain(&o.end_ns).flatten().copied());
        let fault_times = log
            .crashes
            .iter()
            .map(|c| c.time_ns)
            .chain(log.drops.iter().map(|d| d.time_ns))
            .chain(log.skips.iter().map(|d| d.time_ns))
            .chain(log.failures.iter().map(|d| d.time_ns))
            .chain(log.link_changes.iter().map(|d| d.time_ns));
        let last_activity_ns = op_times.chain(fault_times).max().unwrap_or(0);
        // A drained queue stops at its last real event. The engine's clock
        // also advances to the expiry of timeouts armed for ranks that then
        // crashed or finished (they are ignored): such a stop time is not an
        // event, so the last op start/end or fault action stands instead.
        let stale_timeout = sc.exec_timeout_ns.is_some_and(|t| {
            report.ops.iter().any(|o| {
                o.start_ns
                    .iter()
                    .flatten()
                    .any(|s| s.saturating_add(t) == stall.time_ns)
            })
        });
        let time_ns = match reason {
            HangReason::QueueDrained if stale_timeout => last_activity_ns,
            HangReason::QueueDrained => stall.time_ns.max(last_activity_ns),
            HangReason::Timeout { .. } => stall.time_ns,
        };
        Some(HangReport {
            seed: report.seed,
            time_ns,
            last_activity_ns,
            reason,
            root_causes,
            ranks,
            wait_for,
            unfired_faults: log.unfired.iter().map(|u| u.message.clone()).collect(),
            replay: replay.to_string(),
        })
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a hang report serializes")
    }

    /// The report as text: at most `max_ranks` stuck ranks and edges are
    /// listed in full (the JSON has all).
    pub fn to_text_limited(&self, max_ranks: usize) -> String {
        let mut t = String::new();
        let _ = self.write_text(&mut t, max_ranks);
        t
    }

    /// The report as text, listing up to 32 stuck ranks.
    pub fn to_text(&self) -> String {
        self.to_text_limited(32)
    }

    fn write_text(&self, t: &mut String, max: usize) -> std::fmt::Result {
        let mismatch = self.root_causes.iter().find_map(|c| match c {
            RootCause::MismatchedArguments { op, comm, seq, .. } => Some((*op, comm, *seq)),
            _ => None,
        });
        match (&self.reason, mismatch) {
            // The argument check failed the op: an error, not a hang.
            (_, Some((op, comm, seq))) => writeln!(
                t,
                "FAILED: EI0005 argument mismatch in op #{op} on '{comm}' seq {seq} at {}; {} rank(s) unfinished",
                fmt_ns(self.last_activity_ns),
                self.ranks.len()
            )?,
            (HangReason::QueueDrained, None) => writeln!(
                t,
                "HANG: no event left after {}, {} rank(s) unfinished",
                fmt_ns(self.time_ns),
                self.ranks.len()
            )?,
            (
                HangReason::Timeout {
                    rank,
                    op,
                    timeout_ns,
                },
                None,
            ) => writeln!(
                t,
                "HANG at {}: rank {rank} still in op #{op} after HCCL_EXEC_TIMEOUT = {}; {} rank(s) unfinished",
                fmt_ns(self.time_ns),
                fmt_ns(*timeout_ns),
                self.ranks.len()
            )?,
        }
        writeln!(t, "root causes:")?;
        if self.root_causes.is_empty() {
            writeln!(t, "  (none found: see the wait-for graph)")?;
        }
        for c in &self.root_causes {
            writeln!(t, "  - {}", cause_text(c, &self.ranks))?;
        }
        for u in &self.unfired_faults {
            writeln!(t, "note: {u}")?;
        }
        writeln!(t, "stuck ranks:")?;
        for r in self.ranks.iter().take(max) {
            write!(t, "  rank {:<4} {}", r.rank, r.state)?;
            if let (Some(op), Some(comm), Some(label), Some(seq)) = (r.op, &r.comm, &r.label, r.seq)
            {
                write!(
                    t,
                    " in op #{op} '{label}' on '{comm}' seq {seq} (comm rank {})",
                    r.comm_rank.unwrap_or(0)
                )?;
            }
            if r.blocked_steps > 0 {
                write!(t, ", {} step(s) blocked behind", r.blocked_steps)?;
            }
            writeln!(t)?;
            for w in &r.waits {
                let dir = if w.action == "send" { "->" } else { "<-" };
                let what = match &w.state {
                    WaitState::PeerNotPosted => format!(
                        "rank {} has not posted the matching {}",
                        w.peer,
                        if w.action == "send" {
                            "receive"
                        } else {
                            "send"
                        }
                    ),
                    WaitState::Dropped => "the message was dropped".into(),
                    WaitState::DeadLink { links } => format!("stopped on dead link(s) {links:?}"),
                    WaitState::PeerCrashed => format!("rank {} crashed", w.peer),
                    WaitState::PeerCrashedBeforePosting => format!(
                        "rank {} crashed before posting the matching {}",
                        w.peer,
                        if w.action == "send" {
                            "receive"
                        } else {
                            "send"
                        }
                    ),
                    WaitState::InFlight => "in flight".into(),
                };
                writeln!(
                    t,
                    "      step {:<4} {:<11} {dir} rank {} (comm rank {}) tag {} {} B: {what}",
                    w.step,
                    w.action,
                    w.peer,
                    w.peer_comm_rank,
                    fmt_tag(w.tag),
                    w.bytes
                )?;
            }
        }
        if self.ranks.len() > max {
            writeln!(t, "  ... and {} more (see --json)", self.ranks.len() - max)?;
        }
        writeln!(t, "wait-for graph ({} edge(s)):", self.wait_for.len())?;
        for e in self.wait_for.iter().take(max) {
            writeln!(
                t,
                "  {} -> {}  op #{} {} tag(s) [{}]",
                e.from,
                e.to,
                e.op,
                e.state,
                e.tags
                    .iter()
                    .map(|&g| fmt_tag(g))
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if self.wait_for.len() > max {
            writeln!(t, "  ... and {} more", self.wait_for.len() - max)?;
        }
        writeln!(t, "seed: {}", self.seed)?;
        write!(t, "replay: {}", self.replay)
    }
}

fn list(v: &[u32]) -> String {
    let s: Vec<String> = v.iter().map(u32::to_string).collect();
    s.join(", ")
}

fn cause_text(c: &RootCause, ranks: &[StuckRank]) -> String {
    match c {
        RootCause::MismatchedArguments {
            op,
            comm,
            seq,
            field,
            values,
            failed,
        } => {
            let vals: Vec<String> = values
                .iter()
                .map(|(v, rs)| format!("{v} on rank(s) {}", list(rs)))
                .collect();
            format!(
                "mismatched arguments (EI0005) in op #{op} on '{comm}' seq {seq}: {field} differs: {}; rank(s) {} failed",
                vals.join(", "),
                list(failed)
            )
        }
        RootCause::CrashedRank {
            rank,
            time_ns,
            op,
            waited_on_by,
        } => format!(
            "rank {rank} crashed at {}{}; {}",
            fmt_ns(*time_ns),
            op.map(|o| format!(" in op #{o}")).unwrap_or_default(),
            if waited_on_by.is_empty() {
                "no rank waits on it directly".to_string()
            } else {
                format!("rank(s) {} wait on it", list(waited_on_by))
            }
        ),
        RootCause::NeverCalled {
            rank,
            op,
            comm,
            seq,
            why,
            waited_on_by,
        } => format!(
            "rank {rank} never called op #{op} on '{comm}' seq {seq} ({why}); rank(s) {} wait on it",
            list(waited_on_by)
        ),
        RootCause::DelayedForever {
            rank,
            op,
            waited_on_by,
        } => format!(
            "rank {rank} never starts op #{op}: its start delays (slow_rank faults) add up past {} ns, the end of simulated time; {}",
            u64::MAX,
            if waited_on_by.is_empty() {
                "no rank waits on it directly".to_string()
            } else {
                format!("rank(s) {} wait on it", list(waited_on_by))
            }
        ),
        RootCause::DeadLink {
            links,
            messages,
            alternative_route,
        } => {
            let names: Vec<String> = links
                .iter()
                .map(|l| format!("{} -> {} (link {})", l.from, l.to, l.id))
                .collect();
            let msgs: Vec<String> = messages.iter().map(|(s, d)| format!("{s}->{d}")).collect();
            format!(
                "dead link {} stops message(s) {}; {}",
                names.join(", "),
                msgs.join(", "),
                if *alternative_route {
                    "another route exists, but a started connection is not rerouted"
                } else {
                    "no alternative route exists"
                }
            )
        }
        RootCause::DroppedMessage {
            src,
            dst,
            op,
            tag,
            bytes,
            time_ns,
        } => format!(
            "message {src} -> {dst} of op #{op} (tag {}, {bytes} B) was dropped at {}; rank {dst} waits for it",
            fmt_tag(*tag),
            fmt_ns(*time_ns)
        ),
        RootCause::CommunicatorCycle { ranks: cyc, ops, comms } => {
            let steps: Vec<String> = cyc
                .iter()
                .zip(ops.iter().zip(comms))
                .enumerate()
                .map(|(i, (r, (o, c)))| {
                    let next = cyc[(i + 1) % cyc.len()];
                    let next_op = ranks
                        .iter()
                        .find(|s| s.rank == next)
                        .and_then(|s| s.op)
                        .map(|o| format!("#{o}"))
                        .unwrap_or_else(|| "?".into());
                    format!("rank {r} in op #{o} on '{c}' waits for rank {next}, which is in op {next_op}")
                })
                .collect();
            format!(
                "wait cycle across communicators (called in different orders on different ranks): {}",
                steps.join("; ")
            )
        }
        RootCause::TooSlow {
            rank,
            op,
            timeout_ns,
        } => format!(
            "op #{op} on rank {rank} was still making progress when HCCL_EXEC_TIMEOUT ({}) expired: it is too slow (degraded links, slow ranks); raise the timeout or remove the slowdown",
            fmt_ns(*timeout_ns)
        ),
    }
}

fn root_causes(
    cx: &Ctx<'_, '_>,
    ranks: &[StuckRank],
    edges: &[WaitEdge],
    reason: &HangReason,
) -> Vec<RootCause> {
    let mut out = Vec::new();
    let waiting_on = |target: u32, op: Option<usize>| -> Vec<u32> {
        let mut v: Vec<u32> = edges
            .iter()
            .filter(|e| e.to == target && op.map_or(true, |o| o == e.op))
            .map(|e| e.from)
            .collect();
        v.dedup();
        v
    };
    // 1. Mismatched arguments, one cause per op.
    let mut by_op: BTreeMap<usize, Vec<&crate::faults::ArgsFailure>> = BTreeMap::new();
    for f in &cx.log.failures {
        by_op.entry(f.op).or_default().push(f);
    }
    for (op, fs) in by_op {
        let field = fs[0].field.clone();
        let mut values: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for f in fs.iter().filter(|f| f.field == field) {
            values.entry(f.local.clone()).or_default().push(f.rank);
            let peer_vals = values.entry(f.remote.clone()).or_default();
            if !peer_vals.contains(&f.peer) {
                peer_vals.push(f.peer);
            }
        }
        for v in values.values_mut() {
            v.sort_unstable();
            v.dedup();
        }
        let mut failed: Vec<u32> = fs.iter().map(|f| f.rank).collect();
        failed.sort_unstable();
        failed.dedup();
        out.push(RootCause::MismatchedArguments {
            op,
            comm: cx.comm_of(op).name.clone(),
            seq: cx.sc.ops[op].seq,
            field,
            values,
            failed,
        });
    }
    // 2. Crashed ranks.
    for c in &cx.log.crashes {
        out.push(RootCause::CrashedRank {
            rank: c.rank,
            time_ns: c.time_ns,
            op: c.op,
            waited_on_by: waiting_on(c.rank, None),
        });
    }
    // 3. Ranks that never called an op others wait in: the peer is not
    // in that op and will not reach it (done, past it, or skipped it).
    let mut never: BTreeSet<(u32, usize)> = BTreeSet::new();
    for e in edges.iter().filter(|e| e.state == "peer_not_posted") {
        let Some(peer) = ranks.iter().find(|r| r.rank == e.to) else {
            // Not stuck: it finished every op without calling this one.
            never.insert((e.to, e.op));
            continue;
        };
        let in_op = peer.op == Some(e.op) && matches!(peer.state, "waiting" | "delayed");
        let will_reach = peer.remaining_ops.contains(&e.op);
        if !in_op && !will_reach && matches!(peer.state, "waiting" | "delayed" | "idle") {
            never.insert((e.to, e.op));
        }
    }
    for (rank, op) in never {
        let why = match cx.log.skips.iter().find(|s| s.rank == rank && s.op == op) {
            Some(s) => format!("skipped by the fault plan, faults[{}]", s.fault),
            None => "it went past the op without calling it".into(),
        };
        out.push(RootCause::NeverCalled {
            rank,
            op,
            comm: cx.comm_of(op).name.clone(),
            seq: cx.sc.ops[op].seq,
            why,
            waited_on_by: waiting_on(rank, Some(op)),
        });
    }
    // 3b. Ranks delayed with no event left: their wake-up time saturated
    // at u64::MAX, which the queue keeps as never.
    if matches!(reason, HangReason::QueueDrained) {
        for r in ranks.iter().filter(|r| r.state == "delayed") {
            if let Some(op) = r.op {
                out.push(RootCause::DelayedForever {
                    rank: r.rank,
                    op,
                    waited_on_by: waiting_on(r.rank, Some(op)),
                });
            }
        }
    }
    // 4. Dead links.
    if !cx.stall.stalled_flows.is_empty() {
        let g = cx.sc.fabric().graph();
        let mut dead: BTreeSet<LinkId> = BTreeSet::new();
        let mut msgs: BTreeSet<(u32, u32)> = BTreeSet::new();
        for f in &cx.stall.stalled_flows {
            dead.extend(f.dead_links.iter().copied());
            msgs.insert((f.src, f.dst));
        }
        // Every link down now (not only those on stopped routes).
        let mut now_gbps: BTreeMap<LinkId, f64> = BTreeMap::new();
        for c in &cx.log.link_changes {
            now_gbps.insert(c.link, c.gbps);
        }
        let down: BTreeSet<LinkId> = now_gbps
            .iter()
            .filter(|(_, g)| **g <= 0.0)
            .map(|(l, _)| *l)
            .chain(dead.iter().copied())
            .collect();
        let fabric = cx.sc.fabric();
        let alternative_route = msgs
            .iter()
            .all(|&(s, d)| route_avoiding(fabric, s, d, &down));
        out.push(RootCause::DeadLink {
            links: dead
                .iter()
                .map(|&l| {
                    let (a, b) = g
                        .edge_endpoints(petgraph::graph::EdgeIndex::new(l as usize))
                        .expect("a stalled flow's link is a fabric edge");
                    LinkName {
                        id: l,
                        from: g[a].name.clone(),
                        to: g[b].name.clone(),
                    }
                })
                .collect(),
            messages: msgs.into_iter().collect(),
            alternative_route,
        });
    }
    // 5. Dropped messages someone waits for.
    for r in ranks {
        for w in r.waits.iter().filter(|w| w.state == WaitState::Dropped) {
            if let Some(d) = cx.log.drops.iter().find(|d| {
                Some(d.op) == r.op && d.src == w.peer && d.dst == r.rank && d.tag == w.tag
            }) {
                out.push(RootCause::DroppedMessage {
                    src: d.src,
                    dst: d.dst,
                    op: d.op,
                    tag: d.tag,
                    bytes: d.bytes,
                    time_ns: d.time_ns,
                });
            }
        }
    }
    // 6. Cycles of "waits for a rank that has not posted" across
    // communicators, unless a rank of the cycle is already a named cause
    // (crashed, failed, never called): then the cycle is its consequence.
    let named: BTreeSet<u32> = out
        .iter()
        .flat_map(|c| match c {
            RootCause::CrashedRank { rank, .. }
            | RootCause::NeverCalled { rank, .. }
            | RootCause::DelayedForever { rank, .. } => vec![*rank],
            RootCause::MismatchedArguments { failed, .. } => failed.clone(),
            _ => Vec::new(),
        })
        .collect();
    out.extend(cycles(cx, ranks, edges).into_iter().filter(|c| match c {
        RootCause::CommunicatorCycle { ranks, .. } => !ranks.iter().any(|r| named.contains(r)),
        _ => true,
    }));
    // 7. A timeout while things still moved.
    if out.is_empty() {
        if let HangReason::Timeout {
            rank,
            op,
            timeout_ns,
        } = *reason
        {
            out.push(RootCause::TooSlow {
                rank,
                op,
                timeout_ns,
            });
        }
    }
    out
}

/// Strongly connected components (of 2+ ranks) of the not-posted edges
/// whose ranks are in different ops.
fn cycles(cx: &Ctx<'_, '_>, ranks: &[StuckRank], edges: &[WaitEdge]) -> Vec<RootCause> {
    let mut g: DiGraph<u32, ()> = DiGraph::new();
    let mut node: BTreeMap<u32, petgraph::graph::NodeIndex> = BTreeMap::new();
    for e in edges.iter().filter(|e| e.state == "peer_not_posted") {
        let a = *node.entry(e.from).or_insert_with(|| g.add_node(e.from));
        let b = *node.entry(e.to).or_insert_with(|| g.add_node(e.to));
        if g.find_edge(a, b).is_none() {
            g.add_edge(a, b, ());
        }
    }
    let mut out = Vec::new();
    let mut sccs = petgraph::algo::tarjan_scc(&g);
    for scc in &mut sccs {
        scc.sort_by_key(|n| g[*n]);
    }
    sccs.sort_by_key(|s| s.first().map(|n| g[*n]));
    for scc in sccs.into_iter().filter(|s| s.len() >= 2) {
        // Walk the cycle from its smallest rank, following edges inside it.
        let inside: BTreeSet<_> = scc.iter().copied().collect();
        let mut order = vec![scc[0]];
        while order.len() < scc.len() {
            let last = *order.last().expect("non-empty");
            let next = g
                .neighbors(last)
                .filter(|n| inside.contains(n) && !order.contains(n))
                .min_by_key(|n| g[*n]);
            match next {
                Some(n) => order.push(n),
                None => break,
            }
        }
        let rs: Vec<u32> = order.iter().map(|n| g[*n]).collect();
        let ops: Vec<usize> = rs
            .iter()
            .map(|r| {
                ranks
                    .iter()
                    .find(|s| s.rank == *r)
                    .and_then(|s| s.op)
                    .unwrap_or(0)
            })
            .collect();
        let comms: BTreeSet<usize> = ops.iter().map(|&o| cx.sc.ops[o].comm).collect();
        if comms.len() < 2 {
            continue; // one communicator: not an ordering problem across them
        }
        out.push(RootCause::CommunicatorCycle {
            comms: ops.iter().map(|&o| cx.comm_of(o).name.clone()).collect(),
            ranks: rs,
            ops,
        });
    }
    out
}

/// Whether `dst`'s NPU can be reached from `src`'s over links not in
/// `down` (through any node, as [`hccl_topology::Fabric::route`] routes).
fn route_avoiding(
    fabric: &hccl_topology::Fabric,
    src: u32,
    dst: u32,
    down: &BTreeSet<LinkId>,
) -> bool {
    use petgraph::visit::EdgeRef;
    let g = fabric.graph();
    let (s, d) = (fabric.npu(src), fabric.npu(dst));
    let mut seen = vec![false; g.node_count()];
    let mut stack = vec![s];
    seen[s.index()] = true;
    while let Some(n) = stack.pop() {
        if n == d {
            return true;
        }
        for e in g.edges(n) {
            let t = e.target();
            if !down.contains(&(e.id().index() as LinkId)) && !seen[t.index()] {
                seen[t.index()] = true;
                stack.push(t);
            }
        }
    }
    false
}

/// A schedule tag as `phase:tag`: the schedules put the phase of a
/// multi-phase algorithm in the tag's top 8 bits (`phase << 24 | tag`), so
/// `16777216` reads `1:0` (phase 1, tag 0).
pub fn fmt_tag(tag: u32) -> String {
    format!("{}:{}", tag >> 24, tag & 0x00ff_ffff)
}

/// `1836 s`, `12.5 us`, `850 ns`: virtual times for people.
pub fn fmt_ns(ns: u64) -> String {
    let (v, unit) = match ns {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "s"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "ms"),
        n if n >= 1_000 => (n as f64 / 1e3, "us"),
        n => return format!("{n} ns"),
    };
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {unit}")
}

#[cfg(test)]
mod tests {
    use super::fmt_ns;

    #[test]
    fn times_read_well() {
        assert_eq!(fmt_ns(850), "850 ns");
        assert_eq!(fmt_ns(12_500), "12.5 us");
        assert_eq!(fmt_ns(1_836_000_000_000), "1836 s");
        assert_eq!(fmt_ns(3_000_000), "3 ms");
    }
}
