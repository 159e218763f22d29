//! Hooks: where fault injection and observers plug into the engine.
//!
//! The engine calls a [`Hooks`] object at three points — a rank about to
//! start an op, a message about to enter the fabric, a timer firing — and
//! hands it a [`Ctl`] to act on the simulation (change a link's bandwidth,
//! crash a rank, set timers, draw from the seeded RNG). Every default method
//! does nothing, so [`NoHooks`] is the plain simulation.
//!
//! The fault plans of issue 4 (link down/degraded windows, jitter, drops,
//! crashes, slow ranks, skipped or altered collectives) are all expressible
//! as a `Hooks` implementation; hang reports read [`crate::Stall`].

use std::rc::Rc;

use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::core::Core;
use crate::flows::LinkId;
use crate::scenario::PlanSource;

/// What a rank does when it reaches an op (see [`Hooks::before_op`]).
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum OpStart {
    /// Start it now (the default).
    #[default]
    Run,
    /// Start it after this many ns (a slow rank).
    Delay(u64),
    /// Never call it: go on to the rank's next op (a rank that skips a collective).
    Skip,
    /// Crash now: the rank stops for good.
    Crash,
    /// Run this plan instead (a rank that calls the op with other arguments).
    Replace(Rc<dyn PlanSource>),
}

impl std::fmt::Debug for OpStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpStart::Run => f.write_str("Run"),
            OpStart::Delay(ns) => write!(f, "Delay({ns})"),
            OpStart::Skip => f.write_str("Skip"),
            OpStart::Crash => f.write_str("Crash"),
            OpStart::Replace(p) => write!(f, "Replace({})", p.label()),
        }
    }
}

/// What happens to a matched message (see [`Hooks::on_message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MessageFate {
    /// Enter the fabric after the usual overhead α (the default).
    #[default]
    Deliver,
    /// Enter the fabric after α plus this many ns (latency jitter).
    Delay(u64),
    /// Lost: the sender completes after α, the receiver never does.
    Drop,
}

/// A message about to enter the fabric: both its send and receive are posted.
#[derive(Debug, Clone, Copy)]
pub struct MessageInfo<'a> {
    /// Index of the op in the scenario.
    pub op: usize,
    /// Communicator id.
    pub comm: u64,
    /// Op sequence number on the communicator.
    pub seq: u64,
    /// Sending fabric rank.
    pub src: u32,
    /// Receiving fabric rank.
    pub dst: u32,
    /// Schedule tag.
    pub tag: u32,
    /// Payload bytes.
    pub bytes: u64,
    /// Directed links it will cross (fabric edge indices), in order.
    pub route: &'a [LinkId],
}

/// A message that reached its receiver: its receive step completes now
/// (after the transfer, the route latency and, for a receive-reduce, γ).
///
/// The one message record: [`Hooks::on_delivered`] gets it, the CLI's
/// traces keep it and `hccl::profiling` writes it as a profile's step
/// (`src`, `dst`, `tag`, `bytes`, `start_ns`, `end_ns`; without `op`, which
/// the enclosing op record gives).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Delivered {
    /// Index of the op in the scenario.
    #[serde(skip)]
    pub op: usize,
    /// Sending fabric rank.
    pub src: u32,
    /// Receiving fabric rank.
    pub dst: u32,
    /// Schedule tag.
    pub tag: u32,
    /// Payload bytes.
    pub bytes: u64,
    /// When send and receive matched (the time [`Hooks::on_message`] saw,
    /// before any delay a hook gave it), ns.
    pub start_ns: u64,
    /// When the receiver had the data (after α, transfer, latency and any
    /// reduction): the time of the [`Hooks::on_delivered`] call, ns.
    pub end_ns: u64,
}

/// Observer and fault injector. Every method has a do-nothing default.
pub trait Hooks {
    /// Fabric rank `rank` is about to start op `op` (scenario index).
    fn before_op(&mut self, ctl: &mut Ctl<'_, '_>, rank: u32, op: usize) -> OpStart {
        let _ = (ctl, rank, op);
        OpStart::Run
    }

