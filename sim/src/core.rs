//! The engine's core: virtual time, the event queue, message matching,
//! flows and local steps. Executors and op lifecycles live in
//! [`crate::engine`]; the core only sees posted steps and produces
//! completions, exactly as a transport does.
//!
//! # Message model (rendezvous)
//!
//! A message is matched by `(communicator, op sequence number, sender,
//! receiver, tag)`. Its transfer starts only when **both** the send and the
//! matching receive are posted (rendezvous, like HCCL's and NCCL's
//! zero-copy protocols, where the receiver's buffer must be ready; there is
//! no eager path). From the match at time `t`:
//!
//! 1. the message joins the FIFO **channel** from sender to receiver:
//!    messages between one ordered pair of ranks go one at a time, in match
//!    order, as on one RDMA queue pair or one HCCL link stream (different
//!    peers' channels run concurrently);
//! 2. once it heads the channel, after the fixed overhead α
//!    (`msg_overhead_ns`), its flow enters the fabric and shares link
//!    bandwidth max-min fairly with all other flows ([`crate::flows`]);
//! 3. when its last byte is sent, at `t_tx`, the **send completes** and the
//!    next message of the channel begins (its own α, then its flow);
//! 4. the **receive completes** at `t_tx + Σ hop latency` (plus, for a
//!    receive-and-reduce, `bytes / γ` for the reduction).
//!
//! So an uncontended message of `B` bytes over a route with bottleneck
//! bandwidth β and latencies `l_i`, heading an idle channel, takes from
//! match to receive completion `α + ⌈B/β⌉ + Σ l_i (+ ⌈B/γ⌉)`. Local steps
//! take `⌈B/copy⌉` (copy) or `⌈B/γ⌉` (reduce, divide); a rank's local steps
//! do not contend with each
//! other. A message to oneself crosses no link: it costs α + `⌈B/copy⌉`.
//!
//! A crashed rank (see [`Core::crash`]) completes nothing more, and none of
//! its messages enters the fabric after the crash: matched messages still
//! waiting for α or for their channel are discarded at their start time.
//! Flows already on the wire at the crash are completed (the bytes left the
//! NIC before the process died); their receivers see them.

use hccl_algos::schedule::{Op, Rank, StepId};
use hccl_algos::transport::OpContext;
use hccl_topology::Fabric;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::cost::transfer_ns;
use crate::data::{ApplyError, RankMem};
use crate::error::SimError;
use crate::flows::{FlowNet, LinkId, LinkSpec, Resched};
use crate::fold::Fold;
use crate::hooks::{Ctl, Delivered, Hooks, MessageFate, MessageInfo};
use crate::queue::{EventKind, EventQueue};
use crate::scenario::{CommEntry, CostParams, OpEntry};
use crate::small::{IdList, SmallList};
use crate::trace::TraceHash;

/// Where a rank is in its list of ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Between ops (transient) or not started.
    Idle,
    /// Running op `RankState::op`.
    Running,
    /// Waiting for a hook's delay before starting op `RankState::op`.
    Delayed,
    /// Finished all its ops.
    Done,
    /// Crashed by a hook.
    Crashed,
}

/// A posted send or receive waiting for its partner, kept at the receiver.
/// Only what matching and timing need (32 bytes, not the whole [`Op`]): the
/// op itself is in the poster's executor window until it completes, and in
/// data mode also in `Core::data_ops` (slot `op_slot`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pending {
    /// The poster's op, a scenario op index: it names the communicator
    /// and sequence number (each op is one `(communicator, seq)`) in 4
    /// bytes instead of 16.
    pub op: u32,
    /// Bytes of the step.
    pub len: u64,
    /// The other fabric rank (the sender for a send, the sender for a receive too:
    /// entries live at the receiver, so `peer` is always the sending rank).
    pub peer: u32,
    pub tag: u32,
    pub step: StepId,
    /// Data mode: index of the op in `Core::data_ops`; `NONE` in timing mode.
    pub op_slot: u32,
    pub is_send: bool,
    /// A receive-and-reduce (costs `len / γ` after delivery).
    pub reduce: bool,
}

/// One side of a matched message (16 bytes; the ops of data mode travel
/// apart, in [`SideOps`], so timing mode never builds or moves them).
#[derive(Debug, Clone, Copy)]
struct Side {
    step: StepId,
    len: u64,
    reduce: bool,
}

/// The send's and the receive's ops of a match (data mode only).
#[derive(Debug, Clone, Copy)]
struct SideOps {
    send: Op,
    recv: Op,
}

