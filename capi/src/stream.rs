//! Streams and events (`aclrtCreateStream`, `aclrtRecordEvent`, ...): a
//! stream is an [`hccl::stream::Stream`], a FIFO of tasks run in order by
//! its own worker thread or by the thread that synchronizes, so an HCCL op
//! or an async copy enqueues and returns at once, as on an NPU, and host
//! work overlaps communication (that module says when the worker starts a
//! task and when the synchronizing thread runs it). `aclrtSynchronizeStream`
//! waits for the queue to drain and returns the first failed task's error
//! (and clears it). An event is recorded by a task on a stream: it
//! completes when the stream reaches it, and keeps the time it did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hccl::stream::Kicker;

use crate::codes::AclError;

/// A failed task: the stream's error code and the line it logged.
pub(crate) type Failure = (AclError, String);

/// A unit of work on a stream; `Err` is the stream's error code (the
/// line the task logged on its thread is kept with it).
pub(crate) type Task = Box<dyn FnOnce() -> Result<(), AclError> + Send>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks `m`, through poisoning (a panicked task holds no invariant).
pub(crate) fn lock_opt<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    lock(m)
}

/// One stream and its worker.
pub(crate) struct Stream {
    tasks: hccl::stream::Stream<Failure>,
    id: i32,
    /// Simulated ns of the ops run so far (`HCCL_TIMING=sim`).
    clock: Clock,
}

/// A stream's simulated clock (`HCCL_TIMING=sim`): HCCL ops add their
/// simulated time, ns; an op that could not be simulated makes it
/// invalid, and events recorded after that keep wall time only.
#[derive(Default)]
pub(crate) struct SimClock {
    ns: AtomicU64,
    invalid: std::sync::atomic::AtomicBool,
}

impl SimClock {
    /// Adds an op's simulated time (`None`: it has none; the clock is no
    /// longer valid).
    pub(crate) fn add(&self, ns: Option<u64>) {
        match ns {
            Some(t) => {
                self.ns.fetch_add(t, Ordering::SeqCst);
            }
            None => self.invalid.store(true, Ordering::SeqCst),
        }
    }

    /// The clock, if valid.
    fn read(&self) -> Option<u64> {
        (!self.invalid.load(Ordering::SeqCst)).then(|| self.ns.load(Ordering::SeqCst))
    }
}

/// A shared [`SimClock`].
pub(crate) type Clock = Arc<SimClock>;

impl Stream {
    /// A stream with a running worker; `Err` if no thread can start.
    pub(crate) fn new() -> std::io::Result<Stream> {
        // A panicking task (a bug) fails with the runtime's internal error.
        let tasks = hccl::stream::Stream::new("acl-stream", || {
            (
                crate::codes::ACL_ERROR_RT_INTERNAL_ERROR,
                "a task on the stream panicked (a bug in hccl-rs)".to_string(),
            )
        })?;
        static NEXT_ID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
        Ok(Stream {
            tasks,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            clock: Arc::new(SimClock::default()),
        })
    }

    /// The simulated clock of this stream.
    pub(crate) fn clock(&self) -> Clock {
        Arc::clone(&self.clock)
    }

    /// `aclrtStreamGetId`'s number: streams in creation order.
    pub(crate) fn id(&self) -> i32 {
        self.id
    }

    /// Appends a task; it runs after every task enqueued before it.
    pub(crate) fn enqueue(&self, task: Task) {
        self.tasks.enqueue(Box::new(move || {
            // The task logged why on this thread (crate::log::fail).
            task().map_err(|e| (e, crate::log::recent_text()))
        }));
    }

    /// Waits until every task enqueued so far has run; returns (and
    /// clears) the first failure among them, with the line the task
    /// logged. `timeout`: `Err(None)` when it passes first.
    pub(crate) fn synchronize(&self, timeout: Option<Duration>) -> Result<(), Option<Failure>> {
        self.tasks.synchronize(timeout)
    }

    /// True if every task enqueued so far has run.
    pub(crate) fn is_idle(&self) -> bool {
        self.tasks.is_idle()
    }

    /// Runs what is queued, then stops the worker (`aclrtDestroyStream`).
    pub(crate) fn close(&self) {
        self.tasks.close();
    }
}

#[derive(Default)]
struct EventState {
    /// Records made, and the last one a stream reached.
    recorded: u64,
    reached: u64,
    /// When the stream reached the last record.
    at: Option<Instant>,
    /// The stream's simulated clock then, ns.
    sim_at: Option<u64>,
    /// The stream of the last record: a thread about to wait for the
    /// event makes it start its tasks (it may be waiting for a
    /// synchronize to run them; `hccl::stream`'s lazy mode).
    on: Option<Kicker>,
}

