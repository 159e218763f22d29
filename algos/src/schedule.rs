//! The schedule IR: what one rank does for one collective, as data.
//!
//! An algorithm never moves bytes. For each rank it emits a sequence of
//! [`Step`]s over that rank's three buffers (input, output, scratch); each
//! step names the earlier steps it waits for. Regions are byte offsets and
//! lengths (`u64`), so counts above 2^31 elements are ordinary.
//!
//! Steps are produced lazily by a [`RankPlan`] (an iterator), so a 16,384-rank
//! simulation holds a few words per rank instead of every step of every rank.
//! [`RankPlan`]s can be collected into a [`RankSchedule`] for printing,
//! snapshot tests and the verifier.
//!
//! Messages pair up by `(sender, receiver, tag)` within one op: the
//! algorithm chooses tags so that this triple is unique per op. Both sides of a
//! pair must have the same length.

use serde::{Deserialize, Serialize};

use crate::dtype::{DataType, ReduceOp};

/// A rank number in a communicator, `0..world_size`.
pub type Rank = u32;

/// Index of a step within one rank's plan, from 0.
pub type StepId = u32;

/// Which of a rank's buffers a region lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BufKind {
    /// The user's send buffer (read-only for the schedule).
    Input,
    /// The user's receive buffer.
    Output,
    /// Library-owned scratch of [`BufferSizes::scratch`] bytes.
    Scratch,
}

/// A byte range of one buffer: `[offset, offset + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Region {
    /// The buffer.
    pub buf: BufKind,
    /// Start, in bytes from the buffer's start.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Region {
    /// `len` bytes of `buf` from `offset`.
    pub const fn new(buf: BufKind, offset: u64, len: u64) -> Region {
        Region { buf, offset, len }
    }

    /// One past the last byte. Saturates instead of overflowing, so a
    /// corrupt region is caught by bounds checks, never wraps.
    pub const fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// What a step does. Reductions apply the schedule's [`DataType`] element-wise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// Send `src` to `peer`, matched by the peer's `Recv`/`RecvReduce` with the same tag.
    Send {
        /// Receiving rank.
        peer: Rank,
        /// Message tag, unique per (sender, receiver) within the op.
        tag: u32,
        /// Bytes to send.
        src: Region,
    },
    /// Receive from `peer` into `dst`.
    Recv {
        /// Sending rank.
        peer: Rank,
        /// Message tag.
        tag: u32,
        /// Where the bytes land; its length must equal the send's.
        dst: Region,
    },
    /// Receive from `peer` and reduce: `dst = local (op) received`.
    /// `local` may be the same region as `dst`.
    RecvReduce {
        /// Sending rank.
        peer: Rank,
        /// Message tag.
        tag: u32,
        /// The local operand (same length as `dst`).
        local: Region,
        /// Where the result lands.
        dst: Region,
        /// The reduction (never `Avg`: averaging is a `Sum` then [`Op::Divide`]).
        op: ReduceOp,
    },
    /// Copy `src` to `dst` on this rank (same lengths; may not overlap unless equal).
    Copy {
        /// Source.
        src: Region,
        /// Destination.
        dst: Region,
    },
    /// Local reduction `dst = dst (op) src`.
    LocalReduce {
        /// Second operand.
        src: Region,
        /// First operand and result.
        dst: Region,
        /// The reduction (never `Avg`).
        op: ReduceOp,
    },
    /// Divide every element of `dst` by `divisor` (the last step of `Avg`;
    /// integers truncate toward zero).
    Divide {
        /// Region divided in place.
        dst: Region,
        /// The divisor, the world size of the reducing group.
        divisor: u32,
    },
}

impl Op {
    /// The peer rank of a communication step, `None` for local steps.
    pub fn peer(&self) -> Option<Rank> {
        match *self {
            Op::Send { peer, .. } | Op::Recv { peer, .. } | Op::RecvReduce { peer, .. } => {
                Some(peer)
            }
            _ => None,
        }
    }

    /// Bytes this step moves or touches.
    pub fn bytes(&self) -> u64 {
        match *self {
            Op::Send { src, .. } => src.len,
            Op::Recv { dst, .. } | Op::RecvReduce { dst, .. } => dst.len,
            Op::Copy { dst, .. } | Op::LocalReduce { dst, .. } | Op::Divide { dst, .. } => dst.len,
        }
    }
}

/// Maximum number of explicit dependencies of one step. A step that waits
/// for more uses [`Deps::all_before`].
pub const MAX_DEPS: usize = 3;

/// The earlier steps a step waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Deps {
    ids: [StepId; MAX_DEPS],
    len: u8,
    /// If true, the step waits for *every* earlier step of the rank (a fence).
    pub all_before: bool,
}

impl Deps {
    /// No dependency.
    pub const NONE: Deps = Deps {
        ids: [0; MAX_DEPS],
        len: 0,
        all_before: false,
    };

    /// Waits for every earlier step.
    pub const FENCE: Deps = Deps {
        ids: [0; MAX_DEPS],
        len: 0,
        all_before: true,
    };

    /// Waits for the given steps (at most [`MAX_DEPS`]; more becomes a fence,
    /// which is always correct, only less concurrent).
    pub fn on(ids: &[StepId]) -> Deps {
        if ids.len() > MAX_DEPS {
            return Deps::FENCE;
        }
        let mut d = Deps::NONE;
        d.ids[..ids.len()].copy_from_slice(ids);
        d.len = ids.len() as u8;
        d
    }

    /// The explicit dependencies.
    pub fn ids(&self) -> &[StepId] {
        &self.ids[..self.len as usize]
    }

    /// The same dependencies of a plan moved to start at step `by` (every
    /// id plus `by`; a fence stays a fence).
    pub fn shifted(&self, by: StepId) -> Deps {
        let mut d = *self;
        for id in &mut d.ids[..d.len as usize] {
            *id += by;
        }
        d
    }
}

/// One step of a rank's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// What it does.
    pub op: Op,
    /// What it waits for; every id is smaller than this step's own index.
    pub deps: Deps,
}

/// The buffer sizes a rank's plan assumes, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BufferSizes {
    /// Input (send) buffer.
    pub input: u64,
    /// Output (receive) buffer.
    pub output: u64,
    /// Scratch the library allocates for the op.
    pub scratch: u64,
}

/// A rank's steps, generated lazily in index order (0, 1, 2, ...).
pub type RankPlan = Box<dyn Iterator<Item = Step> + Send>;

/// A rank's plan collected into memory, for printing, snapshots and the verifier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankSchedule {
    /// The rank.
    pub rank: Rank,
    /// The buffers it assumes.
    pub buffers: BufferSizes,
    /// Its steps; a step's index is its [`StepId`].
    pub steps: Vec<Step>,
}

/// Element type and shape of a schedule, shared by all ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleHeader {
    /// Number of ranks.
    pub world_size: u32,
    /// Element type, for reductions.
    pub dtype: DataType,
}
