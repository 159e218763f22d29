//! The simulator backend: every rank of the communicator is a thread of
//! this process ([`crate::comm::Comm::init_all`] with `HCCL_BACKEND=sim`). Each
//! rank hands its call and its plan (the facade's, as TCP would run it) to
//! a shared [`SimWorld`]; when the last rank of an op arrives, one
//! `hccl_sim` data-mode scenario runs those plans on the tree's simulated
//! cluster ([`Cluster`]: its fabric, fault plan, seed and virtual clocks)
//! and every rank takes its output back. Arguments are checked for
//! consistency across ranks first, as on TCP.
//!
//! Point-to-point messages go through a mailbox keyed by (sender,
//! receiver, message number of the pair): the sender leaves its bytes
//! there and goes on (waiting only while the pair holds more than
//! `HCCL_BUFFSIZE`, as a TCP sender stalls on backpressure); the receiver
//! takes its message, checks count and data type, and runs the transfer as
//! a one-transfer SendRecv data-mode scenario, so a p2p message is
//! simulated like every collective. A mismatch, a timeout, any rank's
//! failed op (say, a buffer of the wrong size) or its `abort()` breaks the
//! world: every rank's waiting and later ops fail at once naming the rank
//! and the reason, as a TCP abort frame does. A rank that drops its
//! communicator is a lost peer: ops and messages that need it fail.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::{CollectiveArgs, OpSignature, P2p};
use hccl_algos::layout::GroupLayout;
use hccl_algos::DataType;
use hccl_hw::tcp::AbortKind;
use hccl_sim::{Collective, PlanSource, PlannedCollective};

use super::sim_cluster::{Cluster, Fate, Finished, Member};
use super::{sim, Prepared};
use crate::comm::plan::{self, HostFit, PlannedOp};
use crate::comm::{signature, BackendError, CommError};

/// Every rank's output bytes and virtual (start, end), or the failure
/// every rank reports.
type Outputs = Result<Arc<Finished>, CommError>;

/// One rank's output bytes and its virtual (start, end), ns.
type RankOutput = (Vec<u8>, (u64, u64));

struct Pending {
    /// What runs (f32 when widened).
    args: CollectiveArgs,
    /// What `first` called, and its signature.
    called: CollectiveArgs,
    sig: OpSignature,
    /// `first` runs the op widened to f32 (`HCCL_REDUCE_PRECISION=fp32`).
    wide: bool,
    /// The rank whose arguments are `args` (the first to call).
    first: u32,
    /// The algorithm `first` runs the op with.
    spec: AlgoSpec,
    /// Each rank's plan, as it arrives, and where its own call places its
    /// input and output (one rank may call in place and another not).
    plans: Vec<Option<PlannedOp>>,
    aliases: Vec<Option<(u64, u64)>>,
    inputs: Vec<Option<Vec<u8>>>,
    /// Each rank's call of the op (index and fate), as it arrives.
    members: Vec<Option<Member>>,
    arrived: u32,
    result: Option<Outputs>,
    taken: u32,
}

/// A point-to-point message waiting for its receive.
struct Mail {
    count: u64,
    dtype: DataType,
    data: Vec<u8>,
    /// The sender's call and virtual clock when it sent.
    sender: Member,
}

#[derive(Default)]
struct SimState {
    ops: BTreeMap<u64, Pending>,
    /// Sub-worlds made by splits and sub-communicators that not all of
    /// their members have joined yet, by number, with the joins still to
    /// come: the members' backends hold a sub-world once joined, so it is
    /// freed when the last of them is destroyed, not with its parent.
    splits: BTreeMap<u64, (Arc<SimWorld>, u32)>,
    /// The number of the next sub-world (never reused while a token of an
    /// earlier one may still travel).
    next_split: u64,
    /// Sent, not yet received messages by (src, dst, message number).
    mail: BTreeMap<(u32, u32, u64), Mail>,
    /// Bytes in `mail` per (src, dst).
    queued: BTreeMap<(u32, u32), u64>,
    /// Messages a receive refused (count or type) while their pair held
    /// more than `HCCL_BUFFSIZE`: their senders wait, and fail with it.
    refused: BTreeSet<(u32, u32, u64)>,
    /// (rank, reason, kind) of the failure that broke the world.
    broken: Option<(u32, String, AbortKind)>,
    /// Ranks that dropped their communicator: an op or message that needs
    /// one fails at once, as a lost peer does on TCP.
    gone: Vec<u32>,
}

