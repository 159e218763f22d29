//! Async ops a communicator still runs, so that [`super::Comm::destroy`]
//! (and drop) can deliver them before the connections close: a program
//! that calls `send_async`, destroys the communicator and exits must not
//! lose the message. Failed async ops whose handle was never waited are
//! kept too, so destroy reports them instead of dropping them silently.

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
    /// A collective, by name.
    Collective(&'static str),
}

/// The async ops started and not finished, by id; the failed ones whose
/// handle has not been waited, with their error.
#[derive(Default, Debug)]
pub(crate) struct Asyncs {
    next: u64,
    running: BTreeMap<u64, AsyncKind>,
    unseen: BTreeMap<u64, (AsyncKind, String)>,
}

/// [`Asyncs`] and the condition variable its changes signal.
#[derive(Default, Debug)]
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
        let id = tracker.reserve();
        lock(&tracker.asyncs).running.insert(id, kind);
        AsyncGuard {
            tracker: Arc::clone(tracker),
            id,
        }
    }

    /// The op's id, for [`super::OpHandle::reported_to`].
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Tracker {
    /// A fresh op id.
    pub(crate) fn reserve(&self) -> u64 {
        let mut a = lock(&self.asyncs);
        a.next += 1;
        a.next - 1
    }

    /// Op `id` of `kind` ended with the error `r` (if it did): kept until
    /// its handle is waited ([`Tracker::seen`]).
    pub(crate) fn note_result<T>(&self, id: u64, kind: AsyncKind, r: &Result<T, CommError>) {
        if let Err(e) = r {
            lock(&self.asyncs).unseen.insert(id, (kind, e.to_string()));
        }
    }

    /// The handle of op `id` was waited: its error, if any, was seen.
    pub(crate) fn seen(&self, id: u64) {
        lock(&self.asyncs).unseen.remove(&id);
    }

    /// Takes the failures no handle reported, as destroy's error.
    pub(crate) fn take_unseen(&self, rank: u32) -> Result<(), CommError> {
        let unseen = std::mem::take(&mut lock(&self.asyncs).unseen);
        if unseen.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = unseen
            .values()
            .map(|(k, e)| format!("{} failed: {e}", describe(*k)))
            .collect();
        Err(CommError::Undelivered(format!(
            "destroy on rank {rank}: {} async op{} whose handle was dropped without waiting failed, so {} data was not delivered: {}",
            list.len(),
            if list.len() == 1 { "" } else { "s" },
            if list.len() == 1 { "its" } else { "their" },
            list.join("; ")
        )))
    }
}

/// Destroy's error for the messages that reached rank `rank` and that no
/// receive took, as (sender, message number of the pair, bytes): "destroy
/// on rank 1: 1 message from rank 0 (4096 bytes, message 0 of the pair) was
/// never received ...". Ok if there are none.
pub(crate) fn unreceived(rank: u32, msgs: &[(u32, u64, u64)]) -> Result<(), CommError> {
    if msgs.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = msgs
        .iter()
        .map(|(src, n, bytes)| format!("from rank {src} ({bytes} bytes, message {n} of the pair)"))
        .collect();
    let what = match list.as_slice() {
        [one] => format!("1 message {one} was never received, so its data was lost"),
        _ => format!(
            "{} messages ({}) were never received, so their data was lost",
            list.len(),
            list.join(", ")
        ),
    };
    Err(CommError::Undelivered(format!(
        "destroy on rank {rank}: {what}; call recv for each message sent to this rank before destroying the communicator"
    )))
}

/// "a send to rank 1", "an AllReduce".
fn describe(k: AsyncKind) -> String {
    match k {
        AsyncKind::Send(p) => format!("a send to rank {p}"),
        AsyncKind::Recv(p) => format!("a receive from rank {p}"),
        AsyncKind::Collective(name) => format!("an async {name}"),
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
/// [`CommError::Undelivered`] counting and naming the ops still running.
pub(crate) fn wait_idle(tracker: &Tracker, rank: u32, linger: Duration) -> Result<(), CommError> {
    let end = Instant::now() + linger;
    let mut a = lock(&tracker.asyncs);
    while !a.running.is_empty() {
        let now = Instant::now();
        if now >= end {
            return Err(CommError::Undelivered(pending_message(
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
            AsyncKind::Collective(name) => colls.push(name.to_string()),
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
        assert!(matches!(e, CommError::Undelivered(_)), "{e}");
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

    /// A failed op whose handle is never waited is destroy's error, once;
    /// a waited one is not.
    #[test]
    fn failures_no_handle_reported_are_destroys_error() {
        let t = Tracker::default();
        let err: Result<(), CommError> = Err(CommError::Broken("lost rank 1".into()));
        let (a, b) = (t.reserve(), t.reserve());
        t.note_result(a, AsyncKind::Send(1), &err);
        t.note_result(b, AsyncKind::Recv(2), &err);
        t.seen(b);
        let e = t.take_unseen(0).unwrap_err().to_string();
        assert!(
            e.contains("1 async op whose handle was dropped without waiting failed")
                && e.contains("a send to rank 1 failed: communicator is unusable: lost rank 1"),
            "{e}"
        );
        assert!(!e.contains("rank 2"), "{e}");
        assert!(t.take_unseen(0).is_ok());
    }
}
