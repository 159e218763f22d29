//! One rank of a TCP communicator: owns the runtime, the peer connections
//! and the matching state; [`TcpOp`] runs one op over it as a
//! [`Transport`].
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
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hccl_algos::exec::Executor;
use hccl_algos::schedule::{Op, Rank, RankPlan, Region, StepId};
use hccl_algos::transport::{drive, Completion, OpContext, Transport};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use super::bootstrap::bootstrap;
use super::buffers::OpBuffers;
use super::cma::{self, LendWord, LentReadError, Token};
use super::cma_reader::{self, ChunkPool};
use super::config::TcpConfig;
use super::core::agreement::{OpCheck, StartError, Starts};
use super::core::failure::{self, on_closed, Closed, Health, Stall};
use super::core::matcher::{
    ChunkAction, HeaderAction, Key, MatchError, Matcher, PostAction, RecvKind,
};
use super::core::sends::SendQueue;
use super::error::TcpError;
use super::io::{reader, writer, Event, Outgoing};
use super::root::RootInfo;
use super::wire::{
    FrameHeader, FrameKind, PieceDesc, SessionId, Signature, FRAME_HEADER_LEN, MAX_ABORT_REASON,
    MAX_CMA_PIECE, MAX_INLINE_ON_CMA, PIECE_DESC_LEN,
};
use crate::sync::{ByteBudget, Permit};

/// Longest a destroy waits for writers to flush and peers to say goodbye.
/// A communicator broken by a failed op waits at most [`ABORT_FLUSH`] and
/// not for goodbyes: its data is void, and a hung peer (one that stopped
/// reading) would otherwise hold the error back for the whole linger.
pub const LINGER: Duration = Duration::from_secs(10);

/// Bytes of payload per piece handed to a writer: the writer starts on the
/// first piece while the caller copies the next. Also the size of a piece
/// lent to a same-host peer (one `process_vm_readv` and one ack each), at
/// most the wire's [`MAX_CMA_PIECE`] and `HCCL_BUFFSIZE`'s least value
/// (1 MB), so any peer's budget holds one. 1 MiB rather than 256 KiB:
/// `tcp_allreduce_bench`, quiet VM, 3 runs, busbw GB/s with 256 KiB vs
/// 1 MiB: 2 processes 8 MiB 4.8-5.3 vs 6.0-6.5, 16 MiB 4.2-4.7 vs
/// 5.1-5.2, 32 MiB 2.7-3.6 vs 3.6-3.8; 4 processes 4-16 MiB 2.0-3.7 vs
/// 3.1-3.6 (a quarter of the descriptors, acks and system calls).
pub const SEND_PIECE: usize = 1 << 20;
/// Bound on messages (of any size, zero included) and op starts held
/// before this rank posts their receives: bytes are bounded by
/// `HCCL_BUFFSIZE`, this bounds the bookkeeping.
pub const MAX_EARLY_MESSAGES: usize = 1 << 16;
// A message short enough to go as bytes on a cross-memory connection must
// be one piece: one write, never split around an ack.
const _: () = assert!(SEND_PIECE as u64 >= MAX_INLINE_ON_CMA);
const _: () = assert!(SEND_PIECE as u64 <= MAX_CMA_PIECE);
/// Pieces a send may run ahead of the writer (4 MiB at 1 MiB pieces): the
/// memory a send holds per peer, whatever the message size.
pub const PIECES_AHEAD: u32 = 4;
/// Pieces of op buffers lent to a same-host peer and not yet acked (16 MiB
/// at 1 MiB): they cost this rank no memory, and the peer takes budget
/// only for the ones it reads. A deeper window than [`PIECES_AHEAD`]
/// keeps the peer's reads going while acks travel: `tcp_allreduce_bench`,
/// 2 processes, 32-64 MiB, went from 1.7-2.1 GB/s busbw with 4 MiB lent
/// ahead to 2.4-3.1 with 16 MiB (4 processes: no change).
pub const LEND_AHEAD: u32 = 16;
/// Send piece buffers kept for reuse (16 MiB at 1 MiB).
const SEND_POOL: usize = 16;
/// Counters of the same-host fast path (see [`super::cma`]), for tests
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
}

/// How long a waiting op keeps looking at its connections before it sleeps
/// in `epoll`, when this host runs other ranks of the communicator (found
/// by the same-host probe). A sleeping thread's wake-up costs 20-50 µs per
/// message on the project's 2-core VM, and with the same-host path a rank
/// waits often (every lent piece completes with the peer's ack), so it
/// looks for up to 3 ms: for the first [`SPIN_BUSY`] without pausing, then
/// calling `sched_yield` between looks so that a runnable thread on its
/// CPU (another rank when the host is oversubscribed, or the kernel's
/// `ksoftirqd` delivering loopback packets) runs first. With more ranks
/// than CPUs it yields from the start (Open MPI's `mpi_yield_when_idle`
/// does the same). Measured with `tcp_allreduce_bench` (2-core VM, quiet,
/// 3 runs each): 2 processes, a 20 µs busy look before sleeping gave 1.7–2.6
/// GB/s busbw at 1–16 MiB and 13.5–14.4 µs at 8 KiB; 50 µs busy then
/// yielding up to 1 ms gave 4.2–5.8 GB/s and the same 8 KiB time; 4
/// processes (sleeping at once) 8 KiB 128–164 µs, yielding up to 1 ms
/// 84–87 µs, up to 3 ms 59–62 µs, and 2.1–2.5 GB/s at 2–8 MiB (was
/// 1.1–1.9). A busy look of 1 ms without yielding was as fast at 1–16 MiB
/// but made some 2-process runs take 100–250 µs per 8 KiB op (the loopback
/// packets waited for the CPU). With more ranks than CPUs the look is
/// shorter: [`SPIN_OVERSUBSCRIBED`].
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_millis(3);

/// [`SPIN_BEFORE_SLEEP`] when this host runs more ranks than it has CPUs.
/// A rank that yields stays runnable, so a CPU whose ranks all wait for
/// ranks on another CPU looks busy: the kernel never moves a rank with work
/// onto it, and the two waiting ranks hand the CPU to each other (pinned
/// with `taskset`, 4 processes on 2 cores, H-D_R, 16 MiB: ranks 0 and 1 on
/// one core made 71,000 context switches and 14.3 ms per op, ranks 0 and 2
/// 8,000 and 8.6 ms). Once a waiting rank sleeps its CPU can go idle and
/// the kernel's load balancer moves work onto it. Measured with
/// `tcp_allreduce_bench` (4 processes, unpinned, quiet, 8–10 interleaved
/// runs, medians in µs at 8 KiB / 128 KiB / 1 MiB / 4 MiB / 16 MiB):
/// looking for 3 ms 803 µs at 1 MiB, 2066 at 4 MiB, 11687 at 16 MiB (half
/// the runs over 11,000); 200 µs 49 / 141 / 809 / 1762 / 8555; 100 µs
/// 51 / 147 / 623 / 1759 / 8102; 50 µs 50 / 140 / 641 / 1715 / 8325;
/// 20 µs 48 / 169 / 644 / 1731 / 7980; 10 µs 54 / 164 / 629 / 1742 / 8661.
/// With 3 and 8 processes 50 µs and 3 ms were within the runs' spread;
/// with 2 (ranks fit the CPUs) a shorter look made 4 and 16 MiB a few runs
/// slower, so 3 ms stays there.
pub const SPIN_OVERSUBSCRIBED: Duration = Duration::from_micros(50);

/// The first part of [`SPIN_BEFORE_SLEEP`], looked through without yielding
/// the CPU, when this host's ranks fit its CPUs (zero otherwise).
pub const SPIN_BUSY: Duration = Duration::from_micros(50);

