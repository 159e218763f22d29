//! `hccl doctor`: the root cause of a failed or hung job from the flight
//! recorder dumps of its ranks ([`diagnose`]).
//!
//! The words are the simulator's hang report's (`hccl_sim::hang`): the
//! causes have its names (`mismatched_arguments`, `crashed_rank`,
//! `never_called`, `communicator_cycle`, `dead_link`, `too_slow`) and the
//! same order, most specific first, and the report has per-rank states and
//! a wait-for graph. What differs is the evidence: a real run has no fault
//! plan and no virtual clock, only what each rank recorded, so ops are
//! named by communicator and sequence number (not by scenario index), and
//! a rank that left no dump is a finding of its own (`missing_dump`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::{Dump, DumpReason, ErrorKind, OpRecord, OpState, WaitKind, WaitOn};

/// A root cause `hccl doctor` can name (serialized with `"cause"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// Ranks called one op with different arguments (HCCL's EI0005).
    MismatchedArguments {
        /// The communicator.
        comm: String,
        /// The op's sequence number.
        seq: u64,
        /// The first field that differs: `kind`, `dtype`, `count`, `op`, `root`.
        field: String,
        /// Each value and the communicator ranks that used it.
        values: BTreeMap<String, Vec<u32>>,
    },
    /// A rank left no dump and its peers lost its connection: its process
    /// died (a crash, a kill, the OOM killer) while they needed it.
    CrashedRank {
        /// The communicator.
        comm: String,
        /// The rank (communicator rank).
        rank: u32,
        /// Its world rank.
        global: u32,
        /// The op the peers were in when they lost it.
        seq: Option<u64>,
        /// The ranks that lost it.
        lost_by: Vec<u32>,
    },
    /// Ranks wait in an op that a member never called, while it is not
    /// blocked in another communicator's op.
    NeverCalled {
        /// The communicator.
        comm: String,
        /// The op's sequence number.
        seq: u64,
        /// The op (`AllReduce`, ...), as the waiting ranks called it.
        kind: String,
        /// The rank that did not call it.
        rank: u32,
        /// Its world rank.
        global: u32,
        /// Its last op on the communicator (`None`: no dump or no op).
        last_seq: Option<u64>,
        /// The ranks waiting for it.
        waited_on_by: Vec<u32>,
    },
    /// Ranks wait on each other in a cycle, each inside an op the next
    /// has not called: communicators used in different orders.
    CommunicatorCycle {
        /// World ranks of the cycle, in wait order.
        ranks: Vec<u32>,
        /// The communicator each of them waits in.
        comms: Vec<String>,
        /// The op (sequence number) each of them waits in.
        seqs: Vec<u64>,
    },
    /// Two ranks that both called an op wait for each other's data (or
    /// one waits for data the other sent, having finished the op): the
    /// link between them carries nothing (cut, firewalled, or a switch
    /// port down).
    DeadLink {
        /// The communicator.
        comm: String,
        /// The op's sequence number.
        seq: u64,
        /// The two communicator ranks.
        ranks: [u32; 2],
        /// Their hosts, as their dumps name them.
        hosts: [String; 2],
    },
    /// A rank left no dump, and no rank lost its connection.
    MissingDump {
        /// The communicator.
        comm: String,
        /// The rank (communicator rank).
        rank: u32,
        /// Its world rank.
        global: u32,
        /// Ranks whose failed op waited on it.
        waited_on_by: Vec<u32>,
    },
    /// An op timed out, every rank called it, and nothing above explains
    /// it: slower than `HCCL_EXEC_TIMEOUT` allows.
    TooSlow {
        /// The communicator.
        comm: String,
        /// The op's sequence number.
        seq: u64,
        /// The ranks that timed out.
        ranks: Vec<u32>,
    },
}

