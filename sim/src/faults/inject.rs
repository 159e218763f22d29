//! [`FaultHooks`]: a resolved [`FaultPlan`] acting on the engine through
//! [`Hooks`], and the [`FaultLog`] of what it did.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use hccl_algos::collective::OpSignature;
use rand::Rng;
use serde::Serialize;

use super::resolve::{check_op, check_rank, links};
use super::{Fault, FaultError, FaultPlan};
use crate::collective::Collective;
use crate::consistency::{Entry, OpCheck};
use crate::flows::LinkId;
use crate::hooks::{Ctl, Hooks, MessageFate, MessageInfo, OpStart};
use crate::report::RankStatus;
use crate::scenario::{PlanSource, Scenario};

/// A rank the plan crashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CrashRecord {
    /// Fabric rank.
    pub rank: u32,
    /// Virtual time, ns.
    pub time_ns: u64,
    /// The op it was in or about to call.
    pub op: Option<usize>,
    /// Index of the fault in the plan.
    pub fault: usize,
}

/// A message the plan dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DropRecord {
    /// Virtual time of the match, ns.
    pub time_ns: u64,
    /// Op index.
    pub op: usize,
    /// Sending fabric rank.
    pub src: u32,
    /// Receiving fabric rank.
    pub dst: u32,
    /// Schedule tag.
    pub tag: u32,
    /// Payload bytes.
    pub bytes: u64,
    /// Index of the fault in the plan.
    pub fault: usize,
}

/// An op a rank skipped because of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkipRecord {
    /// Fabric rank.
    pub rank: u32,
    /// Op index.
    pub op: usize,
    /// Virtual time, ns.
    pub time_ns: u64,
    /// Index of the fault in the plan.
    pub fault: usize,
}

/// A rank whose op failed the cross-rank argument check (EI0005).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgsFailure {
    /// Fabric rank.
    pub rank: u32,
    /// Its communicator rank.
    pub comm_rank: u32,
    /// Op index.
    pub op: usize,
    /// Virtual time, ns.
    pub time_ns: u64,
    /// The first differing field (`kind`, `count`, `dtype`, `op`, `root`).
    pub field: String,
    /// This rank's value.
    pub local: String,
    /// The peer's value.
    pub remote: String,
    /// The peer's communicator rank.
    pub peer_comm_rank: u32,
    /// The peer's fabric rank.
    pub peer: u32,
    /// The full message, e.g. `all_reduce: count mismatch, local 8, remote 4
    /// (rank 1); ...`.
    pub message: String,
}

/// A link's bandwidth change made by the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkChange {
    /// Virtual time, ns.
    pub time_ns: u64,
    /// Directed link id.
    pub link: LinkId,
    /// New bandwidth, GB/s (0: down).
    pub gbps: f64,
}

/// A fault of the plan that did nothing during the run (a crash after its
/// rank finished, a drop whose n-th message never came, a skip of an op the
/// run never reached, ...). A plan that silently does nothing looks like a
/// fault the library survived; this makes it visible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnfiredFault {
    /// Index of the fault in the plan (`faults[N]`).
    pub fault: usize,
    /// For people, e.g. `fault 0 (drop of message 1 from rank 0 to rank 1
    /// in op #2) never fired: op #2 sent 0 message(s) from rank 0 to rank 1`.
    pub message: String,
}

/// Everything the plan did during a run, in time order per kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FaultLog {
    /// The plan that ran.
    pub plan: FaultPlan,
    /// Ranks crashed.
    pub crashes: Vec<CrashRecord>,
    /// Messages dropped.
    pub drops: Vec<DropRecord>,
    /// Ops skipped.
    pub skips: Vec<SkipRecord>,
    /// Ops called with other arguments: (fabric rank, op).
    pub altered: Vec<(u32, usize)>,
    /// Ranks failed by the argument check.
    pub failures: Vec<ArgsFailure>,
    /// Link bandwidth changes.
    pub link_changes: Vec<LinkChange>,
    /// Messages delayed by jitter, and the total delay, ns.
    pub jittered: (u64, u64),
    /// Faults of the plan that never fired, in plan order (filled when the
    /// run ends, by [`FaultHooks::into_log`]; left out of the JSON when
    /// empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unfired: Vec<UnfiredFault>,
}