/// Unmatched posts kept inline in a rank's record (ring and hierarchical
/// schedules with the benchmark's window have at most this many at a
/// receiver almost always; more spill to the heap).
const INLINE_PENDING: usize = 2;

/// Channels kept inline in a rank's record (a ring rank sends to one
/// peer, a hierarchical ring rank to two).
const INLINE_CHANS: usize = 2;

/// Per-rank state: one record holds what the core touches per step
/// (status, unmatched posts, completions and channels; the executor is
/// the engine's, `Engine::execs`), so a step costs the lines of one
/// record, not one buffer each (at 4,096 ranks and more, each is a cache
/// miss). 192 bytes, aligned to 64: three whole cache lines (at 200
/// bytes and 8-byte alignment, every record spanned four).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct RankState {
    pub status: Status,
    pub touched: bool,
    /// Current (or delayed) op index into the scenario.
    pub op: u32,
    pub ctx: OpContext,
    /// Completed steps not yet fed to the executor.
    pub completions: IdList,
    /// Unmatched posts addressed to this rank (as receiver).
    pub pending: SmallList<Pending, INLINE_PENDING>,
    /// Channels to the peers this rank sent to, sorted by destination.
    pub chans: SmallList<Chan, INLINE_CHANS>,
    pub mem: Option<Box<RankMem>>,
}

/// The ordered channel from a rank to one peer: its route and the FIFO of
/// matched messages waiting to use it (linked through [`Msg::next`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Chan {
    pub dst: u32,
    pub route: u32,
    /// Message in its α or transmission now (`NONE`: idle).
    pub head: u32,
    /// Last queued message (`NONE`: empty).
    pub tail: u32,
}

const NONE: u32 = u32::MAX;

/// A matched message (64 bytes, aligned to them: one cache line, where
/// an 8-byte-aligned vector put most messages across two). Its receive op
/// and payload (data mode only) are in `Core::msg_data`.
#[derive(Debug)]
#[repr(align(64))]
struct Msg {
    op: u32,
    src: u32,
    dst: u32,
    send_step: StepId,
    recv_step: StepId,
    tag: u32,
    bytes: u64,
    route: u32,
    /// The flow carrying it, `u32::MAX` when not on the fabric.
    flow: u32,
    /// Next message queued on the same channel.
    next: u32,
    /// Extra delay before it enters the fabric (a hook's jitter), ns.
    delay: u64,
    /// When send and receive matched, ns (for [`Delivered::start_ns`]).
    matched_ns: u64,
    dropped: bool,
    live: bool,
    /// The receive reduces: delivery costs `bytes / γ` more.
    reduce: bool,
}

/// Events the engine (not the core) must handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EngineEvent {
    Wake { rank: u32 },
    Timeout { rank: u32, op: u32 },
}

/// Counters for [`crate::EngineStats`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counters {
    pub events: u64,
    pub messages: u64,
    pub flows: u64,
    pub local_steps: u64,
    pub reallocations: u64,
}

pub(crate) struct Core<'a> {
    pub now: u64,
    pub queue: EventQueue,
    pub rng: ChaCha8Rng,
    pub net: FlowNet,
    pub ranks: Vec<RankState>,
    pub trace: TraceHash,
    pub counters: Counters,
    pub touched: Vec<u32>,
    pub deferred: Vec<EngineEvent>,
    pub ops: &'a [OpEntry],
    pub comms: &'a [CommEntry],
    pub hooks: Option<&'a mut dyn Hooks>,
    /// `hooks.observes_messages()`, asked once.
    observe_messages: bool,
    /// Some rank has crashed (`Core::crash`).
    any_crashed: bool,
    pub data: bool,
    fabric: &'a Fabric,
    pub costs: CostParams,
    msgs: Vec<Msg>,
    free_msgs: Vec<u32>,
    /// Data mode: receive op and payload of each message, by message id.
    msg_data: Vec<(Op, Vec<u8>)>,
    /// Data mode: ops of unmatched posts, by `Pending::op_slot`.
    data_ops: Vec<Op>,
    free_data_ops: Vec<u32>,
    flow_msg: Vec<u32>,
    resched: Vec<Resched>,
    route_buf: Vec<LinkId>,
    /// Symmetry folding: only representatives run; messages and channels
    /// are kept in their representatives' frames (`crate::fold`).
    pub fold: Option<Fold>,
    /// Folded runs: per route, its slack-channel index (or `NONE`).
    route_slack: Vec<u32>,
    /// Folded runs, per slack channel: start of its flow on the wire, its
    /// flows' `(start, end)` and its bytes (to rebuild slack links' usage).
    slack_open: Vec<u64>,
    pub slack_flows: Vec<Vec<(u64, u64)>>,
    pub slack_bytes: Vec<u64>,
}

