//! [`SimTransport`]: the simulator seen through the `Transport` trait.

use std::time::Duration;

use hccl_algos::schedule::{Op, StepId};
use hccl_algos::transport::{Completion, OpContext, Transport};

use crate::core::Core;
use crate::error::SimError;

/// One rank's view of a running simulation, implementing
/// [`hccl_algos::transport::Transport`]: the engine posts every step of
/// every rank through it, so the simulator exercises the same interface as
/// the TCP and Ascend backends.
///
/// Completions are those of the rank's current op. `wait_completion` runs
/// network events until this rank has one; it cannot run other ranks'
/// executors, so it is for a rank whose peers are already posted (the
/// engine itself only uses `post` and `poll_completion`).
pub struct SimTransport<'c, 'a> {
    core: &'c mut Core<'a>,
    rank: u32,
}

impl<'c, 'a> SimTransport<'c, 'a> {
    pub(crate) fn new(core: &'c mut Core<'a>, rank: u32) -> Self {
        SimTransport { core, rank }
    }
}

impl Transport for SimTransport<'_, '_> {
    type Error = SimError;

    fn post(&mut self, ctx: &OpContext, step: StepId, op: &Op) -> Result<(), SimError> {
        self.core.post(self.rank, ctx, step, op)
    }

    fn poll_completion(&mut self) -> Result<Option<Completion>, SimError> {
        let rs = &mut self.core.ranks[self.rank as usize];
        Ok(rs.completions.pop().map(|step| Completion {
            seq: rs.ctx.seq,
            step,
        }))
    }

    fn wait_completion(&mut self) -> Result<Completion, SimError> {
        loop {
            if let Some(c) = self.poll_completion()? {
                return Ok(c);
            }
            let Some(ev) = self.core.next_event() else {
                return Err(SimError::Stuck {
                    rank: self.rank,
                    time_ns: self.core.now,
                });
            };
            if let Some(engine_event) = self.core.handle(ev)? {
                self.core.deferred.push(engine_event);
            }
        }
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.core.now)
    }
}