impl FaultLog {
    /// One line per fault that never fired (see [`UnfiredFault`]).
    pub fn unfired_lines(&self) -> Vec<&str> {
        self.unfired.iter().map(|u| u.message.as_str()).collect()
    }
}

struct Window {
    fault: usize,
    links: Vec<LinkId>,
    factor: f64,
    at: u64,
    until: Option<u64>,
}

enum Timer {
    Links,
    Crash { rank: u32, fault: usize },
}

struct DropRule {
    fault: usize,
    probability: Option<f64>,
    nth: Option<u64>,
    from: Option<u32>,
    to: Option<u32>,
    op: Option<usize>,
    /// Messages that matched `from`, `to` and `op` so far: `nth` counts
    /// these, so with `op` it counts within that op.
    seen: u64,
}

impl DropRule {
    fn matches(&self, msg: &MessageInfo<'_>) -> bool {
        self.from.is_none_or(|r| r == msg.src)
            && self.to.is_none_or(|r| r == msg.dst)
            && self.op.is_none_or(|o| o == msg.op)
    }
}

struct JitterRule {
    fault: usize,
    max_ns: u64,
    from: Option<u32>,
    to: Option<u32>,
}

struct Altered {
    source: Rc<dyn PlanSource>,
    sig: OpSignature,
}

/// A [`FaultPlan`] resolved against one scenario, as engine [`Hooks`].
/// Also checks argument consistency on every op (see
/// the `consistency` module: HCCL's EI0005 check on every op).
pub struct FaultHooks {
    base_gbps: Vec<f64>,
    windows: Vec<Window>,
    timers: Vec<(u64, Timer)>,
    started: bool,
    jitters: Vec<JitterRule>,
    drops: Vec<DropRule>,
    crash_at_op: BTreeMap<(u32, usize), usize>,
    /// Per rank: total delay and the faults it comes from.
    slow: BTreeMap<u32, (u64, Vec<usize>)>,
    /// Per fault of the plan: whether it did something yet.
    fired: Vec<bool>,
    skips: BTreeMap<(u32, usize), usize>,
    altered: BTreeMap<(u32, usize), Altered>,
    /// Per op: its signature (collectives only) and communicator index map.
    op_sigs: Vec<Option<OpSignature>>,
    comm_rank: Vec<Vec<u32>>,
    checks: Vec<OpCheck>,
    log: FaultLog,
}