    /// A send met its receive; decide the message's fate.
    fn on_message(&mut self, ctl: &mut Ctl<'_, '_>, msg: &MessageInfo<'_>) -> MessageFate {
        let _ = (ctl, msg);
        MessageFate::Deliver
    }

    /// A message reached its receiver (observers: profiling, traces).
    /// Not called for dropped messages.
    fn on_delivered(&mut self, ctl: &mut Ctl<'_, '_>, msg: &Delivered) {
        let _ = (ctl, msg);
    }

    /// A timer set with [`Ctl::set_timer`] fired.
    fn on_timer(&mut self, ctl: &mut Ctl<'_, '_>, id: u64) {
        let _ = (ctl, id);
    }

    /// Whether [`Hooks::on_message`] and [`Hooks::on_delivered`] must be
    /// called (default `true`). Asked once per run; `false` lets the engine
    /// skip building their arguments for every message.
    fn observes_messages(&self) -> bool {
        true
    }
}

/// The plain simulation: no faults, no observers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {
    fn observes_messages(&self) -> bool {
        false
    }
}

/// What a hook may do to the running simulation.
pub struct Ctl<'c, 'a> {
    pub(crate) core: &'c mut Core<'a>,
}

impl Ctl<'_, '_> {
    /// Virtual time now, ns.
    pub fn now(&self) -> u64 {
        self.core.now
    }

    /// The engine's seeded RNG (ChaCha8): the only randomness allowed.
    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.core.rng
    }

    /// Calls [`Hooks::on_timer`] with `id` at virtual time `at_ns` (now if
    /// in the past).
    pub fn set_timer(&mut self, at_ns: u64, id: u64) {
        let t = at_ns.max(self.core.now);
        self.core
            .queue
            .push(t, crate::queue::EventKind::Timer { id });
    }

    /// Number of directed links (fabric edges); ids are `0..link_count()`.
    pub fn link_count(&self) -> usize {
        self.core.net.link_count()
    }

    /// Current bandwidth of a link, GB/s (`None` for an unknown id).
    pub fn link_bandwidth(&self, link: LinkId) -> Option<f64> {
        ((link as usize) < self.core.net.link_count()).then(|| self.core.link_bandwidth(link))
    }

    /// Sets a link's bandwidth from now on, GB/s (0 = down: flows on it stop
    /// and wait). Returns false for an unknown link id.
    pub fn set_link_bandwidth(&mut self, link: LinkId, gbps: f64) -> bool {
        if (link as usize) >= self.core.net.link_count() {
            return false;
        }
        let spec = self.core.link_spec(link);
        self.core.net.set_bandwidth(link, gbps, spec);
        true
    }

    /// Crashes fabric rank `rank` now: it posts and completes nothing more.
    pub fn crash(&mut self, rank: u32) {
        self.core.crash(rank);
    }

    /// Number of fabric ranks.
    pub fn world_size(&self) -> u32 {
        self.core.ranks.len() as u32
    }

    /// The op (scenario index) fabric rank `rank` is running or is delayed
    /// before; `None` when it is between ops, done, crashed or unknown.
    pub fn current_op(&self, rank: u32) -> Option<usize> {
        let rs = self.core.ranks.get(rank as usize)?;
        matches!(
            rs.status,
            crate::core::Status::Running | crate::core::Status::Delayed
        )
        .then_some(rs.op as usize)
    }

    /// Where fabric rank `rank` is (`None` for an unknown rank).
    pub fn rank_status(&self, rank: u32) -> Option<crate::report::RankStatus> {
        use crate::core::Status;
        use crate::report::RankStatus;
        Some(match self.core.ranks.get(rank as usize)?.status {
            Status::Idle => RankStatus::Idle,
            Status::Running => RankStatus::Running,
            Status::Delayed => RankStatus::Delayed,
            Status::Done => RankStatus::Done,
            Status::Crashed => RankStatus::Crashed,
        })
    }
}
