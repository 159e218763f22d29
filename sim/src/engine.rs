//! The engine: executors and op lifecycles on top of the [`Core`].
//!
//! One [`Executor`] per running rank. After every event the engine drives
//! each rank that got a completion: feed completions to its executor, post
//! every step it releases (through [`SimTransport`], the same `Transport`
//! interface real backends implement), and when its plan is done, start the
//! rank's next op.

use hccl_algos::exec::Executor;
use hccl_algos::transport::{OpContext, Transport};

use crate::core::{Core, EngineEvent, Status};
use crate::data::{default_input, RankMem};
use crate::error::SimError;
use crate::fold::Fold;
use crate::hooks::{Hooks, OpStart};
use crate::queue::EventKind;
use crate::report::{
    EngineStats, OpResult, RankStatus, RankWait, SimReport, Stall, StallReason, UnmatchedPost,
};
use crate::scenario::{Mode, PlanSource, Scenario};
use crate::transport::SimTransport;

/// Each member's start and end of one op, ns; [`UNSET`] until known
/// (8 bytes a rank instead of an `Option`'s 16: the simulator holds one
/// pair per rank and op).
struct OpTimes {
    start: Vec<u64>,
    end: Vec<u64>,
    outputs: Option<Vec<Vec<u8>>>,
}

/// A time not known yet (no event is ever at `u64::MAX`: it means "never").
const UNSET: u64 = u64::MAX;

pub(crate) struct Engine<'a> {
    sc: &'a Scenario<'a>,
    core: Core<'a>,
    /// The executor of each rank's running op (set and dropped by the
    /// engine), by fabric rank. Beside the core, not in the rank's record:
    /// driving a rank lends it in place while the core posts its steps
    /// (in the record it had to be moved out, 80 bytes, and back in on
    /// every drive, since posting needs the whole core).
    execs: Vec<Option<Executor>>,
    /// Each rank's next scenario op index to examine (read only when an
    /// op starts: outside the rank's record, which this keeps at 192
    /// bytes, three cache lines).
    next_ops: Vec<u32>,
    times: Vec<OpTimes>,
}