/// Longest a failing op waits for its abort frames to be written.
pub const ABORT_FLUSH: Duration = Duration::from_secs(1);

/// How long a rank that found a peer's loan withdrawn (the peer's op
/// failed while lending; see [`super::cma`]) waits for that peer's abort
/// frame, which names the original error, before it fails its op with
/// [`TcpError::LenderFailed`]. The failing peer writes its aborts before
/// it withdraws, so the frame is normally there already.
pub const WITHDRAWN_GRACE: Duration = ABORT_FLUSH;

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
const SIGNATURE_TAG: u32 = 0;

/// The tag of an op-start frame that says "every rank's signature has
/// reached me and agrees with mine", sent by a rank that sent
/// [`LATE_TAG`] (tag 0 carries the sender's signature at the op's start).
/// See the module docs.
pub const AGREED_TAG: u32 = 1;

/// The tag of an op-start frame that says "half my `HCCL_EXEC_TIMEOUT`
/// has passed and a signature is still missing: do not finish the op
/// before my [`AGREED_TAG`]". See the module docs.
pub const LATE_TAG: u32 = 2;

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

#[derive(Debug, Default)]
struct Peer {
    tx: Option<UnboundedSender<Outgoing>>,
    /// The connection's socket, for whole frames this thread writes itself
    /// while the writer is idle (see [`TcpRank::flush_outbox`]).
    direct: Option<std::net::TcpStream>,
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
    /// The peer's process, verified by the probe: this rank reads its pieces.
    cma_pid: Option<u32>,
    /// This op's op-start frames for the peer (its signature, later the
    /// agreement), held back so that they leave in one write with the op's
    /// next message to the peer (or when the op waits, see
    /// [`TcpRank::flush_op_start`]).
    op_start: Option<Vec<u8>>,
}

/// What [`write_now`] did with a frame.
enum Written {
    /// The socket took all of it; for a data frame, its completion.
    All(Option<Event>),
    /// What is left for the writer task (all of it if the socket took
    /// nothing or failed: the writer retries and reports the failure).
    Rest(Outgoing),
}

