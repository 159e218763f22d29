//! Replaying a run on the simulator (issue 16): the dumps of a run
//! ([`super::read_dumps`]) turned into an `hccl_sim` scenario file and
//! fault plan, which `hccl sim --replay DIR` and `hccl doctor DIR --replay`
//! run (`cli/src/replay.rs`) as `hccl sim --scenario F --faults P` does.
//!
//! What the dumps give: the communicators (names, sizes, world ranks of
//! splits), each rank's collectives in call order (across communicators by
//! the time it called them), and the faults they imply:
//! - a rank of the world with no dump crashed: the replay crashes it
//!   before the first op any other rank did not finish;
//! - a rank whose record ends early, every op done (it never called op
//!   #k: it went past it or finished), has no op #k in its order, as in
//!   the run; a rank stuck in its last op calls the ops it never reached
//!   after it (so communicators called in different orders wait on each
//!   other in a cycle, as they did);
//! - a rank that called op #k with another count, data type, reduce op or
//!   root than the others (the majority) calls it so (`wrong_args`);
//! - two ranks in one failed op each waiting for the other's data (or its
//!   start, of an op it recorded), or one waiting so for the other, which
//!   finished the op (a link that went silent): the route between them
//!   goes down when they start the op (`link_down`, timed by
//!   [`Replay::time_links`]).
//!
//! Point-to-point ops and the V collectives are left out (scenario files
//! cannot express them yet), with a note.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveKind;
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::faults::{Fault, FaultPlan};
use hccl_sim::scenario_file::{OpSpec, ScenarioFile};

use super::{Dump, OpRecord, OpState};

/// Dumps that do not make one run's scenario, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReplayError(pub String);

/// A run's dumps as a scenario: the file, the fault plan and what was
/// found on the way, one line each.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// The ops, communicators and per-rank orders.
    pub scenario: ScenarioFile,
    /// The faults the dumps imply.
    pub faults: FaultPlan,
    /// World size.
    pub ranks: u32,
    /// Findings and what was left out, for people.
    pub notes: Vec<String>,
    /// Links the dumps imply went dead: (index of the `link_down` fault in
    /// [`Replay::faults`], the op it stopped, its two world ranks). Their
    /// `at_ns` is 0 until [`Replay::time_links`] sets it to when the op
    /// started.
    pub links: Vec<(usize, usize, [u32; 2])>,
}

/// What one rank called at one seq: the fields ranks must agree on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    kind: String,
    count: u64,
    dtype: String,
    op: Option<String>,
    root: Option<u32>,
}

impl Call {
    fn of(r: &OpRecord) -> Call {
        Call {
            kind: r.kind.clone(),
            count: r.count,
            dtype: r.dtype.clone(),
            op: r.op.clone(),
            root: r.root,
        }
    }
}

/// A collective the scenario can hold (not point-to-point, not V).
fn replayable(kind: &str) -> Option<CollectiveKind> {
    let k: CollectiveKind = kind.parse().ok()?;
    (!matches!(
        k,
        CollectiveKind::AllToAllV
            | CollectiveKind::AllGatherV
            | CollectiveKind::ReduceScatterV
            | CollectiveKind::SendRecv
            | CollectiveKind::BatchSendRecv
    ))
    .then_some(k)
}

/// The world rank of communicator rank `r` of `d`'s communicator.
fn world_rank(d: &Dump, r: u32) -> u32 {
    d.header
        .global_ranks
        .as_ref()
        .and_then(|g| g.get(r as usize).copied())
        .unwrap_or(r)
}

/// One op of the scenario: its communicator, seq and each rank's record.
struct Slot<'a> {
    comm: String,
    seq: u64,
    /// (world rank, record), by world rank.
    calls: Vec<(u32, &'a OpRecord)>,
}

