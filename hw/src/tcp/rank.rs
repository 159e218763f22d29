//! One rank of a TCP communicator: the tokio driver of the protocol core
//! (`tcp::core`). [`TcpRank`] owns the runtime, the peer
//! connections and the core's state; [`TcpOp`] runs one op over it as a
//! [`Transport`](hccl_algos::transport::Transport). Here: connect, the
//! event loop and `run`; beside it, `events` (filing one event through the
//! core), `output` (frames out), `op` (the op), `close` (destroy), `probe`
//! (the same-host probe at connect), `tuning` (constants).
//!
//! **Matching.** A message is matched by (peer, op seq, step tag) within the
//! communicator. A data frame whose receive is posted streams straight into
//! the posted region (a `RecvReduce` reduces chunk by chunk as bytes
//! arrive). A frame that arrives first is buffered; the bytes buffered per
//! peer are bounded by `HCCL_BUFFSIZE` (see [`crate::sync::ByteBudget`]):
//! past it the peer's socket is simply not read, and TCP backpressure stalls
//! the sender. Before any byte touches a receive buffer, the frame's length
//! is checked against the step and its op signature against this rank's.
//!
//! **Consistency.** At the start of every op, every rank sends its op
//! signature to every other rank (an op-start frame, held back to leave in
//! one write with the op's first message to that peer). A rank that has
//! every peer's signature compares them with its own: any difference fails
//! the op on that rank naming the field and both values, and since a
//! disagreement differs from every rank's view somewhere, every rank
//! finds it itself. Steps that write the user's buffers (a receive into
//! the output, a copy or reduction into it) are held back until every
//! signature has arrived and agrees, so a mismatched op fails before any
//! byte lands in a receive buffer (sends and scratch work go ahead).
//! `HCCL_EXEC_TIMEOUT` counts from the op's start until every rank has
//! arrived, then afresh from agreement. Cost: n−1 88-byte frames per rank
//! per op, most in the same write as a data message. Data frames carry the
//! signature too, so a mismatched message is refused before it is copied.
//!
//! **One outcome.** A rank that times out before every rank arrived fails
//! the op; a late rank that finds every signature waiting for it could
//! otherwise complete the op at once, where the rank that timed out
//! failed (two communicators called in different orders do this). So a
//! rank still waiting for signatures at half its timeout says so to every
//! peer (an op-start frame with tag [`LATE_TAG`]), and tells them again
//! when all have come ([`AGREED_TAG`]); a rank finishes the op only after
//! every peer that said it was late has said it agreed. The rank that
//! times out never does, so the late rank fails with its abort. An op
//! whose ranks arrive within half the timeout sends neither frame.
//! Point-to-point ops ([`P2P_SEQ_BIT`]) involve two ranks only: they skip
//! the ring, and the receiver checks the data frame's signature (count,
//! dtype) before any byte lands.
//!
//! **Same-host sends** ([`super::cma`]) lend the op's own buffer: a send
//! step whose pieces a peer reads out of this process completes only when
//! the peer has acked all of them, so an op that succeeds leaves nothing
//! lent. Every op opens this rank's lend word with a fresh number when it
//! starts and poisons it (store, then a sequentially consistent fence)
//! before a failure is returned and whenever the op ends ([`TcpOp`]'s
//! `Drop`), so a peer that reads a piece after the op gave the buffers
//! back discards it.
//!
//! **Failure.** Any error fails the op, is sent to every live peer as an
//! abort, and leaves the communicator broken (every later op returns
//! [`TcpError::Broken`]), as with HCCL and NCCL after an error.

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hccl_algos::exec::Executor;
use hccl_algos::schedule::{Rank, RankPlan};
use hccl_algos::transport::{drive, Completion, OpContext};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use super::bootstrap::bootstrap;
use super::buffers::OpBuffers;
use super::chunk::Chunk;
use super::cma::LendWord;
use super::cma_reader::{self, ChunkPool};
use super::config::TcpConfig;
use super::core::agreement::Starts;
use super::core::failure::Health;
use super::core::matcher::Matcher;
use super::core::sends::SendQueue;
use super::error::AbortKind;
use super::error::TcpError;
use super::io::{reader, writer, Event, Outgoing};
use super::root::RootInfo;
use super::wire::{SessionId, Signature, MAX_INLINE_ON_CMA, MAX_INLINE_ON_RINGS};
use crate::shm::pipe::{watch, ShmLink, ShmReader, ShmWriter};
use crate::sync::{ByteBudget, Permit};