/// Writes the whole frame `out` for `peer` to its non-blocking socket now,
/// as far as the socket takes it (see [`TcpRank::flush_outbox`]).
fn write_now(sock: &std::net::TcpStream, peer: u32, out: Outgoing) -> Written {
    let bytes: &[u8] = match &out {
        Outgoing::Data { bytes, .. } | Outgoing::Control(bytes) | Outgoing::Ack(bytes) => bytes,
        Outgoing::Lent { frame } => frame,
        Outgoing::Flush(_) | Outgoing::End => return Written::Rest(out),
    };
    let n = (&*sock).write(bytes).unwrap_or(0);
    if n == bytes.len() {
        return Written::All(match out {
            Outgoing::Data { bytes, seq, step } => Some(Event::SendDone {
                peer,
                seq,
                step,
                buf: bytes,
            }),
            _ => None,
        });
    }
    if n == 0 {
        return Written::Rest(out);
    }
    // The frame's tail, as raw bytes the writer sends next and never holds.
    let rest = bytes[n..].to_vec();
    Written::Rest(match out {
        Outgoing::Data { seq, step, .. } => Outgoing::Data {
            bytes: rest,
            seq,
            step,
        },
        _ => Outgoing::Control(rest),
    })
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
    matcher: Matcher<(Vec<u8>, Permit)>,
    /// The peers' op-start frames (signatures, late and agreed words).
    starts: Starts,
    completions: VecDeque<Completion>,
    /// Sequence number of the last op that finished here (frames of it or
    /// older are stale).
    last_done: Option<u64>,
    /// Broken, closed, what a failure tells the peers, withdrawn loans.
    health: Health,
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
    /// handled before the I/O tasks' events.
    local_events: VecDeque<Event>,
    cma_stats: CmaStats,
    /// Receive chunks of fast-path peers, shared with their readers.
    chunk_pool: ChunkPool,
    /// Validity word of the pieces this rank lends (see [`super::cma`]).
    lend_word: LendWord,
    /// The lend number of the running (or last) op; never
    /// [`LEND_POISON`](super::wire::LEND_POISON).
    lend_id: u64,
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
        let (streams, settled) =
            probe_peers(&runtime, &cfg, mesh.streams, mesh.session, comm, rank)?;
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
            peers[p].direct = direct;
            let (r, w) = s.into_split();
            let (tx, rx) = unbounded_channel();
            let (recycle, recycled) = unbounded_channel();
            let budget = ByteBudget::new(cfg.unexpected_bound);
            peers[p].cma_send = settled[p].send;
            let (peer, ev) = (p as u32, ev_tx.clone());
            peers[p].cma_pid = settled[p].recv_pid;
            if settled[p].recv_pid.is_some() {
                let pool = chunk_pool.clone();
                let rd = cma_reader::reader(peer, r, mesh.session, budget.clone(), ev, pool);
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
        let local_ranks = 1 + peers.iter().filter(|p| p.cma_send).count();
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
        let (look, spin_busy) = if local_ranks <= cpus {
            (SPIN_BEFORE_SLEEP, SPIN_BUSY)
        } else {
            (SPIN_OVERSUBSCRIBED, Duration::ZERO)
        };
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
        })
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
    /// `HcclGetCommAsyncError`). Never blocks.
    pub fn async_error(&mut self) -> Option<TcpError> {
        if self.health.usable() {
            while let Some(ev) = self.next_event(Some(Duration::ZERO)) {
                if let Err(e) = self.handle(ev, None) {
                    self.health.break_with(e);
                    break;
                }
            }
        }
        self.health.broken().cloned()
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

    /// Starts op `ctx` (sends its signature to the next rank) and returns
    /// the [`Transport`] that runs its steps; call [`TcpOp::finish`] after
    /// the executor is done.
    ///
    /// # Errors
    /// [`TcpError::Broken`] after an earlier failure; bad arguments.
    pub fn begin<'r, 'a>(
        &'r mut self,
        ctx: &OpContext,
        info: &'a OpInfo<'a>,
        bufs: OpBuffers<'a>,
    ) -> Result<TcpOp<'r, 'a>, TcpError> {
        if !self.health.closed() {
            self.send_deferred_abort();
        }
        self.health.may_begin(ctx.seq, info.name)?;
        if ctx.comm != self.comm || ctx.rank != self.rank {
            return Err(TcpError::InvalidArgument(format!(
                "op context is for comm {:#x} rank {}, this is comm {:#x} rank {}",
                ctx.comm, ctx.rank, self.comm, self.rank
            )));
        }
        if !is_p2p_seq(ctx.seq) && self.last_done.is_some_and(|d| ctx.seq <= d) {
            return Err(TcpError::InvalidArgument(format!(
                "op seq {} is not after the last op ({:?})",
                ctx.seq, self.last_done
            )));
        }
        let timeout = self.cfg.exec_timeout;
        // A fresh lend number: no descriptor of an earlier op validates
        // against it. (An earlier op left nothing lent: it succeeded, so
        // every piece was acked, or it failed and broke the communicator.)
        self.lend_id += 1;
        self.lend_word.open(self.lend_id);
        let ring = self.nranks > 1 && !is_p2p_seq(ctx.seq);
        let mut op = TcpOp {
            rank: self,
            ctx: *ctx,
            info,
            bufs,
            deadline: timeout.map(|t| Instant::now() + t),
            check: OpCheck::new(ring, Instant::now(), timeout),
        };
        if ring {
            op.tell_peers(SIGNATURE_TAG);
        }
        // Check what arrived early for this op (signatures, aborts).
        op.pump_nonblocking().map_err(|e| op.fail(e))?;
        op.check_starts().map_err(|e| op.fail(e))?;
        Ok(op)
    }

    /// Sends the held op-start frame (see [`Peer::op_start`]) to whichever
    /// peer still has one: before this rank waits, fails or finishes.
    fn flush_op_start(&mut self) {
        for p in 0..self.nranks {
            if let Some(bytes) = self.peers[p as usize].op_start.take() {
                self.send_control(p, bytes);
            }
        }
    }

    fn send_control(&mut self, peer: u32, bytes: Vec<u8>) {
        self.queue_frame(peer, Outgoing::Control(bytes));
    }

    /// Queues a whole frame that is not part of a message's pieces (a
    /// control frame or an ack): this thread may write it itself unless a
    /// byte-stream message to `peer` is half on the wire.
    fn queue_frame(&mut self, peer: u32, out: Outgoing) {
        let whole = !self.peers[peer as usize].sends.mid_message();
        self.outbox.push((peer, out, whole));
    }

    /// Hands the frames queued in [`TcpRank::outbox`] to the writers, from
    /// inside the runtime: a writer woken there is only put on the
    /// runtime's run queue, where a wake from outside costs an `eventfd`
    /// write and an extra `epoll` event per frame.
    ///
    /// A whole frame for a peer whose writer has nothing queued is written
    /// here, straight to the socket (it is non-blocking): one `send` and no
    /// scheduler pass, where the writer task ran only after a few `epoll`
    /// polls. Whatever the socket does not take at once goes to the writer,
    /// and so does every later frame for that peer until the writer is
    /// idle again, so frames stay in order on the wire.
    fn flush_outbox(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let items = std::mem::take(&mut self.outbox);
        let mut deferred = Vec::with_capacity(items.len());
        for (p, out, whole) in items {
            let peer = &mut self.peers[p as usize];
            let idle = peer.queued.load(Ordering::Acquire) == 0 && peer.tx.is_some();
            let out = match (whole && idle, peer.direct.as_ref()) {
                (true, Some(sock)) => match write_now(sock, p, out) {
                    Written::All(Some(ev)) => {
                        self.local_events.push_back(ev);
                        continue;
                    }
                    Written::All(None) => continue,
                    Written::Rest(rest) => rest,
                },
                _ => out,
            };
            peer.queued.fetch_add(1, Ordering::AcqRel);
            deferred.push((p, out));
        }
        if deferred.is_empty() {
            return;
        }
        let peers = &self.peers;
        let send = move || {
            for (p, out) in deferred {
                if let Some(tx) = &peers[p as usize].tx {
                    let _ = tx.send(out);
                }
            }
        };
        match &self.runtime {
            Some(rt) => rt.block_on(async move { send() }),
            None => send(),
        }
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
        if let Some(t) = self.health.abort_with(reason, self.last_done) {
            self.broadcast_abort(t.seq, &t.reason);
        }
        self.shutdown(false);
    }

    /// Tells the peers of the failure whose abort was left to the caller
    /// ([`TcpRank::abort_with`]) if the caller went on without it, in
    /// the transport's own words.
    fn send_deferred_abort(&mut self) {
        if let Some(t) = self.health.take_deferred(self.last_done) {
            self.broadcast_abort(t.seq, &t.reason);
        }
    }

    fn broadcast_abort(&mut self, seq: u64, reason: &str) {
        let mut text = reason.as_bytes().to_vec();
        text.truncate(MAX_ABORT_REASON as usize);
        let h = FrameHeader {
            kind: FrameKind::Abort,
            session: self.session,
            comm: self.comm,
            seq,
            tag: 0,
            len: text.len() as u64,
            sig: [0; 32],
        };
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&text);
        let (ack_tx, mut ack_rx) = unbounded_channel();
        let mut waiting = 0;
        for p in 0..self.nranks {
            if p != self.rank && self.peers[p as usize].dead.is_none() {
                self.send_control(p, bytes.clone());
            }
        }
        self.flush_outbox();
        for p in 0..self.nranks {
            if p != self.rank && self.peers[p as usize].dead.is_none() {
                if let Some(tx) = &self.peers[p as usize].tx {
                    self.peers[p as usize].queued.fetch_add(1, Ordering::AcqRel);
                    waiting += u32::from(tx.send(Outgoing::Flush(ack_tx.clone())).is_ok());
                }
            }
        }
        // The abort must reach the peers before this process may exit: run
        // the writers (bounded) until they have handed it to the kernel.
        if let Some(rt) = &self.runtime {
            rt.block_on(async {
                let _ = tokio::time::timeout(ABORT_FLUSH, async {
                    for _ in 0..waiting {
                        if ack_rx.recv().await.is_none() {
                            break;
                        }
                    }
                })
                .await;
            });
        }
    }

    /// Runs the I/O tasks until an event arrives or `wait` passes (`None`:
    /// forever; zero: one scheduler pass).
    fn next_event(&mut self, wait: Option<Duration>) -> Option<Event> {
        self.flush_outbox();
        if let Some(ev) = self.local_events.pop_front() {
            return Some(ev);
        }
        if let Ok(ev) = self.events.try_recv() {
            return Some(ev);
        }
        if wait != Some(Duration::ZERO) {
            self.flush_op_start();
            self.flush_outbox();
        }
        // Look (without sleeping) for a short while first: see
        // SPIN_BEFORE_SLEEP.
        if let Some(spin) = self.spin.filter(|_| wait != Some(Duration::ZERO)) {
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
        let rt = self.runtime.as_ref()?;
        let events = &mut self.events;
        match wait {
            // Two scheduler passes: a yielded task is woken after the I/O
            // driver is polled, so the first pass runs the readers it woke
            // and the second catches one that needed another step. (Four
            // passes cost an epoll_wait each whenever nothing had arrived.)
            Some(w) if w.is_zero() => rt.block_on(async {
                for _ in 0..2 {
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

    /// Queues pieces of `peer`'s pending sends, up to [`PIECES_AHEAD`] in
    /// flight ([`LEND_AHEAD`] for lent ones): copies into send pieces, or,
    /// for a same-host peer and a message over [`MAX_INLINE_ON_CMA`]
    /// bytes, descriptors of the region's own bytes in `bufs` (no copy: the
    /// peer reads them while the send step waits for its acks).
    fn fill_sends(&mut self, peer: u32, bufs: &OpBuffers<'_>) -> Result<(), TcpError> {
        let p = &mut self.peers[peer as usize];
        while let Some(piece) = p.sends.next_piece(p.cma_send) {
            // The held op start leaves with the first piece of a message.
            let op_start = if piece.first { p.op_start.take() } else { None };
            let payload = bufs.get(piece.src)?;
            let n = piece.src.len;
            let out = if piece.lend {
                // The op's own memory, lent: the send step completes only
                // when every piece is acked, and a failure withdraws it
                // through the lend word before the buffers go back.
                let desc = PieceDesc {
                    addr: payload.as_ptr() as u64,
                    len: n,
                    word: self.lend_word.addr(),
                    expected: self.lend_id,
                };
                self.cma_stats.pieces_lent += 1;
                self.cma_stats.bytes_lent += n;
                let h = if piece.first {
                    FrameHeader {
                        kind: FrameKind::DataCma,
                        ..piece.header
                    }
                } else {
                    FrameHeader {
                        kind: FrameKind::CmaMore,
                        len: PIECE_DESC_LEN as u64,
                        ..piece.header
                    }
                };
                if let Some(start) = op_start {
                    self.outbox.push((peer, Outgoing::Control(start), true));
                }
                let mut frame = [0u8; FRAME_HEADER_LEN + PIECE_DESC_LEN];
                frame[..FRAME_HEADER_LEN].copy_from_slice(&h.encode());
                frame[FRAME_HEADER_LEN..].copy_from_slice(&desc.encode());
                p.sends.lend(desc, &piece);
                Outgoing::Lent { frame }
            } else {
                let mut bytes = self.send_pool.pop().unwrap_or_default();
                bytes.clear();
                if let Some(start) = op_start {
                    bytes.extend_from_slice(&start);
                }
                if piece.first {
                    bytes.extend_from_slice(&piece.header.encode());
                }
                bytes.extend_from_slice(payload);
                let step = piece.last.then_some(piece.step);
                Outgoing::Data {
                    bytes,
                    seq: piece.seq,
                    step,
                }
            };
            let open = p.dead.is_none() && p.tx.as_ref().is_some_and(|tx| !tx.is_closed());
            if !open {
                // Never sent: out of the window again.
                p.sends.on_written();
                return Ok(()); // The reader reports the peer's end.
            }
            // A byte-stream message in one piece is a whole frame; lent
            // pieces are whole frames each.
            let whole = piece.lend || (piece.first && piece.last);
            self.outbox.push((peer, out, whole));
        }
        Ok(())
    }

    /// Says goodbye to every peer and lets the writers flush (at most
    /// [`LINGER`]). With `linger`, it then reads until every peer has said
    /// goodbye too (at most [`LINGER`]): closing a socket with unread bytes
    /// makes the kernel send a reset, which could destroy data a slower peer
    /// has not read yet.
    fn shutdown(&mut self, linger: bool) {
        if self.health.closed() {
            return;
        }
        self.send_deferred_abort();
        self.health.close();
        let bye = FrameHeader {
            kind: FrameKind::Bye,
            session: self.session,
            comm: self.comm,
            seq: 0,
            tag: 0,
            len: 0,
            sig: [0; 32],
        }
        .encode()
        .to_vec();
        for p in 0..self.nranks {
            if p != self.rank {
                self.send_control(p, bye.clone());
            }
        }
        self.flush_outbox();
        for p in 0..self.nranks {
            if p != self.rank {
                if let Some(tx) = &self.peers[p as usize].tx {
                    let _ = tx.send(Outgoing::End);
                }
            }
        }
        for p in &mut self.peers {
            p.tx = None;
        }
        let Some(rt) = self.runtime.as_ref() else {
            return;
        };
        let writers = std::mem::take(&mut self.writers);
        let broken = self.health.broken().is_some();
        let bound = if broken { ABORT_FLUSH } else { LINGER };
        let end = Instant::now() + bound;
        rt.block_on(async {
            let _ = tokio::time::timeout(bound, async {
                for w in writers {
                    let _ = w.await;
                }
            })
            .await;
        });
        if linger && !broken {
            // Peers in this process (`Comm::init_all`) read only while
            // their own thread runs an op, so an idle one never says
            // goodbye: waiting for them cost LINGER per communicator when
            // a program dropped its communicators one after another. What
            // they sent is drained below instead, so closing sends no reset.
            let me = std::process::id();
            let mut waiting: Vec<bool> = self
                .peers
                .iter()
                .enumerate()
                .map(|(p, peer)| {
                    p as u32 != self.rank && peer.dead.is_none() && peer.cma_pid != Some(me)
                })
                .collect();
            // The peer whose connection ended, if `ev` says so.
            let handle = |rank: &mut TcpRank, ev: Event| match ev {
                Event::Closed { peer, .. } | Event::Protocol { peer, .. } => Some(peer),
                Event::CmaAck { peer, desc } => {
                    // Acked: the peer is done with it.
                    rank.peers[peer as usize].sends.ack_quietly(desc);
                    None
                }
                _ => None,
            };
            while waiting.contains(&true) && Instant::now() < end {
                let wait = end.saturating_duration_since(Instant::now());
                let Some(ev) = self.next_event(Some(wait)) else {
                    break;
                };
                if let Some(p) = handle(self, ev) {
                    waiting[p as usize] = false;
                }
            }
            while let Some(ev) = self.next_event(Some(Duration::ZERO)) {
                handle(self, ev);
            }
        }
        // Only a failed op leaves pieces lent, and its lend word was
        // poisoned before it returned; poison once more in case.
        self.lend_word.poison();
        for (p, peer) in self.peers.iter_mut().enumerate() {
            let n = peer.sends.lent();
            if n > 0 {
                let bytes = peer.sends.forget_lent();
                tracing::debug!(
                    "hccl rank {}: {n} piece(s) ({bytes} bytes) lent to rank {p} were never acked; withdrawn by the lend word",
                    self.rank
                );
            }
        }
        for p in &self.peers {
            if let Some(b) = &p.budget {
                b.close();
            }
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    /// Files one event. `op` is the running op, if any (with its buffers).
    fn handle(
        &mut self,
        ev: Event,
        mut op: Option<(&OpContext, &OpInfo<'_>, &mut OpBuffers<'_>)>,
    ) -> Result<(), TcpError> {
        let cur_seq = op.as_ref().map(|(c, _, _)| c.seq);
        let name = op.as_ref().map_or("op", |(_, i, _)| i.name).to_string();
        match ev {
            Event::Header { peer, h } => {
                if h.comm != self.comm {
                    return Err(self.protocol(
                        peer,
                        format!("frame for comm {:#x} on comm {:#x}", h.comm, self.comm),
                    ));
                }
                let key = Key {
                    peer,
                    seq: h.seq,
                    tag: h.tag,
                };
                if !is_p2p_seq(h.seq) && self.last_done.is_some_and(|d| h.seq <= d) {
                    return Err(self.protocol(
                        peer,
                        format!(
                            "message for op #{} which already finished here (tag {})",
                            h.seq, h.tag
                        ),
                    ));
                }
                let running = op.as_ref().map(|(c, i, _)| (c.seq, &i.sig));
                match self.matcher.on_header(key, h.len, &h.sig, running) {
                    Ok(HeaderAction::Complete(step)) => {
                        self.completions.push_back(Completion { seq: h.seq, step });
                        Ok(())
                    }
                    Ok(HeaderAction::Stream | HeaderAction::Kept) => Ok(()),
                    Err(e) => {
                        let info = op.as_ref().map(|(_, i, _)| *i);
                        Err(self.match_error(e, &name, peer, h.seq, info))
                    }
                }
            }
            Event::Chunk { peer, data, permit } => {
                let n = data.len() as u64;
                match self.matcher.on_chunk(peer, (data, permit), n, op.is_some()) {
                    Ok(ChunkAction::Place {
                        chunk: (data, permit),
                        kind,
                        offset,
                        step,
                        done,
                    }) => {
                        let Some((ctx, _, bufs)) = op.as_mut() else {
                            return Ok(());
                        };
                        apply(bufs, ctx.dtype, kind, offset, &data)?;
                        drop(permit);
                        self.recycle(peer, data);
                        if done {
                            let seq = ctx.seq;
                            self.completions.push_back(Completion { seq, step });
                        }
                        Ok(())
                    }
                    Ok(ChunkAction::Kept | ChunkAction::Unused(_)) => Ok(()),
                    Err(e) => Err(self.match_error(e, &name, peer, cur_seq.unwrap_or(0), None)),
                }
            }
            Event::Piece {
                peer,
                desc,
                permit,
                seq,
                tag,
                msg_len,
                before,
            } => {
                if self.health.is_withdrawn(peer) {
                    return Ok(()); // its op failed: wait for its abort
                }
                let Some(pid) = self.peers[peer as usize].cma_pid else {
                    return Err(self.protocol(peer, "cross-memory piece without a probe".into()));
                };
                if !self.matcher.receiving(peer) {
                    return Ok(());
                }
                // A plain receive that is posted: straight into its region.
                let direct = match self.matcher.direct(peer, desc.len, op.is_some()) {
                    Ok(d) => d,
                    Err(e) => return Err(self.match_error(e, &name, peer, seq, None)),
                };
                if let (Some(region), Some((ctx, _, bufs))) = (direct, op.as_mut()) {
                    let into = bufs.get_mut(region)?;
                    // On an error the bytes that landed are not counted:
                    // the op fails.
                    if let Err(e) = cma::read_lent(pid, &desc, into) {
                        let at = (before, msg_len);
                        return self.piece_failed(&name, cur_seq, peer, desc, e, at);
                    }
                    drop(permit);
                    self.cma_stats.bytes_read += desc.len;
                    self.cma_stats.bytes_read_direct += desc.len;
                    let seq = ctx.seq;
                    self.send_ack(peer, desc, seq, tag);
                    if let Some(step) = self.matcher.advance(peer, desc.len) {
                        self.completions.push_back(Completion { seq, step });
                    }
                    return Ok(());
                }
                // Otherwise into a chunk, then as over TCP.
                let mut data = self.chunk_pool.take();
                // Shrinking a reused chunk zeroes nothing.
                data.resize(desc.len as usize, 0);
                if let Err(e) = cma::read_lent(pid, &desc, &mut data) {
                    self.chunk_pool.give(data);
                    let at = (before, msg_len);
                    return self.piece_failed(&name, cur_seq, peer, desc, e, at);
                }
                self.cma_stats.bytes_read += desc.len;
                self.send_ack(peer, desc, seq, tag);
                self.handle(Event::Chunk { peer, data, permit }, op)
            }
            Event::OpStart { peer, h } => {
                if h.comm != self.comm {
                    return Err(self.protocol(
                        peer,
                        format!("op start for comm {:#x} on comm {:#x}", h.comm, self.comm),
                    ));
                }
                let running = op.as_ref().map(|(c, i, _)| (c.seq, &i.sig));
                match self.starts.on_frame(peer, h.seq, h.tag, &h.sig, running) {
                    Ok(()) => Ok(()),
                    Err(StartError::TooMany) => Err(self.protocol(
                        peer,
                        format!("more than {MAX_EARLY_MESSAGES} op starts pending"),
                    )),
                    Err(StartError::Mismatch { peer, sig }) => {
                        let describe = op.as_ref().map(|(_, i, _)| i.describe);
                        Err(TcpError::Mismatch {
                            op: name,
                            seq: h.seq,
                            detail: describe.map_or_else(String::new, |d| d(&sig, peer)),
                        })
                    }
                }
            }
            Event::Abort { peer, seq, reason } => {
                self.peers[peer as usize]
                    .dead
                    .get_or_insert_with(|| "it aborted".into());
                self.health.on_peer_abort(peer, seq, reason, cur_seq, &name)
            }
            Event::CmaAck { peer, desc } => {
                let p = &mut self.peers[peer as usize];
                let done = match p.sends.on_ack(desc) {
                    Ok(done) => done,
                    Err(what) => return Err(self.protocol(peer, what)),
                };
                if let Some((_, _, bufs)) = op.as_ref() {
                    self.fill_sends(peer, bufs)?;
                }
                // The message's last ack: the peer has read all of it, so
                // the send step completes (the region may be written now).
                if let Some((seq, step)) = done {
                    self.send_complete(peer, seq, step, cur_seq);
                }
                Ok(())
            }
            Event::SendDone {
                peer,
                seq,
                step,
                buf,
            } => {
                if self.send_pool.len() < SEND_POOL && buf.capacity() >= 64 << 10 {
                    self.send_pool.push(buf);
                }
                let p = &mut self.peers[peer as usize];
                p.sends.on_written();
                if let Some((_, _, bufs)) = op.as_ref() {
                    self.fill_sends(peer, bufs)?;
                }
                if let Some(step) = step {
                    self.send_complete(peer, seq, step, cur_seq);
                }
                Ok(())
            }
            Event::Closed {
                peer,
                reason,
                graceful,
            } => {
                let p = &mut self.peers[peer as usize];
                p.dead = Some(reason.clone());
                p.tx = None;
                let waiting = p.sends.in_progress() > 0
                    || self.matcher.receiving(peer)
                    || self.matcher.posted_from(peer);
                match on_closed(graceful, waiting, cur_seq.is_some()) {
                    Closed::Fine => Ok(()),
                    Closed::Lost => Err(self.lost(&name, cur_seq.unwrap_or(0), peer)),
                    Closed::BetweenOps => {
                        tracing::warn!(
                            "hccl rank {}: lost rank {peer} between ops: {reason}",
                            self.rank
                        );
                        Ok(())
                    }
                }
            }
            Event::SendFailed { peer, reason } => {
                let p = &mut self.peers[peer as usize];
                p.tx = None;
                tracing::debug!("hccl rank {}: writing to rank {peer}: {reason}", self.rank);
                Ok(())
            }
            Event::LocalAbort(reason) => Err(self.health.on_local_abort(reason)),
            Event::Protocol { peer, error } => {
                self.peers[peer as usize].dead = Some(format!("protocol error: {error}"));
                Err(TcpError::Protocol {
                    from: format!("rank {peer}"),
                    error,
                })
            }
        }
    }

    /// A message to `peer` is done (written, or lent and fully acked):
    /// completes its send step if it belongs to the running op `cur_seq`.
    fn send_complete(&mut self, peer: u32, seq: u64, step: StepId, cur_seq: Option<u64>) {
        let p = &mut self.peers[peer as usize];
        p.sends.complete(seq, step);
        if cur_seq == Some(seq) {
            self.completions.push_back(Completion { seq, step });
        }
    }

    /// Gives a consumed chunk back: to the pool shared with the fast-path
    /// readers for a same-host peer, else to the peer's reader.
    fn recycle(&mut self, peer: u32, data: Vec<u8>) {
        if self.peers[peer as usize].cma_pid.is_some() {
            self.chunk_pool.give(data);
        } else if let Some(tx) = &self.peers[peer as usize].recycle {
            let _ = tx.send(data);
        }
    }

    /// Tells `peer` that its piece `desc` has been copied out.
    fn send_ack(&mut self, peer: u32, desc: PieceDesc, seq: u64, tag: u32) {
        let h = FrameHeader {
            kind: FrameKind::CmaAck,
            session: self.session,
            comm: self.comm,
            seq,
            tag,
            len: PIECE_DESC_LEN as u64,
            sig: [0; 32],
        };
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&desc.encode());
        self.queue_frame(peer, Outgoing::Ack(bytes));
    }

    /// A piece `desc` of `peer`'s could not be used (`at`: the message's
    /// bytes before it and its length): after a failed read (the peer's
    /// process gone, or a bad address) or with a withdrawn loan (the peer's
    /// op failed) this rank discards the bytes, stops reading from the
    /// peer, and waits up to [`WITHDRAWN_GRACE`] for an abort frame that
    /// names the peer's error, else fails with the peer lost or
    /// [`TcpError::LenderFailed`] (see [`TcpOp`]'s waits).
    ///
    /// # Errors
    /// None today (the failure comes from the wait).
    fn piece_failed(
        &mut self,
        name: &str,
        seq: Option<u64>,
        peer: u32,
        desc: PieceDesc,
        e: LentReadError,
        (before, msg_len): (u64, u64),
    ) -> Result<(), TcpError> {
        let pid = self.peers[peer as usize].cma_pid.unwrap_or(0);
        let found = match e {
            LentReadError::Read(e) => {
                // The peer's process may be gone because its op failed and
                // it exited at once: its abort frame, which names the
                // cause, is then still in the socket. Like a withdrawn
                // loan, wait for it (or the close) up to WITHDRAWN_GRACE
                // before reporting the peer lost.
                let why = cma_failure(desc, pid, &e, before, msg_len);
                tracing::warn!("hccl rank {}: rank {peer}: {why}", self.rank);
                let mut e = self.lost(name, seq.unwrap_or(0), peer);
                if let TcpError::PeerLost { reason, .. } = &mut e {
                    *reason = why;
                }
                self.peers[peer as usize].cma_pid = None;
                self.matcher.stop_receiving(peer);
                self.health
                    .withdraw(peer, e, Instant::now() + WITHDRAWN_GRACE);
                return Ok(());
            }
            LentReadError::Withdrawn { found } => found,
        };
        let e = TcpError::LenderFailed {
            op: name.to_string(),
            seq: seq.unwrap_or(0),
            rank: self.rank,
            peer,
            len: desc.len,
            word: desc.word,
            expected: desc.expected,
            found,
        };
        tracing::debug!("hccl rank {}: {e}", self.rank);
        (self.health).withdraw(peer, e, Instant::now() + WITHDRAWN_GRACE);
        Ok(())
    }

    /// The error for a message or receive the matcher refused, for op
    /// `name` `seq` (whose `info` describes a signature disagreement).
    fn match_error(
        &mut self,
        e: MatchError,
        name: &str,
        peer: u32,
        seq: u64,
        info: Option<&OpInfo<'_>>,
    ) -> TcpError {
        match e {
            MatchError::Mismatch { peer, sig } => match info {
                Some(info) => TcpError::Mismatch {
                    op: name.to_string(),
                    seq,
                    detail: (info.describe)(&sig, peer),
                },
                None => self.protocol(peer, e.to_string()),
            },
            MatchError::Length {
                peer,
                tag,
                expected,
                received,
            } => TcpError::LengthMismatch {
                op: name.to_string(),
                seq,
                rank: self.rank,
                peer,
                tag,
                expected,
                received,
            },
            MatchError::TooManyEarly | MatchError::Duplicate { .. } => {
                self.protocol(peer, e.to_string())
            }
            MatchError::TwoReceives { .. } | MatchError::Overflow { .. } => {
                TcpError::InvalidArgument(e.to_string())
            }
        }
    }

    fn protocol(&mut self, peer: u32, what: String) -> TcpError {
        tracing::warn!(
            "hccl rank {}: protocol error from rank {peer}: {what}",
            self.rank
        );
        self.peers[peer as usize].dead = Some(what.clone());
        TcpError::InvalidArgument(format!(
            "rank {peer} sent a frame this rank cannot place: {what}"
        ))
    }

    /// The error for a lost `peer` during op `seq`, with the bytes this
    /// rank was waiting for from it.
    fn lost(&self, name: &str, seq: u64, peer: u32) -> TcpError {
        let receiving = self.matcher.posted_from(peer);
        let sending = self.peers[peer as usize].sends.oldest();
        self.lost_sending(name, seq, peer, sending.filter(|_| !receiving))
    }

    /// [`TcpRank::lost`] for a send of `sending` bytes, if `Some`.
    fn lost_sending(&self, name: &str, seq: u64, peer: u32, sending: Option<u64>) -> TcpError {
        // A posted receive, else the message arriving early when it broke.
        let (expected, received) = self.matcher.progress_from(peer).unwrap_or((0, 0));
        let (expected, received) = sending.map_or((expected, received), |n| (n, 0));
        TcpError::PeerLost {
            op: name.to_string(),
            seq,
            rank: self.rank,
            peer,
            expected,
            received,
            sending: sending.is_some(),
            reason: self.peers[peer as usize].dead.clone().unwrap_or_default(),
        }
    }
}

/// Runs the cross-memory probe exchange ([`cma::exchange`]) on every peer
/// connection at once and returns the connections with what each settled.
fn probe_peers(
    runtime: &tokio::runtime::Runtime,
    cfg: &TcpConfig,
    streams: Vec<Option<tokio::net::TcpStream>>,
    session: SessionId,
    comm: u64,
    rank: u32,
) -> Result<(Vec<Option<tokio::net::TcpStream>>, Vec<cma::PeerCma>), TcpError> {
    // Lives until every exchange is over: peers read it before answering.
    let token = Token::new(session);
    let mine = token.probe(cfg.intra_cma && cma::AVAILABLE);
    let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
    let results = runtime.block_on(async {
        let tasks: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(p, s)| {
                s.map(|mut s| {
                    tokio::spawn(async move {
                        let r = tokio::time::timeout_at(
                            deadline,
                            cma::exchange(&mut s, mine, session, comm, p as u32),
                        )
                        .await;
                        (s, r)
                    })
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(match t {
                Some(t) => Some(t.await),
                None => None,
            });
        }
        out
    });
    drop(token);
    let mut streams = Vec::new();
    let mut settled = Vec::new();
    for (p, r) in results.into_iter().enumerate() {
        let Some(r) = r else {
            streams.push(None);
            settled.push(cma::PeerCma::default());
            continue;
        };
        let (s, r) = r.map_err(|e| TcpError::io("cross-memory probe task", e))?;
        let reason = match r {
            Ok(Ok(c)) => {
                streams.push(Some(s));
                settled.push(c);
                continue;
            }
            Ok(Err(e)) => e,
            Err(_) => "no answer within HCCL_CONNECT_TIMEOUT".to_string(),
        };
        return Err(TcpError::PeerConnect {
            rank,
            peer: p as u32,
            addr: s
                .peer_addr()
                .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
            reason: format!("cross-memory probe exchange: {reason}"),
        });
    }
    Ok((streams, settled))
}

impl Drop for TcpRank {
    fn drop(&mut self) {
        self.shutdown(true);
    }
}

/// The words of a failed piece copy, for [`TcpError::PeerLost`].
fn cma_failure(desc: PieceDesc, pid: u32, e: &cma::ReadError, before: u64, len: u64) -> String {
    format!(
        "cross-memory read of {} bytes at {:#x} from pid {pid} failed after {} bytes: {}; {before} of {len} bytes of the message were read",
        desc.len, desc.addr, e.got, e.reason
    )
}

/// Applies `data`, the bytes of a message from `offset` on, to the
/// receive's regions `kind`.
fn apply(
    bufs: &mut OpBuffers<'_>,
    dtype: hccl_algos::DataType,
    kind: RecvKind,
    offset: u64,
    data: &[u8],
) -> Result<(), TcpError> {
    let n = data.len() as u64;
    let sub = |r: Region| Region::new(r.buf, r.offset + offset, n);
    match kind {
        RecvKind::Copy { dst } => bufs.get_mut(sub(dst))?.copy_from_slice(data),
        RecvKind::Reduce { local, dst, op } => {
            bufs.reduce_pair_from(dtype, op, sub(local), sub(dst), data)?;
        }
    }
    Ok(())
}

/// One op in progress on a [`TcpRank`]: the [`Transport`] the executor
/// drives. Owns (borrows) the op's buffers for its lifetime.
pub struct TcpOp<'r, 'a> {
    rank: &'r mut TcpRank,
    ctx: OpContext,
    info: &'a OpInfo<'a>,
    bufs: OpBuffers<'a>,
    deadline: Option<Instant>,
    /// The consistency check: agreed yet, the steps it holds back.
    check: OpCheck,
}

impl std::fmt::Debug for TcpOp<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpOp").field("ctx", &self.ctx).finish()
    }
}

impl TcpOp<'_, '_> {
    fn header(&self, kind: FrameKind, tag: u32, len: u64) -> FrameHeader {
        FrameHeader {
            kind,
            session: self.rank.session,
            comm: self.rank.comm,
            seq: self.ctx.seq,
            tag,
            len,
            sig: self.info.sig,
        }
    }

    fn handle(&mut self, ev: Event) -> Result<(), TcpError> {
        let start = matches!(ev, Event::OpStart { .. });
        self.rank
            .handle(ev, Some((&self.ctx, self.info, &mut self.bufs)))?;
        if start && !self.check.agreed() {
            self.check_starts()?;
        }
        Ok(())
    }

    /// Compares the peers' signatures that have arrived for this op with
    /// this rank's; once all have and agree, tells every peer so, restarts
    /// the deadline and runs the steps held back (see the module docs).
    ///
    /// # Errors
    /// [`TcpError::Mismatch`] naming the first peer that differs.
    fn check_starts(&mut self) -> Result<(), TcpError> {
        if self.check.agreed() {
            return Ok(());
        }
        let (me, n, seq) = (self.rank.rank, self.rank.nranks, self.ctx.seq);
        match self.rank.starts.check(me, n, seq, &self.info.sig) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(StartError::Mismatch { peer, sig }) => {
                return Err(TcpError::Mismatch {
                    op: self.info.name.to_string(),
                    seq,
                    detail: (self.info.describe)(&sig, peer),
                })
            }
            Err(StartError::TooMany) => return Ok(()),
        }
        let (say_agreed, deferred) = self.check.agree();
        if say_agreed {
            self.tell_peers(AGREED_TAG);
        }
        if let Some(t) = self.rank.cfg.exec_timeout {
            self.deadline = Some(Instant::now() + t);
        }
        for (step, op) in deferred {
            self.run_step(step, &op)?;
        }
        Ok(())
    }

    /// Queues an op-start frame with `tag` for every peer (held back to
    /// leave with the next message, see [`Peer::op_start`]).
    fn tell_peers(&mut self, tag: u32) {
        let h = self.header(FrameKind::OpStart, tag, 0).encode();
        let me = self.rank.rank;
        for p in (0..self.rank.nranks).filter(|&p| p != me) {
            let held = self.rank.peers[p as usize]
                .op_start
                .get_or_insert_with(Vec::new);
            held.extend_from_slice(&h);
        }
    }

    /// The ranks whose signature for this op has not arrived here.
    fn not_started(&self) -> Vec<u32> {
        let r = &*self.rank;
        r.starts.missing(r.rank, r.nranks, self.ctx.seq)
    }

    fn pump_nonblocking(&mut self) -> Result<(), TcpError> {
        while let Some(ev) = self.rank.next_event(Some(Duration::ZERO)) {
            self.handle(ev)?;
        }
        Ok(())
    }

    /// Runs the I/O until one event arrives or the op's deadline passes.
    fn pump_one(&mut self) -> Result<(), TcpError> {
        // A peer gone before its signature came never will send it (a
        // peer that finished the op sent it and its agreement first).
        if !self.check.agreed() {
            let gone = self
                .not_started()
                .into_iter()
                .find(|&p| self.rank.peers[p as usize].dead.is_some());
            if let Some(p) = gone {
                return Err(self.rank.lost(self.info.name, self.ctx.seq, p));
            }
        }
        if self.check.late_due(Instant::now()) {
            self.tell_peers(LATE_TAG);
        }
        // A peer whose loan was withdrawn and whose abort has not come.
        if let Some(e) = self.rank.health.grace_over(Instant::now()) {
            return Err(e);
        }
        let grace = self.rank.health.grace().map(|w| w.1);
        let late = self.check.late_at();
        let until = [self.deadline, grace, late].into_iter().flatten().min();
        let wait = until.map(|d| d.saturating_duration_since(Instant::now()));
        match self.rank.next_event(wait) {
            Some(ev) => self.handle(ev),
            None if self.deadline.is_some_and(|d| Instant::now() >= d) => Err(self.timeout_error()),
            None if until.is_some() => Ok(()),
            None => Err(self.all_gone()),
        }
    }

    /// Every connection ended and nothing more can arrive.
    fn all_gone(&self) -> TcpError {
        match self.rank.matcher.posted().next() {
            Some((peer, ..)) => self.rank.lost(self.info.name, self.ctx.seq, peer),
            None => TcpError::io(
                format!("{} {}", self.info.name, super::error::OpSeq(self.ctx.seq)),
                "every peer connection is closed",
            ),
        }
    }

    fn timeout_error(&self) -> TcpError {
        let r = &*self.rank;
        let seq = self.ctx.seq;
        let full = (0..r.nranks).find_map(|p| {
            let b = r.peers[p as usize].budget.as_ref()?;
            (b.held() >= b.capacity()).then(|| (p, b.held(), b.capacity()))
        });
        let agreed = self.check.agreed();
        let stall = Stall {
            full,
            posted: r.matcher.posted().collect(),
            missing: if agreed {
                Vec::new()
            } else {
                self.not_started()
            },
            unconfirmed: if is_p2p_seq(seq) {
                Vec::new()
            } else {
                r.starts.unconfirmed(r.nranks, seq).collect()
            },
            sends: (r.peers.iter().enumerate())
                .filter(|(_, p)| p.sends.in_progress() > 0)
                .map(|(p, peer)| (p as u32, peer.sends.in_progress()))
                .collect(),
        };
        let secs = r.cfg.exec_timeout.map_or(0.0, |t| t.as_secs_f64());
        failure::timeout_error(self.info.name, seq, r.rank, r.nranks, secs, stall)
    }

    fn check_peer(&self, peer: Rank) -> Result<(), TcpError> {
        if peer >= self.rank.nranks || peer == self.rank.rank {
            return Err(TcpError::InvalidArgument(format!(
                "step names peer {peer} (this is rank {} of {})",
                self.rank.rank, self.rank.nranks
            )));
        }
        Ok(())
    }

    fn post_recv(
        &mut self,
        step: StepId,
        peer: Rank,
        tag: u32,
        kind: RecvKind,
        len: u64,
    ) -> Result<(), TcpError> {
        self.check_peer(peer)?;
        let key = Key {
            peer,
            seq: self.ctx.seq,
            tag,
        };
        let sig = &self.info.sig;
        match self.rank.matcher.post(key, step, kind, len, sig) {
            Err(e) => {
                let seq = self.ctx.seq;
                return Err(self
                    .rank
                    .match_error(e, self.info.name, peer, seq, Some(self.info)));
            }
            Ok(PostAction::Early { chunks, complete }) => {
                let mut offset = 0;
                for (data, permit) in chunks {
                    apply(&mut self.bufs, self.ctx.dtype, kind, offset, &data)?;
                    offset += data.len() as u64;
                    drop(permit);
                    self.rank.recycle(peer, data);
                }
                if complete {
                    self.rank.completions.push_back(Completion {
                        seq: self.ctx.seq,
                        step,
                    });
                    return Ok(());
                }
            }
            Ok(PostAction::Wait) => {}
        }
        if self.rank.peers[peer as usize].dead.is_some() {
            return Err(self.rank.lost(self.info.name, self.ctx.seq, peer));
        }
        Ok(())
    }

    /// Completes the op on this rank: waits for every peer's signature and
    /// for every peer's word that all signatures agree (the consistency
    /// check, see the module docs), then retires the op. A p2p op
    /// ([`P2P_SEQ_BIT`]) has no op-start frames and retires at once.
    ///
    /// # Errors
    /// [`TcpError::Mismatch`], timeouts, peer failures.
    pub fn finish(&mut self) -> Result<(), TcpError> {
        let seq = self.ctx.seq;
        if is_p2p_seq(seq) {
            // Only two ranks take part: no op-start ring, and the
            // communicator-wide seq is not consumed.
            self.pump_nonblocking()?;
            return self.wait_lent();
        }
        self.rank.flush_op_start();
        let me = self.rank.rank;
        // Every peer's signature (the consistency check).
        while !self.check.agreed() {
            match self.not_started().first() {
                None => self.check_starts()?,
                Some(&p) if self.rank.peers[p as usize].dead.is_some() => {
                    return Err(self.rank.lost(self.info.name, seq, p))
                }
                Some(_) => self.pump_one()?,
            }
        }
        // This rank's agreement may still be held back: send it.
        self.rank.flush_op_start();
        // A mismatched frame, or a peer's word that it is late, may still
        // be queued: look once more.
        self.pump_nonblocking()?;
        // The agreement of every peer that said it was late.
        loop {
            let unconfirmed = (self.rank.starts)
                .unconfirmed(self.rank.nranks, seq)
                .find(|&p| p != me);
            let Some(p) = unconfirmed else { break };
            if self.rank.peers[p as usize].dead.is_some() {
                return Err(self.rank.lost(self.info.name, seq, p));
            }
            self.pump_one()?;
        }
        self.wait_lent()?;
        self.rank.starts.retire(seq);
        self.rank.last_done = Some(seq);
        Ok(())
    }

    /// Waits until no piece of this op's buffers is lent: an op may not
    /// succeed while a peer could still read them. Every send step of a
    /// finished plan completed with its acks, so this only waits for a
    /// caller that finishes early.
    ///
    /// # Errors
    /// Timeouts and peer failures, as any wait.
    fn wait_lent(&mut self) -> Result<(), TcpError> {
        while self.rank.peers.iter().any(|p| p.sends.lent() > 0) {
            self.pump_one()?;
        }
        Ok(())
    }

    /// Fails the op: tells every live peer (unless the error came from a
    /// peer's abort), withdraws every piece of its buffers lent to a peer
    /// (poisons the lend word, then a fence: see [`super::cma`]), records
    /// the error, and returns it.
    pub fn fail(&mut self, e: TcpError) -> TcpError {
        self.rank.flush_op_start();
        // A byte-stream message already started on a connection must be
        // finished, or the abort frame would land inside its payload; the
        // rest are dropped. A cross-memory message is simply cut (its
        // pieces are whole frames; the peer's reader takes an abort
        // between them), so no more of its buffer is lent.
        for p in 0..self.rank.nranks {
            if self.rank.peers[p as usize].sends.cut() {
                while self.rank.peers[p as usize].sends.has_pieces() {
                    if self.rank.fill_sends(p, &self.bufs).is_err() {
                        break;
                    }
                    self.rank.peers[p as usize].sends.open_window();
                }
            }
            self.rank.peers[p as usize].sends.drop_pending();
        }
        if let Some(t) = self.rank.health.on_op_failed(&e, self.ctx.seq) {
            self.rank.broadcast_abort(t.seq, &t.reason);
        }
        // The caller may rewrite its buffers as soon as this returns, and
        // a peer may still hold descriptors of them: withdraw them now.
        // After the aborts, so that a peer that finds the word poisoned
        // has this rank's reason on its way (see WITHDRAWN_GRACE).
        self.rank.lend_word.poison();
        self.rank.matcher.clear_posted();
        e
    }
}

impl Drop for TcpOp<'_, '_> {
    /// The op's buffers go back to the caller: withdraw anything still
    /// lent (a no-op after [`TcpOp::fail`], and after a successful
    /// [`TcpOp::finish`] nothing is lent). An op dropped with pieces lent
    /// (never finished nor failed) breaks the communicator: their acks and
    /// completions would land in a later op.
    fn drop(&mut self) {
        self.rank.lend_word.poison();
        let lent: usize = self.rank.peers.iter().map(|p| p.sends.lent()).sum();
        if lent > 0 && self.rank.health.broken().is_none() {
            self.rank.health.break_with(TcpError::Broken(format!(
                "{} {} was dropped with {lent} piece(s) of its buffers lent to peers",
                self.info.name,
                super::error::OpSeq(self.ctx.seq)
            )));
        }
    }
}

impl TcpOp<'_, '_> {
    /// Runs (or, for a receive, posts) step `step` of this op.
    fn run_step(&mut self, step: StepId, op: &Op) -> Result<(), TcpError> {
        match *op {
            Op::Send { peer, tag, src } => {
                self.check_peer(peer)?;
                self.bufs.check(src)?;
                let header = self.header(FrameKind::Data, tag, src.len);
                let r = &mut *self.rank;
                let p = &mut r.peers[peer as usize];
                if p.dead.is_some() || p.tx.is_none() {
                    return Err(r.lost_sending(self.info.name, self.ctx.seq, peer, Some(src.len)));
                }
                p.sends.push(self.ctx.seq, step, src, header);
                r.fill_sends(peer, &self.bufs)?;
            }
            Op::Recv { peer, tag, dst } => {
                self.bufs.check_writable(dst)?;
                self.post_recv(step, peer, tag, RecvKind::Copy { dst }, dst.len)?;
            }
            Op::RecvReduce {
                peer,
                tag,
                local,
                dst,
                op,
            } => {
                self.bufs.check(local)?;
                self.bufs.check_writable(dst)?;
                if local.len != dst.len {
                    return Err(TcpError::InvalidArgument(format!(
                        "recv-reduce local {local:?} and dst {dst:?} differ in length"
                    )));
                }
                self.post_recv(
                    step,
                    peer,
                    tag,
                    RecvKind::Reduce { local, dst, op },
                    dst.len,
                )?;
            }
            Op::Copy { src, dst } => {
                self.bufs.copy(src, dst)?;
                self.rank.completions.push_back(Completion {
                    seq: self.ctx.seq,
                    step,
                });
            }
            Op::LocalReduce { src, dst, op } => {
                self.bufs.reduce(self.ctx.dtype, op, src, dst)?;
                self.rank.completions.push_back(Completion {
                    seq: self.ctx.seq,
                    step,
                });
            }
            Op::Divide { dst, divisor } => {
                self.bufs.divide(self.ctx.dtype, dst, divisor)?;
                self.rank.completions.push_back(Completion {
                    seq: self.ctx.seq,
                    step,
                });
            }
        }
        Ok(())
    }
}

impl Transport for TcpOp<'_, '_> {
    type Error = TcpError;

    fn post(&mut self, ctx: &OpContext, step: StepId, op: &Op) -> Result<(), TcpError> {
        if ctx.seq != self.ctx.seq {
            return Err(TcpError::InvalidArgument(format!(
                "step of op #{} posted to op #{}",
                ctx.seq, self.ctx.seq
            )));
        }
        if self.check.hold(step, op) {
            return Ok(());
        }
        self.run_step(step, op)
    }

    fn poll_completion(&mut self) -> Result<Option<Completion>, TcpError> {
        // Only what is already queued: running the I/O here (several
        // scheduler passes, each an epoll_wait) after every completion cost
        // more than the small messages it waited for; the next
        // wait_completion runs the I/O tasks anyway.
        Ok(self.rank.completions.pop_front())
    }

    fn wait_completion(&mut self) -> Result<Completion, TcpError> {
        loop {
            if let Some(c) = self.rank.completions.pop_front() {
                return Ok(c);
            }
            self.pump_one()?;
        }
    }

    fn now(&self) -> Duration {
        self.rank.start.elapsed()
    }
}
