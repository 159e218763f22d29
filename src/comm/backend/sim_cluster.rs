//! The simulated cluster under one communicator tree (a world from
//! `Comm::init_all` and every communicator split from it): one fabric, one
//! fault plan, one seed, and one virtual clock per rank that runs across
//! ops. Each op still runs as its own `hccl_sim` scenario, on the whole
//! fabric, but every rank starts it at its own clock (the end of its
//! previous op) and the fault plan's times are times of the whole program,
//! so profiling records and hang reports show the program's timeline.
//!
//! Op indices of the fault plan (`at_op`, `op`) count each rank's own calls
//! on the tree: collectives and point-to-point calls on any communicator
//! of it, from 0 (a split takes two, its exchanges over the parent). For a
//! program that calls collectives on one communicator, op `k` is the op of
//! sequence number `k`. A hang report renumbers its ops so: the first hang
//! breaks the whole tree, every rank's current and later op fails with it
//! ([`CommError::Hang`]), and it is written to `HCCL_FLIGHT_RECORDER_DIR`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use hccl_algos::schedule::{BufferSizes, RankSchedule};
use hccl_algos::DataType;
use hccl_sim::faults::{Fault, FaultHooks, FaultPlan};
use hccl_sim::hang::{HangReason, HangReport, RootCause};
use hccl_sim::{
    Ctl, Delivered, FixedPlans, Hooks, MessageFate, MessageInfo, Mode, OpStart, PlanSource,
    Scenario, TraceHash,
};
use hccl_topology::Fabric;

use super::sim_settings::Resolved;
use super::sim_world::SimWorld;
use crate::comm::{lock, CommError};

/// What a rank does at one of its calls, by the fault plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Calls it.
    Run,
    /// Never calls it: goes on to its next call (`skip`).
    Skip,
    /// Stops for good before it (`crash` with `at_op`, or a crash earlier).
    Crash,
}

/// One rank of an op being simulated: its world rank, its call index,
/// what it does, when it starts and whether the op moves its clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    pub(crate) global: u32,
    pub(crate) call: u64,
    pub(crate) fate: Fate,
    /// Its start, ns (`None`: its clock; a sender's: when it sent).
    pub(crate) start: Option<u64>,
    /// The op's end is its clock's (false for a sender, which went on).
    pub(crate) advance: bool,
}

impl Member {
    /// A rank that takes no part in a point-to-point message but is in
    /// its world: starts at 0, keeps its clock, matches no fault.
    pub(crate) fn bystander(global: u32) -> Member {
        Member {
            global,
            call: u64::MAX,
            fate: Fate::Run,
            start: Some(0),
            advance: false,
        }
    }
}

/// A finished op: each communicator rank's output and its virtual
/// (start, end) in ns.
pub(crate) struct Finished {
    pub(crate) outputs: Vec<Vec<u8>>,
    pub(crate) times: Vec<(u64, u64)>,
}

#[derive(Default)]
struct ClusterState {
    /// Virtual time each world rank's last op ended, ns.
    clocks: Vec<u64>,
    /// Calls each world rank made on the tree.
    calls: Vec<u64>,
    /// World ranks that crashed.
    crashed: Vec<u32>,
    /// The first hang report, which broke the tree.
    hang: Option<Box<HangReport>>,
    /// Whether the flight records of the tree's ranks were dumped for it.
    hang_dumped: bool,
}

/// A world rank of a simulated cluster, as the flight recorder sees it:
/// a crashed rank is a dead process (no more records, no dump), and the
/// tree's first hang dumps every live rank's record.
#[derive(Clone)]
pub(crate) struct SimRank {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) global: u32,
}

impl SimRank {
    /// Whether this rank has crashed (fault plan).
    pub(crate) fn crashed(&self) -> bool {
        self.cluster.crashed(self.global)
    }

    /// Whether this rank is on `cluster`.
    pub(crate) fn on(&self, cluster: &Cluster) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.cluster), cluster)
    }
}

