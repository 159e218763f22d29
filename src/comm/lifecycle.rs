//! A communicator's queries and its end: rank, size, name, settings,
//! the async error (HCCL's `HcclGetCommAsyncError`), abort
//! (`HcclCommAbort`) and destroy (`HcclCommDestroy`).

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;

use super::plan;
use super::{drain, lock, BackendKind, Comm, CommError, ReducePrecision};
use crate::flight::{Dump, DumpReason, FlightError};

impl Comm {
    /// This rank, `0..size`.
    pub fn rank(&self) -> u32 {
        self.shared.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.shared.size
    }

    /// The communicator's name (`world`, or `world/split0/color3`, ...).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The precision fp16/bf16 Sum/Prod/Avg reductions carry partial sums
    /// in: `HCCL_REDUCE_PRECISION` when the communicator was made (a split
    /// takes its parent's), [`ReducePrecision::Native`] by default.
    pub fn reduce_precision(&self) -> ReducePrecision {
        *lock(&self.shared.precision)
    }

    /// Sets the precision of this communicator's later fp16/bf16 Sum, Prod
    /// and Avg reductions. [`ReducePrecision::Fp32`] runs them in f32
    /// (twice the bytes; see [`ReducePrecision`]). Every rank must use the
    /// same setting for an op: a rank that differs fails the op on every
    /// rank with a "reduce precision mismatch" naming both settings.
    pub fn set_reduce_precision(&self, precision: ReducePrecision) {
        *lock(&self.shared.precision) = precision;
    }

    /// The backend running this communicator.
    pub fn backend(&self) -> BackendKind {
        self.shared.kind
    }

    /// The error that broke the communicator, if any (HCCL's
    /// `HcclGetCommAsyncError`). Never waits for a running op.
    pub fn async_error(&self) -> Option<CommError> {
        if let Some(e) = lock(&self.shared.error).clone() {
            return Some(e);
        }
        let mut st = self.shared.state.try_lock().ok()?;
        let e = st.backend.as_mut()?.async_error()?;
        let e = self.shared.name_ranks(e);
        lock(&self.shared.error).get_or_insert(e.clone());
        Some(e)
    }

    /// The algorithm this communicator runs `args` with: `HCCL_ALGO` where
    /// it fits, else the choice for host TCP ([`hccl_algos::select::choose`],
    /// which depends on how many hosts the ranks run on). Every rank
    /// computes the same. For reports such as `hccl test`'s algorithm column;
    /// [`Comm::planned`] gives the whole plan.
    ///
    /// # Errors
    /// None: `HCCL_ALGO` is parsed when the communicator is built (a bad
    /// value fails the constructor). The `Result` is kept for callers.
    pub fn algorithm(&self, args: &CollectiveArgs) -> Result<AlgoSpec, CommError> {
        Ok(plan::choose(
            args,
            self.shared.fit,
            self.shared.algo.as_ref(),
        ))
    }

    /// Aborts the communicator: interrupts a running op, tells the peers,
    /// closes the connections. Every later op fails. A second call is a no-op.
    pub fn abort(&self) {
        self.abort_because(format!(
            "rank {} aborted the communicator",
            self.shared.rank
        ));
    }

    /// [`Comm::abort`] telling the peers `reason`.
    pub(crate) fn abort_because(&self, reason: String) {
        {
            let mut a = lock(&self.shared.aborted);
            if *a {
                return;
            }
            *a = true;
        }
        // Before the interrupt: the record shows the op it ends as running
        // (that op's failure, if the first, writes its own dump after).
        if let Some(f) = &self.shared.flight {
            let why = (DumpReason::Abort, super::recorder::Trigger::Asked);
            f.dump_logged(&self.shared, why, Some(reason.clone()));
        }
        (self.shared.interrupt)(&reason);
        let mut st = lock(&self.shared.state);
        if let Some(b) = st.backend.as_mut() {
            b.fail(&reason, hccl_hw::tcp::AbortKind::Failed);
        }
        st.backend = None;
        lock(&self.shared.error).get_or_insert(CommError::Broken(reason));
        self.shared.turn_cv.notify_all();
    }

