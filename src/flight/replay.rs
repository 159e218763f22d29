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
//! - the V collectives replay with the counts their records carry
//!   (`counts`, `matrix`); point-to-point ops replay as the scenario's
//!   `send_recv` / `batch_send_recv` ops: message `n` of each ordered pair
//!   of ranks (in call order, items of a batch in list order) is matched
//!   to receive `n` of that pair, as the library matches them. Since a
//!   TCP send returns once its bytes are queued and the simulator's
//!   messages are rendezvous, a rank's calls that only send run together
//!   with its next point-to-point call (one batch, as the sends were still
//!   in flight), and every call joined by a message to another rank's is
//!   one op; a message whose sender finished its send but that no rank
//!   received is left out (it was queued, never read), one whose receive
//!   never got its send waits for it (a sender that never called send,
//!   or crashed).
//!
//! Records the replay cannot place are left out with a note: V records
//! and point-to-point records without their counts (dumps of builds
//! before those fields), and the point-to-point ops of a communicator
//! whose ring dropped its oldest records (the message numbers are lost).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveKind;
use hccl_algos::{DataType, ReduceOp};
use hccl_sim::faults::{Fault, FaultPlan};
use hccl_sim::scenario_file::{OpSpec, PairSpec, ScenarioFile};

use super::{Dump, OpRecord, OpState, P2pDir};

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
    /// The V forms' counts or matrix (empty for the others).
    counts: Vec<u64>,
    matrix: Vec<Vec<u64>>,
}

impl Call {
    fn of(r: &OpRecord) -> Call {
        Call {
            kind: r.kind.clone(),
            count: r.count,
            dtype: r.dtype.clone(),
            op: r.op.clone(),
            root: r.root,
            counts: r.counts.clone(),
            matrix: r.matrix.clone(),
        }
    }
}

/// A collective record the scenario can hold: a collective (not
/// point-to-point), and a V form only with its counts.
fn replayable(r: &OpRecord) -> Option<CollectiveKind> {
    let k: CollectiveKind = r.kind.parse().ok()?;
    match k {
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => None,
        CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => {
            (!r.counts.is_empty()).then_some(k)
        }
        CollectiveKind::AllToAllV => (!r.matrix.is_empty()).then_some(k),
        _ => Some(k),
    }
}

/// Which op of the scenario a record belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// A collective: communicator and seq.
    Coll(String, u64),
    /// Point-to-point: communicator and the number of its group of calls
    /// joined by messages.
    P2p(String, usize),
}

/// A point-to-point op of the scenario: its transfers and who takes part.
struct P2pOp {
    /// Transfers between communicator ranks, by (sender, receiver, number).
    pairs: Vec<PairSpec>,
    dtype: String,
    /// The world ranks of its transfers.
    ranks: BTreeSet<u32>,
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
    key: Key,
    comm: String,
    /// A collective's seq (`None`: point-to-point).
    seq: Option<u64>,
    /// (world rank, record), by world rank (point-to-point: every call
    /// of the op, a rank's in call order).
    calls: Vec<(u32, &'a OpRecord)>,
    /// A point-to-point op's transfers.
    p2p: Option<P2pOp>,
}

impl Slot<'_> {
    /// Whether world rank `rank` (a member of the communicator, `members`)
    /// takes part: every member in a collective, the ranks of its
    /// transfers in a point-to-point op.
    fn takes(&self, rank: u32, members: Option<&Vec<u32>>) -> bool {
        match &self.p2p {
            Some(p) => p.ranks.contains(&rank),
            None => members.is_some_and(|m| m.contains(&rank)),
        }
    }

