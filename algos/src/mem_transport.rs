//! An in-memory fabric: every rank's executor in one thread, real bytes.
//!
//! [`MemFabric`] runs one collective on N ranks. Each rank has its own user
//! memory (input and output placed as [`Placement`] says, so in-place calls
//! really alias) and scratch, sized by the plan's [`BufferSizes`]. It drives
//! the ranks' [`Executor`]s directly (no [`crate::transport::Transport`]
//! object per rank: the fabric is the transport of all of them):
//!
//! - A posted `Send` and the peer's `Recv`/`RecvReduce` match by
//!   `(comm, seq, sender, receiver, tag)`. Rendezvous semantics: neither
//!   completes before both are posted; then the bytes move at once (read
//!   from the sender, written or reduced into the receiver) and both
//!   complete together.
//! - Local steps (`Copy`, `LocalReduce`, `Divide`) are ready once posted.
//! - Ready work is executed one item at a time in posting order
//!   ([`Order::Fifo`]) or in a seeded pseudo-random order
//!   ([`Order::Shuffled`]), so tests can try many arrival orders while
//!   staying reproducible. No clock, no threads.
//!
//! Every region is bounds-checked against its buffer's declared size; a
//! length mismatch between a send and its receive, a duplicate tag, a step
//! naming a rank outside the communicator, a partial overlap in a `Copy`,
//! or a deadlock (no ready work while ranks are unfinished) is a
//! [`MemError`] naming rank, step and values. Nothing here panics on a bad
//! schedule.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;

use crate::algo::{self, AlgoError, AlgoSpec};
use crate::collective::CollectiveArgs;
use crate::dtype::DataType;
use crate::exec::{ExecError, Executor, DEFAULT_WINDOW};
use crate::kernels::{self, KernelError};
use crate::layout::GroupLayout;
use crate::schedule::{BufKind, BufferSizes, Op, Rank, RankPlan, Region, StepId};

/// Where a rank's input and output buffers start in its one user address
/// space, in bytes. Separate buffers have disjoint ranges; an in-place call
/// overlaps them (e.g. AllGather: the input is the rank's slot of the output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Byte where the input buffer starts.
    pub input_at: u64,
    /// Byte where the output buffer starts.
    pub output_at: u64,
}

impl Placement {
    /// Input then output, not overlapping.
    pub fn separate(buffers: &BufferSizes) -> Placement {
        Placement {
            input_at: 0,
            output_at: buffers.input,
        }
    }
}

/// One rank's part of a run: its plan, buffer sizes, input bytes and placement.
pub struct MemRank {
    /// The rank's lazy plan.
    pub plan: RankPlan,
    /// Buffer sizes the plan assumes.
    pub buffers: BufferSizes,
    /// The input bytes; its length must equal `buffers.input`.
    pub input: Vec<u8>,
    /// Where input and output sit (see [`Placement`]).
    pub placement: Placement,
}

/// In which order ready work (matched transfers, posted local steps) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Fifo,
    /// A seeded pseudo-random choice each time: a reproducible arrival order.
    Shuffled(u64),
}

/// Options of a [`MemFabric`] run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemOptions {
    /// Order of ready work.
    pub order: Order,
    /// Executor window (steps pulled but not completed), see [`Executor::with_window`].
    pub window: usize,
    /// Communicator id used in message keys.
    pub comm: u64,
    /// Op sequence number used in message keys.
    pub seq: u64,
    /// Seed of the bytes output and scratch buffers start with (garbage on
    /// purpose, so a schedule that reads what it never wrote is caught).
    pub fill_seed: u64,
}

impl Default for MemOptions {
    fn default() -> Self {
        MemOptions {
            order: Order::Fifo,
            window: DEFAULT_WINDOW,
            comm: 0,
            seq: 0,
            fill_seed: 0x5EED,
        }
    }
}

