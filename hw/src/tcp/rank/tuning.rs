//! The TCP transport's tuning: bounds, piece sizes, windows, waits (each
//! with the measurement behind it).

use std::time::Duration;

use crate::tcp::wire::{MAX_CMA_PIECE, MAX_INLINE_ON_CMA};

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
/// Largest byte-stream payload a rank sends on a ring link
/// ([`crate::shm`]) when its host runs no more ranks than CPUs; longer
/// messages go as lent pieces. Each peer is then running, so a piece's
/// ack comes back at once, and one copy (the peer's `process_vm_readv`)
/// beats two (into the ring and out of it) from a few KiB. Session 16
/// (Intel Xeon VM, 2 processes, `tcp_allreduce_bench`, 5-7 interleaved
/// rounds, medians): bound 32 → 16 KiB took 32 KiB from 19.0 to 14.1 µs,
/// 16 → 8 KiB took 16 KiB from 12.0 to 10.5 µs, and 8 → 4 KiB made 8 KiB
/// slower (8.9 → 9.8 µs). Oversubscribed hosts keep
/// [`MAX_INLINE_ON_RINGS`](crate::tcp::wire::MAX_INLINE_ON_RINGS), and
/// in-place ops [`MAX_INLINE_ON_CMA`] (they lent 16-32 KiB 1.2-1.35× slower
/// than they sent it as bytes: `TcpRank::fill_sends`).
pub const INLINE_ON_RINGS_FIT: u64 = 8 << 10;
const _: () = assert!(INLINE_ON_RINGS_FIT <= MAX_INLINE_ON_CMA);
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
pub(super) const SEND_POOL: usize = 16;
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
/// While a rank whose peers are all on shared-memory rings spins, it
/// runs a scheduler pass (which polls `epoll`: a system call) only when a
/// ring has something for its tasks, or after this long without one, so
/// that a peer's end on its socket is still seen while nothing moves.
pub const RING_PASS: Duration = Duration::from_micros(100);
/// Largest op (bytes of its input or output) for which a waiting rank whose peers are all
/// on rings reads them by polling their readers itself instead of a
/// scheduler pass (`TcpRank::look_without_pass`; a pass polls epoll, a
/// system call). Measured with `hccl test --transport tcp --spawn N`,
/// interleaved against the build without it (2-core VM, medians of 7-15
/// runs, 300 ops each), time per op new/old: 2 processes 8-128 KiB
/// 0.59-0.92 (8 KiB 9.3 → 5.5 µs; system calls per rank-op 6.4 → ~1),
/// 256-512 KiB 0.94-1.08 (level within the runs' spread), 1 MiB 1.06
/// and 2 MiB 1.15 (16 and 18 of 25 pairs slower; the cause is not found:
/// the same events arrive, no more system calls); 4 processes 8-512 KiB
/// 0.6-0.91, 1-4 MiB level. Ops above this keep the passes.
pub const LOOK_HERE_MAX: usize = 512 << 10;
/// Longest a failing op waits for its abort frames to be written.
pub const ABORT_FLUSH: Duration = Duration::from_secs(1);
/// How long a rank that found a peer's loan withdrawn (the peer's op
/// failed while lending; see [`crate::tcp::cma`]) waits for that peer's abort
/// frame, which names the original error, before it fails its op with
/// [`TcpError::LenderFailed`](crate::tcp::TcpError::LenderFailed). The failing peer writes its aborts before
/// it withdraws, so the frame is normally there already.
pub const WITHDRAWN_GRACE: Duration = ABORT_FLUSH;