/// Turns `dumps` (every rank's, of one run) into a scenario.
///
/// # Errors
/// [`ReplayError`] for:
/// No dumps, no world communicator's dump, or dumps that disagree on a
/// communicator's size.
pub fn from_dumps(dumps: &[Dump]) -> Result<Replay, ReplayError> {
    let mut notes = Vec::new();
    // The world: not made by a split (a split's name is `parent/splitN/colorC`).
    let worlds: Vec<&Dump> = dumps
        .iter()
        .filter(|d| d.header.global_ranks.is_none() && !d.header.comm.contains('/'))
        .collect();
    let Some(w) = worlds.first() else {
        return Err(ReplayError(format!(
            "no dump of a world communicator (one not made by a split) among {} dump(s); give the directory of a run's dumps",
            dumps.len()
        )));
    };
    if let Some(other) = worlds.iter().find(|d| d.header.comm != w.header.comm) {
        return Err(ReplayError(format!(
            "dumps of two world communicators, '{}' and '{}': give the dumps of one run",
            w.header.comm, other.header.comm
        )));
    }
    let world_name = w.header.comm.clone();
    let n = w.header.size;
    // Communicators: name -> world ranks.
    let mut comms: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for d in dumps {
        let members: Vec<u32> = (0..d.header.size).map(|r| world_rank(d, r)).collect();
        if let Some(m) = comms.get(&d.header.comm) {
            if *m != members {
                return Err(ReplayError(format!(
                    "the dumps of communicator '{}' disagree on its ranks ({m:?} and {members:?})",
                    d.header.comm
                )));
            }
        }
        if let Some(&r) = members.iter().find(|&&r| r >= n) {
            return Err(ReplayError(format!(
                "communicator '{}' names world rank {r}, but '{world_name}' has {n} ranks",
                d.header.comm
            )));
        }
        comms.insert(d.header.comm.clone(), members);
    }
    // Every rank's replayable collectives, from the seq every rank of the
    // communicator still holds (a ring may have dropped older ones).
    let mut slots: BTreeMap<(String, u64), Slot<'_>> = BTreeMap::new();
    let mut left_out = BTreeMap::<String, u64>::new();
    for d in dumps {
        let me = world_rank(d, d.header.rank);
        let first = comm_window(dumps, &d.header.comm);
        for r in &d.ops {
            let Some(seq) = r.seq.filter(|_| replayable(&r.kind).is_some()) else {
                *left_out.entry(r.kind.clone()).or_default() += 1;
                continue;
            };
            if seq < first {
                continue;
            }
            slots
                .entry((d.header.comm.clone(), seq))
                .or_insert_with(|| Slot {
                    comm: d.header.comm.clone(),
                    seq,
                    calls: Vec::new(),
                })
                .calls
                .push((me, r));
        }
    }
    for (kind, k) in &left_out {
        notes.push(format!(
            "{k} {kind} op record(s) left out: the replay holds collectives other than the V forms"
        ));
    }
    // Scenario order: when the op was first called, then communicator, seq.
    let mut order: Vec<Slot<'_>> = slots.into_values().collect();
    order.sort_by_key(|s| {
        let t = s.calls.iter().map(|(_, r)| r.queued_us).min().unwrap_or(0);
        (t, s.comm.clone(), s.seq)
    });
    let index: BTreeMap<(String, u64), usize> = order
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.comm.clone(), s.seq), i))
        .collect();
    let mut faults = FaultPlan::default();
    let mut ops = Vec::with_capacity(order.len());
    for (i, s) in order.iter().enumerate() {
        let (call, algo) = majority(&s.calls);
        for &(rank, r) in &s.calls {
            let mine = Call::of(r);
            if mine == call {
                continue;
            }
            match wrong_args(rank, i, &call, &mine) {
                Some(f) => {
                    notes.push(format!(
                        "rank {rank} called op #{i} ('{}' seq {}) as {} where the others called {}: replayed as {}",
                        s.comm,
                        s.seq,
                        describe(&mine),
                        describe(&call),
                        f.describe()
                    ));
                    faults.faults.push(f);
                }
                None => notes.push(format!(
                    "rank {rank} called {} at '{}' seq {} where the others called {}: the replay cannot change a rank's collective, it calls {} too",
                    mine.kind, s.comm, s.seq, call.kind, call.kind
                )),
            }
        }
        ops.push(OpSpec {
            comm: s.comm.clone(),
            collective: replayable(&call.kind)
                .map_or_else(|| call.kind.clone(), |k| k.name().to_string()),
            count: call.count,
            dtype: Some(call.dtype.clone()),
            op: call.op.clone(),
            root: call.root,
            algo: algo.filter(|a| a.parse::<AlgoSpec>().is_ok()),
            in_place: false,
        });
    }
    // Each dumped rank's own order: its calls by when it made them.
    let mut rank_orders = BTreeMap::new();
    let dumped: BTreeSet<u32> = dumps.iter().map(|d| world_rank(d, d.header.rank)).collect();
    for &rank in &dumped {
        let mut mine: Vec<(u64, String, u64, usize)> = Vec::new();
        for d in dumps
            .iter()
            .filter(|d| world_rank(d, d.header.rank) == rank)
        {
            for r in &d.ops {
                if let Some(&i) = r.seq.and_then(|s| index.get(&(d.header.comm.clone(), s))) {
                    mine.push((r.queued_us, d.header.comm.clone(), r.turn, i));
                }
            }
        }
        mine.sort();
        let stuck = mine.last().is_some_and(|m| {
            order[m.3]
                .calls
                .iter()
                .any(|&(r, rec)| r == rank && rec.state != OpState::Done)
        });
        let mut list: Vec<usize> = mine.into_iter().map(|m| m.3).collect();
        if stuck {
            // It stopped in its last op, so it never reached its later
            // ones: the ops of its communicators that others called come
            // after, in scenario order (a cycle needs them).
            let later: Vec<usize> = (0..order.len())
                .filter(|i| !list.contains(i))
                .filter(|&i| comms.get(&order[i].comm).is_some_and(|m| m.contains(&rank)))
                .collect();
            list.extend(later);
        }
        rank_orders.insert(rank.to_string(), list);
    }
    // A world rank with no dump crashed: before the first op of its
    // communicators that a rank did not finish.
    for rank in (0..n).filter(|r| !dumped.contains(r)) {
        let stuck = order.iter().enumerate().find(|(_, s)| {
            comms.get(&s.comm).is_some_and(|m| m.contains(&rank))
                && s.calls.iter().any(|(_, r)| r.state != OpState::Done)
        });
        match stuck {
            Some((i, s)) => {
                notes.push(format!(
                    "rank {rank} left no dump: it died; replayed as a crash before op #{i} ('{}' seq {}), where the others stopped",
                    s.comm, s.seq
                ));
                faults.faults.push(Fault::Crash {
                    rank,
                    at_ns: None,
                    at_op: Some(i),
                });
            }
            None => notes.push(format!(
                "rank {rank} left no dump, but every recorded op finished: nothing to replay for it"
            )),
        }
    }
    // Two ranks of one failed op each waiting for the other's data: the
    // link between them went silent (no peer died, nobody skipped).
    let mut links = Vec::new();
    for (i, s) in order.iter().enumerate() {
        let Some(members) = comms.get(&s.comm) else {
            continue;
        };
        // A peer this rank saw as never calling the op, but that recorded
        // it, called it: its start never arrived (`hccl doctor` reads it so).
        let called = |peer: u32| s.calls.iter().any(|&(r, _)| r == peer);
        let waits_on = |rank: u32, peer: u32| {
            s.calls.iter().any(|&(r, rec)| {
                r == rank
                    && rec.waits.iter().any(|w| {
                        let data = match w.why {
                            super::WaitKind::Data => true,
                            super::WaitKind::NeverCalled => called(peer),
                            _ => false,
                        };
                        data && members.get(w.peer as usize) == Some(&peer)
                    })
            })
        };
        // Or one waited for the other's data and the other finished the
        // op: all it sent was lost on the way.
        let done = |peer: u32| {
            s.calls
                .iter()
                .any(|&(r, rec)| r == peer && rec.state == OpState::Done)
        };
        for &(a, _) in &s.calls {
            for &(b, _) in s.calls.iter().filter(|&&(b, _)| b != a) {
                let pair = [a.min(b), a.max(b)];
                let mutual = waits_on(a, b) && waits_on(b, a);
                if !(mutual && a < b || waits_on(a, b) && done(b))
                    || links.iter().any(|l: &(usize, usize, [u32; 2])| l.2 == pair)
                {
                    continue;
                }
                {
                    let how = if mutual {
                        format!("ranks {a} and {b} each waited for the other's data")
                    } else {
                        format!("rank {a} waited for rank {b}'s data, which rank {b} had sent (it finished the op),")
                    };
                    notes.push(format!(
                        "{how} in op #{i} ('{}' seq {}): replayed as the route between them going down when they start it",
                        s.comm, s.seq
                    ));
                    let [a, b] = pair;
                    links.push((faults.faults.len(), i, [a, b]));
                    faults.faults.push(Fault::LinkDown {
                        link: hccl_sim::faults::LinkRef::Route { ranks: [a, b] },
                        directed: false,
                        at_ns: 0,
                        until_ns: None,
                    });
                }
            }
        }
    }
    comms.remove(&world_name);
    let mut communicators = comms;
    communicators.insert("world".into(), (0..n).collect());
    for o in &mut ops {
        if o.comm == world_name {
            o.comm = "world".into();
        }
    }
    Ok(Replay {
        scenario: ScenarioFile {
            preset: None,
            servers: None,
            communicators,
            ops,
            rank_orders,
        },
        faults,
        ranks: n,
        notes,
        links,
    })
}