/// Error of an in-memory run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// The number of input buffers differs from the number of ranks.
    #[error("{got} input buffers for {world} ranks; give one per rank")]
    InputCount {
        /// Buffers given.
        got: usize,
        /// Ranks.
        world: usize,
    },
    /// A rank's input has the wrong size for its plan.
    #[error("rank {rank}: input is {got} bytes, the plan expects {want}")]
    InputSize {
        /// The rank.
        rank: Rank,
        /// Bytes given.
        got: u64,
        /// Bytes the plan's [`BufferSizes::input`] says.
        want: u64,
    },
    /// A buffer does not fit in this process's memory.
    #[error("rank {rank}: {what} of {bytes} bytes does not fit in memory")]
    TooLarge {
        /// The rank.
        rank: Rank,
        /// Which buffer.
        what: &'static str,
        /// Its size.
        bytes: u64,
    },
    /// A step's region lies outside its buffer.
    #[error(
        "rank {rank} step {step}: region {buf:?}[{offset}..{end}] is outside the {buf:?} \
         buffer of {size} bytes"
    )]
    OutOfBounds {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The buffer.
        buf: BufKind,
        /// Region start.
        offset: u64,
        /// Region end (saturated).
        end: u64,
        /// The buffer's size.
        size: u64,
    },
    /// A send and its matching receive have different lengths.
    #[error(
        "message {sender} -> {receiver} tag {tag}: sent {send_len} bytes (step {send_step} of \
         rank {sender}) but the receive expects {recv_len} (step {recv_step} of rank {receiver})"
    )]
    LengthMismatch {
        /// Sending rank.
        sender: Rank,
        /// Receiving rank.
        receiver: Rank,
        /// The schedule tag.
        tag: u32,
        /// Bytes sent.
        send_len: u64,
        /// Bytes expected.
        recv_len: u64,
        /// The send step.
        send_step: StepId,
        /// The receive step.
        recv_step: StepId,
    },
    /// Two unmatched sends (or receives) with the same key are in flight.
    #[error(
        "rank {rank} step {step}: a second {what} {sender} -> {receiver} tag {tag} while step \
         {earlier} is unmatched; tags must be unique per sender, receiver and op"
    )]
    DuplicateTag {
        /// The rank posting it.
        rank: Rank,
        /// The new step.
        step: StepId,
        /// The unmatched earlier step.
        earlier: StepId,
        /// `send` or `receive`.
        what: &'static str,
        /// Sending rank.
        sender: Rank,
        /// Receiving rank.
        receiver: Rank,
        /// The tag.
        tag: u32,
    },
    /// A step names a peer outside the communicator.
    #[error("rank {rank} step {step}: peer {peer} is outside the communicator of {world} ranks")]
    PeerOutOfRange {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The peer named.
        peer: Rank,
        /// Number of ranks.
        world: usize,
    },
    /// A local step's regions do not fit together.
    #[error("rank {rank} step {step}: {why}")]
    BadStep {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// What is wrong, with the regions.
        why: String,
    },
    /// A reduce kernel rejected its operands.
    #[error("rank {rank} step {step}: {source}")]
    Kernel {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The kernel's error.
        source: KernelError,
    },
    /// The executor rejected a completion (a fabric bug).
    #[error("rank {rank}: {source}")]
    Exec {
        /// The rank.
        rank: Rank,
        /// The executor's error.
        source: ExecError,
    },
    /// Planning the collective failed ([`run_collective`]).
    #[error(transparent)]
    Plan(#[from] AlgoError),
    /// Nothing can run while some ranks are unfinished.
    #[error("deadlock: no step can run, {} rank(s) unfinished:\n{report}", ranks.len())]
    Deadlock {
        /// The unfinished ranks.
        ranks: Vec<Rank>,
        /// Per stuck rank, what it waits on (one line each).
        report: String,
    },
}

/// Key a message is matched by: `(comm, seq, sender, receiver, tag)`.
type MsgKey = (u64, u64, Rank, Rank, u32);

#[derive(Clone, Copy, Debug)]
struct Posted {
    rank: Rank,
    step: StepId,
    op: Op,
}

#[derive(Clone, Copy, Debug)]
enum Work {
    Local(Posted),
    Transfer { send: Posted, recv: Posted },
}

struct RankMem {
    exec: Executor,
    user: Vec<u8>,
    scratch: Vec<u8>,
    /// fp16/bf16 partial values of `user` and `scratch` (see [`kernels::Partials`]).
    parts: [kernels::Partials; 2],
    placement: Placement,
    buffers: BufferSizes,
}

/// Which of a rank's two memories a resolved region lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Space {
    User,
    Scratch,
}

/// N ranks running one collective in memory. See the module docs.
pub struct MemFabric {
    dtype: DataType,
    opts: MemOptions,
    ranks: Vec<RankMem>,
    ready: Vec<Work>,
    sends: BTreeMap<MsgKey, Posted>,
    recvs: BTreeMap<MsgKey, Posted>,
    rng: u64,
}