impl<'a> Engine<'a> {
    pub(crate) fn new(
        sc: &'a Scenario<'a>,
        hooks: &'a mut dyn Hooks,
        fold: Option<Fold>,
    ) -> Engine<'a> {
        let data = sc.mode == Mode::Data;
        let core = Core::new(
            sc.fabric, sc.costs, sc.seed, data, &sc.ops, &sc.comms, hooks, fold,
        );
        let times = sc
            .ops
            .iter()
            .map(|o| {
                let n = sc.comms[o.comm].members.len();
                OpTimes {
                    start: vec![UNSET; n],
                    end: vec![UNSET; n],
                    outputs: data.then(|| vec![Vec::new(); n]),
                }
            })
            .collect();
        let execs = (0..core.ranks.len()).map(|_| None).collect();
        let next_ops = vec![0; core.ranks.len()];
        Engine {
            sc,
            core,
            execs,
            next_ops,
            times,
        }
    }

    /// Ranks the engine runs: all, or the representatives of a folded run.
    fn running(&self) -> usize {
        self.core
            .fold
            .as_ref()
            .map_or(self.core.ranks.len(), |f| f.period as usize)
    }

    pub(crate) fn run(mut self) -> Result<SimReport, SimError> {
        for r in 0..self.running() as u32 {
            self.start_next(r)?;
            self.drive(r)?;
        }
        let mut stall_reason = None;
        loop {
            let ev = match self.core.deferred.pop() {
                Some(EngineEvent::Wake { rank }) => Some(EventKind::Wake { rank }),
                Some(EngineEvent::Timeout { rank, op }) => Some(EventKind::Timeout { rank, op }),
                None => self.core.next_event(),
            };
            let Some(ev) = ev else { break };
            match self.core.handle(ev)? {
                None => {}
                Some(EngineEvent::Wake { rank })
                    if self.core.ranks[rank as usize].status == Status::Delayed =>
                {
                    let op = self.core.ranks[rank as usize].op;
                    self.begin(rank, op as usize, None)?;
                    self.drive(rank)?;
                }
                Some(EngineEvent::Wake { .. }) => {}
                Some(EngineEvent::Timeout { rank, op }) => {
                    let rs = &self.core.ranks[rank as usize];
                    if rs.op == op && matches!(rs.status, Status::Running | Status::Delayed) {
                        stall_reason = Some(StallReason::Timeout {
                            rank,
                            op: op as usize,
                        });
                        break;
                    }
                }
            }
            let mut touched = std::mem::take(&mut self.core.touched);
            for &r in &touched {
                self.core.ranks[r as usize].touched = false;
                self.drive(r)?;
            }
            touched.clear();
            if self.core.touched.is_empty() {
                self.core.touched = touched;
            }
        }
        let unfinished = self.core.ranks[..self.running()]
            .iter()
            .any(|r| r.status != Status::Done);
        let stall = match (stall_reason, unfinished) {
            (Some(reason), _) => Some(self.stall(reason)),
            (None, true) => Some(self.stall(StallReason::QueueDrained)),
            (None, false) => None,
        };
        Ok(self.report(stall))
    }

    /// The next op index of fabric rank `r` at or after its cursor.
    fn next_op_of(&self, r: u32) -> Option<usize> {
        let cursor = self.next_ops[r as usize] as usize;
        match self.sc.orders.get(&r) {
            Some(order) => order.get(cursor).copied(),
            None => (cursor..self.sc.ops.len())
                .find(|&i| self.sc.comms[self.sc.ops[i].comm].index_of[r as usize] != u32::MAX),
        }
    }

    /// Advances the cursor past op `i`.
    fn consume(&mut self, r: u32, i: usize) {
        let next = &mut self.next_ops[r as usize];
        *next = if self.sc.orders.contains_key(&r) {
            *next + 1
        } else {
            i as u32 + 1
        };
    }

    /// Starts rank `r`'s next op (asking the hooks), or marks it done.
    fn start_next(&mut self, r: u32) -> Result<(), SimError> {
        loop {
            if self.core.ranks[r as usize].status == Status::Crashed {
                return Ok(());
            }
            let Some(i) = self.next_op_of(r) else {
                self.core.ranks[r as usize].status = Status::Done;
                return Ok(());
            };
            self.consume(r, i);
            let action = self.core.with_hooks(|h, ctl| h.before_op(ctl, r, i));
            let overhead = self.core.costs.op_overhead_ns;
            match action {
                // The op is called now; its first step waits out the fixed
                // per-op cost, which counts as part of the op's time.
                OpStart::Run if overhead > 0 => {
                    let comm_rank = self.sc.comms[self.sc.ops[i].comm].index_of[r as usize];
                    self.times[i].start[comm_rank as usize] = self.core.now;
                    let rs = &mut self.core.ranks[r as usize];
                    rs.status = Status::Delayed;
                    rs.op = i as u32;
                    let at = self.core.now.saturating_add(overhead);
                    self.core.queue.push(at, EventKind::Wake { rank: r });
                    self.arm_timeout(r, i);
                    return Ok(());
                }
                OpStart::Run => return self.begin(r, i, None),
                OpStart::Replace(p) => return self.begin(r, i, Some(p.as_ref())),
                OpStart::Skip => continue,
                OpStart::Crash => {
                    self.core.ranks[r as usize].op = i as u32;
                    self.core.crash(r);
                    return Ok(());
                }
                OpStart::Delay(ns) => {
                    let rs = &mut self.core.ranks[r as usize];
                    rs.status = Status::Delayed;
                    rs.op = i as u32;
                    let at = self.core.now.saturating_add(ns).saturating_add(overhead);
                    self.core.queue.push(at, EventKind::Wake { rank: r });
                    self.arm_timeout(r, i);
                    return Ok(());
                }
            }
        }
    }

    fn arm_timeout(&mut self, r: u32, i: usize) {
        if let Some(t) = self.sc.exec_timeout_ns {
            let at = self.core.now.saturating_add(t);
            self.core.queue.push(
                at,
                EventKind::Timeout {
                    rank: r,
                    op: i as u32,
                },
            );
        }
    }

    /// Begins op `i` on rank `r` now, with its own plan or `replacement`.
    fn begin(
        &mut self,
        r: u32,
        i: usize,
        replacement: Option<&dyn PlanSource>,
    ) -> Result<(), SimError> {
        let entry = &self.sc.ops[i];
        let comm = &self.sc.comms[entry.comm];
        let comm_rank = comm.index_of[r as usize];
        let size = comm.members.len() as u32;
        let source: &dyn PlanSource = replacement.unwrap_or(entry.source.as_ref());
        let (sizes, plan) = source
            .plan(comm_rank, size)
            .map_err(|reason| SimError::Plan {
                op: i,
                label: entry.label.clone(),
                rank: comm_rank,
                reason,
            })?;
        let dtype = source.dtype();
        let was_delayed = self.core.ranks[r as usize].status == Status::Delayed;
        if self.core.data {
            let input = match &entry.inputs {
                Some(inputs) => {
                    let given = inputs.get(comm_rank as usize).cloned().unwrap_or_default();
                    if given.len() as u64 != sizes.input {
                        return Err(SimError::InputLength {
                            op: i,
                            rank: comm_rank,
                            expected: sizes.input,
                            got: given.len() as u64,
                        });
                    }
                    given
                }
                None => default_input(self.sc.seed, i, comm_rank, dtype, sizes.input),
            };
            let alias = source.alias(comm_rank);
            self.core.ranks[r as usize].mem = Some(Box::new(RankMem::new(sizes, input, alias)));
        }
        let rs = &mut self.core.ranks[r as usize];
        rs.status = Status::Running;
        rs.op = i as u32;
        rs.ctx = OpContext {
            comm: comm.id,
            seq: entry.seq,
            rank: comm_rank,
            dtype,
        };
        self.execs[r as usize] = Some(Executor::with_window(plan, self.sc.window));
        let start = &mut self.times[i].start[comm_rank as usize];
        if *start == UNSET {
            *start = self.core.now;
        }
        if !was_delayed {
            self.arm_timeout(r, i);
        }
        Ok(())
    }

    /// Records the end of rank `r`'s current op.
    fn finish_op(&mut self, r: u32) {
        let now = self.core.now;
        let rs = &mut self.core.ranks[r as usize];
        let i = rs.op as usize;
        let comm_rank = rs.ctx.rank as usize;
        rs.status = Status::Idle;
        let mem = rs.mem.take();
        self.execs[r as usize] = None;
        let t = &mut self.times[i];
        t.end[comm_rank] = now;
        if let (Some(outputs), Some(mem)) = (t.outputs.as_mut(), mem) {
            outputs[comm_rank] = mem.into_output();
        }
    }

    /// Feeds completions to rank `r`'s executor and posts what it releases,
    /// moving on to the next op when the plan is done.
    fn drive(&mut self, r: u32) -> Result<(), SimError> {
        loop {
            if self.core.ranks[r as usize].status == Status::Crashed {
                self.execs[r as usize] = None;
                return Ok(());
            }
            let Some(exec) = self.execs[r as usize].as_mut() else {
                return Ok(());
            };
            if !step_exec(&mut self.core, r, exec)? {
                return Ok(());
            }
            self.finish_op(r);
            self.start_next(r)?;
        }
    }

    fn stall(&mut self, reason: StallReason) -> Stall {
        let mut ranks = Vec::new();
        for r in 0..self.core.ranks.len() as u32 {
            let status = match self.core.ranks[r as usize].status {
                Status::Done => continue,
                Status::Idle => RankStatus::Idle,
                Status::Running => RankStatus::Running,
                Status::Delayed => RankStatus::Delayed,
                Status::Crashed => RankStatus::Crashed,
            };
            let rs = &self.core.ranks[r as usize];
            let op = (rs.op != u32::MAX).then_some(rs.op as usize);
            let comm_rank = op.map(|i| self.sc.comms[self.sc.ops[i].comm].index_of[r as usize]);
            let mut remaining_ops = Vec::new();
            let saved = self.next_ops[r as usize];
            while let Some(i) = self.next_op_of(r) {
                remaining_ops.push(i);
                self.consume(r, i);
            }
            self.next_ops[r as usize] = saved;
            let (in_flight, blocked) = match &self.execs[r as usize] {
                Some(e) => (
                    e.in_flight().map(|(i, s)| (i, *s)).collect(),
                    e.blocked().map(|(i, s)| (i, *s)).collect(),
                ),
                None => (Vec::new(), Vec::new()),
            };
            ranks.push(RankWait {
                rank: r,
                status,
                op,
                comm_rank,
                remaining_ops,
                in_flight,
                blocked,
            });
        }
        let unmatched = self
            .core
            .unmatched()
            .filter_map(|(dst, p)| {
                // The op is in the poster's window: a pending post's step
                // has not completed, so its rank is still running the op
                // (a crashed rank's posts are removed from the lists).
                let poster = if p.is_send { p.peer } else { dst };
                let op = self.core.pending_op(p).or_else(|| {
                    let exec = self.execs.get(poster as usize)?.as_ref()?;
                    exec.step(p.step).map(|s| s.op)
                })?;
                Some(UnmatchedPost {
                    is_send: p.is_send,
                    src: p.peer,
                    dst,
                    comm: self.sc.comms[self.sc.ops[p.op as usize].comm].id,
                    seq: self.sc.ops[p.op as usize].seq,
                    tag: p.tag,
                    step: p.step,
                    op,
                })
            })
            .collect();
        Stall {
            time_ns: self.core.now,
            reason,
            ranks,
            unmatched,
            stalled_flows: self.core.stalled_flows(),
        }
    }

    fn report(mut self, stall: Option<Stall>) -> SimReport {
        // A folded run: every rank's times are its representative's (world
        // communicators only, so communicator rank = fabric rank).
        let folded_period = self.core.fold.as_ref().map_or(0, |f| f.period as usize);
        if folded_period > 0 {
            for t in &mut self.times {
                for r in folded_period..t.start.len() {
                    t.start[r] = t.start[r % folded_period];
                    t.end[r] = t.end[r % folded_period];
                }
            }
        }
        // Executors are dropped as ranks finish: count the peak, one full
        // window per rank of the largest communicator-op (an upper bound).
        let window_slot = std::mem::size_of::<(hccl_algos::Step, u8)>();
        let exec_bytes = self.core.ranks.len() * self.sc.window.min(1024) * window_slot
            + self.execs.capacity() * std::mem::size_of::<Option<Executor>>();
        let c = self.core.counters;
        let stats = EngineStats {
            events: c.events,
            messages: c.messages,
            flows: c.flows,
            local_steps: c.local_steps,
            reallocations: c.reallocations,
            peak_queue: self.core.queue.peak_len() as u64,
            peak_flows: self.core.net.peak_active() as u64,
            largest_component: self.core.net.largest_component() as u64,
            memory_bytes: (self.core.heap_bytes() + exec_bytes) as u64,
            folded_period: folded_period as u64,
        };
        let ops = self
            .sc
            .ops
            .iter()
            .zip(self.times)
            .map(|(entry, t)| {
                let known = |v: Vec<u64>| -> Vec<Option<u64>> {
                    v.into_iter().map(|x| (x != UNSET).then_some(x)).collect()
                };
                let (start, end) = (known(t.start), known(t.end));
                let comm = &self.sc.comms[entry.comm];
                let size = comm.members.len() as u32;
                let first = start.iter().flatten().min().copied();
                let last = end
                    .iter()
                    .all(Option::is_some)
                    .then(|| end.iter().flatten().max().copied())
                    .flatten();
                let time_ns = match (first, last) {
                    (Some(a), Some(b)) => Some(b - a),
                    _ => None,
                };
                let (bytes, factor) = entry.source.bandwidth_basis(size);
                let algbw = time_ns
                    .filter(|&t| t > 0 && bytes > 0)
                    .map(|t| bytes as f64 / t as f64);
                OpResult {
                    label: entry.label.clone(),
                    comm: comm.name.clone(),
                    seq: entry.seq,
                    start_ns: start,
                    end_ns: end,
                    time_ns,
                    bytes,
                    algbw_gbps: algbw,
                    busbw_gbps: algbw.map(|a| a * factor),
                    outputs: t.outputs,
                }
            })
            .collect();
        SimReport {
            ops,
            links: match &self.core.fold {
                Some(f) => f.expand_usage(
                    &self.core.net.usage(self.core.now),
                    &self.core.slack_flows,
                    &self.core.slack_bytes,
                ),
                None => self.core.net.usage(self.core.now),
            },
            stats,
            trace_hash: self.core.trace.value(),
            end_time_ns: self.core.now,
            seed: self.sc.seed,
            stall,
        }
    }
}

/// One round of [`Engine::drive`] on rank `r`'s executor: true when its
/// plan is done.
fn step_exec(core: &mut Core<'_>, r: u32, exec: &mut Executor) -> Result<bool, SimError> {
    loop {
        let ctx = core.ranks[r as usize].ctx;
        let mut t = SimTransport::new(core, r);
        while let Some(c) = t.poll_completion()? {
            exec.handle_completion(c.step)
                .map_err(|source| SimError::Exec { rank: r, source })?;
        }
        let mut posted = false;
        while let Some((id, step)) = exec.poll_step() {
            t.post(&ctx, id, &step.op)?;
            posted = true;
        }
        let rs = &core.ranks[r as usize];
        if !rs.completions.is_empty() {
            continue; // zero-cost steps completed while posting
        }
        // A step just posted is in flight: the plan cannot be done.
        return Ok(!posted && rs.status == Status::Running && exec.is_done());
    }
}