    /// Destroys the communicator (HCCL's `HcclCommDestroy`): waits for its
    /// async ops still running (handles dropped without waiting included),
    /// at most `HCCL_EXEC_TIMEOUT` and at most 30 s, then says goodbye to
    /// the peers and closes the connections once what was queued for them
    /// is written (TCP: a bounded linger). The process may exit right after.
    /// Dropping a `Comm` does the same and logs the error.
    ///
    /// # Errors
    /// [`CommError::Undelivered`] counting and naming the async ops (sends,
    /// receives, collectives, with their peers) still running after that
    /// wait (they are aborted, so the peers fail too), or that failed while
    /// their handle was dropped without waiting, with their errors; or
    /// naming the messages sent to this rank that no receive took ("1
    /// message from rank 0 (4096 bytes, message 0 of the pair) was never
    /// received"), whose senders saw them delivered.
    pub fn destroy(self) -> Result<(), CommError> {
        self.close()
    }

    /// [`Comm::destroy`] without consuming the communicator (for drop).
    pub(crate) fn close(&self) -> Result<(), CommError> {
        let linger = self
            .shared
            .exec_timeout
            .map_or(drain::DRAIN_LINGER, |t| t.min(drain::DRAIN_LINGER));
        let (asyncs, rank) = (&self.shared.asyncs, self.shared.rank);
        let mut r = drain::wait_idle(asyncs, rank, linger);
        if r.is_err() {
            self.abort();
            // Aborted ops end at once; let them go before closing.
            let _ = drain::wait_idle(asyncs, rank, std::time::Duration::from_secs(1));
        }
        // Failures nobody waited for; after a timeout those are the aborts.
        let unseen = asyncs.take_unseen(rank);
        // Messages that reached this rank and that no receive took: their
        // senders saw them delivered, so this is the only report.
        let mut st = lock(&self.shared.state);
        let msgs = st
            .backend
            .as_mut()
            .map_or_else(Vec::new, |b| b.unreceived());
        // Close now, on the caller's thread: were the last async thread to
        // drop the state, a caller that exits next would cut its goodbye.
        st.backend = None;
        drop(st);
        for e in [unseen, drain::unreceived(rank, &msgs)] {
            r = match (r, e) {
                (Ok(()), e) => e,
                (Err(a), Err(b)) => Err(CommError::Undelivered(format!("{a}; {b}"))),
                (r, Ok(())) => r,
            };
        }
        r
    }

    /// This rank's flight record of the communicator now (the ring of its
    /// last ops, `HCCL_FLIGHT_RECORDER_ENTRIES`; see [`crate::flight`]),
    /// with reason `on_demand`; `None` when the recorder is off. Never
    /// waits for a running op (which shows as `started`).
    pub fn flight_record(&self) -> Option<Dump> {
        let f = self.shared.flight.as_ref()?;
        Some(f.snapshot(&self.shared, DumpReason::OnDemand, None))
    }

    /// Writes this rank's flight record to `HCCL_FLIGHT_RECORDER_DIR`
    /// (`hccl_flight_<comm>_rank<r>_<pid>.jsonl`, replacing an earlier
    /// dump of this communicator rank): the file's path, or `None` when
    /// the recorder is off, no directory is set, or this is a simulated
    /// rank that crashed (fault plan: a dead process writes nothing). Never
    /// waits for a running op. `hccl doctor DIR` reads the dumps of all
    /// ranks.
    ///
    /// # Errors
    /// [`FlightError::Io`]: the directory or file could not be written.
    pub fn dump_flight_record(&self) -> Result<Option<std::path::PathBuf>, FlightError> {
        match &self.shared.flight {
            Some(f) => f.dump(
                &self.shared,
                (DumpReason::OnDemand, super::recorder::Trigger::Asked),
                None,
            ),
            None => Ok(None),
        }
    }

    /// Writes this rank's profile file now (with `HCCL_PROFILING_ENABLE=1`)
    /// rather than when the communicator is dropped, so that a write error
    /// reaches the caller: the file's path, or `None` when profiling is off
    /// or the file was written already. Ops after this call are not
    /// recorded. (Without this call, a write error at drop is reported as
    /// an error log line, on stderr if no subscriber is installed.)
    ///
    /// # Errors
    /// [`crate::profiling::ProfilingError::Io`]: the directory or file
    /// could not be written.
    pub fn write_profile(
        &self,
    ) -> Result<Option<std::path::PathBuf>, crate::profiling::ProfilingError> {
        match &self.shared.profile {
            Some(p) => p.finish(),
            None => Ok(None),
        }
    }
}