impl<'a> Core<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        fabric: &'a Fabric,
        costs: CostParams,
        seed: u64,
        data: bool,
        ops: &'a [OpEntry],
        comms: &'a [CommEntry],
        hooks: &'a mut dyn Hooks,
        fold: Option<Fold>,
    ) -> Core<'a> {
        let link_count = match &fold {
            Some(f) => f.links.len(),
            None => fabric.graph().edge_count(),
        };
        let slack = fold.as_ref().map_or(0, |f| f.slack_chans as usize);
        let world = fabric.world_size();
        let idle_ctx = OpContext {
            comm: 0,
            seq: 0,
            rank: 0,
            dtype: hccl_algos::DataType::Uint8,
        };
        Core {
            now: 0,
            queue: EventQueue::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            net: FlowNet::new(link_count),
            ranks: (0..world)
                .map(|_| RankState {
                    status: Status::Idle,
                    op: u32::MAX,
                    ctx: idle_ctx,
                    pending: SmallList::default(),
                    completions: IdList::default(),
                    chans: SmallList::default(),
                    touched: false,
                    mem: None,
                })
                .collect(),
            trace: TraceHash::default(),
            counters: Counters::default(),
            touched: Vec::new(),
            deferred: Vec::new(),
            ops,
            comms,
            observe_messages: hooks.observes_messages(),
            any_crashed: false,
            hooks: Some(hooks),
            data,
            fabric,
            costs,
            msgs: Vec::new(),
            free_msgs: Vec::new(),
            msg_data: Vec::new(),
            data_ops: Vec::new(),
            free_data_ops: Vec::new(),
            flow_msg: Vec::new(),
            resched: Vec::new(),
            route_buf: Vec::new(),
            fold,
            route_slack: Vec::new(),
            slack_open: vec![0; slack],
            slack_flows: vec![Vec::new(); slack],
            slack_bytes: vec![0; slack],
        }
    }

    fn label(&self, op: u32) -> String {
        self.ops
            .get(op as usize)
            .map_or_else(|| format!("#{op}"), |o| o.label.clone())
    }

    /// Runs `f` with the hooks and a [`Ctl`] over this core.
    pub(crate) fn with_hooks<R>(
        &mut self,
        f: impl FnOnce(&mut dyn Hooks, &mut Ctl<'_, 'a>) -> R,
    ) -> R {
        let hooks = self.hooks.take().expect("hooks are re-entered");
        let r = {
            let mut ctl = Ctl { core: self };
            f(&mut *hooks, &mut ctl)
        };
        self.hooks = Some(hooks);
        r
    }

    // ---- completions ------------------------------------------------------

    fn complete(&mut self, rank: u32, step: StepId) {
        let rs = &mut self.ranks[rank as usize];
        if rs.status != Status::Running {
            return; // crashed meanwhile
        }
        rs.completions.push(step);
        if !rs.touched {
            rs.touched = true;
            self.touched.push(rank);
        }
    }

    /// Crashes `rank`: drops its unmatched posts; it completes nothing more.
    pub(crate) fn crash(&mut self, rank: u32) {
        if rank as usize >= self.ranks.len() {
            return;
        }
        self.any_crashed = true;
        let rs = &mut self.ranks[rank as usize];
        rs.status = Status::Crashed;
        rs.completions.clear();
        rs.mem = None;
        rs.pending.retain(|p| p.is_send); // its own posted receives
        for other in &mut self.ranks {
            other.pending.retain(|p| !(p.is_send && p.peer == rank));
        }
        if !self.ranks[rank as usize].touched {
            self.ranks[rank as usize].touched = true;
            self.touched.push(rank); // so the engine drops its executor
        }
    }

    // ---- posting ------------------------------------------------------------

    /// The fabric rank of member `peer` of `rank`'s running op's
    /// communicator. Inline, the error cold: returned through memory, the
    /// large `Result` cost a call and its checks on every post.
    #[inline]
    fn member(&self, rank: u32, step: StepId, peer: Rank) -> Result<u32, SimError> {
        let op = self.ranks[rank as usize].op;
        let comm = &self.comms[self.ops[op as usize].comm];
        match comm.members.get(peer as usize) {
            Some(&m) => Ok(m),
            None => Err(self.peer_out_of_range(op, rank, step, peer)),
        }
    }

    #[cold]
    #[inline(never)]
    fn peer_out_of_range(&self, op: u32, rank: u32, step: StepId, peer: Rank) -> SimError {
        SimError::PeerOutOfRange {
            op: self.label(op),
            rank,
            step,
            peer,
            size: self.comms[self.ops[op as usize].comm].members.len() as u32,
        }
    }

    /// Posts one step of `rank`'s current op.
    pub(crate) fn post(
        &mut self,
        rank: u32,
        ctx: &OpContext,
        step: StepId,
        op: &Op,
    ) -> Result<(), SimError> {
        let rs = &self.ranks[rank as usize];
        if rs.status != Status::Running || rs.ctx.comm != ctx.comm || rs.ctx.seq != ctx.seq {
            return Err(SimError::NotRunning {
                rank,
                comm: ctx.comm,
                seq: ctx.seq,
                running: format!("{:?} op {}", rs.status, self.label(rs.op)),
            });
        }
        match *op {
            Op::Send { peer, tag, .. } => {
                let dst = self.member(rank, step, peer)?;
                match &self.fold {
                    // Folded: the pair moved into the frame of the
                    // receiver's representative (a receive is posted by
                    // one already).
                    Some(f) => {
                        let (d, shift) = f.rep(dst);
                        let src = f.unshift(rank, shift);
                        self.post_comm(rank, d, src, step, tag, true, op)
                    }
                    None => self.post_comm(rank, dst, rank, step, tag, true, op),
                }
            }
            Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. } => {
                let src = self.member(rank, step, peer)?;
                self.post_comm(rank, rank, src, step, tag, false, op)
            }
            Op::Copy { dst, .. } => {
                let ns = transfer_ns(dst.len, self.costs.copy_gbps);
                self.post_local(rank, step, op, ns)
            }
            Op::LocalReduce { dst, .. } | Op::Divide { dst, .. } => {
                let ns = transfer_ns(dst.len, self.costs.reduce_gbps);
                self.post_local(rank, step, op, ns)
            }
        }
    }

    fn post_local(
        &mut self,
        rank: u32,
        step: StepId,
        op: &Op,
        ns: Option<u64>,
    ) -> Result<(), SimError> {
        self.counters.local_steps += 1;
        let ns = ns.unwrap_or(u64::MAX);
        if ns == 0 {
            self.apply_local(rank, op)?;
            self.complete(rank, step);
        } else {
            if let Some(mem) = self.ranks[rank as usize].mem.as_mut() {
                mem.local_ops.push((step, *op));
            }
            if ns != u64::MAX {
                self.queue.push(
                    self.now.saturating_add(ns),
                    EventKind::LocalDone { rank, step },
                );
            }
        }
        Ok(())
    }

    fn apply_local(&mut self, rank: u32, op: &Op) -> Result<(), SimError> {
        let dtype = self.ranks[rank as usize].ctx.dtype;
        let Some(mem) = self.ranks[rank as usize].mem.as_mut() else {
            return Ok(());
        };
        mem.apply_local(dtype, op)
            .map_err(|e| self.apply_error(rank, self.ranks[rank as usize].op, 0, e))
    }

    fn apply_error(&self, rank: u32, op: u32, step: StepId, e: ApplyError) -> SimError {
        match e {
            ApplyError::OutOfBounds { region, buffer_len } => SimError::RegionOutOfBounds {
                op: self.label(op),
                rank,
                step,
                region,
                buffer_len,
            },
            ApplyError::Kernel(source) => SimError::Kernel {
                op: self.label(op),
                rank,
                source,
            },
        }
    }

    /// Posts a send (`is_send`, by `src`) or a receive (by `dst`); both are
    /// matched in the receiver's pending list.
    #[allow(clippy::too_many_arguments)]
    fn post_comm(
        &mut self,
        poster: u32,
        dst: u32,
        src: u32,
        step: StepId,
        tag: u32,
        is_send: bool,
        op: &Op,
    ) -> Result<(), SimError> {
        let op_index = self.ranks[poster as usize].op;
        let list = &mut self.ranks[dst as usize].pending;
        let found = list.iter().position(|p| {
            p.is_send != is_send && p.peer == src && p.tag == tag && p.op == op_index
        });
        let this = Side {
            step,
            len: op.bytes(),
            reduce: matches!(op, Op::RecvReduce { .. }),
        };
        match found {
            None => {
                let op_slot = if self.data {
                    match self.free_data_ops.pop() {
                        Some(i) => {
                            self.data_ops[i as usize] = *op;
                            i
                        }
                        None => {
                            self.data_ops.push(*op);
                            (self.data_ops.len() - 1) as u32
                        }
                    }
                } else {
                    NONE
                };
                self.ranks[dst as usize].pending.push(Pending {
                    op: op_index,
                    len: this.len,
                    peer: src,
                    tag,
                    step,
                    op_slot,
                    is_send,
                    reduce: this.reduce,
                });
                Ok(())
            }
            Some(i) => {
                let other = list.remove(i);
                // Data mode: the other post's op is in `data_ops`.
                let ops = (other.op_slot != NONE).then(|| {
                    self.free_data_ops.push(other.op_slot);
                    let other_op = self.data_ops[other.op_slot as usize];
                    if is_send {
                        SideOps {
                            send: *op,
                            recv: other_op,
                        }
                    } else {
                        SideOps {
                            send: other_op,
                            recv: *op,
                        }
                    }
                });
                let other = Side {
                    step: other.step,
                    len: other.len,
                    reduce: other.reduce,
                };
                let (send, recv) = if is_send {
                    (this, other)
                } else {
                    (other, this)
                };
                self.matched(src, dst, tag, send, recv, ops)
            }
        }
    }

    /// The op of an unmatched post (data mode), if stored here.
    pub(crate) fn pending_op(&self, p: &Pending) -> Option<Op> {
        (p.op_slot != NONE).then(|| self.data_ops[p.op_slot as usize])
    }

    /// The channel of a message from `src` to `dst` as (sending rank,
    /// receiver): itself, or in a folded run moved into the frame of the
    /// sender's representative (which holds the channel).
    #[inline]
    fn chan_key(&self, src: u32, dst: u32) -> (u32, u32) {
        match &self.fold {
            Some(f) => {
                let (s, shift) = f.rep(src);
                (s, f.unshift(dst, shift))
            }
            None => (src, dst),
        }
    }

    /// The rank that sent a message from `src`: itself, or in a folded run
    /// its representative.
    #[inline]
    fn sender(&self, src: u32) -> u32 {
        self.fold.as_ref().map_or(src, |f| f.rep(src).0)
    }

    /// Index of `src`'s channel to `dst` in `ranks[src].chans`, created
    /// (with its route) on first use.
    fn chan(&mut self, src: u32, dst: u32) -> Result<usize, SimError> {
        let cache = &self.ranks[src as usize].chans;
        match cache.as_slice().binary_search_by_key(&dst, |c| c.dst) {
            Ok(i) => Ok(i),
            Err(i) => {
                let route = if let Some(f) = &self.fold {
                    // Every channel of the representatives was analysed.
                    let r = f.route(src, dst).ok_or_else(|| SimError::NoRoute {
                        src,
                        dst,
                        reason: "not among the channels of the symmetry analysis".into(),
                    })?;
                    let id = self
                        .net
                        .add_route_with_latency(&r.links, r.latency, |l| f.links[l as usize]);
                    self.route_slack.push(r.slack);
                    id
                } else {
                    let route = self.fabric.route(src, dst).map_err(|e| SimError::NoRoute {
                        src,
                        dst,
                        reason: e.to_string(),
                    })?;
                    self.route_buf.clear();
                    self.route_buf
                        .extend(route.edges().iter().map(|e| e.index() as LinkId));
                    let fabric = self.fabric;
                    self.net
                        .add_route(&self.route_buf, |l| fabric_spec(fabric, l))
                };
                self.ranks[src as usize].chans.insert(
                    i,
                    Chan {
                        dst,
                        route,
                        head: NONE,
                        tail: NONE,
                    },
                );
                Ok(i)
            }
        }
    }

    fn matched(
        &mut self,
        src: u32,
        dst: u32,
        tag: u32,
        send: Side,
        recv: Side,
        ops: Option<SideOps>,
    ) -> Result<(), SimError> {
        let op_index = self.ranks[dst as usize].op;
        let (send_step, recv_step) = (send.step, recv.step);
        let send_len = send.len;
        let recv_len = recv.len;
        if send_len != recv_len {
            return Err(SimError::LengthMismatch {
                op: self.label(op_index),
                src,
                dst,
                tag,
                send_len,
                recv_len,
            });
        }
        let (cs, cd) = self.chan_key(src, dst);
        let chan = self.chan(cs, cd)?;
        let route = self.ranks[cs as usize].chans.as_slice()[chan].route;
        let ctx = self.ranks[dst as usize].ctx;
        let fate = if !self.observe_messages {
            MessageFate::Deliver
        } else {
            // The route goes to the hook by reference: no allocation per message.
            let mut route_links = std::mem::take(&mut self.route_buf);
            route_links.clear();
            route_links.extend(self.net.route(route));
            let info = MessageInfo {
                op: op_index as usize,
                comm: ctx.comm,
                seq: ctx.seq,
                src,
                dst,
                tag,
                bytes: send_len,
                route: &route_links,
            };
            let fate = self.with_hooks(|h, ctl| h.on_message(ctl, &info));
            self.route_buf = route_links;
            fate
        };
        // Timing mode reads nothing of the sender's record.
        let payload = match (self.data, ops.map(|o| o.send)) {
            (true, Some(Op::Send { src: region, .. })) => match &self.ranks[src as usize].mem {
                Some(mem) => mem
                    .read(region)
                    .map_err(|e| self.apply_error(src, op_index, send_step, e))?
                    .to_vec(),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        let msg = Msg {
            op: op_index,
            src,
            dst,
            send_step,
            recv_step,
            tag,
            bytes: send_len,
            route,
            dropped: fate == MessageFate::Drop,
            flow: NONE,
            next: NONE,
            delay: match fate {
                MessageFate::Delay(ns) => ns,
                _ => 0,
            },
            matched_ns: self.now,
            live: true,
            reduce: recv.reduce,
        };
        let id = match self.free_msgs.pop() {
            Some(id) => {
                self.msgs[id as usize] = msg;
                id
            }
            None => {
                self.msgs.push(msg);
                (self.msgs.len() - 1) as u32
            }
        };
        if let Some(recv_op) = ops.map(|o| o.recv) {
            let i = id as usize;
            if self.msg_data.len() <= i {
                self.msg_data.resize(i + 1, (recv_op, Vec::new()));
            }
            self.msg_data[i] = (recv_op, payload);
        }
        self.counters.messages += 1;
        let c = &mut self.ranks[cs as usize].chans.as_mut_slice()[chan];
        if c.head == NONE {
            c.head = id;
            c.tail = id;
            self.begin_message(id)
        } else {
            let tail = c.tail;
            c.tail = id;
            self.msgs[tail as usize].next = id;
            Ok(())
        }
    }

    /// The message now heads its channel: after α (and any hook delay) it
    /// enters the fabric.
    fn begin_message(&mut self, id: u32) -> Result<(), SimError> {
        let start = self
            .now
            .saturating_add(self.costs.msg_overhead_ns)
            .saturating_add(self.msgs[id as usize].delay);
        if start == self.now {
            self.start_flow(id)
        } else {
            self.queue.push(start, EventKind::FlowStart { msg: id });
            Ok(())
        }
    }

    /// Message `id` finished sending: the next one on its channel begins.
    fn advance_channel(&mut self, id: u32) -> Result<(), SimError> {
        let (src, dst, next) = {
            let m = &self.msgs[id as usize];
            (m.src, m.dst, m.next)
        };
        let (src, dst) = self.chan_key(src, dst);
        let chans = self.ranks[src as usize].chans.as_mut_slice();
        let i = chans
            .binary_search_by_key(&dst, |c| c.dst)
            .expect("a message's channel exists");
        chans[i].head = next;
        if next == NONE {
            chans[i].tail = NONE;
            Ok(())
        } else {
            self.begin_message(next)
        }
    }

    fn free_msg(&mut self, id: u32) {
        let m = &mut self.msgs[id as usize];
        m.live = false;
        if let Some(d) = self.msg_data.get_mut(id as usize) {
            d.1 = Vec::new();
        }
        m.flow = NONE;
        m.next = NONE;
        self.free_msgs.push(id);
    }

    fn start_flow(&mut self, id: u32) -> Result<(), SimError> {
        let m = &self.msgs[id as usize];
        // A crashed sender starts nothing more: its queued messages vanish
        // like dropped ones (flows already on the wire still complete).
        // (The sender's record is read only once some rank has crashed:
        // at scale it is a cache miss per message.)
        if m.dropped || (self.any_crashed && self.ranks[m.src as usize].status == Status::Crashed) {
            let (src, step) = (self.sender(m.src), m.send_step);
            self.complete(src, step);
            self.advance_channel(id)?;
            self.free_msg(id);
            return Ok(());
        }
        let hops = self.net.route_hops(m.route);
        if m.bytes == 0 || hops == 0 {
            let ns = if hops == 0 {
                transfer_ns(m.bytes, self.costs.copy_gbps).unwrap_or(u64::MAX)
            } else {
                0
            };
            if ns == 0 {
                return self.tx_done(id);
            } else if ns != u64::MAX {
                self.queue
                    .push(self.now.saturating_add(ns), EventKind::TxDone { msg: id });
            }
            return Ok(());
        }
        let route = m.route;
        let flow = self.net.start(self.now, route, m.bytes);
        if let Some(&sc) = self.route_slack.get(route as usize) {
            if sc != NONE {
                self.slack_open[sc as usize] = self.now;
            }
        }
        self.counters.flows += 1;
        if self.flow_msg.len() <= flow as usize {
            self.flow_msg.resize(flow as usize + 1, u32::MAX);
        }
        self.flow_msg[flow as usize] = id;
        self.msgs[id as usize].flow = flow;
        Ok(())
    }

    fn tx_done(&mut self, id: u32) -> Result<(), SimError> {
        let m = &self.msgs[id as usize];
        let (src, step) = (self.sender(m.src), m.send_step);
        let mut delay = self.net.route_latency(m.route);
        if m.reduce {
            delay = delay
                .saturating_add(transfer_ns(m.bytes, self.costs.reduce_gbps).unwrap_or(u64::MAX));
        }
        self.complete(src, step);
        self.advance_channel(id)?;
        if delay == 0 {
            return self.deliver(id);
        }
        if delay != u64::MAX {
            self.queue.push(
                self.now.saturating_add(delay),
                EventKind::Deliver { msg: id },
            );
        }
        Ok(())
    }

    fn deliver(&mut self, id: u32) -> Result<(), SimError> {
        let (dst, step, op_index) = {
            let m = &self.msgs[id as usize];
            (m.dst, m.recv_step, m.op)
        };
        let rs = &mut self.ranks[dst as usize];
        if self.data && rs.status == Status::Running {
            if let (Some(mem), Some((recv_op, payload))) =
                (rs.mem.as_mut(), self.msg_data.get(id as usize))
            {
                let dtype = rs.ctx.dtype;
                if let Err(e) = mem.apply_recv(dtype, recv_op, payload) {
                    let err = self.apply_error(dst, op_index, step, e);
                    self.free_msg(id);
                    return Err(err);
                }
            }
        }
        self.complete(dst, step);
        // Observers only; skipped if a hook is running (re-entrant call).
        let hooks = if self.observe_messages {
            self.hooks.take()
        } else {
            None
        };
        if let Some(hooks) = hooks {
            let m = &self.msgs[id as usize];
            let info = Delivered {
                op: m.op as usize,
                src: m.src,
                dst: m.dst,
                tag: m.tag,
                bytes: m.bytes,
                start_ns: m.matched_ns,
                end_ns: self.now,
            };
            let mut ctl = Ctl { core: self };
            hooks.on_delivered(&mut ctl, &info);
            self.hooks = Some(hooks);
        }
        self.free_msg(id);
        Ok(())
    }
}

// ---- the event loop -----------------------------------------------------------

impl Core<'_> {
    /// Pops the next event, first reallocating flow rates once all events
    /// of the current instant are processed. `None` when nothing is left.
    pub(crate) fn next_event(&mut self) -> Option<EventKind> {
        loop {
            if self.net.has_dirty() && self.queue.peek_time() != Some(self.now) {
                self.reallocate();
                continue;
            }
            let (t, ev) = self.queue.pop()?;
            debug_assert!(t >= self.now, "time never goes back");
            self.now = t;
            self.counters.events += 1;
            self.trace.word(t);
            for w in ev.trace_words() {
                self.trace.word(w);
            }
            return Some(ev);
        }
    }

    fn reallocate(&mut self) {
        self.counters.reallocations += 1;
        let mut out = std::mem::take(&mut self.resched);
        out.clear();
        self.net.reallocate(self.now, &mut out);
        for r in &out {
            if let Some(end) = r.end {
                self.queue.push(
                    end,
                    EventKind::FlowEnd {
                        flow: r.flow,
                        version: r.version,
                    },
                );
            }
        }
        self.resched = out;
    }

    /// Handles a network, local-step or timer event; returns the events the
    /// engine must handle itself.
    pub(crate) fn handle(&mut self, ev: EventKind) -> Result<Option<EngineEvent>, SimError> {
        match ev {
            EventKind::FlowStart { msg } => self.start_flow(msg)?,
            EventKind::FlowEnd { flow, version } => {
                if self.net.is_current(flow, version) {
                    self.net.finish(self.now, flow);
                    let msg = self.flow_msg[flow as usize];
                    let route = self.msgs[msg as usize].route;
                    if let Some(&sc) = self.route_slack.get(route as usize) {
                        if sc != NONE {
                            let sc = sc as usize;
                            self.slack_flows[sc].push((self.slack_open[sc], self.now));
                            let b = self.msgs[msg as usize].bytes;
                            self.slack_bytes[sc] = self.slack_bytes[sc].saturating_add(b);
                        }
                    }
                    self.msgs[msg as usize].flow = u32::MAX;
                    self.tx_done(msg)?;
                }
            }
            EventKind::TxDone { msg } => self.tx_done(msg)?,
            EventKind::Deliver { msg } => self.deliver(msg)?,
            EventKind::LocalDone { rank, step } => {
                let op = self.ranks[rank as usize].mem.as_mut().and_then(|mem| {
                    let i = mem.local_ops.iter().position(|(s, _)| *s == step)?;
                    Some(mem.local_ops.swap_remove(i).1)
                });
                if let Some(op) = op {
                    if self.ranks[rank as usize].status == Status::Running {
                        self.apply_local(rank, &op)?;
                    }
                }
                self.complete(rank, step);
            }
            EventKind::Timer { id } => self.with_hooks(|h, ctl| h.on_timer(ctl, id)),
            EventKind::Wake { rank } => return Ok(Some(EngineEvent::Wake { rank })),
            EventKind::Timeout { rank, op } => return Ok(Some(EngineEvent::Timeout { rank, op })),
        }
        Ok(None)
    }

    /// Unmatched posts, as (receiver fabric rank, entry), in rank order.
    pub(crate) fn unmatched(&self) -> impl Iterator<Item = (u32, &Pending)> + '_ {
        self.ranks
            .iter()
            .enumerate()
            .flat_map(|(r, rs)| rs.pending.iter().map(move |p| (r as u32, p)))
    }

    /// Bandwidth and latency of link `l` as the fabric (or the folded
    /// network) gives it, before any fault.
    pub(crate) fn link_spec(&self, l: LinkId) -> LinkSpec {
        match &self.fold {
            Some(f) => f.links[l as usize],
            None => fabric_spec(self.fabric, l),
        }
    }

    /// Link `l`'s current bandwidth, GB/s.
    pub(crate) fn link_bandwidth(&self, l: LinkId) -> f64 {
        self.net
            .bandwidth(l)
            .unwrap_or_else(|| self.link_spec(l).bandwidth_gbps)
    }

    /// Messages on the fabric that cross a link of bandwidth 0.
    pub(crate) fn stalled_flows(&self) -> Vec<crate::report::StalledFlow> {
        self.msgs
            .iter()
            .filter(|m| m.live && m.flow != u32::MAX)
            .filter_map(|m| {
                let dead: Vec<LinkId> = self
                    .net
                    .route(m.route)
                    .filter(|&l| self.link_bandwidth(l) <= 0.0)
                    .collect();
                if dead.is_empty() {
                    return None;
                }
                Some(crate::report::StalledFlow {
                    src: m.src,
                    dst: m.dst,
                    tag: m.tag,
                    bytes: m.bytes,
                    dead_links: dead,
                })
            })
            .collect()
    }

    /// Heap bytes held by the core (for the memory estimate).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.queue.heap_bytes()
            + self.net.heap_bytes()
            + self.ranks.capacity() * size_of::<RankState>()
            + self
                .ranks
                .iter()
                .map(|r| r.pending.heap_bytes() + r.completions.heap_bytes() + r.chans.heap_bytes())
                .sum::<usize>()
            + self.msgs.capacity() * size_of::<Msg>()
            + self.msg_data.capacity() * size_of::<(Op, Vec<u8>)>()
            + self.data_ops.capacity() * size_of::<Op>()
            + self.flow_msg.capacity() * 4
    }
}

/// Bandwidth and latency of fabric edge `l`.
fn fabric_spec(fabric: &Fabric, l: LinkId) -> LinkSpec {
    let link = fabric.link(petgraph::graph::EdgeIndex::new(l as usize));
    LinkSpec {
        bandwidth_gbps: link.bandwidth_gbps,
        latency_ns: link.latency_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank's record is three cache lines and a message one: every
    /// event at scale reads a record or two and a message, each a cache
    /// miss per line.
    #[test]
    fn rank_record_and_message_fill_whole_cache_lines() {
        assert_eq!(std::mem::size_of::<RankState>(), 192);
        assert_eq!(std::mem::align_of::<RankState>(), 64);
        assert_eq!(std::mem::size_of::<Msg>(), 64);
        assert_eq!(std::mem::align_of::<Msg>(), 64);
    }
}