/// SplitMix64 step: a tiny, well-mixed deterministic generator (Steele,
/// Lea, Flood, "Fast splittable pseudorandom number generators", 2014).
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn garbage(len: usize, seed: &mut u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let w = splitmix64(seed).to_le_bytes();
        v.extend_from_slice(&w[..(len - v.len()).min(8)]);
    }
    v
}

fn to_usize(rank: Rank, what: &'static str, bytes: u64) -> Result<usize, MemError> {
    usize::try_from(bytes).map_err(|_| MemError::TooLarge { rank, what, bytes })
}

impl MemFabric {
    /// Sets up `ranks` (rank i = `ranks[i]`) for element type `dtype`.
    ///
    /// # Errors
    /// [`MemError::InputSize`] if an input's length differs from its plan's
    /// input size; [`MemError::TooLarge`] if a buffer cannot be allocated.
    pub fn new(
        dtype: DataType,
        ranks: Vec<MemRank>,
        opts: MemOptions,
    ) -> Result<MemFabric, MemError> {
        let mut fill = opts.fill_seed;
        let mut mems = Vec::with_capacity(ranks.len());
        for (r, mr) in ranks.into_iter().enumerate() {
            let rank = r as Rank;
            let b = mr.buffers;
            if mr.input.len() as u64 != b.input {
                return Err(MemError::InputSize {
                    rank,
                    got: mr.input.len() as u64,
                    want: b.input,
                });
            }
            let p = mr.placement;
            let user_len = p
                .input_at
                .checked_add(b.input)
                .zip(p.output_at.checked_add(b.output))
                .map(|(i, o)| i.max(o))
                .unwrap_or(u64::MAX);
            let mut user = garbage(to_usize(rank, "user memory", user_len)?, &mut fill);
            let at = p.input_at as usize; // fits: input_at + input <= user_len
            user[at..at + mr.input.len()].copy_from_slice(&mr.input);
            let scratch = garbage(to_usize(rank, "scratch", b.scratch)?, &mut fill);
            mems.push(RankMem {
                exec: Executor::with_window(mr.plan, opts.window),
                user,
                scratch,
                parts: Default::default(),
                placement: p,
                buffers: b,
            });
        }
        let rng = match opts.order {
            Order::Fifo => 0,
            Order::Shuffled(seed) => seed,
        };
        Ok(MemFabric {
            dtype,
            opts,
            ranks: mems,
            ready: Vec::new(),
            sends: BTreeMap::new(),
            recvs: BTreeMap::new(),
            rng,
        })
    }

    /// Runs every rank's plan to the end.
    ///
    /// # Errors
    /// Any [`MemError`] (see the module docs); the buffers are then left as
    /// they were when the error was found.
    pub fn run(&mut self) -> Result<(), MemError> {
        for r in 0..self.ranks.len() {
            self.post_ready(r as Rank)?;
        }
        loop {
            if self.ready.is_empty() {
                return self.finish();
            }
            let i = match self.opts.order {
                Order::Fifo => 0,
                Order::Shuffled(_) => {
                    (splitmix64(&mut self.rng) % self.ready.len() as u64) as usize
                }
            };
            let work = match self.opts.order {
                Order::Fifo => self.ready.remove(i),
                Order::Shuffled(_) => self.ready.swap_remove(i),
            };
            match work {
                Work::Local(p) => {
                    self.execute_local(p)?;
                    self.complete(p)?;
                }
                Work::Transfer { send, recv } => {
                    self.execute_transfer(send, recv)?;
                    self.complete(send)?;
                    self.complete(recv)?;
                }
            }
        }
    }

    /// Rank `rank`'s output buffer (after [`Self::run`]).
    pub fn output(&self, rank: Rank) -> &[u8] {
        let m = &self.ranks[rank as usize];
        let at = m.placement.output_at as usize;
        &m.user[at..at + m.buffers.output as usize]
    }

    /// Every rank's output buffer, in rank order.
    pub fn into_outputs(self) -> Vec<Vec<u8>> {
        (0..self.ranks.len())
            .map(|r| self.output(r as Rank).to_vec())
            .collect()
    }