/// What a `wrong_args` fault makes a rank call instead (`None`: as called).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Called {
    pub(crate) count: Option<u64>,
    pub(crate) dtype: Option<DataType>,
    pub(crate) op: Option<hccl_algos::ReduceOp>,
    pub(crate) root: Option<u32>,
}

/// The cluster shared by the worlds of one communicator tree.
pub(crate) struct Cluster {
    fabric: Fabric,
    plan: FaultPlan,
    seed: u64,
    report_dir: Option<PathBuf>,
    replay: String,
    state: Mutex<ClusterState>,
    /// The worlds of the tree, to wake when it breaks. Never locked while
    /// a world's state is locked by the same thread after it.
    worlds: Mutex<Vec<Weak<SimWorld>>>,
}

impl Cluster {
    /// The cluster of `n` world ranks from checked settings.
    pub(crate) fn new(r: Resolved, n: u32) -> Cluster {
        Cluster {
            fabric: r.fabric,
            plan: r.plan,
            seed: r.seed,
            report_dir: r.report_dir,
            replay: r.replay,
            state: Mutex::new(ClusterState {
                clocks: vec![0; n as usize],
                calls: vec![0; n as usize],
                ..ClusterState::default()
            }),
            worlds: Mutex::new(Vec::new()),
        }
    }

    /// Adds a world of the tree (to be woken when the tree breaks).
    pub(crate) fn register(&self, w: Weak<SimWorld>) {
        lock(&self.worlds).push(w);
    }

    /// World rank `global` makes its next call: its index and fate.
    pub(crate) fn call(&self, global: u32) -> Member {
        let mut s = lock(&self.state);
        let g = global as usize;
        let call = s.calls.get(g).copied().unwrap_or(0);
        if let Some(c) = s.calls.get_mut(g) {
            *c += 1;
        }
        let planned = |f: &Fault| match f {
            Fault::Crash {
                rank,
                at_op: Some(k),
                ..
            } => *rank == global && *k as u64 == call,
            _ => false,
        };
        let fate =
            if s.crashed.contains(&global) || self.plan.faults.iter().any(planned) {
                if !s.crashed.contains(&global) {
                    s.crashed.push(global);
                }
                Fate::Crash
            } else if self.plan.faults.iter().any(
                |f| matches!(f, Fault::Skip { rank, op } if *rank == global && *op as u64 == call),
            ) {
                Fate::Skip
            } else {
                Fate::Run
            };
        Member {
            global,
            call,
            fate,
            start: None,
            advance: true,
        }
    }

    /// The arguments the plan's `wrong_args` fault makes world rank
    /// `global` call its call `call` with (`None`: no such fault), for its
    /// flight record: the ranks' records then differ as the simulated
    /// calls do.
    pub(crate) fn wrong_args(&self, global: u32, call: u64) -> Option<Called> {
        self.plan.faults.iter().find_map(|f| match f {
            Fault::WrongArgs {
                rank,
                op,
                count,
                dtype,
                reduce_op,
                root,
            } if *rank == global && *op as u64 == call => Some(Called {
                count: *count,
                dtype: *dtype,
                op: *reduce_op,
                root: *root,
            }),
            _ => None,
        })
    }

