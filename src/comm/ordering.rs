//! Ordering: ops on one communicator run one at a time in call order,
//! from any thread. A call takes a ticket when made (its turn among all
//! of this rank's ops and, for a collective, its communicator-wide
//! sequence number); [`Comm::at_turn`] runs it when its turn comes and
//! passes the turn on whatever happened. Blocking calls are marked for
//! [`super::local`]'s check; async calls run on their own threads,
//! tracked for destroy ([`super::drain`]).

use std::sync::Arc;

use hccl_hw::tcp::TcpError;

use super::local::{CallGuard, Waits};
use super::{drain, lock, BackendError, BackendKind, Comm, CommError, OpHandle, Shared, State};

/// What an op gets when called: its turn among every op of this rank (the
/// order ops run in) and, for collectives, its communicator-wide sequence
/// number (the same on every rank; point-to-point ops take none).
#[derive(Default)]
pub(crate) struct Tickets {
    /// Next turn to hand out.
    turn: u64,
    /// Next collective sequence number.
    pub(crate) coll: u64,
}

impl Comm {
    /// A collective's (turn, sequence number).
    pub(crate) fn take_ticket(&self) -> (u64, u64) {
        let mut t = lock(&self.shared.tickets);
        let r = (t.turn, t.coll);
        t.turn += 1;
        t.coll += 1;
        r
    }

    /// A point-to-point op's turn.
    pub(crate) fn take_turn(&self) -> u64 {
        let mut t = lock(&self.shared.tickets);
        t.turn += 1;
        t.turn - 1
    }

    /// Waits until it is turn `turn`, runs `f` on the state, then passes
    /// the turn on (whatever `f` returned) and records an error.
    pub(crate) fn at_turn<R>(
        shared: &Shared,
        turn: u64,
        f: impl FnOnce(&mut State) -> Result<R, CommError>,
    ) -> Result<R, CommError> {
        let mut st = lock(&shared.state);
        while st.turn != turn && st.backend.is_some() {
            st = shared.turn_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let r = f(&mut st).map_err(|e| shared.name_ranks(e));
        if let Err(e) = &r {
            lock(&shared.error).get_or_insert(e.clone());
            // The other ranks may be waiting in this op: tell them now
            // (a failure the transport found, it has told them already).
            // Without this op's prefix, which the peers' text has already.
            // They report it as the same kind (a timeout, a mismatch).
            let reason = hccl_hw::tcp::told_reason(shared.rank, &e.to_string());
            if let Some(b) = st.backend.as_mut() {
                b.fail(&reason, e.abort_kind());
            }
        }
        st.turn = st.turn.max(turn + 1);
        shared.turn_cv.notify_all();
        r
    }

    /// A failure a collective met before its op was queued that is not its
    /// arguments' (a V call's copy of NPU memory to the host) still takes
    /// the op's turn and fails it like any other failed op
    /// ([`Comm::at_turn`]): the communicator breaks and the other ranks,
    /// which may be waiting in the op already, fail at once naming this
    /// rank's error. (An argument error, found from the rank's own
    /// arguments before anything moves, takes no turn and leaves the
    /// communicator usable: see [`Comm::check_call`].)
    #[cfg(feature = "ascend")]
    pub(crate) fn fail_local(&self, e: CommError) -> CommError {
        let (turn, _) = self.take_ticket();
        let _ = Comm::at_turn(&self.shared, turn, |_| Err::<(), _>(e.clone()));
        e
    }

    /// A mismatch that every rank finds alike from data the ranks
    /// exchanged before op `op` (`AllToAllV`'s counts): takes the op's
    /// turn and fails it as a backend's mismatch fails an op
    /// ([`Comm::at_turn`]): [`CommError::Mismatch`] (`HCCL_E_REMOTE`)
    /// naming the op, its seq and `detail`, in the backend's words, and
    /// the communicator unusable.
    pub(crate) fn fail_mismatch(&self, op: &str, detail: String) -> CommError {
        let (turn, seq) = self.take_ticket();
        let op = format!("comm '{}' {op}", self.shared.name);
        let e = CommError::Mismatch(match self.shared.kind {
            BackendKind::Tcp => BackendError::Tcp(TcpError::Mismatch { op, seq, detail }),
            #[cfg(feature = "ascend")]
            BackendKind::Ascend => BackendError::Ascend(format!("{op} #{seq}: {detail}")),
            _ => BackendError::Sim(format!("{op} #{seq}: {detail}")),
        });
        let _ = Comm::at_turn(&self.shared, turn, |_| Err::<(), _>(e.clone()));
        self.shared.name_ranks(e)
    }

    /// Marks a blocking call `op` as started for [`super::local`]'s check (only
    /// communicators made by [`Comm::init_all`] have one).
    pub(crate) fn enter_blocking(
        &self,
        op: &dyn std::fmt::Display,
        waits: Waits<'_>,
    ) -> Option<CallGuard> {
        // Formatted only for communicators of Comm::init_all (not per op).
        let world = self.shared.local.get()?;
        let (rank, size) = (self.shared.rank, self.shared.size);
        let head = format!(
            "{op} on comm '{}' (rank {rank} of {size})",
            self.shared.name
        );
        let describe = move |peers: &[u32]| {
            format!(
                "{head} cannot complete: ranks {peers:?} are communicators of this process \
                 (Comm::init_all) that no thread has called, and the thread that created them \
                 is blocked in this call. In HCCL such a loop works because a call only \
                 enqueues work on a stream; here a blocking call returns when the op is done. \
                 Issue the calls together with hccl::group(|g| ...), call each communicator \
                 from its own thread, or use the async calls and wait on their handles"
            )
        };
        let sh = Arc::clone(&self.shared);
        let on_stuck = Box::new(move |msg: String| {
            lock(&sh.error).get_or_insert(CommError::Undriven(msg.clone()));
            (sh.interrupt)(&format!("rank {} failed: {msg}", sh.rank));
        });
        Some(world.enter(rank, waits, describe, on_stuck))
    }

    /// Runs `f` as an async op of `kind` on a thread named `name`: the
    /// rank counts as driven for [`super::local`]'s check, destroy waits for the
    /// op ([`drain`]), and a failure its handle never reports is kept for
    /// destroy's error.
    pub(crate) fn spawn_async<T: Send + 'static>(
        &self,
        name: String,
        kind: drain::AsyncKind,
        f: impl FnOnce(&Arc<Shared>) -> Result<T, CommError> + Send + 'static,
    ) -> OpHandle<T> {
        if let Some(w) = self.shared.local.get() {
            w.driven(self.shared.rank);
        }
        let shared = Arc::clone(&self.shared);
        let running = drain::AsyncGuard::new(&shared.asyncs, kind);
        let id = running.id();
        OpHandle::spawn(name, move || {
            let _running = running;
            let r = f(&shared);
            shared.asyncs.note_result(id, kind, &r);
            r
        })
        .reported_to(&self.shared.asyncs, id)
    }

    /// Ends a call [`Comm::enter_blocking`] started: a call failed as stuck
    /// returns [`CommError::Undriven`], not the abort it was ended with.
    pub(crate) fn end_blocking<R>(
        call: Option<CallGuard>,
        r: Result<R, CommError>,
    ) -> Result<R, CommError> {
        match (r, call.as_ref().and_then(CallGuard::stuck)) {
            (Err(_), Some(msg)) => Err(CommError::Undriven(msg)),
            (r, _) => r,
        }
    }
}
