//! The transport trait: how an executor's steps reach a fabric.
//!
//! Completion-based and not async: post a step, later learn that it
//! finished. Memory is named as (buffer, offset, length) regions, never as
//! pointers: the transport owns the memory of the op it runs. The simulator
//! and the TCP transport implement it; the executor and the algorithms are
//! the same on both. (The Ascend backend's schedule mode runs the same
//! plans with a wave loop of its own, as HCCL's batch calls need.)

use std::time::Duration;

use crate::dtype::DataType;
use crate::exec::{ExecError, Executor};
use crate::schedule::{Op, Rank, StepId};

/// Identity of one collective call on one communicator, shared by all its
/// messages. A message is matched by `(comm, seq, sender, receiver, tag)`, so
/// messages of different ops or communicators can never be confused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpContext {
    /// Communicator id (a hash of its name, the same on every member).
    pub comm: u64,
    /// Sequence number of the op on this communicator, from 0.
    pub seq: u64,
    /// This rank.
    pub rank: Rank,
    /// Element type, for reductions.
    pub dtype: DataType,
}

/// The full tag of one message on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageTag {
    /// Communicator id.
    pub comm: u64,
    /// Op sequence number.
    pub seq: u64,
    /// The step's tag from the schedule ([`Op::Send::tag`]).
    pub tag: u32,
}

/// A posted step that finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Sequence number of the op the step belongs to.
    pub seq: u64,
    /// The step.
    pub step: StepId,
}

/// A fabric that can run the steps of one rank.
pub trait Transport {
    /// The transport's error (peer failure, timeout, length mismatch, ...).
    type Error: std::error::Error + From<ExecError>;

    /// Starts step `step` of op `ctx`. Local steps (copy, reduce, divide)
    /// may complete at once but still report a [`Completion`].
    fn post(&mut self, ctx: &OpContext, step: StepId, op: &Op) -> Result<(), Self::Error>;

    /// A finished step, if any, without blocking.
    fn poll_completion(&mut self) -> Result<Option<Completion>, Self::Error>;

    /// Blocks until a step finishes; errors on timeout (`HCCL_EXEC_TIMEOUT`)
    /// or a failed peer.
    fn wait_completion(&mut self) -> Result<Completion, Self::Error>;

    /// Time since the transport started (virtual time in the simulator).
    fn now(&self) -> Duration;
}

/// Runs `exec` to completion over `transport`, blocking.
///
/// # Errors
/// The transport's error, or its [`ExecError`] if it reports a step that
/// was not in flight.
pub fn drive<T: Transport>(
    exec: &mut Executor,
    ctx: &OpContext,
    transport: &mut T,
) -> Result<(), T::Error> {
    loop {
        while let Some((id, step)) = exec.poll_action() {
            transport.post(ctx, id, &step.op)?;
        }
        if exec.is_done() {
            return Ok(());
        }
        let done = transport.wait_completion()?;
        exec.handle_completion(done.step)?;
        while let Some(done) = transport.poll_completion()? {
            exec.handle_completion(done.step)?;
        }
    }
}
