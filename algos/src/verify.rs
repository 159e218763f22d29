//! The schedule verifier: proves a materialized schedule correct before it
//! runs, or names the rank, step and region where it is wrong.
//!
//! Checks, in order:
//! 1. **Structure**: one schedule per rank, buffer sizes as
//!    [`CollectiveArgs::io_bytes`] requires, dependencies pointing backwards,
//!    regions inside their buffers, peers inside the communicator, the
//!    right reduce op (`Sum` for `Avg`), `Divide` by the world size, element-aligned reductions.
//! 2. **Matching**: every Send has exactly one Recv/RecvReduce with the same
//!    `(sender, receiver, tag)` and length, and vice versa.
//! 3. **Races**: two steps of a rank that touch overlapping memory (input and
//!    output are one memory when the call is in place, see
//!    [`CollectiveArgs::alias`]), one of them writing, must be ordered by the
//!    rank's dependencies, so every execution order gives the same bytes.
//! 4. **Deadlock**: a symbolic run of all ranks with the executor's window
//!    ([`crate::exec::DEFAULT_WINDOW`]) and rendezvous semantics (a send
//!    completes only together with its matching receive) must finish.
//! 5. **Data**: the same run tracks, for every byte range, which ranks'
//!    input contributed and from which input offset (at the granularity of
//!    the regions the schedule uses, not per element). Each output range must
//!    be exactly the right combination, each rank counted once; for data
//!    movement, the right rank's bytes at the right place; `Avg` divided
//!    exactly once. A Barrier must make every rank's completion depend on
//!    every rank's start.
//!
//! One module a check: `structure`, `matching`, `races`, and `symbolic` (the
//! run behind checks 4 and 5), over the buffer and contents model in `memory`.

use std::fmt;

use crate::collective::CollectiveArgs;
use crate::exec::DEFAULT_WINDOW;
use crate::schedule::{BufKind, Rank, RankSchedule, Region, StepId};

mod matching;
mod memory;
mod races;
mod structure;
mod symbolic;

use matching::match_messages;
use races::check_races;
#[cfg(test)]
pub(crate) use structure::accesses_of;
use structure::check_structure;
use symbolic::Run;

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = match self.buf {
            BufKind::Input => "input",
            BufKind::Output => "output",
            BufKind::Scratch => "scratch",
        };
        write!(f, "{b}[{}..{})", self.offset, self.end())
    }
}

/// Options of [`verify_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Executor window used in the deadlock check.
    pub window: usize,
    /// Run the race check (quadratic in a rank's step count in the worst case).
    pub check_races: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            window: DEFAULT_WINDOW,
            check_races: true,
        }
    }
}

/// What a verified schedule does, in numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VerifyReport {
    /// Steps of all ranks.
    pub steps: u64,
    /// Messages (matched send/receive pairs).
    pub messages: u64,
    /// Bytes sent, all ranks together.
    pub bytes_sent: u64,
    /// Most bytes sent by one rank.
    pub max_rank_bytes_sent: u64,
    /// Longest chain of messages that must happen one after another.
    pub critical_path_messages: u64,
}

