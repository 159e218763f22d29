//! Analysis: from a run's [`Stall`] and [`FaultLog`] to the stuck ranks,
//! the wait-for graph and the root causes, in the order the module
//! [`super`] lists them.

use std::collections::{BTreeMap, BTreeSet};

use hccl_algos::schedule::{Op, StepId};
use petgraph::graph::DiGraph;

use super::model::*;
use crate::faults::FaultLog;
use crate::flows::LinkId;
use crate::report::{RankStatus, RankWait, SimReport, Stall, StallReason};
use crate::scenario::Scenario;

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
            .filter(|e| e.to == target && op.is_none_or(|o| o == e.op))
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