    fn finish(&mut self) -> Result<(), MemError> {
        let mut stuck = Vec::new();
        let mut report = String::new();
        for r in 0..self.ranks.len() {
            if self.ranks[r].exec.is_done() {
                continue;
            }
            stuck.push(r as Rank);
            let ex = &self.ranks[r].exec;
            let _ = write!(report, "  rank {r}: {} steps done;", ex.completed_prefix());
            for (id, step) in ex.in_flight() {
                let _ = write!(report, " step {id} {}", describe_wait(r as Rank, &step.op));
                report.push(';');
            }
            let blocked = ex.blocked().count();
            if blocked > 0 {
                let _ = write!(report, " {blocked} more step(s) wait on those");
            }
            report.push('\n');
        }
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(MemError::Deadlock {
                ranks: stuck,
                report: report.trim_end().to_string(),
            })
        }
    }

    fn complete(&mut self, p: Posted) -> Result<(), MemError> {
        self.ranks[p.rank as usize]
            .exec
            .handle_completion(p.step)
            .map_err(|source| MemError::Exec {
                rank: p.rank,
                source,
            })?;
        self.post_ready(p.rank)
    }

    /// Posts every step of `rank` that is ready now.
    fn post_ready(&mut self, rank: Rank) -> Result<(), MemError> {
        while let Some((step, s)) = self.ranks[rank as usize].exec.poll_action() {
            self.post(Posted {
                rank,
                step,
                op: s.op,
            })?;
        }
        Ok(())
    }

    fn post(&mut self, p: Posted) -> Result<(), MemError> {
        let (comm, seq) = (self.opts.comm, self.opts.seq);
        let (sender, receiver, tag, is_send) = match p.op {
            Op::Send { peer, tag, .. } => (p.rank, peer, tag, true),
            Op::Recv { peer, tag, .. } | Op::RecvReduce { peer, tag, .. } => {
                (peer, p.rank, tag, false)
            }
            _ => {
                self.ready.push(Work::Local(p));
                return Ok(());
            }
        };
        let peer = if is_send { receiver } else { sender };
        if peer as usize >= self.ranks.len() {
            return Err(MemError::PeerOutOfRange {
                rank: p.rank,
                step: p.step,
                peer,
                world: self.ranks.len(),
            });
        }
        let key = (comm, seq, sender, receiver, tag);
        let (mine, theirs, what) = if is_send {
            (&mut self.sends, &mut self.recvs, "send")
        } else {
            (&mut self.recvs, &mut self.sends, "receive")
        };
        if let Some(other) = theirs.remove(&key) {
            let (send, recv) = if is_send { (p, other) } else { (other, p) };
            let send_len = send.op.bytes();
            let recv_len = recv.op.bytes();
            if send_len != recv_len {
                return Err(MemError::LengthMismatch {
                    sender,
                    receiver,
                    tag,
                    send_len,
                    recv_len,
                    send_step: send.step,
                    recv_step: recv.step,
                });
            }
            self.ready.push(Work::Transfer { send, recv });
            return Ok(());
        }
        if let Some(earlier) = mine.get(&key) {
            return Err(MemError::DuplicateTag {
                rank: p.rank,
                step: p.step,
                earlier: earlier.step,
                what,
                sender,
                receiver,
                tag,
            });
        }
        mine.insert(key, p);
        Ok(())
    }

    /// The (space, byte range) of `region` on `rank`, bounds-checked.
    fn resolve(
        &self,
        rank: Rank,
        step: StepId,
        region: Region,
    ) -> Result<(Space, Range<usize>), MemError> {
        let m = &self.ranks[rank as usize];
        let (space, base, size) = match region.buf {
            BufKind::Input => (Space::User, m.placement.input_at, m.buffers.input),
            BufKind::Output => (Space::User, m.placement.output_at, m.buffers.output),
            BufKind::Scratch => (Space::Scratch, 0, m.scratch.len() as u64),
        };
        let end = region.end();
        if region.offset.checked_add(region.len).is_none() || end > size {
            return Err(MemError::OutOfBounds {
                rank,
                step,
                buf: region.buf,
                offset: region.offset,
                end,
                size,
            });
        }
        // In range of an allocated buffer, so these fit in usize.
        let start = (base + region.offset) as usize;
        Ok((space, start..start + region.len as usize))
    }

    fn read(&self, rank: Rank, step: StepId, region: Region) -> Result<Vec<u8>, MemError> {
        let (space, range) = self.resolve(rank, step, region)?;
        let m = &self.ranks[rank as usize];
        Ok(match space {
            Space::User => m.user[range].to_vec(),
            Space::Scratch => m.scratch[range].to_vec(),
        })
    }

    /// The bytes of `region`, to overwrite: their kept partials are forgotten.
    fn slice_mut(
        &mut self,
        rank: Rank,
        step: StepId,
        region: Region,
    ) -> Result<&mut [u8], MemError> {
        let (bytes, parts, at) = self.slice_kept(rank, step, region)?;
        parts.forget(at..at + bytes.len());
        Ok(bytes)
    }

    /// The bytes of `region`, its buffer's partials and its byte offset there.
    fn slice_kept(
        &mut self,
        rank: Rank,
        step: StepId,
        region: Region,
    ) -> Result<(&mut [u8], &mut kernels::Partials, usize), MemError> {
        let (space, range) = self.resolve(rank, step, region)?;
        let m = &mut self.ranks[rank as usize];
        let at = range.start;
        Ok(match space {
            Space::User => (&mut m.user[range], &mut m.parts[0], at),
            Space::Scratch => (&mut m.scratch[range], &mut m.parts[1], at),
        })
    }

    /// The f32 values of `region` (kept partials where there are any).
    fn values(&self, rank: Rank, step: StepId, region: Region) -> Result<Vec<f32>, MemError> {
        let (space, range) = self.resolve(rank, step, region)?;
        let m = &self.ranks[rank as usize];
        let at = range.start;
        let (bytes, parts) = match space {
            Space::User => (&m.user[range], &m.parts[0]),
            Space::Scratch => (&m.scratch[range], &m.parts[1]),
        };
        kernels::values(self.dtype, bytes, at, Some(parts)).map_err(|source| MemError::Kernel {
            rank,
            step,
            source,
        })
    }

    fn kernel_err(p: Posted) -> impl FnOnce(KernelError) -> MemError {
        move |source| MemError::Kernel {
            rank: p.rank,
            step: p.step,
            source,
        }
    }

    fn same_len(p: Posted, what: &str, a: Region, b: Region) -> Result<(), MemError> {
        if a.len != b.len {
            return Err(MemError::BadStep {
                rank: p.rank,
                step: p.step,
                why: format!("{what}: regions differ in length, {a:?} vs {b:?}"),
            });
        }
        Ok(())
    }

    fn execute_local(&mut self, p: Posted) -> Result<(), MemError> {
        let dtype = self.dtype;
        match p.op {
            Op::Copy { src, dst } => {
                Self::same_len(p, "copy", src, dst)?;
                let (s_space, s) = self.resolve(p.rank, p.step, src)?;
                let (d_space, d) = self.resolve(p.rank, p.step, dst)?;
                if s == d && s_space == d_space {
                    return Ok(()); // copying a region onto itself: nothing to do
                }
                if s_space == d_space && s.start < d.end && d.start < s.end {
                    return Err(MemError::BadStep {
                        rank: p.rank,
                        step: p.step,
                        why: format!("copy: {src:?} and {dst:?} partly overlap in memory"),
                    });
                }
                let bytes = self.read(p.rank, p.step, src)?;
                kernels::copy::copy(self.slice_mut(p.rank, p.step, dst)?, &bytes);
            }
            Op::LocalReduce { src, dst, op } if kernels::keeps_partials(dtype) => {
                Self::same_len(p, "local reduce", src, dst)?;
                let vals = self.values(p.rank, p.step, src)?;
                let (d, parts, at) = self.slice_kept(p.rank, p.step, dst)?;
                kernels::fold_kept(dtype, op, d, at, parts, &vals).map_err(Self::kernel_err(p))?;
            }
            Op::LocalReduce { src, dst, op } => {
                Self::same_len(p, "local reduce", src, dst)?;
                let bytes = self.read(p.rank, p.step, src)?;
                let d = self.slice_mut(p.rank, p.step, dst)?;
                kernels::reduce(dtype, op, d, &bytes).map_err(Self::kernel_err(p))?;
            }
            Op::Divide { dst, divisor } if kernels::keeps_partials(dtype) => {
                let (d, parts, at) = self.slice_kept(p.rank, p.step, dst)?;
                kernels::divide_kept(dtype, d, at, parts, divisor).map_err(Self::kernel_err(p))?;
            }
            Op::Divide { dst, divisor } => {
                let d = self.slice_mut(p.rank, p.step, dst)?;
                kernels::divide(dtype, d, divisor).map_err(Self::kernel_err(p))?;
            }
            Op::Send { .. } | Op::Recv { .. } | Op::RecvReduce { .. } => {
                unreachable!("communication steps are matched, not run as local work")
            }
        }
        Ok(())
    }

    fn execute_transfer(&mut self, send: Posted, recv: Posted) -> Result<(), MemError> {
        let Op::Send { src, .. } = send.op else {
            unreachable!("the send side of a transfer is a Send")
        };
        let data = self.read(send.rank, send.step, src)?;
        match recv.op {
            Op::Recv { dst, .. } => {
                kernels::copy::copy(self.slice_mut(recv.rank, recv.step, dst)?, &data);
            }
            Op::RecvReduce { local, dst, op, .. } => {
                Self::same_len(recv, "receive-reduce local vs destination", local, dst)?;
                let local = self.read(recv.rank, recv.step, local)?;
                let dtype = self.dtype;
                if kernels::keeps_partials(dtype) {
                    let (d, parts, at) = self.slice_kept(recv.rank, recv.step, dst)?;
                    kernels::reduce_into_kept(dtype, op, d, at, parts, &local, &data)
                        .map_err(Self::kernel_err(recv))?;
                } else {
                    let mut acc = local;
                    kernels::reduce(dtype, op, &mut acc, &data).map_err(Self::kernel_err(recv))?;
                    kernels::copy::copy(self.slice_mut(recv.rank, recv.step, dst)?, &acc);
                }
            }
            _ => unreachable!("the receive side of a transfer is a Recv or RecvReduce"),
        }
        Ok(())
    }
}