/// An event (`aclrtCreateEvent`).
#[derive(Default)]
pub(crate) struct Event {
    st: Mutex<EventState>,
    cv: Condvar,
}

impl Event {
    /// `aclrtRecordEvent`: a task on `stream` that completes the event
    /// when the stream reaches it.
    pub(crate) fn record(self: &Arc<Event>, stream: &Stream) {
        let n = {
            let mut st = lock(&self.st);
            st.recorded += 1;
            st.on = Some(stream.tasks.kicker());
            st.recorded
        };
        let ev = Arc::clone(self);
        let clock = stream.clock();
        stream.enqueue(Box::new(move || {
            let mut st = lock(&ev.st);
            if st.reached < n {
                st.reached = n;
                st.at = Some(Instant::now().max(epoch()));
                st.sim_at = clock.read();
            }
            ev.cv.notify_all();
            Ok(())
        }));
    }

    /// `aclrtResetEvent`: forgets the records.
    pub(crate) fn reset(&self) {
        let mut st = lock(&self.st);
        st.reached = st.recorded;
        st.at = None;
        st.sim_at = None;
    }

    /// True when the last record was reached (or nothing was recorded:
    /// ACL reports such an event complete).
    pub(crate) fn is_complete(&self) -> bool {
        let st = lock(&self.st);
        st.reached >= st.recorded
    }

    /// `aclrtSynchronizeEvent`: waits for the last record made so far;
    /// `false` if `timeout` passed first.
    pub(crate) fn synchronize(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.kick_stream();
        let mut st = lock(&self.st);
        let n = st.recorded;
        while st.reached < n {
            st = match deadline {
                None => self.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    self.cv
                        .wait_timeout(st, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        true
    }

    /// A task for `aclrtStreamWaitEvent`: waits for the record made so
    /// far (none: at once).
    pub(crate) fn waiter(self: &Arc<Event>) -> Task {
        let n = lock(&self.st).recorded;
        let ev = Arc::clone(self);
        Box::new(move || {
            ev.kick_stream();
            let mut st = lock(&ev.st);
            while st.reached < n {
                st = ev.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            Ok(())
        })
    }

    /// Makes the stream of the last record start its tasks if the record
    /// is not reached yet (for a thread about to wait for it).
    fn kick_stream(&self) {
        let on = {
            let st = lock(&self.st);
            if st.reached >= st.recorded {
                return;
            }
            st.on.clone()
        };
        if let Some(k) = on {
            k.kick();
        }
    }

    /// When the stream reached the event's last record.
    pub(crate) fn time(&self) -> Option<Instant> {
        let st = lock(&self.st);
        st.at.filter(|_| st.reached >= st.recorded)
    }

    /// The stream's simulated clock (ns) when it reached the event's last
    /// record.
    pub(crate) fn sim_time(&self) -> Option<u64> {
        let st = lock(&self.st);
        st.sim_at.filter(|_| st.reached >= st.recorded)
    }
}

/// The start of this library's clock (`aclrtEventGetTimestamp`).
pub(crate) fn epoch() -> Instant {
    static E: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *E.get_or_init(Instant::now)
}

/// `aclrtEventElapsedTime`: milliseconds from `start` to `end`.
pub(crate) fn elapsed_ms(start: Instant, end: Instant) -> f32 {
    match end.checked_duration_since(start) {
        Some(d) => d.as_secs_f64() as f32 * 1e3,
        None => -(start.duration_since(end).as_secs_f64() as f32 * 1e3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn an_event_completes_when_its_stream_reaches_it() {
        let (a, b) = (Stream::new().unwrap(), Stream::new().unwrap());
        let ev = Arc::new(Event::default());
        assert!(ev.is_complete(), "never recorded");
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let g = Arc::clone(&gate);
        a.enqueue(Box::new(move || {
            drop(g.lock().unwrap());
            Ok(())
        }));
        ev.record(&a);
        assert!(!ev.is_complete());
        // b waits for the event: its next task runs after a's record.
        b.enqueue(ev.waiter());
        let after = Arc::new(AtomicU32::new(0));
        let af = Arc::clone(&after);
        b.enqueue(Box::new(move || {
            af.store(1, Ordering::SeqCst);
            Ok(())
        }));
        assert_eq!(b.synchronize(Some(Duration::from_millis(20))), Err(None));
        assert!(!ev.synchronize(Some(Duration::from_millis(1))));
        assert_eq!(after.load(Ordering::SeqCst), 0);
        drop(held);
        assert!(ev.synchronize(None));
        assert!(ev.is_complete() && ev.time().is_some());
        assert_eq!(b.synchronize(None), Ok(()));
        assert_eq!(after.load(Ordering::SeqCst), 1);
    }
}