impl FaultHooks {
    /// Resolves `plan` against `sc`'s fabric and ops.
    ///
    /// # Errors
    /// [`FaultError`] naming the fault's JSON path for an unknown node,
    /// link, rank or op, a rank outside the op's communicator, or
    /// `wrong_args` that are invalid or on an op that is not a collective.
    pub fn new(sc: &Scenario<'_>, plan: &FaultPlan) -> Result<FaultHooks, FaultError> {
        plan.check()?;
        let fabric = sc.fabric();
        let mut h = FaultHooks {
            base_gbps: fabric
                .graph()
                .edge_weights()
                .map(|l| l.bandwidth_gbps)
                .collect(),
            windows: Vec::new(),
            timers: Vec::new(),
            started: false,
            jitters: Vec::new(),
            drops: Vec::new(),
            crash_at_op: BTreeMap::new(),
            slow: BTreeMap::new(),
            fired: vec![false; plan.faults.len()],
            skips: BTreeMap::new(),
            altered: BTreeMap::new(),
            op_sigs: sc
                .ops
                .iter()
                .map(|o| o.source.collective().map(|c| c.args.signature()))
                .collect(),
            comm_rank: sc
                .ops
                .iter()
                .map(|o| sc.comms[o.comm].index_of.clone())
                .collect(),
            checks: vec![OpCheck::default(); sc.ops.len()],
            log: FaultLog {
                plan: plan.clone(),
                ..FaultLog::default()
            },
        };
        let mut boundaries = BTreeSet::new();
        for (i, f) in plan.faults.iter().enumerate() {
            let path = |field: &str| format!("faults[{i}].{field}");
            match f {
                Fault::LinkDown {
                    link,
                    directed,
                    at_ns,
                    until_ns,
                }
                | Fault::LinkDegraded {
                    link,
                    directed,
                    at_ns,
                    until_ns,
                    ..
                } => {
                    let factor = match f {
                        Fault::LinkDegraded {
                            bandwidth_factor, ..
                        } => *bandwidth_factor,
                        _ => 0.0,
                    };
                    h.windows.push(Window {
                        fault: i,
                        links: links(fabric, &path("link"), link, *directed)?,
                        factor,
                        at: *at_ns,
                        until: *until_ns,
                    });
                    boundaries.insert(*at_ns);
                    boundaries.extend(*until_ns);
                }
                Fault::Jitter { max_ns, from, to } => {
                    for (field, r) in [("from", from), ("to", to)] {
                        if let Some(r) = r {
                            check_rank(fabric, &path(field), *r)?;
                        }
                    }
                    h.jitters.push(JitterRule {
                        fault: i,
                        max_ns: *max_ns,
                        from: *from,
                        to: *to,
                    });
                }
                Fault::Drop {
                    probability,
                    nth,
                    from,
                    to,
                    op,
                } => {
                    for (field, r) in [("from", from), ("to", to)] {
                        if let Some(r) = r {
                            check_rank(fabric, &path(field), *r)?;
                        }
                    }
                    if let Some(op) = op {
                        check_op(sc, &path("op"), *op, None)?;
                    }
                    h.drops.push(DropRule {
                        fault: i,
                        probability: *probability,
                        nth: *nth,
                        from: *from,
                        to: *to,
                        op: *op,
                        seen: 0,
                    });
                }
                Fault::Crash { rank, at_ns, at_op } => {
                    check_rank(fabric, &path("rank"), *rank)?;
                    if let Some(t) = at_ns {
                        h.timers.push((
                            *t,
                            Timer::Crash {
                                rank: *rank,
                                fault: i,
                            },
                        ));
                    }
                    if let Some(op) = at_op {
                        check_op(sc, &path("at_op"), *op, Some(*rank))?;
                        h.crash_at_op.entry((*rank, *op)).or_insert(i);
                    }
                }
                Fault::SlowRank { rank, delay_ns } => {
                    check_rank(fabric, &path("rank"), *rank)?;
                    let (total, faults) = h.slow.entry(*rank).or_default();
                    // Saturating: enough in-range delays still pass u64::MAX.
                    *total = total.saturating_add(*delay_ns);
                    faults.push(i);
                }
                Fault::Skip { rank, op } => {
                    check_rank(fabric, &path("rank"), *rank)?;
                    check_op(sc, &path("op"), *op, Some(*rank))?;
                    h.skips.entry((*rank, *op)).or_insert(i);
                }
                Fault::WrongArgs {
                    rank,
                    op,
                    count,
                    dtype,
                    reduce_op,
                    root,
                } => {
                    check_rank(fabric, &path("rank"), *rank)?;
                    check_op(sc, &path("op"), *op, Some(*rank))?;
                    let source = sc.ops[*op].source.clone();
                    let orig = source.collective().ok_or_else(|| FaultError::BadArgs {
                        path: path("op"),
                        reason: format!(
                            "op #{op} '{}' is a hand-written schedule, not a collective call; wrong_args needs a collective",
                            sc.ops[*op].label
                        ),
                    })?;
                    // Faults on the same (rank, op) combine: start from any earlier alteration.
                    let base = h
                        .altered
                        .get(&(*rank, *op))
                        .and_then(|a| a.source.collective().cloned())
                        .unwrap_or_else(|| orig.clone());
                    let mut args = base.args.clone();
                    if let Some(c) = count {
                        args.count = *c;
                    }
                    if let Some(d) = dtype {
                        args.dtype = *d;
                    }
                    if let Some(o) = reduce_op {
                        args.op = *o;
                    }
                    if let Some(r) = root {
                        args.root = *r;
                    }
                    args.validate().map_err(|e| FaultError::BadArgs {
                        path: format!("faults[{i}]"),
                        reason: format!("the altered arguments are invalid: {e}"),
                    })?;
                    let sig = args.signature();
                    let c = Collective { args, ..base };
                    h.altered.insert(
                        (*rank, *op),
                        Altered {
                            source: Rc::new(c),
                            sig,
                        },
                    );
                }
            }
        }
        h.timers
            .extend(boundaries.into_iter().map(|t| (t, Timer::Links)));
        Ok(h)
    }