/// Plans `args` with `algo` on every rank and runs all ranks in memory in
/// the seeded arrival order `Order::Shuffled(seed)`; returns every rank's
/// output buffer (sized by [`CollectiveArgs::io_bytes`]).
///
/// `inputs[r]` is rank r's input buffer. In-place calls
/// ([`CollectiveArgs::in_place`]) place input and output in one memory as
/// [`CollectiveArgs::alias`] says, so the schedule really overwrites its input.
///
/// # Errors
/// [`MemError::Plan`] if planning fails, [`MemError::InputCount`] or
/// [`MemError::InputSize`] for wrong inputs, and any error of [`MemFabric::run`].
pub fn run_collective(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    inputs: Vec<Vec<u8>>,
    seed: u64,
) -> Result<Vec<Vec<u8>>, MemError> {
    let opts = MemOptions {
        order: Order::Shuffled(seed),
        fill_seed: seed ^ 0xF111_F111,
        ..MemOptions::default()
    };
    run_collective_with(args, algo, layout, inputs, opts)
}

/// [`run_collective`] with explicit [`MemOptions`] (order, window, fill).
///
/// # Errors
/// As [`run_collective`].
pub fn run_collective_with(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    inputs: Vec<Vec<u8>>,
    opts: MemOptions,
) -> Result<Vec<Vec<u8>>, MemError> {
    if inputs.len() != args.world_size as usize {
        return Err(MemError::InputCount {
            got: inputs.len(),
            world: args.world_size as usize,
        });
    }
    let mut ranks = Vec::with_capacity(inputs.len());
    for (r, input) in inputs.into_iter().enumerate() {
        let rank = r as Rank;
        let (buffers, plan) = algo::plan(args, algo, layout, rank)?;
        let placement = args
            .alias(rank)
            .map_or(Placement::separate(&buffers), |a| Placement {
                input_at: a.input_at,
                output_at: a.output_at,
            });
        ranks.push(MemRank {
            plan,
            buffers,
            input,
            placement,
        });
    }
    let mut fabric = MemFabric::new(args.dtype, ranks, opts)?;
    fabric.run()?;
    Ok(fabric.into_outputs())
}

/// What a posted, unfinished step of `rank` waits for, for deadlock reports.
fn describe_wait(rank: Rank, op: &Op) -> String {
    match *op {
        Op::Send { peer, tag, src } => format!(
            "send {rank} -> {peer} tag {tag} ({} bytes): rank {peer} never posted the receive",
            src.len
        ),
        Op::Recv { peer, tag, dst } | Op::RecvReduce { peer, tag, dst, .. } => format!(
            "receive {peer} -> {rank} tag {tag} ({} bytes): rank {peer} never posted the send",
            dst.len
        ),
        _ => "local step".to_string(),
    }
}

#[cfg(test)]
mod tests;