/// Where a rank is on one communicator, by its dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankState {
    /// The communicator.
    pub comm: String,
    /// The communicator rank.
    pub rank: u32,
    /// Its world rank.
    pub global: u32,
    /// Its host.
    pub host: String,
    /// Why it dumped.
    pub reason: DumpReason,
    /// `failed`, `waiting` (in an op), `queued` or `idle` (every op done).
    pub state: &'static str,
    /// The op it is in or failed (`None` when idle).
    pub seq: Option<u64>,
    /// That op's kind.
    pub kind: Option<String>,
    /// That op's error kind, if it failed.
    pub error: Option<ErrorKind>,
    /// The peers that op waited on.
    pub waits: Vec<WaitOn>,
    /// Its last collective's sequence number on the communicator.
    pub last_seq: Option<u64>,
}

/// An edge of the wait-for graph: world rank `from` cannot go on until
/// `to` acts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct WaitEdge {
    /// Waiting world rank.
    pub from: u32,
    /// World rank waited on.
    pub to: u32,
    /// The communicator `from` waits in.
    pub comm: String,
    /// The op (`None`: point-to-point).
    pub seq: Option<u64>,
    /// Why.
    pub why: WaitKind,
}

/// One communicator, as the dumps show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommSummary {
    /// Its name.
    pub comm: String,
    /// Its ranks.
    pub size: u32,
    /// Ranks that left a dump.
    pub dumped: Vec<u32>,
    /// Ranks that left none.
    pub missing: Vec<u32>,
    /// World rank of each rank (index: communicator rank).
    pub global_ranks: Vec<u32>,
}

/// `hccl doctor`'s report. [`Diagnosis::to_text`] for people; serialize
/// for tools (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    /// The communicators found.
    pub comms: Vec<CommSummary>,
    /// Root causes, most specific first.
    pub root_causes: Vec<Cause>,
    /// Every dumped rank's state, by communicator then rank.
    pub ranks: Vec<RankState>,
    /// The wait-for graph, in world ranks.
    pub wait_for: Vec<WaitEdge>,
    /// What to do, one line per cause.
    pub advice: Vec<String>,
    /// The dumps it read (for the side-by-side table).
    #[serde(skip)]
    pub dumps: Vec<Dump>,
}

/// Why a rank in op `seq` waits on `w.peer`, given the peer's dump: a
/// peer that "never called" the op by this rank's view but recorded it
/// itself did call it, and its start never arrived (a link that carries
/// nothing): data.
fn effective(w: &WaitOn, seq: Option<u64>, peer: Option<&Dump>) -> WaitKind {
    let called = |d: &Dump| d.ops.iter().any(|o| o.seq.is_some() && o.seq == seq);
    match (w.why, peer) {
        (WaitKind::NeverCalled, Some(p)) if called(p) => WaitKind::Data,
        (why, _) => why,
    }
}

/// The op a rank is in or failed: its first op not done.
fn current(d: &Dump) -> Option<&OpRecord> {
    d.ops.iter().find(|o| o.state != OpState::Done)
}

fn last_seq(d: &Dump) -> Option<u64> {
    d.ops.iter().filter_map(|o| o.seq).max()
}

fn global_of(d: &Dump, r: u32) -> u32 {
    d.header
        .global_ranks
        .as_ref()
        .and_then(|g| g.get(r as usize).copied())
        .unwrap_or(r)
}