impl Replay {
    /// Times the dead links ([`Replay::links`]) on `fabric`: runs the
    /// scenario without them and sets each `link_down`'s `at_ns` to when
    /// the later of its two ranks started its op (no message of that op
    /// between them can have moved before). A link whose op never started
    /// is left out, with a note.
    ///
    /// # Errors
    /// The scenario does not build or run on `fabric` (the simulator's
    /// message).
    pub fn time_links(&mut self, fabric: &hccl_topology::Fabric) -> Result<(), ReplayError> {
        if self.links.is_empty() {
            return Ok(());
        }
        let timed: BTreeSet<usize> = self.links.iter().map(|l| l.0).collect();
        let rest = FaultPlan {
            faults: (self.faults.faults.iter().enumerate())
                .filter(|(i, _)| !timed.contains(i))
                .map(|(_, f)| f.clone())
                .collect(),
        };
        let e = |e: &dyn std::fmt::Display| ReplayError(e.to_string());
        let sc = self.scenario.build(fabric, None).map_err(|x| e(&x))?;
        let run = hccl_sim::faults::run_with_faults(&sc, &rest).map_err(|x| e(&x))?;
        let mut drop = BTreeSet::new();
        for &(f, op, [a, b]) in &self.links {
            let comm = self.scenario.communicators.get(&self.scenario.ops[op].comm);
            let start = |r: u32| {
                let c = comm.and_then(|m| m.iter().position(|&x| x == r))?;
                run.report.ops.get(op)?.start_ns.get(c).copied().flatten()
            };
            match (start(a), start(b)) {
                (Some(x), Some(y)) => {
                    if let Some(Fault::LinkDown { at_ns, .. }) = self.faults.faults.get_mut(f) {
                        *at_ns = x.max(y);
                    }
                }
                _ => {
                    self.notes.push(format!(
                        "the link between ranks {a} and {b} is left out: op #{op} does not start in the replay without it"
                    ));
                    drop.insert(f);
                }
            }
        }
        let mut i = 0;
        self.faults.faults.retain(|_| {
            i += 1;
            !drop.contains(&(i - 1))
        });
        self.links.clear();
        Ok(())
    }
}