mod close;
mod events;
mod op;
mod output;
mod probe;
mod shared_task;
mod tuning;

use probe::probe_peers;
use shared_task::SharedTask;

pub use op::TcpOp;
pub use tuning::*;

/// The seq bit that marks a point-to-point op (send/recv between two ranks).
/// Collectives number their ops `0, 1, 2, ...` across the communicator; a
/// p2p op instead carries `P2P_SEQ_BIT | n`, where `n` counts the messages
/// of its ordered (sender, receiver) pair, so the two namespaces never
/// match each other and ranks outside the pair consume no seq. A p2p op
/// sends no op-start frame (only its two ranks take part): its data frame's
/// signature is checked by the receiver before any byte lands.
pub const P2P_SEQ_BIT: u64 = 1 << 63;
/// True if `seq` numbers a point-to-point op (see [`P2P_SEQ_BIT`]).
pub fn is_p2p_seq(seq: u64) -> bool {
    seq & P2P_SEQ_BIT != 0
}

/// The tag of the op-start frame every rank sends every peer when an op
/// starts: it carries the sender's signature. See the module docs.
pub(super) const SIGNATURE_TAG: u32 = 0;
/// The tag of an op-start frame that says "every rank's signature has
/// reached me and agrees with mine", sent by a rank that sent
/// [`LATE_TAG`] (tag 0 carries the sender's signature at the op's start).
/// See the module docs.
pub const AGREED_TAG: u32 = 1;
/// The tag of an op-start frame that says "half my `HCCL_EXEC_TIMEOUT`
/// has passed and a signature is still missing: do not finish the op
/// before my [`AGREED_TAG`]". See the module docs.
pub const LATE_TAG: u32 = 2;
/// Counters of the same-host fast paths (the cross-memory path, see
/// [`super::cma`], and whole messages written into the rings), for tests
/// and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmaStats {
    /// Pieces of op buffers lent to peers as descriptors since connect
    /// (no copy on this side).
    pub pieces_lent: u64,
    /// Payload bytes in those pieces.
    pub bytes_lent: u64,
    /// Pieces lent and not yet acked now.
    pub outstanding: u64,
    /// Bytes copied out of peers' pieces since connect.
    pub bytes_read: u64,
    /// Of those, bytes copied straight into a posted plain receive (no
    /// chunk, no second copy).
    pub bytes_read_direct: u64,
    /// Byte-stream messages written whole into a peer's ring straight
    /// from the op's buffers (no copy into a send piece first), since
    /// connect.
    pub messages_written_direct: u64,
}

/// What an op is, for error messages and the consistency check.
pub struct OpInfo<'a> {
    /// Its name as printed ("AllReduce").
    pub name: &'a str,
    /// Its signature, sent to peers and compared with theirs.
    pub sig: Signature,
    /// Describes a disagreement with `remote` (the other rank's signature)
    /// held by rank `peer`: field, both values, both ranks.
    pub describe: &'a dyn Fn(&Signature, Rank) -> String,
}

impl std::fmt::Debug for OpInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpInfo").field("name", &self.name).finish()
    }
}

/// Where this thread writes a whole frame itself while the peer's writer
/// task is idle (see [`TcpRank::flush_outbox`]).
#[derive(Debug)]
enum Direct {
    /// The connection's non-blocking socket.
    Tcp(std::net::TcpStream),
    /// The pair's outgoing shared-memory ring.
    Shm(Arc<ShmLink>),
}

impl Direct {
    /// Writes what the socket or ring takes of `bytes` now.
    fn write(&self, bytes: &[u8]) -> usize {
        use std::io::Write as _;
        match self {
            Direct::Tcp(s) => (&*s).write(bytes).unwrap_or(0),
            Direct::Shm(l) => l.write_now(bytes),
        }
    }