/// Diagnoses `dumps` (as [`super::read_dumps`] returns them: the last
/// dump of each communicator rank).
pub fn diagnose(dumps: Vec<Dump>) -> Diagnosis {
    let mut by_comm: BTreeMap<String, Vec<&Dump>> = BTreeMap::new();
    for d in &dumps {
        by_comm.entry(d.header.comm.clone()).or_default().push(d);
    }
    let mut comms = Vec::new();
    let mut ranks = Vec::new();
    let mut edges: BTreeSet<WaitEdge> = BTreeSet::new();
    let mut causes: Vec<Cause> = Vec::new();
    // (comm, seq, rank that never called) -> waiting ranks.
    let mut never: BTreeMap<(String, u64, u32), (String, Vec<u32>)> = BTreeMap::new();
    let mut missing_causes = Vec::new();
    let mut slow = Vec::new();
    let mut links = Vec::new();
    for (name, ds) in &by_comm {
        let size = ds.iter().map(|d| d.header.size).max().unwrap_or(0);
        let at = |r: u32| ds.iter().find(|d| d.header.rank == r).copied();
        let globals: Vec<u32> = (0..size)
            .map(|r| ds.first().map_or(r, |d| global_of(d, r)))
            .collect();
        let dumped: Vec<u32> = (0..size).filter(|&r| at(r).is_some()).collect();
        let missing: Vec<u32> = (0..size).filter(|&r| at(r).is_none()).collect();
        for d in ds {
            let cur = current(d);
            let (r, g) = (d.header.rank, global_of(d, d.header.rank));
            ranks.push(RankState {
                comm: name.clone(),
                rank: r,
                global: g,
                host: d.header.host.clone(),
                reason: d.header.reason,
                state: match cur.map(|c| c.state) {
                    None => "idle",
                    Some(OpState::Failed) => "failed",
                    Some(OpState::Queued) => "queued",
                    Some(_) => "waiting",
                },
                seq: cur.and_then(|c| c.seq),
                kind: cur.map(|c| c.kind.clone()),
                error: cur.and_then(|c| c.error.as_ref().map(|e| e.kind)),
                waits: cur.map(|c| c.waits.clone()).unwrap_or_default(),
                last_seq: last_seq(d),
            });
            let Some(c) = cur else { continue };
            for w in &c.waits {
                edges.insert(WaitEdge {
                    from: g,
                    to: globals.get(w.peer as usize).copied().unwrap_or(w.peer),
                    comm: name.clone(),
                    seq: c.seq,
                    why: effective(w, c.seq, at(w.peer)),
                });
            }
            // A dumped peer whose record ends before this op never called it.
            let Some(k) = c.seq else { continue };
            for p in &dumped {
                let pd = at(*p).expect("dumped");
                let called = pd.ops.iter().any(|o| o.seq.is_some_and(|s| s >= k));
                if *p != r && !called {
                    edges.insert(WaitEdge {
                        from: g,
                        to: globals[*p as usize],
                        comm: name.clone(),
                        seq: Some(k),
                        why: WaitKind::NeverCalled,
                    });
                }
            }
        }
        if let Some(m) = mismatch(name, ds) {
            causes.push(m);
        }
        // Ranks with no dump: lost (crashed) or just missing.
        for &m in &missing {
            let lost_by: Vec<(u32, Option<u64>)> = ds
                .iter()
                .filter_map(|d| {
                    let c = current(d)?;
                    c.waits
                        .iter()
                        .any(|w| w.peer == m && w.why == WaitKind::Lost)
                        .then_some((d.header.rank, c.seq))
                })
                .collect();
            let waited: Vec<u32> = ds
                .iter()
                .filter(|d| current(d).is_some_and(|c| c.waits.iter().any(|w| w.peer == m)))
                .map(|d| d.header.rank)
                .collect();
            if lost_by.is_empty() {
                missing_causes.push(Cause::MissingDump {
                    comm: name.clone(),
                    rank: m,
                    global: globals[m as usize],
                    waited_on_by: waited,
                });
            } else {
                causes.push(Cause::CrashedRank {
                    comm: name.clone(),
                    rank: m,
                    global: globals[m as usize],
                    seq: lost_by.iter().find_map(|l| l.1),
                    lost_by: lost_by.iter().map(|l| l.0).collect(),
                });
            }
        }
        // Never called, per (op, rank); dead links; timeouts.
        for d in ds {
            let Some(c) = current(d) else { continue };
            let Some(k) = c.seq else { continue };
            let r = d.header.rank;
            for w in &c.waits {
                match effective(w, Some(k), at(w.peer)) {
                    WaitKind::NeverCalled if at(w.peer).is_some() => {
                        let e = never
                            .entry((name.clone(), k, w.peer))
                            .or_insert_with(|| (c.kind.clone(), Vec::new()));
                        if !e.1.contains(&r) {
                            e.1.push(r);
                        }
                    }
                    WaitKind::Data => {
                        let Some(pd) = at(w.peer) else { continue };
                        // Both in this op, each waiting for the other's
                        // data; or the peer finished it, so it sent all it
                        // had to and what this rank waits for was lost on
                        // the way.
                        let mutual = current(pd).is_some_and(|pc| {
                            pc.seq == Some(k)
                                && pc.waits.iter().any(|x| {
                                    x.peer == r && effective(x, Some(k), Some(d)) == WaitKind::Data
                                })
                        });
                        let peer_done = pd
                            .ops
                            .iter()
                            .any(|o| o.seq == Some(k) && o.state == OpState::Done);
                        let (lo, hi) = if r < w.peer { (*d, pd) } else { (pd, *d) };
                        let link = Cause::DeadLink {
                            comm: name.clone(),
                            seq: k,
                            ranks: [lo.header.rank, hi.header.rank],
                            hosts: [lo.header.host.clone(), hi.header.host.clone()],
                        };
                        if (mutual || peer_done) && !links.contains(&link) {
                            links.push(link);
                        }
                    }
                    _ => {}
                }
            }
            for p in &dumped {
                let pd = at(*p).expect("dumped");
                let called = pd.ops.iter().any(|o| o.seq.is_some_and(|s| s >= k));
                if *p != r && !called {
                    let e = never
                        .entry((name.clone(), k, *p))
                        .or_insert_with(|| (c.kind.clone(), Vec::new()));
                    if !e.1.contains(&r) {
                        e.1.push(r);
                    }
                }
            }
            if c.error
                .as_ref()
                .is_some_and(|e| e.kind == ErrorKind::Timeout)
            {
                slow.push((name.clone(), k, r));
            }
        }
        comms.push(CommSummary {
            comm: name.clone(),
            size,
            dumped,
            missing,
            global_ranks: globals,
        });
    }
    let edges: Vec<WaitEdge> = edges.into_iter().collect();
    let cycle = find_cycle(&edges);
    if let Some(c) = &cycle {
        causes.push(c.clone());
    }
    let in_cycle: BTreeSet<u32> = match &cycle {
        Some(Cause::CommunicatorCycle { ranks, .. }) => ranks.iter().copied().collect(),
        _ => BTreeSet::new(),
    };
    for ((comm, seq, rank), (kind, mut by)) in never {
        let info = comms.iter().find(|c| c.comm == comm).expect("seen");
        let global = info
            .global_ranks
            .get(rank as usize)
            .copied()
            .unwrap_or(rank);
        let stuck_before = by_comm[&comm]
            .iter()
            .find(|d| d.header.rank == rank)
            .and_then(|d| current(d))
            .is_some_and(|c| c.seq.is_some_and(|s| s < seq));
        // A rank stuck in an earlier op of the communicator is explained
        // by that op (a cause of its own above), not as a rank that never
        // called this one.
        if in_cycle.contains(&global) || info.missing.contains(&rank) || stuck_before {
            continue;
        }
        by.sort_unstable();
        let last = by_comm[&comm]
            .iter()
            .find(|d| d.header.rank == rank)
            .and_then(|d| last_seq(d));
        causes.push(Cause::NeverCalled {
            comm,
            seq,
            kind,
            rank,
            global,
            last_seq: last,
            waited_on_by: by,
        });
    }
    causes.extend(links);
    // One finding per world rank without dumps (it is missing from each
    // of its communicators).
    for m in missing_causes {
        let Cause::MissingDump { global, .. } = &m else {
            continue;
        };
        let named = causes.iter().any(|c| {
            matches!(c, Cause::CrashedRank { global: g, .. } | Cause::MissingDump { global: g, .. } if g == global)
        });
        if !named {
            causes.push(m);
        }
    }
    if causes.is_empty() {
        let mut per: BTreeMap<(String, u64), Vec<u32>> = BTreeMap::new();
        for (c, k, r) in slow {
            per.entry((c, k)).or_default().push(r);
        }
        for ((comm, seq), ranks) in per {
            causes.push(Cause::TooSlow { comm, seq, ranks });
        }
    }
    let advice = causes.iter().map(advice).collect();
    Diagnosis {
        comms,
        root_causes: causes,
        ranks,
        wait_for: edges,
        advice,
        dumps,
    }
}

