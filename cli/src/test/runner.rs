//! Running one row on the simulator: a timing run of `-w` warmup and `-n`
//! timed ops back to back, and (data mode, `-c 1`) one data run whose
//! every output element is compared with the sequential reference.

use std::collections::{BTreeMap, VecDeque};

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::layout::GroupLayout;
use hccl_algos::reference;
use hccl_sim::faults::{FaultHooks, FaultPlan};
use hccl_sim::hang::HangReport;
use hccl_sim::{
    Collective, Ctl, Delivered, Hooks, MessageFate, MessageInfo, Mode, NoHooks, OpResult, OpStart,
    Scenario, SimReport,
};
use hccl_topology::Fabric;

use super::check::{self, Check};

/// One message seen by a [`Recorder`]: the simulator's record and its route.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    /// Scenario op, ranks, tag, bytes, match and delivery times.
    pub record: Delivered,
    /// Links crossed (fabric edge indices).
    pub route: Vec<u32>,
}

/// (op, src, dst, tag): one channel of one op.
type ChannelKey = (usize, u32, u32, u32);

/// A [`Hooks`] observer that keeps every message of the ops in `ops`
/// (scenario indices, inclusive range), with match and delivery times.
#[derive(Debug)]
pub(crate) struct Recorder {
    ops: std::ops::RangeInclusive<usize>,
    /// Routes of the messages in flight, per channel.
    open: BTreeMap<ChannelKey, VecDeque<Vec<u32>>>,
    /// Delivered messages, in delivery order.
    pub messages: Vec<Message>,
}

impl Recorder {
    /// Records the ops `ops` (scenario indices).
    pub(crate) fn new(ops: std::ops::RangeInclusive<usize>) -> Recorder {
        Recorder {
            ops,
            open: BTreeMap::new(),
            messages: Vec::new(),
        }
    }
}

impl Hooks for Recorder {
    fn on_message(&mut self, _ctl: &mut Ctl<'_, '_>, msg: &MessageInfo<'_>) -> MessageFate {
        if self.ops.contains(&msg.op) {
            self.open
                .entry((msg.op, msg.src, msg.dst, msg.tag))
                .or_default()
                .push_back(msg.route.to_vec());
        }
        MessageFate::Deliver
    }

    fn on_delivered(&mut self, _ctl: &mut Ctl<'_, '_>, d: &Delivered) {
        let key = (d.op, d.src, d.dst, d.tag);
        let Some(q) = self.open.get_mut(&key) else {
            return;
        };
        // Messages on one (src, dst) channel are delivered in FIFO order.
        if let Some(route) = q.pop_front() {
            self.messages.push(Message { record: *d, route });
        }
        if q.is_empty() {
            self.open.remove(&key);
        }
    }
}

/// Fault hooks first, then an observer: the observer sees only messages
/// the faults let through, with the times the faults gave them.
struct Chain<'f, 'o> {
    faults: &'f mut FaultHooks,
    observer: Option<&'o mut dyn Hooks>,
}

impl Hooks for Chain<'_, '_> {
    fn before_op(&mut self, ctl: &mut Ctl<'_, '_>, rank: u32, op: usize) -> OpStart {
        self.faults.before_op(ctl, rank, op)
    }

    fn on_message(&mut self, ctl: &mut Ctl<'_, '_>, msg: &MessageInfo<'_>) -> MessageFate {
        let fate = self.faults.on_message(ctl, msg);
        if fate != MessageFate::Drop {
            if let Some(o) = self.observer.as_deref_mut() {
                o.on_message(ctl, msg);
            }
        }
        fate
    }

    fn on_delivered(&mut self, ctl: &mut Ctl<'_, '_>, msg: &Delivered) {
        self.faults.on_delivered(ctl, msg);
        if let Some(o) = self.observer.as_deref_mut() {
            o.on_delivered(ctl, msg);
        }
    }

    fn on_timer(&mut self, ctl: &mut Ctl<'_, '_>, id: u64) {
        self.faults.on_timer(ctl, id);
    }
}

/// What one row measured.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    /// Average simulated time of one timed op, ns.
    pub time_ns: f64,
    /// The timing run's report (per op results, link usage).
    pub report: SimReport,
    /// Result of the check.
    pub check: Check,
}

