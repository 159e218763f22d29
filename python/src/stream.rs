//! A communicator's stream: its ops, blocking and async, run one at a time
//! in the order Python called them, as ops on one HCCL stream do.
//!
//! It is an [`hccl::stream::Stream`] (the C API's `aclrtStream` too): a
//! blocking op takes its place in the queue and runs on the caller's
//! thread (the GIL released) once the ops before it have run; an async op
//! is queued and started by the stream's worker thread, unless a
//! `Work.wait()` comes first and runs it on the waiting thread (no thread
//! hop per op for the common `all_reduce(..., async_op=True).wait()`,
//! which is what torch.distributed does for every blocking call; that
//! module says when the worker starts a task). The memory of an async op
//! is the caller's, used in place (see `buffer`).

use std::sync::{Arc, Mutex, MutexGuard};

/// A job of the stream: it reports its own result (a `Work`'s `Done`).
pub(crate) type Job = Box<dyn FnOnce() + Send>;

type Tasks = hccl::stream::Stream<()>;

/// One communicator's stream of ops, started on first use. Dropping it
/// lets the worker finish the jobs it has and exit.
#[derive(Default)]
pub(crate) struct Stream {
    tasks: Mutex<Option<Arc<Tasks>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Stream {
    /// The stream, started now if this is its first use.
    fn tasks(&self) -> Result<Arc<Tasks>, String> {
        let mut t = lock(&self.tasks);
        if let Some(s) = &*t {
            return Ok(Arc::clone(s));
        }
        let s = Arc::new(
            Tasks::new("hccl-rs-stream", || ())
                .map_err(|e| format!("cannot start the communicator's worker thread: {e}"))?,
        );
        *t = Some(Arc::clone(&s));
        Ok(s)
    }

    /// Runs `f` on this thread in its turn (after every op called before).
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.tasks() {
            Ok(s) => s.run_here(f),
            // No stream could start, so no op was ever queued on it: this
            // one's turn is now.
            Err(_) => f(),
        }
    }

    /// Queues `job` to run in its turn; returns its place for [`Stream::wait_for`].
    ///
    /// # Errors
    /// The worker thread could not be started (the message says why).
    pub(crate) fn submit(&self, job: Job) -> Result<u64, String> {
        Ok(self.tasks()?.enqueue(Box::new(move || {
            job();
            Ok(())
        })))
    }

    /// Blocks until the job at `place` has run, running queued jobs on
    /// this thread if the worker has not started them.
    pub(crate) fn wait_for(&self, place: u64) {
        let s = lock(&self.tasks).clone();
        if let Some(s) = s {
            s.wait_for(place);
        }
    }

    /// Makes the worker start what is queued (for a timed wait).
    pub(crate) fn kick(&self) {
        if let Some(s) = &*lock(&self.tasks) {
            s.kick();
        }
    }

    /// Blocks until every op called so far has finished.
    pub(crate) fn drain(&self) {
        self.run(|| ());
    }
}