    /// Writes the frame made of `parts` whole now, or nothing (false): a
    /// ring takes it if it has room; a socket never does here (a partial
    /// write would leave a tail to copy out, which is what the caller
    /// avoids).
    fn write_whole(&self, parts: &[&[u8]]) -> bool {
        match self {
            Direct::Tcp(_) => false,
            Direct::Shm(l) => l.write_all_now(parts),
        }
    }
}

#[derive(Debug, Default)]
struct Peer {
    tx: Option<UnboundedSender<Outgoing>>,
    /// For whole frames this thread writes itself while the writer is idle.
    direct: Option<Direct>,
    /// The pair's ring link when every frame travels in shared memory
    /// ([`crate::shm`]); the socket then carries only doorbells.
    shm: Option<Arc<ShmLink>>,
    /// Frames handed to the writer task and not yet written.
    queued: Arc<AtomicUsize>,
    /// Consumed chunk buffers go back to the peer's reader for reuse.
    recycle: Option<UnboundedSender<Vec<u8>>>,
    budget: Option<ByteBudget>,
    dead: Option<String>,
    /// Posted sends: pieces, window, lent pieces and acks.
    sends: SendQueue,
    /// The peer reads this rank's pieces (its probe answer was "ok").
    cma_send: bool,
    /// Messages longer than this go to a `cma_send` peer as lent pieces,
    /// shorter ones as bytes: [`MAX_INLINE_ON_CMA`], or to a ring peer
    /// [`MAX_INLINE_ON_RINGS`] when this host runs more ranks than CPUs and
    /// [`INLINE_ON_RINGS_FIT`] when they fit.
    inline_max: u64,
    /// The peer's process, verified by the probe: this rank reads its pieces.
    cma_pid: Option<u32>,
    /// This op's op-start frames for the peer (its signature, later the
    /// agreement), held back so that they leave in one write with the op's
    /// next message to the peer (or when the op waits, see
    /// [`TcpRank::flush_op_start`]).
    op_start: Option<Vec<u8>>,
}

/// One rank of a TCP communicator. See the module docs.
pub struct TcpRank {
    rank: u32,
    nranks: u32,
    session: SessionId,
    comm: u64,
    cfg: TcpConfig,
    runtime: Option<tokio::runtime::Runtime>,
    writers: Vec<JoinHandle<()>>,
    events: UnboundedReceiver<Event>,
    peers: Vec<Peer>,
    /// Posted receives and early messages.
    matcher: Matcher<(Chunk, Permit)>,
    /// The peers' op-start frames (signatures, late and agreed words).
    starts: Starts,
    completions: VecDeque<Completion>,
    /// Sequence number of the last op that finished here (frames of it or
    /// older are stale).
    last_done: Option<u64>,
    /// Broken, closed, what a failure tells the peers, withdrawn loans.
    health: Health,
    /// The first peer lost between ops (its connection ended without a
    /// goodbye while no op ran): what [`TcpRank::async_error`] reports
    /// then, HCCL's asynchronous error for a dead peer.
    lost_between_ops: Option<TcpError>,
    start: Instant,
    /// Kept to build [`AbortHandle`]s.
    ev_tx: UnboundedSender<Event>,
    local_ip: std::net::IpAddr,
    /// Distinct listener IPs in the communicator (see [`TcpRank::hosts`]).
    hosts: u32,
    /// See [`TcpRank::ranks_fit_cpus`].
    ranks_fit_cpus: bool,
    /// Written send pieces, for reuse.
    send_pool: Vec<Vec<u8>>,
    /// [`SPIN_BEFORE_SLEEP`] (or [`SPIN_OVERSUBSCRIBED`]) when this host
    /// runs other ranks too.
    spin: Option<Duration>,
    /// [`SPIN_BUSY`] when this host's ranks fit its CPUs, else zero.
    spin_busy: Duration,
    /// Frames for the writers, handed over by [`TcpRank::flush_outbox`]
    /// whenever this rank looks for events, each with whether this thread
    /// may write it itself (a whole frame, not inside a byte-stream
    /// message on the wire).
    outbox: Vec<(u32, Outgoing, bool)>,
    /// Events of frames this thread wrote itself ([`Event::SendDone`]),
    /// and a peer's piece put back unread at an op's start or end (see
    /// [`TcpOp`]'s `pump_until_piece`), handled before the I/O tasks'
    /// events.
    local_events: VecDeque<Event>,
    cma_stats: CmaStats,
    /// Receive chunks of fast-path peers, shared with their readers.
    chunk_pool: ChunkPool,
    /// Validity word of the pieces this rank lends (see [`super::cma`]).
    lend_word: LendWord,
    /// The lend number of the running (or last) op; never
    /// [`LEND_POISON`](super::wire::LEND_POISON).
    lend_id: u64,
    /// The ring links of same-host peers, looked at while this thread
    /// spins ([`ShmLink::kick`]).
    shm_links: Vec<Arc<ShmLink>>,
    /// The ring links' reader futures, polled by this thread while it
    /// spins ([`shared_task`]).
    ring_readers: Vec<Arc<SharedTask>>,
    /// Whether the links are told that this thread polls them.
    shm_polling: bool,
    /// Every peer is on rings: a look may skip scheduler passes.
    all_on_rings: bool,
    /// When the last scheduler pass ran ([`TcpRank::look_without_pass`]).
    last_pass: Instant,
    /// The running (or last) op's buffers are at most [`LOOK_HERE_MAX`]:
    /// looks may skip scheduler passes.
    look_here: bool,
}

