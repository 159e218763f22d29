//! Streams and events (`aclrtCreateStream`, `aclrtRecordEvent`, ...): a
//! stream is a FIFO of tasks run in order by its own worker thread, so an
//! HCCL op or an async copy enqueues and returns at once, as on an NPU,
//! and host work overlaps communication. `aclrtSynchronizeStream` waits
//! for the queue to drain and returns the first failed task's error (and
//! clears it). An event is recorded by a task on a stream: it completes
//! when the stream reaches it, and keeps the time it did.
//!
//! A synchronize without a timeout runs the stream's next tasks itself
//! while the worker has not taken them (one runner at a time, so the
//! order holds): a program that synchronizes after every op, as most
//! do, then pays no hop to the worker and back (two thread wake-ups per
//! op, bench/capi.md). The worker is still woken at every enqueue, so a
//! stream progresses while its host thread does something else.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::codes::AclError;

/// A unit of work on a stream; `Err` is the stream's error code.
pub(crate) type Task = Box<dyn FnOnce() -> Result<(), AclError> + Send>;

#[derive(Default)]
struct Queue {
    tasks: VecDeque<Task>,
    /// Tasks enqueued and tasks finished, ever.
    submitted: u64,
    finished: u64,
    /// The first failure since the last synchronize, and its log line.
    error: Option<(AclError, String)>,
    /// A task is running (on the worker or a synchronizing thread).
    busy: bool,
    closed: bool,
}

impl Queue {
    /// The next task, if none is running; marks the queue busy.
    fn take(&mut self) -> Option<Task> {
        if self.busy {
            return None;
        }
        let t = self.tasks.pop_front()?;
        self.busy = true;
        Some(t)
    }
}

struct Inner {
    q: Mutex<Queue>,
    /// The worker waits here for a task (or the close).
    work: Condvar,
    /// Synchronizing threads wait here for tasks to finish.
    done: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Locks `m`, through poisoning (a panicked task holds no invariant).
pub(crate) fn lock_opt<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    lock(m)
}