/// Why a schedule is wrong. Every variant names where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Not one schedule per rank, in rank order.
    #[error(
        "expected {world} rank schedules in rank order, got {got} (first wrong: index {index})"
    )]
    RankCount {
        /// Schedules given.
        got: usize,
        /// World size.
        world: u32,
        /// First index whose rank is wrong.
        index: usize,
    },
    /// A buffer size differs from what the collective requires.
    #[error("rank {rank}: {buf:?} buffer is {got} bytes, the collective requires {expected}")]
    BufferSize {
        /// The rank.
        rank: Rank,
        /// The buffer.
        buf: BufKind,
        /// Size in the schedule.
        got: u64,
        /// Required size.
        expected: u64,
    },
    /// A dependency does not point to an earlier step.
    #[error("rank {rank} step {step}: depends on step {dep}, which is not earlier")]
    BadDep {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The bad dependency.
        dep: StepId,
    },
    /// A region exceeds its buffer.
    #[error("rank {rank} step {step}: region {region} is outside the {size}-byte buffer")]
    OutOfBounds {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The region.
        region: Region,
        /// The buffer's size.
        size: u64,
    },
    /// A peer outside the communicator, or the rank itself.
    #[error("rank {rank} step {step}: peer {peer} is not another rank of the communicator (world_size {world})")]
    BadPeer {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// The peer.
        peer: Rank,
        /// World size.
        world: u32,
    },
    /// A malformed step (wrong op, divisor, lengths, alignment, overlap).
    #[error("rank {rank} step {step}: {what}")]
    BadStep {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// What is wrong.
        what: String,
    },
    /// Two sends (or two receives) with the same (sender, receiver, tag).
    #[error("rank {rank} steps {first} and {second}: two messages {sender} -> {receiver} with tag {tag}")]
    DuplicateMessage {
        /// The rank holding both steps.
        rank: Rank,
        /// The first step.
        first: StepId,
        /// The second step.
        second: StepId,
        /// Sender.
        sender: Rank,
        /// Receiver.
        receiver: Rank,
        /// Tag.
        tag: u32,
    },
    /// A send or receive without its partner.
    #[error("rank {rank} step {step}: {what} {sender} -> {receiver} tag {tag} has no matching {missing} on rank {peer}")]
    Unmatched {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// "send" or "receive".
        what: &'static str,
        /// "receive" or "send".
        missing: &'static str,
        /// Sender.
        sender: Rank,
        /// Receiver.
        receiver: Rank,
        /// The peer that lacks the partner step.
        peer: Rank,
        /// Tag.
        tag: u32,
    },
    /// A send and its receive differ in length.
    #[error("message {sender} -> {receiver} tag {tag}: send (step {send_step}) is {send_len} bytes, receive (step {recv_step}) is {recv_len}")]
    LengthMismatch {
        /// Sender.
        sender: Rank,
        /// Receiver.
        receiver: Rank,
        /// Tag.
        tag: u32,
        /// Sender's step.
        send_step: StepId,
        /// Receiver's step.
        recv_step: StepId,
        /// Send length.
        send_len: u64,
        /// Receive length.
        recv_len: u64,
    },
    /// Two unordered steps of a rank touch the same memory, one writing.
    #[error("rank {rank}: steps {first} ({first_region}) and {second} ({second_region}) overlap, one writes, and no dependency orders them")]
    Race {
        /// The rank.
        rank: Rank,
        /// Earlier step.
        first: StepId,
        /// Its region.
        first_region: Region,
        /// Later step.
        second: StepId,
        /// Its region.
        second_region: Region,
    },
    /// The symbolic run stops with ranks unfinished.
    #[error("deadlock under window {window}: {}", waits.join("; "))]
    Deadlock {
        /// Window used.
        window: usize,
        /// Per stuck rank (at most 8): what it waits on.
        waits: Vec<String>,
    },
    /// A step combines contents wrongly (undefined bytes, misaligned
    /// contributions, a rank counted twice, reducing or dividing twice).
    #[error("rank {rank} step {step}: region {region}: {what}")]
    BadData {
        /// The rank.
        rank: Rank,
        /// The step.
        step: StepId,
        /// Where.
        region: Region,
        /// What is wrong.
        what: String,
    },
    /// An output range ends with the wrong contents.
    #[error("rank {rank}: output {region} should be {expected} but is {got}")]
    WrongOutput {
        /// The rank.
        rank: Rank,
        /// The output range.
        region: Region,
        /// Expected contents.
        expected: String,
        /// Actual contents.
        got: String,
    },
    /// A barrier rank can finish before some rank has started.
    #[error("barrier: rank {rank} can finish without hearing from rank {missing}")]
    BarrierIncomplete {
        /// The rank.
        rank: Rank,
        /// A rank it never (transitively) heard from.
        missing: Rank,
    },
}

/// Verifies `scheds` (one per rank, in rank order) for `args` with the
/// default options.
///
/// # Errors
/// The first [`VerifyError`] found.
pub fn verify(args: &CollectiveArgs, scheds: &[RankSchedule]) -> Result<VerifyReport, VerifyError> {
    verify_with(args, scheds, &VerifyOptions::default())
}

/// [`verify`] with explicit options.
///
/// # Errors
/// The first [`VerifyError`] found.
pub fn verify_with(
    args: &CollectiveArgs,
    scheds: &[RankSchedule],
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    check_structure(args, scheds)?;
    let partner = match_messages(scheds)?;
    if opts.check_races {
        for s in scheds {
            check_races(args, s)?;
        }
    }
    let mut run = Run::new(args, scheds, &partner, opts.window.max(1));
    run.run()?;
    run.check_outputs()?;
    Ok(run.report)
}

#[cfg(test)]
mod tests;
