//! Errors of building or running a simulation.

use hccl_algos::exec::ExecError;
use hccl_algos::kernels::KernelError;
use hccl_algos::schedule::{Rank, Region, StepId};

/// What went wrong. A *hang* is not an error: it is reported in
/// [`crate::SimReport::stall`]. Errors are bad input or a broken schedule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A communicator lists a rank the fabric does not have.
    #[error("communicator '{comm}': rank {rank} is outside the fabric's 0..{world_size}; list fabric ranks only")]
    RankOutOfRange {
        /// Communicator name.
        comm: String,
        /// The rank listed.
        rank: u32,
        /// Ranks of the fabric.
        world_size: u32,
    },
    /// A communicator lists a rank twice.
    #[error("communicator '{comm}': rank {rank} is listed twice; list each rank once")]
    DuplicateRank {
        /// Communicator name.
        comm: String,
        /// The repeated rank.
        rank: u32,
    },
    /// A communicator has no ranks.
    #[error("communicator '{comm}' has no ranks; give it at least one")]
    EmptyCommunicator {
        /// Communicator name.
        comm: String,
    },
    /// An op names a communicator id the scenario does not have.
    #[error("op '{op}' uses communicator #{comm}, but the scenario has {count}; create it with Scenario::communicator first")]
    UnknownCommunicator {
        /// The op's label.
        op: String,
        /// The id given.
        comm: usize,
        /// Number of communicators.
        count: usize,
    },
    /// An op id the scenario does not have.
    #[error("op #{op} does not exist: the scenario has {count} ops")]
    UnknownOp {
        /// The id given.
        op: usize,
        /// Number of ops.
        count: usize,
    },
    /// A rank order names an op the rank cannot run.
    #[error("rank order of rank {rank}: op #{op} is on communicator '{comm}', which does not contain rank {rank}")]
    NotAMember {
        /// Fabric rank.
        rank: u32,
        /// Op index.
        op: usize,
        /// The op's communicator.
        comm: String,
    },
    /// The op's plan could not be built for one rank (bad arguments or an
    /// algorithm that does not support them).
    #[error("op #{op} '{label}': no plan for rank {rank}: {reason}")]
    Plan {
        /// Op index in the scenario.
        op: usize,
        /// The op's label.
        label: String,
        /// Communicator rank.
        rank: Rank,
        /// Why, from the algorithm or argument check.
        reason: String,
    },
    /// The fabric has no route between two ranks that exchange a message.
    #[error("no route from rank {src} to rank {dst} in the fabric: {reason}")]
    NoRoute {
        /// Sending fabric rank.
        src: u32,
        /// Receiving fabric rank.
        dst: u32,
        /// The topology error.
        reason: String,
    },
    /// A send and its matching receive disagree on length: a schedule bug.
    #[error("op '{op}': rank {src} sends {send_len} bytes with tag {tag} but rank {dst} receives {recv_len}; the schedule's send and receive must have equal lengths")]
    LengthMismatch {
        /// The op's label.
        op: String,
        /// Sending fabric rank.
        src: u32,
        /// Receiving fabric rank.
        dst: u32,
        /// Schedule tag.
        tag: u32,
        /// Bytes sent.
        send_len: u64,
        /// Bytes the receive expects.
        recv_len: u64,
    },
    /// A step addresses bytes outside its buffer (data mode): a schedule bug.
    #[error("op '{op}', rank {rank}, step {step}: region {region:?} ends past the buffer's {buffer_len} bytes")]
    RegionOutOfBounds {
        /// The op's label.
        op: String,
        /// Fabric rank.
        rank: u32,
        /// Step index.
        step: StepId,
        /// The region.
        region: Region,
        /// Size of the buffer it lies in.
        buffer_len: u64,
    },
    /// A step names a peer outside the communicator: a schedule bug.
    #[error("op '{op}', rank {rank}: step {step} names peer {peer}, outside the communicator's 0..{size}")]
    PeerOutOfRange {
        /// The op's label.
        op: String,
        /// Fabric rank.
        rank: u32,
        /// Step index.
        step: StepId,
        /// The peer named.
        peer: Rank,
        /// Communicator size.
        size: u32,
    },
    /// Input bytes given for an op have the wrong length.
    #[error(
        "op #{op}: input of communicator rank {rank} is {got} bytes, the plan needs {expected}"
    )]
    InputLength {
        /// Op index.
        op: usize,
        /// Communicator rank.
        rank: Rank,
        /// Bytes the plan's input buffer has.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// A reduce kernel rejected its operands (data mode): a schedule bug.
    #[error("op '{op}', rank {rank}: reduce failed: {source}")]
    Kernel {
        /// The op's label.
        op: String,
        /// Fabric rank.
        rank: u32,
        /// The kernel's error.
        source: KernelError,
    },
    /// The executor was fed a completion it did not expect: an engine bug.
    #[error("rank {rank}: {source}")]
    Exec {
        /// Fabric rank.
        rank: u32,
        /// The executor's error.
        source: ExecError,
    },
    /// [`crate::SimTransport`] was asked to wait, but no pending event can
    /// complete a step of this rank (the simulation is stuck).
    #[error(
        "rank {rank} waits for a completion at {time_ns} ns, but no pending event can produce one"
    )]
    Stuck {
        /// Fabric rank.
        rank: u32,
        /// Virtual time, ns.
        time_ns: u64,
    },
    /// A transport call named an op the rank is not running.
    #[error(
        "rank {rank}: step posted for comm {comm:#x} seq {seq}, but the rank is running {running}"
    )]
    NotRunning {
        /// Fabric rank.
        rank: u32,
        /// Communicator id of the call.
        comm: u64,
        /// Sequence number of the call.
        seq: u64,
        /// What the rank runs instead.
        running: String,
    },
}

impl From<ExecError> for SimError {
    fn from(source: ExecError) -> Self {
        SimError::Exec {
            rank: u32::MAX,
            source,
        }
    }
}