/// The lowest seq of `ds` at which ranks' calls differ, as a cause.
fn mismatch(comm: &str, ds: &[&Dump]) -> Option<Cause> {
    let mut by_seq: BTreeMap<u64, Vec<(u32, &OpRecord)>> = BTreeMap::new();
    for d in ds {
        for o in &d.ops {
            if let Some(s) = o.seq {
                by_seq.entry(s).or_default().push((d.header.rank, o));
            }
        }
    }
    type Field = (&'static str, fn(&OpRecord) -> String);
    let fields: [Field; 5] = [
        ("kind", |o| o.kind.clone()),
        ("dtype", |o| o.dtype.clone()),
        ("count", |o| o.count.to_string()),
        ("op", |o| o.op.clone().unwrap_or_else(|| "-".into())),
        ("root", |o| o.root.map_or("-".into(), |r| r.to_string())),
    ];
    for (seq, calls) in by_seq {
        for (field, get) in &fields {
            let mut values: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            for (r, o) in &calls {
                values.entry(get(o)).or_default().push(*r);
            }
            if values.len() > 1 {
                return Some(Cause::MismatchedArguments {
                    comm: comm.into(),
                    seq,
                    field: (*field).into(),
                    values,
                });
            }
        }
    }
    None
}

/// A cycle of `never_called` edges through two or more communicators.
fn find_cycle(edges: &[WaitEdge]) -> Option<Cause> {
    let next = |from: u32| {
        edges
            .iter()
            .filter(move |e| e.from == from && e.why == WaitKind::NeverCalled)
    };
    let starts: BTreeSet<u32> = edges.iter().map(|e| e.from).collect();
    for &s in &starts {
        // Depth-first along never-called edges, at most one visit a rank.
        let mut path: Vec<&WaitEdge> = Vec::new();
        let mut seen = BTreeSet::new();
        if walk(s, s, &next, &mut path, &mut seen) {
            let comms: BTreeSet<&String> = path.iter().map(|e| &e.comm).collect();
            if comms.len() >= 2 {
                return Some(Cause::CommunicatorCycle {
                    ranks: path.iter().map(|e| e.from).collect(),
                    comms: path.iter().map(|e| e.comm.clone()).collect(),
                    seqs: path.iter().map(|e| e.seq.unwrap_or(0)).collect(),
                });
            }
        }
    }
    None
}

fn walk<'e, I: Iterator<Item = &'e WaitEdge>>(
    start: u32,
    at: u32,
    next: &impl Fn(u32) -> I,
    path: &mut Vec<&'e WaitEdge>,
    seen: &mut BTreeSet<u32>,
) -> bool {
    if !seen.insert(at) {
        return false;
    }
    for e in next(at) {
        path.push(e);
        if e.to == start || walk(start, e.to, next, path, seen) {
            return true;
        }
        path.pop();
    }
    false
}

fn advice(c: &Cause) -> String {
    match c {
        Cause::MismatchedArguments {
            comm, seq, field, ..
        } => format!(
            "make every rank call comm '{comm}' op #{seq} with the same {field}; a rank that skipped or added an op earlier shifts its later ops by one"
        ),
        Cause::CrashedRank { rank, .. } => format!(
            "rank {rank}'s process died: read its log and exit status (a signal, a panic, the OOM killer); it left no dump"
        ),
        Cause::NeverCalled {
            comm, seq, rank, ..
        } => format!(
            "find why rank {rank} does not reach comm '{comm}' op #{seq}: a branch that skips it, or work before it that never ends (a hung rank can be dumped with SIGUSR1)"
        ),
        Cause::CommunicatorCycle { .. } => {
            "call the communicators' ops in the same order on every rank".to_string()
        }
        Cause::DeadLink { hosts, ranks, .. } => format!(
            "check the network between {} (rank {}) and {} (rank {}): link, switch port, firewall; HCCL_SOCKET_IFNAME / HCCL_IF_IP pick the interface",
            hosts[0], ranks[0], hosts[1], ranks[1]
        ),
        Cause::MissingDump { rank, .. } => format!(
            "rank {rank} left no dump: it crashed, was killed, or ran without HCCL_FLIGHT_RECORDER_DIR; send SIGUSR1 to a hung rank to dump it"
        ),
        Cause::TooSlow { .. } => {
            "every rank called the op: find the slow rank or link, or raise HCCL_EXEC_TIMEOUT"
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flight::{Header, OpError, FORMAT, VERSION};

    fn op(seq: u64, state: OpState, waits: &[(u32, WaitKind)], err: Option<ErrorKind>) -> OpRecord {
        OpRecord {
            seq: Some(seq),
            turn: seq,
            kind: "AllReduce".into(),
            count: 2048,
            dtype: "fp32".into(),
            op: Some("sum".into()),
            root: None,
            peers: vec![],
            counts: Vec::new(),
            matrix: Vec::new(),
            items: Vec::new(),
            bytes: 8192,
            algorithm: Some("ring".into()),
            state,
            queued_us: 0,
            started_us: Some(0),
            ended_us: None,
            waits: waits
                .iter()
                .map(|&(peer, why)| WaitOn { peer, why })
                .collect(),
            error: err.map(|kind| OpError {
                kind,
                text: String::new(),
            }),
        }
    }

    fn dump(rank: u32, host: &str, ops: Vec<OpRecord>) -> Dump {
        Dump {
            header: Header {
                format: FORMAT.into(),
                version: VERSION,
                comm: "world".into(),
                comm_id: "0".into(),
                rank,
                size: 2,
                global_ranks: None,
                backend: "tcp".into(),
                host: host.into(),
                pid: 1,
                reason: DumpReason::Timeout,
                detail: None,
                dumped_us: 0,
                created_us: 0,
                entries: 2048,
                recorded: ops.len() as u64,
                exec_timeout_s: Some(1.0),
            },
            ops,
            path: None,
        }
    }

    #[test]
    fn two_ranks_waiting_for_each_others_data_are_a_dead_link() {
        let t = Some(ErrorKind::Timeout);
        let d = diagnose(vec![
            dump(
                0,
                "a",
                vec![
                    op(0, OpState::Done, &[], None),
                    op(1, OpState::Failed, &[(1, WaitKind::Data)], t),
                ],
            ),
            dump(
                1,
                "b",
                vec![
                    op(0, OpState::Done, &[], None),
                    op(1, OpState::Failed, &[(0, WaitKind::Data)], t),
                ],
            ),
        ]);
        assert_eq!(
            d.root_causes,
            [Cause::DeadLink {
                comm: "world".into(),
                seq: 1,
                ranks: [0, 1],
                hosts: ["a".into(), "b".into()],
            }]
        );
        assert!(d
            .to_text()
            .contains("check the network between a (rank 0) and b (rank 1)"));
    }

    #[test]
    fn ranks_whose_starts_never_arrived_but_that_both_called_the_op_are_a_dead_link() {
        let t = Some(ErrorKind::Timeout);
        let nc = WaitKind::NeverCalled;
        let d = diagnose(vec![
            dump(0, "a", vec![op(1, OpState::Failed, &[(1, nc)], t)]),
            dump(1, "b", vec![op(1, OpState::Failed, &[(0, nc)], t)]),
        ]);
        assert!(
            matches!(&d.root_causes[..], [Cause::DeadLink { ranks: [0, 1], .. }]),
            "{}",
            d.to_text()
        );
    }

    #[test]
    fn a_timeout_that_every_rank_called_and_nothing_explains_is_too_slow() {
        let t = Some(ErrorKind::Timeout);
        let d = diagnose(vec![
            dump(0, "a", vec![op(1, OpState::Failed, &[], t)]),
            dump(1, "a", vec![op(1, OpState::Started, &[], None)]),
        ]);
        assert_eq!(
            d.root_causes,
            [Cause::TooSlow {
                comm: "world".into(),
                seq: 1,
                ranks: vec![0],
            }]
        );
    }

    #[test]
    fn all_done_is_no_cause() {
        let d = diagnose(vec![
            dump(0, "a", vec![op(0, OpState::Done, &[], None)]),
            dump(1, "a", vec![op(0, OpState::Done, &[], None)]),
        ]);
        assert!(d.root_causes.is_empty(), "{:?}", d.root_causes);
        assert!(d.to_text().contains("(none found"));
    }
}