/// The first seq of communicator `comm` that every dump of it still
/// holds (0 unless a ring dropped its oldest records).
fn comm_window(dumps: &[Dump], comm: &str) -> u64 {
    dumps
        .iter()
        .filter(|d| d.header.comm == comm)
        .filter_map(|d| d.ops.iter().filter_map(|r| r.seq).min())
        .max()
        .unwrap_or(0)
}

/// The call most ranks made (ties: the lowest rank's) and its algorithm.
fn majority(calls: &[(u32, &OpRecord)]) -> (Call, Option<String>) {
    let mut votes: BTreeMap<Call, (usize, u32, Option<String>)> = BTreeMap::new();
    for &(rank, r) in calls {
        let v = votes
            .entry(Call::of(r))
            .or_insert((0, rank, r.algorithm.clone()));
        v.0 += 1;
        v.1 = v.1.min(rank);
    }
    let (call, (_, _, algo)) = votes
        .into_iter()
        .max_by_key(|(_, (k, first, _))| (*k, std::cmp::Reverse(*first)))
        .expect("a slot has a call");
    (call, algo)
}

/// `rank`'s call `mine` of op `op` as a `wrong_args` fault against the
/// others' `call`; `None` when the collective itself differs.
fn wrong_args(rank: u32, op: usize, call: &Call, mine: &Call) -> Option<Fault> {
    if mine.kind != call.kind {
        return None;
    }
    let differs = |a: &Option<String>, b: &Option<String>| (a != b).then(|| b.clone()).flatten();
    Some(Fault::WrongArgs {
        rank,
        op,
        count: (mine.count != call.count).then_some(mine.count),
        dtype: (mine.dtype != call.dtype)
            .then(|| mine.dtype.parse::<DataType>().ok())
            .flatten(),
        reduce_op: differs(&call.op, &mine.op).and_then(|o| o.parse::<ReduceOp>().ok()),
        root: (mine.root != call.root).then_some(mine.root).flatten(),
    })
    .filter(|f| {
        !matches!(
            f,
            Fault::WrongArgs {
                count: None,
                dtype: None,
                reduce_op: None,
                root: None,
                ..
            }
        )
    })
}

fn describe(c: &Call) -> String {
    let mut s = format!("{} count {} {}", c.kind, c.count, c.dtype);
    if let Some(o) = &c.op {
        let _ = write!(s, " {o}");
    }
    if let Some(r) = c.root {
        let _ = write!(s, " root {r}");
    }
    s
}