impl SimState {
    fn broken_error(&self, name: &str) -> Option<CommError> {
        self.broken.as_ref().map(|(by, why, kind)| {
            let why = hccl_hw::tcp::own_reason(why);
            let e = BackendError::Sim(format!("{name}: aborted by rank {by}: {why}"));
            // The same kind as the failed rank's, as a TCP abort frame says.
            match kind {
                AbortKind::Timeout => CommError::Timeout(e),
                AbortKind::Mismatch => CommError::Mismatch(e),
                _ => CommError::Remote(e),
            }
        })
    }

    /// The error of waiting for `peer` if it dropped its communicator.
    fn gone_error(&self, name: &str, me: u32, peer: u32) -> Option<CommError> {
        self.gone.contains(&peer).then(|| {
            CommError::PeerLost(BackendError::Sim(format!(
                "{name}: rank {me} lost rank {peer} (the peer destroyed its communicator)"
            )))
        })
    }
}

/// One point-to-point message: `count` elements of `dtype` from `src` to
/// `dst`, number `n` of that ordered pair.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Msg {
    pub(crate) src: u32,
    pub(crate) dst: u32,
    pub(crate) n: u64,
    pub(crate) count: u64,
    pub(crate) dtype: DataType,
}

/// The shared state of one simulated communicator.
pub(crate) struct SimWorld {
    n: u32,
    /// The cluster of the tree: fabric, faults, seed, clocks.
    pub(crate) cluster: Arc<Cluster>,
    timeout: Option<Duration>,
    /// Bytes a pair may hold before its sender waits (`HCCL_BUFFSIZE`).
    bound: u64,
    state: Mutex<SimState>,
    cv: Condvar,
    /// The world rank of each rank (identity for a world from `init_all`).
    global: Vec<u32>,
    /// Shared by a world and every world split from it.
    blocked: Arc<Blocked>,
    /// Where its ranks run, for planning ([`sim::fit`]): read once, as a
    /// TCP rank reads its CPUs once at connect.
    fit: HostFit,
}

/// What each rank of a family of worlds (a world and those split from it)
/// waits in, by world rank: the op (`comm 'w' AllReduce #3`) and the world
/// ranks it still waits for. Locked after a world's state, never before.
#[derive(Default)]
struct Blocked(Mutex<BTreeMap<u32, (String, Vec<u32>)>>);