    /// What the plan did.
    pub fn log(&self) -> &FaultLog {
        &self.log
    }

    /// What the plan did, consuming the hooks; call it when the run has
    /// ended: it also lists the faults that never fired
    /// ([`FaultLog::unfired`]).
    pub fn into_log(mut self) -> FaultLog {
        for f in &self.log.crashes {
            self.fired[f.fault] = true;
        }
        for f in &self.log.drops {
            self.fired[f.fault] = true;
        }
        for f in &self.log.skips {
            self.fired[f.fault] = true;
        }
        let plan = &self.log.plan;
        let mut unfired = Vec::new();
        for (i, fault) in plan.faults.iter().enumerate() {
            if self.fired[i] {
                continue;
            }
            let altered = match fault {
                Fault::WrongArgs { rank, op, .. } => self.log.altered.contains(&(*rank, *op)),
                _ => false,
            };
            if altered {
                continue;
            }
            let mut message = format!("fault {i} ({}) never fired", fault.describe());
            if let Some(rule) = self.drops.iter().find(|r| r.fault == i && r.nth.is_some()) {
                message.push_str(&format!(
                    ": only {} matching message(s) were sent",
                    rule.seen
                ));
            }
            unfired.push(UnfiredFault { fault: i, message });
        }
        self.log.unfired = unfired;
        self.log
    }

    /// First callback: apply windows open at the start, arm the timers.
    fn start(&mut self, ctl: &mut Ctl<'_, '_>) {
        if self.started {
            return;
        }
        self.started = true;
        self.apply_links(ctl);
        for (id, (t, _)) in self.timers.iter().enumerate() {
            ctl.set_timer(*t, id as u64);
        }
    }

    /// Sets every link a window touches to base × the factors open now.
    fn apply_links(&mut self, ctl: &mut Ctl<'_, '_>) {
        let now = ctl.now();
        let mut factor: BTreeMap<LinkId, f64> = BTreeMap::new();
        for w in &self.windows {
            let open = w.at <= now && w.until.is_none_or(|u| now < u);
            if open {
                self.fired[w.fault] = true;
            }
            for &l in &w.links {
                let f = factor.entry(l).or_insert(1.0);
                if open {
                    *f *= w.factor;
                }
            }
        }
        for (l, f) in factor {
            let gbps = self.base_gbps[l as usize] * f;
            if ctl.link_bandwidth(l) != Some(gbps) {
                ctl.set_link_bandwidth(l, gbps);
                self.log.link_changes.push(LinkChange {
                    time_ns: now,
                    link: l,
                    gbps,
                });
            }
        }
    }

    fn crash(&mut self, ctl: &mut Ctl<'_, '_>, rank: u32, op: Option<usize>, fault: usize) {
        self.log.crashes.push(CrashRecord {
            rank,
            time_ns: ctl.now(),
            op,
            fault,
        });
    }

    /// The argument check of `rank` entering `op` with `sig`. On a
    /// mismatch, fails every member still in the op (they stop, as a
    /// process does on an HCCL error) and returns true.
    fn check_args(
        &mut self,
        ctl: &mut Ctl<'_, '_>,
        rank: u32,
        op: usize,
        sig: OpSignature,
    ) -> bool {
        let comm_rank = self.comm_rank[op][rank as usize];
        let check = &mut self.checks[op];
        let was_failed = check.failed;
        if !check.enter(Entry {
            comm_rank,
            rank,
            sig,
        }) {
            return false;
        }
        let members: Vec<Entry> = if was_failed {
            check
                .entries
                .iter()
                .filter(|e| e.rank == rank)
                .copied()
                .collect()
        } else {
            check.entries.clone()
        };
        for e in members {
            let still_in = e.rank == rank || ctl.current_op(e.rank) == Some(op);
            if !still_in {
                continue;
            }
            if let Some((err, peer)) = self.checks[op].mismatch_of(e.comm_rank) {
                self.log.failures.push(ArgsFailure {
                    rank: e.rank,
                    comm_rank: e.comm_rank,
                    op,
                    time_ns: ctl.now(),
                    field: err.field.into(),
                    local: err.local.clone(),
                    remote: err.remote.clone(),
                    peer_comm_rank: err.peer,
                    peer,
                    message: format!("EI0005 {err}"),
                });
            }
            if e.rank != rank {
                ctl.crash(e.rank);
            }
        }
        true
    }
}