    /// How many calls world rank `global` has made.
    pub(crate) fn calls_made(&self, global: u32) -> u64 {
        lock(&self.state)
            .calls
            .get(global as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Whether world rank `global` has crashed.
    pub(crate) fn crashed(&self, global: u32) -> bool {
        lock(&self.state).crashed.contains(&global)
    }

    /// World rank `global`'s virtual clock, ns.
    pub(crate) fn clock(&self, global: u32) -> u64 {
        lock(&self.state)
            .clocks
            .get(global as usize)
            .copied()
            .unwrap_or(0)
    }

    /// The error every op of the tree fails with once it broke.
    pub(crate) fn broken(&self) -> Option<CommError> {
        lock(&self.state)
            .hang
            .as_ref()
            .map(|h| CommError::hang(h.clone()))
    }

    /// Wakes every waiting rank of the tree (after it broke). The caller
    /// holds no world's state. The first call after a hang first dumps
    /// every live rank's flight record, as ranks of a real job learn of a
    /// peer's failure (the ranks in an op dump again as it fails).
    pub(crate) fn wake_all(&self) {
        let hang = {
            let mut s = lock(&self.state);
            let first = s.hang.is_some() && !std::mem::replace(&mut s.hang_dumped, true);
            s.hang.clone().filter(|_| first)
        };
        if let Some(h) = hang {
            crate::comm::recorder::dump_tree(self, &h);
        }
        let worlds: Vec<Weak<SimWorld>> = lock(&self.worlds).clone();
        for w in worlds.iter().filter_map(Weak::upgrade) {
            w.wake();
        }
    }

    /// Runs one op on the cluster: `source` on the communicator `comm` of
    /// world ranks `members` (in communicator rank order), with `inputs`;
    /// `seq` is its sequence number on `comm` and `salt` tells apart ops
    /// that share it (point-to-point messages). Each rank starts at its
    /// clock (or [`Member::start`]); the plan's faults for these calls
    /// apply. A finished op moves the clocks of members that
    /// [`Member::advance`] to their ends.
    ///
    /// # Errors
    /// [`CommError::Hang`] with the report (the tree is broken with it;
    /// call [`Cluster::wake_all`] once the world's state is unlocked), or
    /// [`CommError::Sim`] for a scenario the simulator refuses.
    pub(crate) fn simulate(
        &self,
        (comm, seq, salt): (&str, u64, u64),
        members: &[Member],
        source: impl PlanSource + 'static,
        inputs: Vec<Vec<u8>>,
    ) -> Result<Finished, CommError> {
        if let Some(e) = self.broken() {
            return Err(e);
        }
        let ranks: Vec<u32> = members.iter().map(|m| m.global).collect();
        let mut sc = Scenario::new(&self.fabric)
            .mode(Mode::Data)
            .seed(op_seed(self.seed, comm, seq, salt));
        let id = sc
            .communicator(comm, &ranks)
            .map_err(|e| CommError::Sim(e.to_string()))?;
        sc.op_with_inputs(id, source, inputs)
            .map_err(|e| CommError::Sim(e.to_string()))?;
        let starts: BTreeMap<u32, u64> = {
            let s = lock(&self.state);
            members
                .iter()
                .map(|m| {
                    let clock = s.clocks.get(m.global as usize).copied().unwrap_or(0);
                    (m.global, m.start.unwrap_or(clock))
                })
                .collect()
        };
        let plan = self.op_plan(members, &starts);
        let faults = FaultHooks::new(&sc, &plan).map_err(|e| CommError::Sim(e.to_string()))?;
        let mut hooks = Clocked { starts, faults };
        let report = sc
            .run_with_hooks(&mut hooks)
            .map_err(|e| CommError::Sim(e.to_string()))?;
        let log = hooks.faults.into_log();
        let mut s = lock(&self.state);
        for c in &log.crashes {
            let counts = members.iter().any(|m| m.global == c.rank && m.advance);
            if counts && !s.crashed.contains(&c.rank) {
                s.crashed.push(c.rank);
            }
        }
        if let Some(mut hang) = HangReport::build(&sc, &report, &log, &self.replay) {
            if let Some(h) = &s.hang {
                return Err(CommError::hang(h.clone()));
            }
            let call_of = |g: u32| {
                members
                    .iter()
                    .find(|m| m.global == g)
                    .map_or(0, |m| m.call as usize)
            };
            renumber(&mut hang, seq, self.seed, &call_of);
            let hang = Box::new(hang);
            s.hang = Some(hang.clone());
            drop(s);
            self.write_report(&hang);
            return Err(CommError::hang(hang));
        }
        let op = report
            .ops
            .into_iter()
            .next()
            .ok_or_else(|| CommError::Sim("the simulator returned no op".into()))?;
        let times: Vec<(u64, u64)> = (0..members.len())
            .map(|c| {
                let start = op.start_ns.get(c).copied().flatten().unwrap_or(0);
                (start, op.end_ns.get(c).copied().flatten().unwrap_or(start))
            })
            .collect();
        for (m, t) in members.iter().zip(&times) {
            if let Some(clock) = s.clocks.get_mut(m.global as usize).filter(|_| m.advance) {
                *clock = (*clock).max(t.1);
            }
        }
        let outputs = op
            .outputs
            .ok_or_else(|| CommError::Sim("the simulator returned no outputs".into()))?;
        Ok(Finished { outputs, times })
    }

    /// The plan's faults for one op, as the op's scenario (op 0) takes
    /// them: faults of a time, a link or every op as they are; faults of
    /// an op index where it is the member's call; crashes and skips from
    /// the members' fates. A crash is at the rank's start (`starts`): the
    /// engine asks the hooks before a rank waits for its start, not after.
    fn op_plan(&self, members: &[Member], starts: &BTreeMap<u32, u64>) -> FaultPlan {
        let member = |r: u32| members.iter().find(|m| m.global == r);
        let this = |r: u32, op: usize| member(r).is_some_and(|m| m.call == op as u64);
        let mut out = FaultPlan::default();
        for f in &self.plan.faults {
            let f = match f.clone() {
                Fault::Crash {
                    rank,
                    at_ns: Some(t),
                    ..
                } if member(rank).is_some() => Fault::Crash {
                    rank,
                    at_ns: Some(t),
                    at_op: None,
                },
                Fault::Crash { .. } | Fault::Skip { .. } => continue,
                Fault::SlowRank { rank, .. } if member(rank).is_none() => continue,
                Fault::WrongArgs { rank, op, .. } if !this(rank, op) => continue,
                Fault::WrongArgs {
                    rank,
                    count,
                    dtype,
                    reduce_op,
                    root,
                    ..
                } => Fault::WrongArgs {
                    rank,
                    op: 0,
                    count,
                    dtype,
                    reduce_op,
                    root,
                },
                Fault::Drop {
                    op: Some(op), from, ..
                } if !from.is_some_and(|r| this(r, op)) => continue,
                Fault::Drop {
                    probability,
                    nth,
                    from,
                    to,
                    op,
                } => Fault::Drop {
                    probability,
                    nth,
                    from,
                    to,
                    op: op.map(|_| 0),
                },
                f => f,
            };
            out.faults.push(f);
        }
        for m in members {
            match m.fate {
                Fate::Crash => out.faults.push(Fault::Crash {
                    rank: m.global,
                    at_ns: Some(starts.get(&m.global).copied().unwrap_or(0)),
                    at_op: None,
                }),
                Fate::Skip => out.faults.push(Fault::Skip {
                    rank: m.global,
                    op: 0,
                }),
                Fate::Run => {}
            }
        }
        out
    }

    /// Writes the report next to the flight recorder's dumps, once per
    /// tree; a failure to write is logged (the ranks get the report anyway).
    fn write_report(&self, hang: &HangReport) {
        let Some(dir) = &self.report_dir else {
            return;
        };
        let stem = dir.join(format!("hccl_sim_hang_{}", std::process::id()));
        let r = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(stem.with_extension("txt"), hang.to_text() + "\n"))
            .and_then(|()| std::fs::write(stem.with_extension("json"), hang.to_json() + "\n"));
        match r {
            Ok(()) => tracing::error!(
                "hccl: simulated hang; report written to {}.txt",
                stem.display()
            ),
            Err(e) => crate::logging::report_error(&format!(
                "hccl: cannot write the hang report to {}: {e}",
                dir.display()
            )),
        }
    }
}

/// Checks a plan's links against `fabric` as `hccl sim` does (node
/// names, link ids, routes), on a scenario of one empty op.
///
/// # Errors
/// The simulator's message (`faults[2].link[0] = "npu99": ...`).
pub(crate) fn check_links(fabric: &Fabric, plan: &FaultPlan) -> Result<(), String> {
    let links = FaultPlan {
        faults: plan
            .faults
            .iter()
            .filter(|f| matches!(f, Fault::LinkDown { .. } | Fault::LinkDegraded { .. }))
            .cloned()
            .collect(),
    };
    let mut sc = Scenario::new(fabric);
    let w = sc.world();
    let empty = FixedPlans {
        label: "check".into(),
        dtype: DataType::Fp32,
        ranks: (0..fabric.world_size())
            .map(|rank| RankSchedule {
                rank,
                buffers: BufferSizes::default(),
                steps: Vec::new(),
            })
            .collect(),
    };
    sc.op(w, empty).map_err(|e| e.to_string())?;
    FaultHooks::new(&sc, &links)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The seed of one op's scenario: the program's seed and the op's
/// identity (its communicator, sequence number and salt), so a random
/// fault draws the same in every run and differently in each op.
fn op_seed(seed: u64, comm: &str, seq: u64, salt: u64) -> u64 {
    let mut h = TraceHash::default();
    h.word(seed);
    for b in comm.bytes() {
        h.byte(b);
    }
    h.word(seq);
    h.word(salt);
    h.value()
}

/// A one-op report in the program's terms: op indices are the ranks' call
/// indices (`call_of`, by fabric rank), the op's sequence number is `seq`,
/// the seed the program's.
fn renumber(h: &mut HangReport, seq: u64, seed: u64, call_of: &dyn Fn(u32) -> usize) {
    h.seed = seed;
    if let HangReason::Timeout { rank, op, .. } = &mut h.reason {
        *op = call_of(*rank);
    }
    for r in &mut h.ranks {
        if r.op.is_some() {
            r.op = Some(call_of(r.rank));
        }
        if r.seq.is_some() {
            r.seq = Some(seq);
        }
        r.remaining_ops.clear();
    }
    for e in &mut h.wait_for {
        e.op = call_of(e.from);
    }
    for c in &mut h.root_causes {
        match c {
            RootCause::MismatchedArguments {
                op, seq: s, failed, ..
            } => {
                *op = failed.first().map_or(*op, |&r| call_of(r));
                *s = seq;
            }
            RootCause::CrashedRank { rank, op, .. } => *op = op.map(|_| call_of(*rank)),
            RootCause::NeverCalled {
                rank, op, seq: s, ..
            } => {
                *op = call_of(*rank);
                *s = seq;
            }
            RootCause::DelayedForever { rank, op, .. } | RootCause::TooSlow { rank, op, .. } => {
                *op = call_of(*rank)
            }
            RootCause::DroppedMessage { src, op, .. } => *op = call_of(*src),
            RootCause::CommunicatorCycle { ranks, ops, .. } => {
                for (o, r) in ops.iter_mut().zip(ranks.iter()) {
                    *o = call_of(*r);
                }
            }
            _ => {}
        }
    }
}

/// The fault hooks, with every rank starting the op at its clock.
struct Clocked {
    /// Each member's start, ns (its clock).
    starts: BTreeMap<u32, u64>,
    faults: FaultHooks,
}

impl Hooks for Clocked {
    fn before_op(&mut self, ctl: &mut Ctl<'_, '_>, rank: u32, op: usize) -> OpStart {
        let at = self.starts.get(&rank).copied().unwrap_or(0);
        let wait = at.saturating_sub(ctl.now());
        match self.faults.before_op(ctl, rank, op) {
            OpStart::Run if wait > 0 => OpStart::Delay(wait),
            OpStart::Delay(d) => OpStart::Delay(d.saturating_add(wait)),
            other => other,
        }
    }

    fn on_message(&mut self, ctl: &mut Ctl<'_, '_>, msg: &MessageInfo<'_>) -> MessageFate {
        self.faults.on_message(ctl, msg)
    }

    fn on_delivered(&mut self, ctl: &mut Ctl<'_, '_>, msg: &Delivered) {
        self.faults.on_delivered(ctl, msg);
    }

    fn on_timer(&mut self, ctl: &mut Ctl<'_, '_>, id: u64) {
        self.faults.on_timer(ctl, id);
    }

    fn observes_messages(&self) -> bool {
        self.faults.observes_messages()
    }
}