/// Removes a rank's [`Blocked`] entry when its op returns, unless it
/// timed out: the other ranks of a cycle time out about then too, and
/// still name where it was (until its next op).
struct Waiting<'a>(&'a Blocked, u32, bool);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.2 {
            lock(&(self.0).0).remove(&self.1);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimWorld {
    /// A world of `n` ranks on `cluster` (its world ranks); `timeout`
    /// bounds how long a rank waits for the others to call an op
    /// (`HCCL_EXEC_TIMEOUT`); `bound` is the bytes of unreceived
    /// point-to-point messages a pair may hold (`HCCL_BUFFSIZE`).
    pub(crate) fn new(
        n: u32,
        timeout: Option<Duration>,
        bound: u64,
        cluster: Arc<Cluster>,
    ) -> Arc<SimWorld> {
        SimWorld::member(n, timeout, bound, (0..n).collect(), Arc::default(), cluster)
    }

    fn member(
        n: u32,
        timeout: Option<Duration>,
        bound: u64,
        global: Vec<u32>,
        blocked: Arc<Blocked>,
        cluster: Arc<Cluster>,
    ) -> Arc<SimWorld> {
        let w = Arc::new(SimWorld {
            n,
            cluster: Arc::clone(&cluster),
            timeout,
            bound,
            state: Mutex::new(SimState::default()),
            cv: Condvar::new(),
            global,
            blocked,
            fit: sim::fit(n),
        });
        cluster.register(Arc::downgrade(&w));
        w
    }

    /// Wakes this world's waiting ranks (the tree broke). The caller holds
    /// no world's state.
    pub(crate) fn wake(&self) {
        // Taking the lock orders this wake after a waiter's last check.
        drop(lock(&self.state));
        self.cv.notify_all();
    }

    /// This rank's world rank.
    pub(crate) fn global_rank(&self, r: u32) -> u32 {
        self.global_of(r)
    }

    /// Where the ranks run ([`sim::fit`], computed when the world was made).
    pub(crate) fn host_fit(&self) -> HostFit {
        self.fit
    }

    /// How long a rank waits for the others (`HCCL_EXEC_TIMEOUT`; `None`: forever).
    pub(crate) fn exec_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Makes the sub-world of this world's ranks `members` (in their new
    /// rank order); returns its number, for [`SimWorld::join_sub_world`]
    /// (once by each member).
    pub(crate) fn host_sub_world(&self, members: &[u32]) -> u64 {
        let global = members
            .iter()
            .map(|&r| self.global_of(r))
            .collect::<Vec<u32>>();
        let w = SimWorld::member(
            members.len() as u32,
            self.timeout,
            self.bound,
            global,
            Arc::clone(&self.blocked),
            Arc::clone(&self.cluster),
        );
        let mut s = lock(&self.state);
        let id = s.next_split;
        s.next_split += 1;
        s.splits.insert(id, (w, members.len() as u32));
        id
    }

    /// The sub-world number `id` of [`SimWorld::host_sub_world`], for one
    /// of its members; after the last member's join this world no longer
    /// holds it. `None` for a number not made here or already joined by
    /// every member.
    pub(crate) fn join_sub_world(&self, id: u64) -> Option<Arc<SimWorld>> {
        let mut s = lock(&self.state);
        let (w, left) = s.splits.get_mut(&id)?;
        let w = Arc::clone(w);
        *left -= 1;
        if *left == 0 {
            s.splits.remove(&id);
        }
        Some(w)
    }

    /// Runs one op from `source` (op `seq` of communicator `comm`, `salt`
    /// telling apart ops that share it) on `members` with `inputs`, on the
    /// cluster. A hang breaks the tree: the caller wakes it
    /// ([`Cluster::wake_all`]) once it has unlocked this world's state.
    fn simulate(
        &self,
        id: (&str, u64, u64),
        members: &[Member],
        source: impl PlanSource + 'static,
        inputs: Vec<Vec<u8>>,
    ) -> Outputs {
        self.cluster
            .simulate(id, members, source, inputs)
            .map(Arc::new)
    }

    /// Runs op `seq` for `rank` of communicator `comm` (its name, for
    /// errors) with `input` and the rank's plan, as the rank's call `me`
    /// ([`Cluster::call`]); blocks until every rank has called it; returns
    /// this rank's output bytes and its virtual (start, end) in ns, or
    /// `None` for a call the fault plan skips (it returns at once and
    /// writes nothing).
    pub(crate) fn run(
        &self,
        comm: &str,
        rank: u32,
        me: Member,
        op: Prepared<'_>,
        input: Vec<u8>,
    ) -> Result<Option<RankOutput>, CommError> {
        let (seq, args, wide, spec) = (op.seq, op.args, op.wide, op.planned.algo);
        let name = format!("comm '{comm}' {:?} #{seq}", args.kind);
        let mut s = lock(&self.state);
        if let Some(e) = self.cluster.broken() {
            return Err(e);
        }
        // A mismatch found in this op is this rank's error too (as on TCP,
        // where every rank compares the signatures), not the abort of the
        // first rank that reported it.
        let mismatched = s
            .ops
            .get(&seq)
            .is_some_and(|p| matches!(p.result, Some(Err(CommError::Mismatch(_)))));
        if let Some(e) = s.broken_error(&name).filter(|_| !mismatched) {
            return Err(e);
        }
        let n = self.n;
        let p = s.ops.entry(seq).or_insert_with(|| Pending {
            args: args.clone(),
            called: op.called.clone(),
            sig: op.sig,
            wide,
            first: rank,
            spec,
            plans: (0..n).map(|_| None).collect(),
            aliases: vec![None; n as usize],
            inputs: vec![None; n as usize],
            members: vec![None; n as usize],
            arrived: 0,
            result: None,
            taken: 0,
        });
        let precision = |w: bool| if w { "fp32" } else { "native" };
        let mismatch = match OpSignature::check_consistent(&op.sig, &p.sig, 0) {
            // A widened op's dtype is fp32: name the setting, not the type.
            _ if wide != p.wide => Some(format!(
                "{name}: reduce precision mismatch, {} on rank {rank}, {} on rank {}; set HCCL_REDUCE_PRECISION (or Comm::set_reduce_precision) alike on every rank",
                precision(wide),
                precision(p.wide),
                p.first
            )),
            // Both ranks' counts are here: show them, not their hashes.
            Err(e) if e.field == "per-rank counts" => Some(format!(
                "{name}: {} mismatch, {} on rank {rank}, {} on rank {}; every rank must call the collective with the same arguments",
                e.field,
                signature::local_counts(op.called),
                signature::local_counts(&p.called),
                p.first
            )),
            Err(e) => Some(format!(
                "{name}: {} mismatch, {} on rank {rank}, {} on rank {}; every rank must call the collective with the same arguments",
                e.field, e.local, e.remote, p.first
            )),
            Ok(()) if spec != p.spec => Some(format!(
                "{name}: algorithm mismatch, {spec} on rank {rank}, {} on rank {}; set HCCL_ALGO alike on every rank",
                p.spec, p.first
            )),
            Ok(()) => None,
        };
        if let Some(msg) = mismatch {
            // Ranks already waiting learn it now, later ones on arrival.
            p.result
                .get_or_insert(Err(CommError::Mismatch(BackendError::Sim(msg))));
            self.cv.notify_all();
        }
        p.inputs[rank as usize] = Some(input);
        p.plans[rank as usize] = Some(op.planned);
        p.aliases[rank as usize] = args.alias(rank).map(|a| (a.input_at, a.output_at));
        p.members[rank as usize] = Some(me);
        p.arrived += 1;
        if me.fate == Fate::Skip {
            // Goes on to its next call; the others find it never called.
            p.taken += 1;
        }
        if p.arrived == n && p.result.is_none() {
            let r = self.run_pending(comm, &name, seq, p);
            s = self.settle(s, seq, r);
        }
        if me.fate == Fate::Skip {
            return Ok(None);
        }
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let me = self.global_of(rank);
        let mut waiting = Waiting(&self.blocked, me, false);
        loop {
            let Some(p) = s.ops.get_mut(&seq) else {
                return Err(CommError::Sim(format!("{name}: op state vanished")));
            };
            if let Some(r) = &p.result {
                let r = r.clone();
                p.taken += 1;
                if p.taken == n {
                    s.ops.remove(&seq);
                }
                return match r {
                    Ok(outs) => Ok(Some((
                        outs.outputs.get(rank as usize).cloned().unwrap_or_default(),
                        outs.times.get(rank as usize).copied().unwrap_or_default(),
                    ))),
                    Err(e) => Err(e),
                };
            }
            if let Some(e) = self.cluster.broken().or_else(|| s.broken_error(&name)) {
                return Err(e);
            }
            // Every missing rank crashed on the way (in another op): the
            // op runs without them, and hangs naming them.
            let Some(p) = s.ops.get_mut(&seq) else {
                return Err(CommError::Sim(format!("{name}: op state vanished")));
            };
            let crashed_all = p.arrived < n
                && (0..n).all(|r| {
                    p.inputs[r as usize].is_some() || self.cluster.crashed(self.global_of(r))
                });
            if crashed_all && p.result.is_none() {
                let r = self.run_pending(comm, &name, seq, p);
                s = self.settle(s, seq, r);
                continue;
            }
            let lost = s.ops.get(&seq).and_then(|p| {
                (0..n).find(|&r| p.inputs[r as usize].is_none() && s.gone.contains(&r))
            });
            if let Some(e) = lost.and_then(|r| s.gone_error(&name, rank, r)) {
                return Err(e);
            }
            let Some(p) = s.ops.get_mut(&seq) else {
                return Err(CommError::Sim(format!("{name}: op state vanished")));
            };
            let missing: Vec<usize> = p
                .inputs
                .iter()
                .enumerate()
                .filter(|(_, i)| i.is_none())
                .map(|(r, _)| r)
                .collect();
            let globals: Vec<u32> = missing.iter().map(|&m| self.global_of(m as u32)).collect();
            lock(&self.blocked.0).insert(me, (name.clone(), globals));
            let wait = match deadline {
                Some(d) if Instant::now() >= d => {
                    let arrived: Vec<usize> =
                        (0..n as usize).filter(|r| !missing.contains(r)).collect();
                    // TCP's words (`core::failure::timeout_error`).
                    let list = |r: &[usize]| match r {
                        [one] => format!("rank {one}"),
                        _ => format!("ranks {r:?}"),
                    };
                    let msg = format!(
                        "{name}: rank {rank} timed out after {} s waiting for {}, which never called the op (arrived: {}){}; the peer is slow, hung or skipped the op (raise HCCL_EXEC_TIMEOUT if it is only slow)",
                        self.secs(),
                        list(&missing),
                        list(&arrived),
                        self.blocked_elsewhere(&missing, me)
                    );
                    let e = CommError::Timeout(BackendError::Sim(msg));
                    waiting.2 = true;
                    p.result = Some(Err(e.clone()));
                    p.taken += 1;
                    self.cv.notify_all();
                    return Err(e);
                }
                Some(d) => d - Instant::now(),
                None => Duration::from_secs(3600),
            };
            s = self
                .cv
                .wait_timeout(s, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl SimWorld {
    /// Runs a pending op on the cluster once every rank has called it (or
    /// crashed): each rank's own plan, the schedule TCP would run; a
    /// crashed rank that never arrived gets the plan of its call and an
    /// empty input, and crashes before it.
    fn run_pending(&self, comm: &str, name: &str, seq: u64, p: &mut Pending) -> Outputs {
        let n = self.n;
        let call = Collective {
            args: p.args.clone(),
            algo: p.spec,
            layout: GroupLayout::flat(n),
        };
        let mut plans = Vec::with_capacity(n as usize);
        let mut inputs = Vec::with_capacity(n as usize);
        let mut members = Vec::with_capacity(n as usize);
        for r in 0..n {
            let i = r as usize;
            let global = self.global_of(r);
            let m = p.members[i].unwrap_or(Member {
                global,
                call: self.cluster.calls_made(global),
                fate: Fate::Crash,
                start: None,
                advance: false,
            });
            let plan = match p.plans[i].take() {
                Some(plan) => plan,
                None => hccl_algos::select::plan_spec(&p.args, &p.spec, &call.layout, r, self.fit)
                    .map_err(|e| CommError::Sim(format!("{name}: {e}")))?,
            };
            let input = p.inputs[i]
                .take()
                .unwrap_or_else(|| vec![0; plan.sizes.input as usize]);
            plans.push(plan);
            inputs.push(input);
            members.push(m);
        }
        let source = PlannedCollective::new(call, plans).with_aliases(p.aliases.clone());
        self.simulate((comm, seq, 0), &members, source, inputs)
    }

    /// Gives op `seq` its result `r` and wakes its ranks; a hang broke the
    /// tree, so every world of it is woken too (with this world unlocked).
    fn settle<'a>(
        &'a self,
        mut s: std::sync::MutexGuard<'a, SimState>,
        seq: u64,
        r: Outputs,
    ) -> std::sync::MutexGuard<'a, SimState> {
        let hung = matches!(r, Err(CommError::Hang { .. }));
        if let Some(p) = s.ops.get_mut(&seq) {
            p.result = Some(r);
        }
        self.cv.notify_all();
        if hung {
            drop(s);
            self.cluster.wake_all();
            s = lock(&self.state);
        }
        s
    }

    fn global_of(&self, r: u32) -> u32 {
        self.global.get(r as usize).copied().unwrap_or(r)
    }

    /// For a timeout: where the `missing` ranks wait instead, if in an op
    /// of a world of the same family ("; rank 1 waits in comm 'w/split0'
    /// AllReduce #0, which waits for this rank: ..."), else "". `me` is
    /// this rank's world rank.
    fn blocked_elsewhere(&self, missing: &[usize], me: u32) -> String {
        let blocked = lock(&self.blocked.0);
        let mut notes = Vec::new();
        let mut cycle = false;
        for &m in missing {
            if let Some((op, waits)) = blocked.get(&self.global_of(m as u32)) {
                let on_me = waits.contains(&me);
                cycle |= on_me;
                let tail = if on_me {
                    ", which waits for this rank"
                } else {
                    ""
                };
                notes.push(format!("rank {m} waits in {op}{tail}"));
            }
        }
        if notes.is_empty() {
            return String::new();
        }
        let why = if cycle {
            crate::comm::crossed::DIFFERENT_ORDERS
        } else {
            ""
        };
        format!("; {}{why}", notes.join(", "))
    }

    /// Breaks the world: every waiting and later op fails with `why`, a
    /// failure of `kind`.
    fn break_world(&self, s: &mut SimState, by: u32, why: &str, kind: AbortKind) {
        s.broken.get_or_insert((by, why.to_string(), kind));
        self.cv.notify_all();
    }

    /// Rank `by` failed (an error in an op, or an abort) with a failure
    /// of `kind`: every rank's waiting and later ops fail naming it, of
    /// the same kind, as a TCP abort frame does. Never waits for a
    /// running op.
    pub(crate) fn fail(&self, by: u32, why: &str, kind: AbortKind) {
        let mut s = lock(&self.state);
        self.break_world(&mut s, by, why, kind);
    }

    /// Rank `rank` dropped its communicator: ops and messages that need
    /// it fail from now on; the others go on.
    pub(crate) fn leave(&self, rank: u32) {
        let mut s = lock(&self.state);
        s.gone.push(rank);
        self.cv.notify_all();
    }

    /// Waits on the condition variable until `deadline` (`None`: an hour
    /// at a time); false once the deadline has passed.
    fn wait<'a>(
        &self,
        s: std::sync::MutexGuard<'a, SimState>,
        deadline: Option<Instant>,
    ) -> (std::sync::MutexGuard<'a, SimState>, bool) {
        let wait = match deadline {
            Some(d) if Instant::now() >= d => return (s, false),
            Some(d) => d - Instant::now(),
            None => Duration::from_secs(3600),
        };
        let s = self
            .cv
            .wait_timeout(s, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        (s, true)
    }

    fn secs(&self) -> f64 {
        self.timeout.map_or(0.0, |t| t.as_secs_f64())
    }

    /// The ranks other than `me` that have not called op `seq` (while it
    /// is pending: the flight record of its failure), ascending.
    pub(crate) fn never_called(&self, seq: u64, me: u32) -> Vec<u32> {
        let s = lock(&self.state);
        let Some(p) = s.ops.get(&seq) else {
            return Vec::new();
        };
        (0..self.n)
            .filter(|&r| {
                r != me && !matches!(p.members[r as usize], Some(m) if m.fate == Fate::Run)
            })
            .collect()
    }

    /// The messages sent to rank `me` that no receive took: (sender,
    /// message number of the pair, bytes), ascending.
    pub(crate) fn unreceived(&self, me: u32) -> Vec<(u32, u64, u64)> {
        lock(&self.state)
            .mail
            .iter()
            .filter(|((_, dst, _), _)| *dst == me)
            .map(|(&(src, _, n), mail)| (src, n, mail.data.len() as u64))
            .collect()
    }

    /// Leaves message `m` (its bytes `data`) for its receiver, sent by
    /// the call `sender` at its clock. Never waits.
    pub(crate) fn post_send(
        &self,
        name: &str,
        m: Msg,
        data: Vec<u8>,
        sender: Member,
    ) -> Result<(), CommError> {
        let mut s = lock(&self.state);
        if let Some(e) = self.cluster.broken().or_else(|| s.broken_error(name)) {
            return Err(e);
        }
        let sender = Member {
            start: Some(self.cluster.clock(sender.global)),
            advance: false,
            ..sender
        };
        *s.queued.entry((m.src, m.dst)).or_default() += data.len() as u64;
        s.mail.insert(
            (m.src, m.dst, m.n),
            Mail {
                count: m.count,
                dtype: m.dtype,
                data,
                sender,
            },
        );
        self.cv.notify_all();
        Ok(())
    }

    /// A crashed rank's call: waits until the tree breaks (a peer's op
    /// found the crash) and returns that error, or its own timeout.
    pub(crate) fn wait_broken(&self, name: &str) -> CommError {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut s = lock(&self.state);
        loop {
            if let Some(e) = self.cluster.broken().or_else(|| s.broken_error(name)) {
                return e;
            }
            let (next, alive) = self.wait(s, deadline);
            s = next;
            if !alive {
                return CommError::Timeout(BackendError::Sim(format!(
                    "{name}: this rank crashed (fault plan) and no peer needed it within {} s",
                    self.secs()
                )));
            }
        }
    }

    /// Returns once message `m` has been received or its pair holds at most
    /// `HCCL_BUFFSIZE` bytes (a TCP sender's backpressure).
    pub(crate) fn wait_sent(&self, name: &str, m: Msg) -> Result<(), CommError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut s = lock(&self.state);
        loop {
            let held = s.queued.get(&(m.src, m.dst)).copied().unwrap_or(0);
            let Some(mail) = s.mail.get(&(m.src, m.dst, m.n)) else {
                // Taken; a waiting send the receiver refused fails, as a
                // TCP sender does at once, not at its next op.
                if s.refused.remove(&(m.src, m.dst, m.n)) {
                    if let Some(e) = s.broken_error(name) {
                        return Err(e);
                    }
                }
                return Ok(());
            };
            if held <= self.bound {
                return Ok(());
            }
            let len = mail.data.len();
            if let Some(e) = self.cluster.broken().or_else(|| s.broken_error(name)) {
                return Err(e);
            }
            if let Some(e) = s.gone_error(name, m.src, m.dst) {
                return Err(e);
            }
            let (next, alive) = self.wait(s, deadline);
            s = next;
            if !alive {
                let why = format!(
                    "{name}: rank {} timed out after {} s waiting for rank {} to receive message {} ({len} bytes) of the pair, which holds {held} bytes (more than HCCL_BUFFSIZE, {} bytes); the peer is slow, hung or did not call recv (raise HCCL_EXEC_TIMEOUT if it is only slow)",
                    m.src, self.secs(), m.dst, m.n, self.bound
                );
                self.break_world(&mut s, m.src, &why, AbortKind::Timeout);
                return Err(CommError::Timeout(BackendError::Sim(why)));
            }
        }
    }

    /// Receives message `m` on its receiver: waits for the sender's
    /// message, checks its count and data type against `m` (a mismatch
    /// fails before anything is returned), and runs the transfer on the
    /// simulator as the receiver's call `me`; returns the bytes that
    /// arrived. A sender that crashed before sending is simulated so: the
    /// receive hangs, with the report.
    pub(crate) fn recv(
        &self,
        (comm, name): (&str, &str),
        m: Msg,
        me: Member,
    ) -> Result<Vec<u8>, CommError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut s = lock(&self.state);
        let (mail, sender_waits) = loop {
            if let Some(e) = self.cluster.broken().or_else(|| s.broken_error(name)) {
                return Err(e);
            }
            let src = self.global_of(m.src);
            if !s.mail.contains_key(&(m.src, m.dst, m.n)) && self.cluster.crashed(src) {
                let sender = Member {
                    global: src,
                    call: self.cluster.calls_made(src),
                    fate: Fate::Crash,
                    start: None,
                    advance: false,
                };
                let lost = Mail {
                    count: m.count,
                    dtype: m.dtype,
                    data: vec![0; (m.count * m.dtype.size()) as usize],
                    sender,
                };
                drop(s);
                let r = self.transfer((comm, name), m, lost, me);
                self.cluster.wake_all();
                return r;
            }
            if !s.mail.contains_key(&(m.src, m.dst, m.n)) {
                if let Some(e) = s.gone_error(name, m.dst, m.src) {
                    return Err(e);
                }
            }
            if let Some(mail) = s.mail.remove(&(m.src, m.dst, m.n)) {
                let held = s.queued.get(&(m.src, m.dst)).copied().unwrap_or(0);
                if let Some(q) = s.queued.get_mut(&(m.src, m.dst)) {
                    *q = q.saturating_sub(mail.data.len() as u64);
                }
                self.cv.notify_all();
                break (mail, held > self.bound);
            }
            let (next, alive) = self.wait(s, deadline);
            s = next;
            if !alive {
                let why = format!(
                    "{name}: rank {} timed out after {} s waiting for message {} of the pair from rank {} ({} elements of {:?}); the peer is slow, hung or did not call send (raise HCCL_EXEC_TIMEOUT if it is only slow)",
                    m.dst, self.secs(), m.n, m.src, m.count, m.dtype
                );
                self.break_world(&mut s, m.dst, &why, AbortKind::Timeout);
                return Err(CommError::Timeout(BackendError::Sim(why)));
            }
        };
        if mail.count != m.count || mail.dtype != m.dtype {
            let why = format!(
                "{name}: {}",
                signature::p2p_mismatch(
                    m.src,
                    m.dst,
                    Some((mail.count, m.count)),
                    (mail.dtype, m.dtype),
                )
            );
            if sender_waits {
                s.refused.insert((m.src, m.dst, m.n));
            }
            self.break_world(&mut s, m.dst, &why, AbortKind::Mismatch);
            return Err(CommError::Mismatch(BackendError::Sim(why)));
        }
        drop(s);
        let r = self.transfer((comm, name), m, mail, me);
        if matches!(r, Err(CommError::Hang { .. })) {
            self.cluster.wake_all();
        }
        r
    }

    /// Simulates message `m` (`mail`, from its sender's call) to the
    /// receiver's call `me`: a one-transfer SendRecv on the cluster.
    fn transfer(
        &self,
        (comm, name): (&str, &str),
        m: Msg,
        mail: Mail,
        me: Member,
    ) -> Result<Vec<u8>, CommError> {
        let args = CollectiveArgs::p2p(
            false,
            vec![P2p {
                src: m.src,
                dst: m.dst,
                count: m.count,
            }],
            m.dtype,
            self.n,
        );
        // One schedule whatever the algorithm's name (a SendRecv has one
        // algorithm), so no HCCL_ALGO here.
        let call = Collective {
            algo: plan::choose(&args, self.fit, None),
            args,
            layout: GroupLayout::flat(self.n),
        };
        let mut inputs = vec![Vec::new(); self.n as usize];
        inputs[m.src as usize] = mail.data;
        let members: Vec<Member> = (0..self.n)
            .map(|r| match r {
                r if r == m.src => mail.sender,
                r if r == m.dst => me,
                r => Member::bystander(self.global_of(r)),
            })
            .collect();
        // Messages of one pair share the comm's seq 0; `salt` tells them apart.
        let salt = (u64::from(m.src) << 32 | u64::from(m.dst)) ^ m.n.rotate_left(17);
        let outs = self
            .simulate((comm, m.n, salt), &members, call, inputs)
            .map_err(|e| match e {
                CommError::Sim(m) => CommError::Sim(format!("{name}: {m}")),
                e => e,
            })?;
        Ok(outs
            .outputs
            .get(m.dst as usize)
            .cloned()
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::backend::sim_settings::SimSettings;

    fn world(n: u32) -> Arc<SimWorld> {
        let resolved = SimSettings::default().resolve(n).expect("default settings");
        SimWorld::new(n, None, 1 << 20, Arc::new(Cluster::new(resolved, n)))
    }

    #[test]
    fn a_sub_world_is_freed_with_its_members_not_its_parent() {
        let parent = world(4);
        let mut freed = Vec::new();
        for _ in 0..3 {
            let id = parent.host_sub_world(&[2, 0]);
            let a = parent.join_sub_world(id).expect("first member joins");
            let b = parent.join_sub_world(id).expect("second member joins");
            assert!(Arc::ptr_eq(&a, &b), "both members get one sub-world");
            assert_eq!(
                a.global_rank(0),
                2,
                "the sub-world keeps its members' order"
            );
            // Every member joined: a third join (a stale token) finds nothing.
            assert!(parent.join_sub_world(id).is_none());
            freed.push(Arc::downgrade(&a));
            drop((a, b));
        }
        assert!(
            freed.iter().all(|w| w.upgrade().is_none()),
            "a destroyed split's world outlived it"
        );
        assert!(lock(&parent.state).splits.is_empty());
    }

    #[test]
    fn sub_world_numbers_are_not_reused() {
        let parent = world(2);
        let first = parent.host_sub_world(&[0, 1]);
        for _ in 0..2 {
            parent.join_sub_world(first).expect("joins");
        }
        let second = parent.host_sub_world(&[0, 1]);
        assert_ne!(first, second);
        assert!(parent.join_sub_world(first).is_none());
    }
}