/// Interrupts a [`TcpRank`]'s running op from another thread: the op fails
/// at once with [`TcpError::Broken`] (HCCL's `HcclCommAbort` semantics).
#[derive(Clone, Debug)]
pub struct AbortHandle(UnboundedSender<Event>);
impl AbortHandle {
    /// Fails the running op (or the next one) of the rank.
    pub fn abort(&self) {
        let _ = self.0.send(Event::LocalAbort(None));
    }

    /// [`AbortHandle::abort`] for `reason`: the op fails with
    /// [`TcpError::Broken`] carrying it, and every peer is sent it in an
    /// abort frame (so their ops fail naming it, not a lost connection).
    pub fn abort_with(&self, reason: &str) {
        let _ = self.0.send(Event::LocalAbort(Some(reason.to_string())));
    }
}

impl std::fmt::Debug for TcpRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpRank")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("comm", &self.comm)
            .field("broken", &self.health.broken())
            .finish()
    }
}

impl TcpRank {
    /// Bootstraps rank `rank` of `nranks` through the root `root` and
    /// connects to every peer. `comm` is the communicator id carried in
    /// every frame. Blocks for at most about `cfg.connect_timeout` (plus a
    /// 2 s margin for the root's verdict).
    ///
    /// # Errors
    /// Bootstrap errors: [`TcpError::BootstrapTimeout`],
    /// [`TcpError::BootstrapRankLeft`], [`TcpError::SessionExpired`],
    /// [`TcpError::Bind`], ...
    pub fn connect(
        cfg: TcpConfig,
        root: &RootInfo,
        nranks: u32,
        rank: u32,
        comm: u64,
    ) -> Result<TcpRank, TcpError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| TcpError::io("starting the I/O runtime", e))?;
        let mesh = runtime.block_on(bootstrap(&cfg, root, nranks, rank))?;
        let (streams, settled, mut segments) =
            probe_peers(&runtime, &cfg, mesh.streams, mesh.session, comm, rank)?;
        let mut shm_links = Vec::new();
        let mut ring_readers = Vec::new();
        let (ev_tx, events) = unbounded_channel::<Event>();
        let mut peers: Vec<Peer> = (0..nranks).map(|_| Peer::default()).collect();
        let mut writers = Vec::new();
        let chunk_pool = ChunkPool::default();
        for (p, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            let mut direct = None;
            let s = s.into_std().and_then(|s| {
                direct = Some(s.try_clone()?);
                let _guard = runtime.enter();
                tokio::net::TcpStream::from_std(s)
            });
            let s = s.map_err(|e| TcpError::io("moving a peer connection", e))?;
            let (r, w) = s.into_split();
            let (tx, rx) = unbounded_channel();
            let (recycle, recycled) = unbounded_channel();
            let budget = ByteBudget::new(cfg.unexpected_bound);
            peers[p].cma_send = settled[p].send;
            let (peer, ev) = (p as u32, ev_tx.clone());
            peers[p].cma_pid = settled[p].recv_pid;
            if let (Some(seg), Some(bell)) = (segments[p].take(), direct.take()) {
                // Every frame through the rings; the socket rings doorbells
                // and tells of the peer's end.
                let link = ShmLink::new(seg, rank < peer, bell);
                // The watcher keeps the write half too: dropping it would
                // shut the socket's write side, which the peer reads as the end.
                runtime.spawn(watch(Arc::clone(&link), r, w));
                let rd = ShmReader(Arc::clone(&link));
                let shared = if settled[p].recv_pid.is_some() {
                    let pool = chunk_pool.clone();
                    SharedTask::new(cma_reader::reader(
                        peer,
                        rd,
                        mesh.session,
                        budget.clone(),
                        ev,
                        pool,
                        MAX_INLINE_ON_RINGS,
                    ))
                } else {
                    SharedTask::new(reader(peer, rd, mesh.session, budget.clone(), ev, recycled))
                };
                runtime.spawn(shared.task());
                ring_readers.push(shared);
                let queued = Arc::clone(&peers[p].queued);
                let wr = ShmWriter(Arc::clone(&link));
                writers.push(runtime.spawn(writer(peer, wr, rx, ev_tx.clone(), queued)));
                peers[p].direct = Some(Direct::Shm(Arc::clone(&link)));
                peers[p].shm = Some(Arc::clone(&link));
                peers[p].recycle = Some(recycle);
                peers[p].tx = Some(tx);
                peers[p].budget = Some(budget);
                shm_links.push(link);
                continue;
            }
            peers[p].direct = direct.map(Direct::Tcp);
            if settled[p].recv_pid.is_some() {
                let pool = chunk_pool.clone();
                let rd = cma_reader::reader(
                    peer,
                    r,
                    mesh.session,
                    budget.clone(),
                    ev,
                    pool,
                    MAX_INLINE_ON_CMA,
                );
                runtime.spawn(rd);
            } else {
                runtime.spawn(reader(peer, r, mesh.session, budget.clone(), ev, recycled));
            }
            peers[p].recycle = Some(recycle);
            let queued = Arc::clone(&peers[p].queued);
            writers.push(runtime.spawn(writer(p as u32, w, rx, ev_tx.clone(), queued)));
            peers[p].tx = Some(tx);
            peers[p].budget = Some(budget);
        }
        let local_ranks = 1 + peers
            .iter()
            .filter(|p| p.cma_send || p.shm.is_some())
            .count();
        // The host's CPUs as the root counted them (the union of its
        // ranks' affinity masks), not this process's: ranks pinned one per
        // CPU each see one, and still have a CPU each to spin on.
        let oversubscribed = local_ranks > mesh.host_cpus as usize;
        let (look, spin_busy) = if oversubscribed {
            (SPIN_OVERSUBSCRIBED, Duration::ZERO)
        } else {
            (SPIN_BEFORE_SLEEP, SPIN_BUSY)
        };
        for p in &mut peers {
            p.inline_max = match (p.shm.is_some(), oversubscribed) {
                (true, true) => MAX_INLINE_ON_RINGS,
                (true, false) => INLINE_ON_RINGS_FIT,
                (false, _) => MAX_INLINE_ON_CMA,
            };
        }
        let spin = (local_ranks > 1).then_some(look);
        Ok(TcpRank {
            rank,
            nranks,
            session: mesh.session,
            comm,
            cfg,
            runtime: Some(runtime),
            writers,
            events,
            peers,
            matcher: Matcher::new(nranks),
            starts: Starts::default(),
            completions: VecDeque::new(),
            last_done: None,
            health: Health::new(rank, nranks),
            lost_between_ops: None,
            start: Instant::now(),
            ev_tx,
            local_ip: mesh.local_addr.ip(),
            hosts: mesh.hosts,
            ranks_fit_cpus: mesh.ranks_fit_cpus,
            send_pool: Vec::new(),
            spin,
            spin_busy,
            outbox: Vec::new(),
            local_events: VecDeque::new(),
            cma_stats: CmaStats::default(),
            chunk_pool,
            lend_word: LendWord::new(),
            lend_id: 0,
            all_on_rings: nranks > 1 && shm_links.len() == nranks as usize - 1,
            shm_links,
            ring_readers,
            last_pass: Instant::now(),
            look_here: true,
            shm_polling: false,
        })
    }

    /// The peers whose frames travel in shared-memory rings ([`crate::shm`]),
    /// ascending. Empty with `HCCL_SHM_DISABLE=1` on either side, across
    /// hosts, or where the peer's `/proc/<pid>/fd` cannot be opened.
    pub fn shm_peers(&self) -> Vec<u32> {
        (0..self.nranks)
            .filter(|&p| self.peers[p as usize].shm.is_some())
            .collect()
    }

    /// Whether the rings need a scheduler pass: a link's end, room for a
    /// waiting writer task, frames queued for a writer task. Bytes to
    /// read need none: the spinning thread polls the readers itself.
    fn rings_need_tasks(&self) -> bool {
        self.shm_links.iter().any(|l| l.needs_task())
            || self
                .peers
                .iter()
                .any(|p| p.queued.load(std::sync::atomic::Ordering::Acquire) > 0)
    }

    /// Tells the ring links whether this thread looks at them itself
    /// (while it spins) or may sleep (then each waiting task sets its
    /// ring's sleep flag, so the peer's next move rings the doorbell).
    /// Call with `false` before anything that may block.
    pub(super) fn set_shm_polling(&mut self, on: bool) {
        if self.shm_polling != on {
            self.shm_polling = on;
            for l in &self.shm_links {
                l.set_polling(on);
            }
        }
    }

    /// The peers this rank sends cross-memory descriptors to (their probe
    /// answer was "cma ok"; see [`super::cma`]), ascending. Empty with
    /// `HCCL_INTRA_CMA_ENABLE=0` on either side, across hosts, or where
    /// the kernel refuses `process_vm_readv`.
    pub fn cma_peers(&self) -> Vec<u32> {
        (0..self.nranks)
            .filter(|&p| self.peers[p as usize].cma_send)
            .collect()
    }

    /// Counters of the fast path's sending side.
    pub fn cma_stats(&self) -> CmaStats {
        CmaStats {
            outstanding: self.peers.iter().map(|p| p.sends.lent() as u64).sum(),
            ..self.cma_stats
        }
    }

    /// A handle that can interrupt this rank's op from another thread.
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(self.ev_tx.clone())
    }

    /// The IP this rank listened on for its peers.
    pub fn local_ip(&self) -> std::net::IpAddr {
        self.local_ip
    }

    /// Distinct IP addresses the ranks listen on: 1 when every rank runs
    /// on this host. Every rank of the communicator sees the same value
    /// (it comes from the root's address table), so it may steer the
    /// algorithm choice ([`hccl_algos::select::HostFit`]).
    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    /// Whether on every host the communicator's ranks are no more than the
    /// CPUs their processes may use (each rank reports its
    /// `available_parallelism` to the root; a host's figure is the least
    /// of its ranks'). The same on every rank, like [`TcpRank::hosts`]; it
    /// steers the host policy's slicing ([`hccl_algos::select::plan_op`]).
    pub fn ranks_fit_cpus(&self) -> bool {
        self.ranks_fit_cpus
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// World size.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// The settings in force.
    pub fn config(&self) -> &TcpConfig {
        &self.cfg
    }

    /// The error that broke the communicator, if any, after looking at
    /// what the peers sent since the last op (HCCL's
    /// `HcclGetCommAsyncError`); else a peer lost between ops
    /// ([`TcpError::PeerLost`] with op "between ops"), which does not break
    /// the communicator by itself: the next op that needs the peer fails.
    /// Never blocks.
    pub fn async_error(&mut self) -> Option<TcpError> {
        if self.health.usable() {
            while let Some(ev) = self.next_event(Some(Duration::ZERO)) {
                if let Err(e) = self.handle(ev, None) {
                    self.health.break_with(e);
                    break;
                }
            }
        }
        self.health
            .broken()
            .cloned()
            .or_else(|| self.lost_between_ops.clone())
    }

    /// The point-to-point messages that reached this rank and that no
    /// receive took, after reading what the connections hold (never
    /// blocks): (sender, message number of the pair, bytes), ascending.
    /// A p2p frame carries its pair's message number (mod 2^32) as its tag.
    /// For a destroy that must report them: a queued send is delivered or
    /// reported.
    pub fn unreceived(&mut self) -> Vec<(u32, u64, u64)> {
        let _ = self.async_error();
        self.matcher.unreceived()
    }

    /// The peers whose op signature for collective `seq` has reached this
    /// rank (after a timeout: the ranks that called the op), ascending.
    pub fn arrived(&self, seq: u64) -> Vec<u32> {
        (0..self.nranks)
            .filter(|&p| self.starts.has(p, seq))
            .collect()
    }

    /// The collectives peers have started that this rank has not: (peer,
    /// seq, signature), by seq then peer, after reading what the
    /// connections hold (at most 50 ms; for naming, from another
    /// communicator's timeout, what a missing rank is blocked in). Never
    /// runs an op; an error found on the way breaks the communicator, as
    /// [`TcpRank::async_error`] does.
    pub fn peers_ahead(&mut self) -> Vec<(u32, u64, Signature)> {
        let end = Instant::now() + Duration::from_millis(50);
        while self.health.usable() && Instant::now() < end {
            let Some(ev) = self.next_event(Some(Duration::from_millis(1))) else {
                break;
            };
            if let Err(e) = self.handle(ev, None) {
                self.health.break_with(e);
            }
        }
        self.starts.ahead(self.last_done)
    }

    /// Runs `plan` as op `ctx` over `bufs`, blocking until it finishes on
    /// this rank, fails, or `HCCL_EXEC_TIMEOUT` passes.
    ///
    /// # Errors
    /// Any [`TcpError`]; the communicator is then broken.
    pub fn run(
        &mut self,
        ctx: &OpContext,
        info: &OpInfo<'_>,
        bufs: OpBuffers<'_>,
        plan: RankPlan,
    ) -> Result<(), TcpError> {
        let mut exec = Executor::new(plan);
        let mut op = self.begin(ctx, info, bufs)?;
        let r = drive(&mut exec, ctx, &mut op).and_then(|()| op.finish());
        r.map_err(|e| op.fail(e))
    }

    /// Starts op `ctx` (sends its signature to every peer) and returns the
    /// [`Transport`](hccl_algos::transport::Transport) that runs its steps;
    /// call [`TcpOp::finish`] after the executor is done.
    ///
    /// # Errors
    /// [`TcpError::Broken`] after an earlier failure; bad arguments.
    pub fn begin<'r, 'a>(
        &'r mut self,
        ctx: &OpContext,
        info: &'a OpInfo<'a>,
        bufs: OpBuffers<'a>,
    ) -> Result<TcpOp<'r, 'a>, TcpError> {
        TcpOp::start(self, ctx, info, bufs)
    }

    /// Aborts the communicator (HCCL's `HcclCommAbort`): tells every peer,
    /// closes the connections. A second call, or a call after destroy, does
    /// nothing.
    pub fn abort(&mut self) {
        let reason = format!("rank {} aborted the communicator", self.rank);
        self.abort_with(&reason);
    }

    /// [`TcpRank::abort`] with the reason the peers report: for a failure
    /// found above the transport (say, a caller's buffer of the wrong size)
    /// that the peers, perhaps waiting in the op already, must learn of
    /// at once. A rank broken by a failed op has told its peers already
    /// and only closes.
    pub fn abort_with(&mut self, reason: &str) {
        self.fail_with(reason, AbortKind::Failed);
    }

    /// [`TcpRank::abort_with`] for a failure of `kind`, which the peers
    /// report as such (a timeout or a mismatch found above the
    /// transport, or a peer's that this rank reported).
    pub fn fail_with(&mut self, reason: &str, kind: AbortKind) {
        if let Some(t) = self.health.abort_with(reason, kind, self.last_done) {
            self.broadcast_abort(t.seq, &t.reason, t.kind);
        }
        self.shutdown(false);
    }

    /// Tells the peers of the failure whose abort was left to the caller
    /// ([`TcpRank::abort_with`]) if the caller went on without it, in
    /// the transport's own words.
    fn send_deferred_abort(&mut self) {
        if let Some(t) = self.health.take_deferred(self.last_done) {
            self.broadcast_abort(t.seq, &t.reason, t.kind);
        }
    }

    /// With every peer on rings, the look of a scheduler pass without one
    /// (each pass polls epoll: a system call): the rings read by polling
    /// their readers on this thread, then the events. `None` when a pass
    /// is due: a writer task or a link's end needs the runtime, the op's
    /// buffers are above [`LOOK_HERE_MAX`], or [`RING_PASS`] went by since
    /// the last (which still sees a peer's end on its socket).
    fn look_without_pass(&mut self) -> Option<Option<Event>> {
        if !self.all_on_rings
            || !self.look_here
            || self.rings_need_tasks()
            || self.last_pass.elapsed() >= RING_PASS
        {
            return None;
        }
        // A reader with bytes in its ring, or one woken since its last
        // poll (by the budget this thread freed: its ring shows nothing).
        let readable = self.shm_links.iter().any(|l| l.readable());
        for r in &self.ring_readers {
            if readable || r.woken() {
                r.poll_here();
            }
        }
        // The outbox and this thread's own events were looked at just
        // before (`next_event`); the readers add only to the channel.
        Some(self.events.try_recv().ok())
    }

    /// Runs the I/O tasks until an event arrives or `wait` passes (`None`:
    /// forever; zero: one look, a scheduler pass unless
    /// [`TcpRank::look_without_pass`] did without).
    fn next_event(&mut self, wait: Option<Duration>) -> Option<Event> {
        self.flush_outbox();
        if let Some(ev) = self.local_events.pop_front() {
            return Some(ev);
        }
        if let Ok(ev) = self.events.try_recv() {
            return Some(ev);
        }
        if wait == Some(Duration::ZERO) {
            if let Some(ev) = self.look_without_pass() {
                return ev;
            }
        } else {
            self.flush_op_start();
            self.flush_outbox();
        }
        // Look (without sleeping) for a short while first: see
        // SPIN_BEFORE_SLEEP.
        if let Some(spin) = self.spin.filter(|_| wait != Some(Duration::ZERO)) {
            self.set_shm_polling(true);
            let start = Instant::now();
            let end = start + wait.map_or(spin, |w| spin.min(w));
            let busy_end = start + self.spin_busy;
            loop {
                if let Some(ev) = self.next_event(Some(Duration::ZERO)) {
                    return Some(ev);
                }
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now >= busy_end {
                    std::thread::yield_now();
                }
            }
        }
        if wait != Some(Duration::ZERO) {
            self.set_shm_polling(false);
        }
        self.last_pass = Instant::now();
        let rt = self.runtime.as_ref()?;
        let events = &mut self.events;
        let links = &self.shm_links;
        match wait {
            // Two scheduler passes: a yielded task is woken after the I/O
            // driver is polled, so the first pass runs the readers it woke
            // and the second catches one that needed another step. (Four
            // passes cost an epoll_wait each whenever nothing had arrived.)
            Some(w) if w.is_zero() => rt.block_on(async {
                for _ in 0..2 {
                    // Inside the runtime, a woken task only joins the run
                    // queue (no eventfd write).
                    for l in links {
                        l.kick();
                    }
                    tokio::task::yield_now().await;
                    if let Ok(ev) = events.try_recv() {
                        return Some(ev);
                    }
                }
                None
            }),
            Some(w) => {
                rt.block_on(async { tokio::time::timeout(w, events.recv()).await.ok().flatten() })
            }
            None => rt.block_on(events.recv()),
        }
    }
}

impl Drop for TcpRank {
    fn drop(&mut self) {
        self.shutdown(true);
    }
}
