//! Async ops a communicator still runs, so that [`super::Comm::destroy`]
//! (and drop) can deliver them before the connections close: a program
//! that calls `send_async`, destroys the communicator and exits must not
//! lose the message.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{lock, CommError};

/// Longest destroy waits for async ops when `HCCL_EXEC_TIMEOUT` is longer
/// (or 0, never): an op that needs a peer that never comes would keep the
/// process from exiting for that long otherwise.
pub(crate) const DRAIN_LINGER: Duration = Duration::from_secs(30);

/// What an async op is, for destroy's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AsyncKind {
    /// `send_async` to this rank.
    Send(u32),
    /// `recv_async` from this rank.
    Recv(u32),
    /// A collective, by sequence number.
    Collective(u64),
}

/// The async ops started and not finished, by start number.
#[derive(Default)]
pub(crate) struct Asyncs {
    next: u64,
    running: BTreeMap<u64, AsyncKind>,
}

/// [`Asyncs`] and the condition variable its changes signal.
#[derive(Default)]
pub(crate) struct Tracker {
    asyncs: Mutex<Asyncs>,
    cv: Condvar,
}

/// An async op in its communicator's [`Tracker`] until dropped, which
/// its thread does when the op ends.
pub(crate) struct AsyncGuard {
    tracker: Arc<Tracker>,
    id: u64,
}

impl AsyncGuard {
    /// Records an async op of `kind` in `tracker`.
    pub(crate) fn new(tracker: &Arc<Tracker>, kind: AsyncKind) -> AsyncGuard {
        let mut a = lock(&tracker.asyncs);
        let id = a.next;
        a.next += 1;
        a.running.insert(id, kind);
        AsyncGuard {
            tracker: Arc::clone(tracker),
            id,
        }
    }
}

impl Drop for AsyncGuard {
    fn drop(&mut self) {
        lock(&self.tracker.asyncs).running.remove(&self.id);
        self.tracker.cv.notify_all();
    }
}

/// Waits until no async op of `tracker` (rank `rank`'s) runs, at most `linger`.
///
/// # Errors
/// [`CommError::Pending`] counting and naming the ops still running.
pub(crate) fn wait_idle(tracker: &Tracker, rank: u32, linger: Duration) -> Result<(), CommError> {
    let end = Instant::now() + linger;
    let mut a = lock(&tracker.asyncs);
    while !a.running.is_empty() {
        let now = Instant::now();
        if now >= end {
            return Err(CommError::Pending(pending_message(
                rank, &a.running, linger,
            )));
        }
        a = tracker
            .cv
            .wait_timeout(a, end - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    Ok(())
}

/// "destroy on rank 0: 1 send still pending after 2 s (to rank 1); ..."
fn pending_message(rank: u32, running: &BTreeMap<u64, AsyncKind>, linger: Duration) -> String {
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    let mut colls = Vec::new();
    for k in running.values() {
        match *k {
            AsyncKind::Send(p) => sends.push(format!("to rank {p}")),
            AsyncKind::Recv(p) => recvs.push(format!("from rank {p}")),
            AsyncKind::Collective(seq) => colls.push(format!("seq {seq}")),
        }
    }
    let mut parts = Vec::new();
    for (list, one, many) in [
        (&sends, "send", "sends"),
        (&recvs, "receive", "receives"),
        (&colls, "collective", "collectives"),
    ] {
        if !list.is_empty() {
            let word = if list.len() == 1 { one } else { many };
            parts.push(format!("{} {word} ({})", list.len(), list.join(", ")));
        }
    }
    format!(
        "destroy on rank {rank}: {} still pending after {} s (the linger: HCCL_EXEC_TIMEOUT, at most {} s); they were aborted and their data was not delivered: wait for their handles (OpHandle::wait) before destroying the communicator, and check that each peer calls the matching op",
        parts.join(", "),
        linger.as_secs_f64(),
        DRAIN_LINGER.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Destroy's wait ends when the last op ends, and past the linger
    /// fails naming what still runs.
    #[test]
    fn wait_idle_waits_for_running_ops_and_names_the_rest() {
        let t = Arc::new(Tracker::default());
        assert!(wait_idle(&t, 0, Duration::ZERO).is_ok());
        let g = AsyncGuard::new(&t, AsyncKind::Send(1));
        let e = wait_idle(&t, 0, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(e, CommError::Pending(_)), "{e}");
        assert!(
            e.to_string().contains("1 send (to rank 1) still pending"),
            "{e}"
        );
        let ender = std::thread::spawn(move || drop(g));
        assert!(wait_idle(&t, 0, Duration::from_secs(10)).is_ok());
        ender.join().unwrap();
    }

    #[test]
    fn the_message_counts_and_names_pending_ops_by_kind() {
        let running: BTreeMap<u64, AsyncKind> = [
            (0, AsyncKind::Send(1)),
            (1, AsyncKind::Send(2)),
            (2, AsyncKind::Recv(3)),
        ]
        .into_iter()
        .collect();
        let m = pending_message(0, &running, Duration::from_secs(2));
        assert!(
            m.starts_with(
                "destroy on rank 0: 2 sends (to rank 1, to rank 2), 1 receive (from rank 3) still pending after 2 s"
            ),
            "{m}"
        );
    }
}