/// Why a row could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum RunError {
    /// The simulator rejected the scenario.
    #[error(transparent)]
    Sim(#[from] hccl_sim::SimError),
    /// The fault plan does not fit the row's scenario.
    #[error(transparent)]
    Faults(#[from] hccl_sim::faults::FaultError),
    /// Ranks hung under the fault plan: the simulator's hang report.
    #[error("the collective hung under the fault plan:\n{0}")]
    Hang(String),
    /// An op failed its cross-rank argument check under the fault plan
    /// (HCCL's EI0005), which fails the op rather than hanging it.
    #[error("the collective failed under the fault plan: {0}")]
    Failed(String),
    /// The reference could not be computed.
    #[error(transparent)]
    Reference(#[from] reference::RefError),
    /// Ranks never finished (a hang): the stall summary.
    #[error("the simulation stopped with ranks unfinished at {time_ns} ns ({ranks} ranks stuck); first: {first}")]
    Stalled {
        /// Virtual time of the stop.
        time_ns: u64,
        /// Ranks stuck.
        ranks: usize,
        /// The first stuck rank, described.
        first: String,
    },
}

/// The inputs of a row.
pub(crate) struct RowRun<'a> {
    /// The fabric.
    pub fabric: &'a Fabric,
    /// Rank placement.
    pub layout: &'a GroupLayout,
    /// Arguments.
    pub args: &'a CollectiveArgs,
    /// Algorithm.
    pub spec: AlgoSpec,
    /// `-w`.
    pub warmup: u32,
    /// `-n` (at least 1).
    pub iters: u32,
    /// `--seed`.
    pub seed: u64,
    /// Run the data check.
    pub check: bool,
    /// A fault plan for the timing run (op numbers `0..w+n` of each row).
    pub faults: Option<&'a FaultPlan>,
    /// The command line, for hang reports' replay line.
    pub replay: &'a str,
}

fn collective(r: &RowRun<'_>) -> Collective {
    Collective {
        args: r.args.clone(),
        algo: r.spec,
        layout: r.layout.clone(),
    }
}

fn stalled(report: &SimReport) -> Option<RunError> {
    let s = report.stall.as_ref()?;
    let first = s.ranks.first().map_or_else(
        || "none".to_string(),
        |w| {
            format!(
                "rank {} ({:?}) in op {:?}, waiting on {} steps",
                w.rank,
                w.status,
                w.op,
                w.in_flight.len()
            )
        },
    );
    Some(RunError::Stalled {
        time_ns: s.time_ns,
        ranks: s.ranks.len(),
        first,
    })
}

fn window(ops: &[OpResult]) -> (u64, u64) {
    // Per rank, from its own start of the first timed op to its own end of
    // the last (what a rank's stream events measure in hccl_test); the
    // longest rank's window counts. Taking the earliest start over all
    // ranks instead would add the entry skew the warmups leave behind.
    let (Some(first), Some(last)) = (ops.first(), ops.last()) else {
        return (0, 0);
    };
    let longest = first
        .start_ns
        .iter()
        .zip(&last.end_ns)
        .filter_map(|(s, e)| Some(e.as_ref()?.saturating_sub(*s.as_ref()?)))
        .max()
        .unwrap_or(0);
    (0, longest)
}

/// Runs one row. `hooks` observes the timing run (ops `0..w+n`, the timed
/// ones are `w..w+n`).
///
/// # Errors
/// [`RunError`].
pub(crate) fn run_row(r: &RowRun<'_>, hooks: Option<&mut dyn Hooks>) -> Result<Measured, RunError> {
    let iters = r.iters.max(1);
    let mut sc = Scenario::new(r.fabric).seed(r.seed).mode(Mode::Timing);
    let world = sc.world();
    for _ in 0..r.warmup + iters {
        sc.op(world, collective(r))?;
    }
    let report = match r.faults {
        Some(plan) => {
            let mut fh = FaultHooks::new(&sc, plan)?;
            let report = {
                let mut chain = Chain {
                    faults: &mut fh,
                    observer: hooks,
                };
                sc.run_with_hooks(&mut chain)?
            };
            if let Some(f) = fh.log().failures.first() {
                return Err(RunError::Failed(format!(
                    "rank {} failed op #{} at {} ns: {} mismatch (local {}, remote {}); HCCL's EI0005",
                    f.rank, f.op, f.time_ns, f.field, f.local, f.remote
                )));
            }
            if let Some(h) = HangReport::build(&sc, &report, fh.log(), r.replay) {
                return Err(RunError::Hang(h.to_text_limited(16)));
            }
            report
        }
        None => match hooks {
            Some(h) => sc.run_with_hooks(h)?,
            None => sc.run_with_hooks(&mut NoHooks)?,
        },
    };
    if let Some(e) = stalled(&report) {
        return Err(e);
    }
    let (window_start_ns, window_end_ns) = window(&report.ops[r.warmup as usize..]);
    let time_ns = (window_end_ns - window_start_ns) as f64 / f64::from(iters);
    let check = if r.check { data_check(r)? } else { Check::Null };
    Ok(Measured {
        time_ns,
        report,
        check,
    })
}

/// One op in data mode with verifiable inputs, compared with the reference.
fn data_check(r: &RowRun<'_>) -> Result<Check, RunError> {
    let inputs = reference::verifiable_inputs(r.args, r.seed);
    let expected = reference::reference(r.args, &inputs)?;
    let mut sc = Scenario::new(r.fabric).seed(r.seed).mode(Mode::Data);
    let world = sc.world();
    sc.op_with_inputs(world, collective(r), inputs)?;
    let report = sc.run()?;
    if let Some(e) = stalled(&report) {
        return Err(e);
    }
    let got = report
        .ops
        .into_iter()
        .next()
        .and_then(|o| o.outputs)
        .unwrap_or_default();
    Ok(check::compare(r.args.dtype, &expected, &got))
}

/// Bytes a data check of `args` holds at once, estimated: every rank's
/// input and output in the simulator, the reference's outputs, and about
/// one more output's worth for scratch and messages in flight.
pub(crate) fn data_check_bytes(args: &CollectiveArgs) -> u64 {
    (0..args.world_size)
        .map(|r| {
            let (i, o) = args.io_bytes(r);
            i.saturating_mul(2).saturating_add(o.saturating_mul(3))
        })
        .fold(0u64, u64::saturating_add)
}