impl Hooks for FaultHooks {
    fn before_op(&mut self, ctl: &mut Ctl<'_, '_>, rank: u32, op: usize) -> OpStart {
        self.start(ctl);
        if let Some(&fault) = self.crash_at_op.get(&(rank, op)) {
            self.crash(ctl, rank, Some(op), fault);
            return OpStart::Crash;
        }
        if let Some(&fault) = self.skips.get(&(rank, op)) {
            self.log.skips.push(SkipRecord {
                rank,
                op,
                time_ns: ctl.now(),
                fault,
            });
            return OpStart::Skip;
        }
        let altered = self
            .altered
            .get(&(rank, op))
            .map(|a| (a.source.clone(), a.sig));
        let sig = altered.as_ref().map(|a| a.1).or(self.op_sigs[op]);
        if altered.is_some() {
            // Counted even when the argument check then fails the call.
            self.log.altered.push((rank, op));
        }
        if let Some(sig) = sig {
            if self.check_args(ctl, rank, op, sig) {
                return OpStart::Crash;
            }
        }
        if let Some((source, _)) = altered {
            // A slow rank's delay is not applied to an altered call: the
            // engine takes one action per op start.
            return OpStart::Replace(source);
        }
        match self.slow.get(&rank) {
            Some((d, faults)) if *d > 0 => {
                for &f in faults {
                    self.fired[f] = true;
                }
                OpStart::Delay(*d)
            }
            _ => OpStart::Run,
        }
    }

    fn on_message(&mut self, ctl: &mut Ctl<'_, '_>, msg: &MessageInfo<'_>) -> MessageFate {
        self.start(ctl);
        // Count first, for every rule: a message one rule drops still
        // counts towards another rule's n-th.
        for rule in &mut self.drops {
            if rule.matches(msg) {
                rule.seen += 1;
            }
        }
        for rule in &self.drops {
            if !rule.matches(msg) {
                continue;
            }
            let dropped = match (rule.nth, rule.probability) {
                (Some(n), _) => rule.seen == n,
                (None, Some(p)) => ctl.rng().gen_bool(p),
                (None, None) => false,
            };
            if dropped {
                self.log.drops.push(DropRecord {
                    time_ns: ctl.now(),
                    op: msg.op,
                    src: msg.src,
                    dst: msg.dst,
                    tag: msg.tag,
                    bytes: msg.bytes,
                    fault: rule.fault,
                });
                return MessageFate::Drop;
            }
        }
        let mut delay = 0u64;
        for j in &self.jitters {
            if j.from.is_none_or(|r| r == msg.src) && j.to.is_none_or(|r| r == msg.dst) {
                let d = ctl.rng().gen_range(0..=j.max_ns);
                if d > 0 {
                    self.fired[j.fault] = true;
                }
                delay = delay.saturating_add(d);
            }
        }
        if delay > 0 {
            self.log.jittered.0 += 1;
            self.log.jittered.1 = self.log.jittered.1.saturating_add(delay);
            return MessageFate::Delay(delay);
        }
        MessageFate::Deliver
    }

    fn on_timer(&mut self, ctl: &mut Ctl<'_, '_>, id: u64) {
        match self.timers.get(id as usize) {
            Some((_, Timer::Links)) => self.apply_links(ctl),
            // A rank that finished every op has nothing left to break.
            Some(&(_, Timer::Crash { rank, fault }))
                if !matches!(
                    ctl.rank_status(rank),
                    Some(RankStatus::Done | RankStatus::Crashed)
                ) =>
            {
                let op = ctl.current_op(rank);
                self.crash(ctl, rank, op, fault);
                ctl.crash(rank);
            }
            Some((_, Timer::Crash { .. })) => {}
            None => {}
        }
    }
}