    /// `op #3 ('world' seq 2)` or `op #3 ('world' point-to-point)`.
    fn name(&self, i: usize) -> String {
        match self.seq {
            Some(s) => format!("op #{i} ('{}' seq {s})", self.comm),
            None => format!("op #{i} ('{}' point-to-point)", self.comm),
        }
    }
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
            let Some(seq) = r.seq else {
                continue; // point-to-point: below
            };
            if replayable(r).is_none() {
                *left_out.entry(r.kind.clone()).or_default() += 1;
                continue;
            }
            if seq < first {
                continue;
            }
            slots
                .entry((d.header.comm.clone(), seq))
                .or_insert_with(|| Slot {
                    key: Key::Coll(d.header.comm.clone(), seq),
                    comm: d.header.comm.clone(),
                    seq: Some(seq),
                    calls: Vec::new(),
                    p2p: None,
                })
                .calls
                .push((me, r));
        }
    }
    for (kind, k) in &left_out {
        let why = if kind.parse::<CollectiveKind>().is_ok() {
            "their counts are not in the dump (written by an older build)"
        } else {
            "not a collective the replay knows"
        };
        notes.push(format!("{k} {kind} op record(s) left out: {why}"));
    }
    let mut order: Vec<Slot<'_>> = slots.into_values().collect();
    let mut p2p_of = BTreeMap::new();
    for comm in comms.keys() {
        order.extend(p2p_slots(dumps, comm, &mut p2p_of, &mut notes));
    }
    // Scenario order: when the op was first called, then communicator, seq.
    order.sort_by_key(|s| {
        let t = s.calls.iter().map(|(_, r)| r.queued_us).min().unwrap_or(0);
        (t, s.comm.clone(), s.seq.unwrap_or(u64::MAX), s.key.clone())
    });
    let index: BTreeMap<Key, usize> = order
        .iter()
        .enumerate()
        .map(|(i, s)| (s.key.clone(), i))
        .collect();
    let mut faults = FaultPlan::default();
    let mut ops = Vec::with_capacity(order.len());
    for (i, s) in order.iter().enumerate() {
        if let Some(p) = &s.p2p {
            ops.push(OpSpec {
                comm: s.comm.clone(),
                collective: if p.pairs.len() == 1 {
                    CollectiveKind::SendRecv
                } else {
                    CollectiveKind::BatchSendRecv
                }
                .name()
                .to_string(),
                count: None,
                counts: None,
                matrix: None,
                pairs: Some(p.pairs.clone()),
                dtype: Some(p.dtype.clone()),
                op: None,
                root: None,
                algo: None,
                in_place: false,
            });
            continue;
        }
        let (call, algo) = majority(&s.calls);
        for &(rank, r) in &s.calls {
            let mine = Call::of(r);
            if mine == call {
                continue;
            }
            match wrong_args(rank, i, &call, &mine) {
                Some(f) => {
                    notes.push(format!(
                        "rank {rank} called {} as {} where the others called {}: replayed as {}",
                        s.name(i),
                        describe(&mine),
                        describe(&call),
                        f.describe()
                    ));
                    faults.faults.push(f);
                }
                None if mine.kind == call.kind => notes.push(format!(
                    "rank {rank} called {} as {} where the others called {}: the replay cannot give one rank other V counts, it calls the others' too",
                    s.name(i),
                    describe(&mine),
                    describe(&call)
                )),
                None => notes.push(format!(
                    "rank {rank} called {} at '{}' seq {} where the others called {}: the replay cannot change a rank's collective, it calls {} too",
                    mine.kind, s.comm, s.seq.unwrap_or(0), call.kind, call.kind
                )),
            }
        }
        let kind = s.calls.iter().find_map(|(_, r)| replayable(r));
        let v = |field: &Vec<u64>| (!field.is_empty()).then(|| field.clone());
        ops.push(OpSpec {
            comm: s.comm.clone(),
            collective: kind.map_or_else(|| call.kind.clone(), |k| k.name().to_string()),
            count: kind
                .filter(|&k| {
                    !matches!(
                        k,
                        CollectiveKind::AllGatherV
                            | CollectiveKind::ReduceScatterV
                            | CollectiveKind::AllToAllV
                    )
                })
                .map(|_| call.count),
            counts: v(&call.counts),
            matrix: (!call.matrix.is_empty()).then(|| call.matrix.clone()),
            pairs: None,
            dtype: Some(call.dtype.clone()),
            op: call.op.clone(),
            root: call.root,
            algo: algo.filter(|a| a.parse::<AlgoSpec>().is_ok()),
            in_place: false,
        });
    }
    // Each dumped rank's own order: its calls by when it made them (a
    // point-to-point op once, where its first call of it was).
    let mut rank_orders = BTreeMap::new();
    let dumped: BTreeSet<u32> = dumps.iter().map(|d| world_rank(d, d.header.rank)).collect();
    for &rank in &dumped {
        let mut mine: Vec<(u64, String, u64, usize)> = Vec::new();
        for d in dumps
            .iter()
            .filter(|d| world_rank(d, d.header.rank) == rank)
        {
            for r in &d.ops {
                let key = match r.seq {
                    Some(s) => Some(Key::Coll(d.header.comm.clone(), s)),
                    None => p2p_of.get(&(d.header.comm.clone(), rank, r.turn)).cloned(),
                };
                if let Some(&i) = key.as_ref().and_then(|k| index.get(k)) {
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
        let mut list: Vec<usize> = Vec::with_capacity(mine.len());
        for m in mine {
            if !list.contains(&m.3) {
                list.push(m.3);
            }
        }
        if stuck {
            // It stopped in its last op, so it never reached its later
            // ones: the ops of its communicators that others called come
            // after, in scenario order (a cycle needs them).
            let later: Vec<usize> = (0..order.len())
                .filter(|i| !list.contains(i))
                .filter(|&i| order[i].takes(rank, comms.get(&order[i].comm)))
                .collect();
            list.extend(later);
        }
        rank_orders.insert(rank.to_string(), list);
    }
    // A world rank with no dump crashed: before the first op it takes
    // part in that a rank did not finish.
    for rank in (0..n).filter(|r| !dumped.contains(r)) {
        let stuck = order.iter().enumerate().find(|(_, s)| {
            s.takes(rank, comms.get(&s.comm))
                && s.calls.iter().any(|(_, r)| r.state != OpState::Done)
        });
        match stuck {
            Some((i, s)) => {
                notes.push(format!(
                    "rank {rank} left no dump: it died; replayed as a crash before {}, where the others stopped",
                    s.name(i)
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
                        "{how} in {}: replayed as the route between them going down when they start it",
                        s.name(i)
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

/// A message of a point-to-point op: sender, receiver, its number in
/// the pair, count and data type.
type Message = (u32, u32, u64, u64, String);

/// One side of a message: the group of calls it is in, its count and
/// data type, and whether its call finished.
struct Side {
    group: usize,
    count: u64,
    dtype: String,
    done: bool,
}

/// The point-to-point ops of communicator `comm` in `dumps`, as scenario
/// slots (module docs: messages matched by pair and number, a rank's
/// send-only calls joined to its next call, calls joined by a message in
/// one op); `p2p_of` gets (comm, world rank, turn) → the op's key of
/// every call placed.
fn p2p_slots<'a>(
    dumps: &'a [Dump],
    comm: &str,
    p2p_of: &mut BTreeMap<(String, u32, u64), Key>,
    notes: &mut Vec<String>,
) -> Vec<Slot<'a>> {
    let of_comm: Vec<&Dump> = dumps.iter().filter(|d| d.header.comm == comm).collect();
    let p2p = |r: &OpRecord| r.seq.is_none();
    let calls: usize = (of_comm.iter())
        .map(|d| d.ops.iter().filter(|r| p2p(r)).count())
        .sum();
    if calls == 0 {
        return Vec::new();
    }
    if let Some(d) = of_comm
        .iter()
        .find(|d| d.header.recorded > d.ops.len() as u64)
    {
        notes.push(format!(
            "{calls} point-to-point call(s) of '{comm}' left out: rank {}'s ring dropped its oldest records, so the message numbers are lost (raise {})",
            d.header.rank,
            super::ENV_ENTRIES
        ));
        return Vec::new();
    }
    let bare = (of_comm.iter())
        .flat_map(|d| d.ops.iter())
        .filter(|r| p2p(r) && r.items.is_empty())
        .count();
    if bare > 0 {
        notes.push(format!(
            "{bare} point-to-point call(s) of '{comm}' left out: their items are not in the dump (written by an older build)"
        ));
    }
    // Groups of calls that run together: (dump, its records).
    let mut groups: Vec<(&Dump, Vec<&OpRecord>)> = Vec::new();
    let mut sends: BTreeMap<(u32, u32, u64), Side> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32, u64), Side> = BTreeMap::new();
    for d in of_comm.iter().copied() {
        let me = d.header.rank;
        let mut numbers: BTreeMap<(u32, u32, bool), u64> = BTreeMap::new();
        let mut open = false;
        for r in &d.ops {
            if !p2p(r) || r.items.is_empty() {
                open = false; // a collective (or an unplaced call) ends a group
                continue;
            }
            if !open {
                groups.push((d, Vec::new()));
            }
            let g = groups.len() - 1;
            groups[g].1.push(r);
            for it in &r.items {
                let (pair, side) = match it.dir {
                    P2pDir::Send => ((me, it.peer), &mut sends),
                    P2pDir::Recv => ((it.peer, me), &mut recvs),
                };
                let n = numbers
                    .entry((pair.0, pair.1, it.dir == P2pDir::Send))
                    .or_default();
                side.insert(
                    (pair.0, pair.1, *n),
                    Side {
                        group: g,
                        count: it.count,
                        dtype: r.dtype.clone(),
                        done: r.state == OpState::Done,
                    },
                );
                *n += 1;
            }
            // A call that receives waits for its messages before the
            // rank goes on; one that only sends does not.
            open = r.items.iter().all(|it| it.dir == P2pDir::Send);
        }
    }
    // Calls joined by a message run as one op (union-find over groups).
    let mut parent: Vec<usize> = (0..groups.len()).collect();
    fn root(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for (k, rv) in &recvs {
        if let Some(sd) = sends.get(k) {
            let (a, b) = (root(&mut parent, sd.group), root(&mut parent, rv.group));
            parent[a] = b;
        }
    }
    // Each op's messages: (sender, receiver, number, count, dtype).
    let mut msgs: BTreeMap<usize, Vec<Message>> = BTreeMap::new();
    let mut queued_only = 0;
    for (&(src, dst, n), sd) in &sends {
        if recvs.contains_key(&(src, dst, n)) {
            continue;
        }
        if sd.done {
            queued_only += 1; // queued by its sender, never received
            continue;
        }
        let g = root(&mut parent, sd.group);
        msgs.entry(g)
            .or_default()
            .push((src, dst, n, sd.count, sd.dtype.clone()));
    }
    for (&(src, dst, n), rv) in &recvs {
        if let Some(sd) = sends.get(&(src, dst, n)) {
            if (sd.count, &sd.dtype) != (rv.count, &rv.dtype) {
                notes.push(format!(
                    "message {n} from rank {src} to rank {dst} of '{comm}' was sent as {} {} and received as {} {}: replayed as received",
                    sd.count, sd.dtype, rv.count, rv.dtype
                ));
            }
        }
        let g = root(&mut parent, rv.group);
        msgs.entry(g)
            .or_default()
            .push((src, dst, n, rv.count, rv.dtype.clone()));
    }
    if queued_only > 0 {
        notes.push(format!(
            "{queued_only} message(s) of '{comm}' left out: their senders finished sending them and no rank's record receives them (queued, never read)"
        ));
    }
    let mut out = Vec::new();
    for (id, (g, mut m)) in msgs.into_iter().enumerate() {
        m.sort();
        let key = Key::P2p(comm.to_string(), id);
        let members: Vec<usize> = (0..groups.len())
            .filter(|&x| root(&mut parent, x) == g)
            .collect();
        let mut calls = Vec::new();
        let mut seen = BTreeSet::new();
        for &x in &members {
            let (d, recs) = &groups[x];
            let w = world_rank(d, d.header.rank);
            if !seen.insert(w) {
                notes.push(format!(
                    "rank {w}'s point-to-point calls of '{comm}' from turn {} replayed together with its earlier ones (one message joins them)",
                    recs.first().map_or(0, |r| r.turn)
                ));
            }
            for r in recs {
                p2p_of.insert((comm.to_string(), w, r.turn), key.clone());
                calls.push((w, *r));
            }
        }
        let world = |r: u32| of_comm.first().map_or(r, |d| world_rank(d, r));
        let ranks = m.iter().flat_map(|x| [world(x.0), world(x.1)]).collect();
        // One data type per op: mixed ones move as bytes.
        let dtype = m[0].4.clone();
        let mixed = m.iter().any(|x| x.4 != dtype);
        let size = |t: &str| t.parse::<DataType>().map_or(1, |t| t.size());
        let pairs = m
            .iter()
            .map(|x| PairSpec {
                src: x.0,
                dst: x.1,
                count: if mixed { x.3 * size(&x.4) } else { x.3 },
            })
            .collect();
        out.push(Slot {
            key,
            comm: comm.to_string(),
            seq: None,
            calls,
            p2p: Some(P2pOp {
                pairs,
                dtype: if mixed { "int8".into() } else { dtype },
                ranks,
            }),
        });
    }
    out
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
    if !c.counts.is_empty() {
        let _ = write!(s, " counts {:?}", c.counts);
    }
    if !c.matrix.is_empty() {
        let _ = write!(s, " matrix {:?}", c.matrix);
    }
    if let Some(o) = &c.op {
        let _ = write!(s, " {o}");
    }
    if let Some(r) = c.root {
        let _ = write!(s, " root {r}");
    }
    s
}
