//! A communicator's stream: its ops, blocking and async, run one at a time
//! in the order Python called them, as ops on one HCCL stream do.
//!
//! `hccl::Comm` orders calls by when they are made; here an async op is
//! made on a worker thread, later than the call. So every call takes a
//! ticket when Python makes it: a blocking op waits for its ticket's turn
//! on the caller's thread (the GIL released) and runs there; an async op
//! goes to the communicator's worker thread (started on the first one),
//! which runs its jobs in ticket order. The memory of an async op is the
//! caller's, used in place (see `buffer`).

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A job of the worker thread.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Turns {
    /// The next ticket to hand out.
    next: u64,
    /// The ticket whose op may run now.
    serving: u64,
}

#[derive(Default)]
struct Inner {
    turns: Mutex<Turns>,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    fn ticket(&self) -> u64 {
        let mut t = lock(&self.turns);
        t.next += 1;
        t.next - 1
    }

    /// Blocks until ticket `t` may run; the returned guard passes the turn
    /// on when dropped (also if the op panics).
    fn turn(&self, t: u64) -> TurnGuard<'_> {
        let mut g = lock(&self.turns);
        while g.serving != t {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        TurnGuard(self)
    }
}

struct TurnGuard<'a>(&'a Inner);

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        lock(&self.0.turns).serving += 1;
        self.0.cv.notify_all();
    }
}

/// One communicator's stream of ops. Dropping it lets the worker finish
/// the jobs it has and exit.
#[derive(Default)]
pub(crate) struct Stream {
    inner: Arc<Inner>,
    /// The worker's queue, once an async op started it.
    worker: Mutex<Option<Sender<(u64, Job)>>>,
}

impl Stream {
    /// Runs `f` on this thread in its turn (after every op called before).
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = self.inner.ticket();
        let _turn = self.inner.turn(t);
        f()
    }

    /// Queues `job` to run on the worker thread in its turn.
    ///
    /// # Errors
    /// The thread could not be started (the message says why).
    pub(crate) fn submit(&self, job: Job) -> Result<(), String> {
        let mut w = lock(&self.worker);
        if w.is_none() {
            let (tx, rx) = channel::<(u64, Job)>();
            let inner = Arc::clone(&self.inner);
            std::thread::Builder::new()
                .name("hccl-rs-stream".into())
                .spawn(move || {
                    for (t, job) in rx {
                        let _turn = inner.turn(t);
                        job();
                    }
                })
                .map_err(|e| format!("cannot start the communicator's worker thread: {e}"))?;
            *w = Some(tx);
        }
        // The ticket is taken under the worker lock, so the queue holds
        // tickets in ascending order.
        let t = self.inner.ticket();
        let sent = w.as_ref().map(|tx| tx.send((t, job)));
        if !matches!(sent, Some(Ok(()))) {
            // The worker is gone (it cannot be: it only ends when the
            // sender drops); pass the turn on so later ops do not wait.
            drop(self.inner.turn(t));
            return Err("the communicator's worker thread has stopped".into());
        }
        Ok(())
    }

    /// Blocks until every op called so far has finished.
    pub(crate) fn drain(&self) {
        self.run(|| ());
    }
}