/// One stream and its worker.
pub(crate) struct Stream {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
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
        Stream::with_worker(true)
    }

    /// A stream, with its worker or (tests) without one.
    fn with_worker(worker: bool) -> std::io::Result<Stream> {
        let inner = Arc::new(Inner {
            q: Mutex::new(Queue::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let w = Arc::clone(&inner);
        let worker = worker
            .then(|| {
                std::thread::Builder::new()
                    .name("acl-stream".into())
                    .spawn(move || run(&w))
            })
            .transpose()?;
        static NEXT_ID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
        Ok(Stream {
            inner,
            worker: Mutex::new(worker),
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
        let mut q = lock(&self.inner.q);
        q.submitted += 1;
        q.tasks.push_back(task);
        self.inner.work.notify_one();
    }

    /// Waits until every task enqueued so far has run; returns (and
    /// clears) the first failure among them, with the line the task
    /// logged. `timeout`: `Err(None)` when it passes first.
    pub(crate) fn synchronize(
        &self,
        timeout: Option<Duration>,
    ) -> Result<(), Option<(AclError, String)>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = lock(&self.inner.q);
        let target = q.submitted;
        while q.finished < target {
            // Without a timeout this thread may run the tasks itself: it
            // waits for them anyway. With one it must be free to return.
            if deadline.is_none() && q.finished + u64::from(q.busy) < target {
                if let Some(task) = q.take() {
                    drop(q);
                    q = run_one(&self.inner, task);
                    continue;
                }
            }
            q = match deadline {
                None => self.inner.done.wait(q).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(None);
                    }
                    self.inner
                        .done
                        .wait_timeout(q, d - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        match q.error.take() {
            Some(e) => Err(Some(e)),
            None => Ok(()),
        }
    }

    /// True if every task enqueued so far has run.
    pub(crate) fn is_idle(&self) -> bool {
        let q = lock(&self.inner.q);
        q.finished == q.submitted
    }

    /// Runs what is queued, then stops the worker (`aclrtDestroyStream`).
    pub(crate) fn close(&self) {
        lock(&self.inner.q).closed = true;
        self.inner.work.notify_one();
        if let Some(w) = lock(&self.worker).take() {
            let _ = w.join();
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.close();
    }
}

/// The worker: runs tasks as they come until the stream is closed and
/// drained.
fn run(inner: &Inner) {
    let mut q = lock(&inner.q);
    loop {
        if let Some(task) = q.take() {
            drop(q);
            q = run_one(inner, task);
        } else if q.closed && q.tasks.is_empty() && !q.busy {
            return;
        } else {
            q = inner.work.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Runs a task taken with [`Queue::take`] on this thread and books its
/// result; returns the queue locked again.
fn run_one(inner: &Inner, task: Task) -> MutexGuard<'_, Queue> {
    // A panicking task (a bug) fails the task, not the stream.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task))
        .unwrap_or(Err(crate::codes::ACL_ERROR_RT_INTERNAL_ERROR));
    let mut q = lock(&inner.q);
    if let Err(e) = r {
        // The task logged why on this thread (crate::log::fail).
        q.error
            .get_or_insert_with(|| (e, crate::log::recent_text()));
    }
    q.busy = false;
    q.finished += 1;
    inner.done.notify_all();
    // Only the worker waits on `work`, and only for a task it can take
    // (or the close): no wake-up when nothing is left, so a synchronize
    // that ran the task itself does not wake the worker for nothing.
    if !q.tasks.is_empty() || q.closed {
        inner.work.notify_one();
    }
    q
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
            let mut st = lock(&ev.st);
            while st.reached < n {
                st = ev.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
            Ok(())
        })
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
    fn tasks_run_in_order_and_synchronize_returns_the_first_failure_once() {
        let s = Stream::new().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5u32 {
            let log = Arc::clone(&log);
            s.enqueue(Box::new(move || {
                log.lock().unwrap().push(i);
                if i == 2 || i == 3 {
                    crate::log::fail("task", 0, format_args!("task {i} failed"));
                    Err(100 + i as i32)
                } else {
                    Ok(())
                }
            }));
        }
        // The first failure, with the line it logged on the worker.
        assert_eq!(
            s.synchronize(None),
            Err(Some((102, "task: task 2 failed".to_string())))
        );
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(s.synchronize(None), Ok(()), "the error was cleared");
    }

    #[test]
    fn enqueue_returns_before_the_task_runs() {
        let s = Stream::new().unwrap();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let g = Arc::clone(&gate);
        let ran = Arc::new(AtomicU32::new(0));
        let r = Arc::clone(&ran);
        s.enqueue(Box::new(move || {
            let mut open = g.0.lock().unwrap();
            while !*open {
                open = g.1.wait(open).unwrap();
            }
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }));
        assert!(!s.is_idle());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(s.synchronize(Some(Duration::from_millis(10))), Err(None));
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        assert_eq!(s.synchronize(None), Ok(()));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_untimed_synchronize_runs_the_tasks_itself_in_order() {
        // No worker: only the synchronizing thread can run them.
        let s = Stream::with_worker(false).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3u32 {
            let log = Arc::clone(&log);
            s.enqueue(Box::new(move || {
                log.lock().unwrap().push(i);
                if i == 1 {
                    crate::log::fail("task", 0, format_args!("task {i} failed"));
                    return Err(7);
                }
                Ok(())
            }));
        }
        // A timed one must stay free to return, so it runs nothing.
        assert_eq!(s.synchronize(Some(Duration::from_millis(5))), Err(None));
        assert!(log.lock().unwrap().is_empty());
        assert_eq!(
            s.synchronize(None),
            Err(Some((7, "task: task 1 failed".to_string())))
        );
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2]);
        assert!(s.is_idle());
    }

    #[test]
    fn the_worker_and_synchronizing_threads_run_one_task_at_a_time_in_order() {
        let s = Arc::new(Stream::new().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let syncers: Vec<_> = (0..2)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        assert_eq!(s.synchronize(None), Ok(()));
                    }
                })
            })
            .collect();
        for i in 0..2000u32 {
            let (log, running) = (Arc::clone(&log), Arc::clone(&running));
            s.enqueue(Box::new(move || {
                assert!(!running.swap(true, Ordering::SeqCst), "two runners");
                log.lock().unwrap().push(i);
                running.store(false, Ordering::SeqCst);
                Ok(())
            }));
        }
        for t in syncers {
            t.join().unwrap();
        }
        assert_eq!(s.synchronize(None), Ok(()), "no task panicked");
        assert_eq!(*log.lock().unwrap(), (0..2000).collect::<Vec<_>>());
    }

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
