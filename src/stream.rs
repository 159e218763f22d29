//! A host stream: a FIFO of tasks run one at a time in order, as ops on
//! one HCCL/ACL stream are, by the stream's worker thread or by a thread
//! that waits for them. The C API's `aclrtStream` and the Python
//! package's per-communicator stream are both this.
//!
//! An enqueue returns at once, so host work overlaps the tasks. A thread
//! that waits without a time limit ([`Stream::synchronize`] with `None`,
//! [`Stream::wait_for`], [`Stream::run_here`]) runs the queued tasks
//! itself while the worker has not taken them: a program that waits
//! after every op, as most do, then pays no hop to the worker and back
//! (two thread wake-ups per op; bench/capi.md measured +20 µs per 8 KiB
//! op on a 2-core host before this).
//!
//! Waking the worker at every enqueue would still cost such a program a
//! wasted wake-up per op (a futex call and, on a busy host, a core taken
//! from the op's peers: +8 µs per 8 KiB op, bench/capi.md). So a stream
//! is in one of two modes:
//! - **eager**: every enqueue wakes the worker, which starts the task at
//!   once (a program that overlaps host work with its ops);
//! - **lazy**, entered after `LAZY_AFTER` (4) tasks in a row were run by a
//!   waiting thread: an enqueue wakes nobody. The worker looks at the
//!   queue every `GRACE` while the stream is in use and starts a task
//!   that has waited a whole look, so a task starts within about
//!   2 × `GRACE` however the program behaves, and the stream is eager
//!   again from then on. A task queued behind one not yet started, and a
//!   wait that runs nothing itself (a timed one, an event's, a poll that
//!   finds work), also make it eager and wake the worker.
//!
//! `GRACE` is 1 ms: at 250 µs the looks cost the waiting program 2 µs per
//! 8 KiB op on the 2-core host (a look preempts a rank's thread while its
//! peers wait on it), at 2 ms 0.2 µs (bench/capi.md).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A unit of work on a stream; `Err` is kept for the next
/// [`Stream::synchronize`].
pub type Task<E> = Box<dyn FnOnce() -> Result<(), E> + Send>;

/// Tasks in a row run by a waiting thread after which a stream turns
/// lazy (module doc).
const LAZY_AFTER: u32 = 4;

/// How often the worker of a lazy stream looks at its queue; a task
/// nobody waits for starts within about twice this. The cost is one
/// wake-up per look while the stream is in use (module doc).
const GRACE: Duration = Duration::from_millis(1);

/// Looks in a row without a new task after which a lazy stream's worker
/// waits to be woken instead (an enqueue then wakes it): 10 ms idle.
const IDLE_LOOKS: u32 = 40;

enum Entry<E> {
    Task(Task<E>),
    /// The place of a [`Stream::run_here`] call: its thread runs there.
    Here,
}

struct Queue<E> {
    entries: VecDeque<Entry<E>>,
    /// Entries enqueued and finished, ever.
    submitted: u64,
    finished: u64,
    /// The first failure since the last synchronize.
    error: Option<E>,
    /// An entry is running (on the worker or a waiting thread), since.
    busy: Option<Instant>,
    closed: bool,
    /// Lazy mode (module doc): enqueues wake nobody.
    lazy: bool,
    /// Tasks in a row run by a waiting thread in eager mode.
    run_by_waiter: u32,
    /// The worker waits without a time limit (it must be woken).
    parked: bool,
    /// Threads waiting on `Inner::done`: a finish wakes only when some
    /// are (a futex wake is a system call even with no waiter, and the
    /// common program, which runs each op on its waiting thread, has none).
    done_waiters: u32,
}

impl<E> Queue<E> {
    /// The next task, if none is running and the front is a task; marks
    /// the queue busy.
    fn take(&mut self) -> Option<Task<E>> {
        if self.busy.is_some() || !matches!(self.entries.front(), Some(Entry::Task(_))) {
            return None;
        }
        self.busy = Some(Instant::now());
        match self.entries.pop_front() {
            Some(Entry::Task(t)) => Some(t),
            _ => None,
        }
    }

    /// Eager mode, and the count towards lazy mode started again.
    fn eager(&mut self) {
        self.lazy = false;
        self.run_by_waiter = 0;
    }

    /// A waiting thread takes a task: counts towards lazy mode.
    fn take_as_waiter(&mut self) -> Option<Task<E>> {
        let t = self.take()?;
        if !self.lazy {
            self.run_by_waiter += 1;
            self.lazy = self.run_by_waiter >= LAZY_AFTER;
        }
        Some(t)
    }
}

struct Inner<E> {
    q: Mutex<Queue<E>>,
    /// The worker waits here for a task (or the close).
    work: Condvar,
    /// Waiting threads wait here for entries to finish.
    done: Condvar,
    /// A panicking task's error.
    on_panic: Box<dyn Fn() -> E + Send + Sync>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking task holds no lock (it runs unlocked): nothing to heal.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(|p| p.into_inner())
}

fn wait_timeout<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>, d: Duration) -> MutexGuard<'a, T> {
    cv.wait_timeout(g, d).unwrap_or_else(|p| p.into_inner()).0
}

/// Waits (up to `d`, if given) for an entry to finish, counted in
/// `done_waiters` so that [`finish`] knows to wake it.
fn wait_done<'a, E>(
    inner: &Inner<E>,
    mut q: MutexGuard<'a, Queue<E>>,
    d: Option<Duration>,
) -> MutexGuard<'a, Queue<E>> {
    q.done_waiters += 1;
    let mut q = match d {
        None => wait(&inner.done, q),
        Some(d) => wait_timeout(&inner.done, q, d),
    };
    q.done_waiters -= 1;
    q
}

/// A stream and its worker thread. Dropping it runs what is queued, then
/// stops the worker.
pub struct Stream<E: Send + 'static> {
    inner: Arc<Inner<E>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

/// A handle that makes a stream start its queued tasks (for an event a
/// thread waits on); it does not keep the stream alive.
#[derive(Clone)]
pub struct Kicker(Weak<dyn Kick>);

trait Kick: Send + Sync {
    fn kick(&self);
}

impl Kicker {
    /// Makes the stream start what is queued, if it still exists.
    pub fn kick(&self) {
        if let Some(s) = self.0.upgrade() {
            s.kick();
        }
    }
}

impl<E: Send + 'static> Stream<E> {
    /// A stream whose worker thread is called `name`; a task that panics
    /// fails with `on_panic()`.
    ///
    /// # Errors
    /// The worker thread could not be started.
    pub fn new(
        name: &str,
        on_panic: impl Fn() -> E + Send + Sync + 'static,
    ) -> std::io::Result<Stream<E>> {
        Stream::with_worker(name, on_panic, true)
    }

    fn with_worker(
        name: &str,
        on_panic: impl Fn() -> E + Send + Sync + 'static,
        worker: bool,
    ) -> std::io::Result<Stream<E>> {
        let inner = Arc::new(Inner {
            q: Mutex::new(Queue {
                entries: VecDeque::new(),
                submitted: 0,
                finished: 0,
                error: None,
                busy: None,
                closed: false,
                lazy: false,
                run_by_waiter: 0,
                parked: false,
                done_waiters: 0,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            on_panic: Box::new(on_panic),
        });
        let w = Arc::clone(&inner);
        let worker = worker
            .then(|| {
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || run(&w))
            })
            .transpose()?;
        Ok(Stream {
            inner,
            worker: Mutex::new(worker),
        })
    }

    /// Appends a task; it runs after every entry enqueued before it.
    /// Returns its place, for [`Stream::wait_for`].
    pub fn enqueue(&self, task: Task<E>) -> u64 {
        let mut q = lock(&self.inner.q);
        // A task queued behind one nobody has run yet: the program is
        // queueing ahead, not waiting after each op, so start them now.
        if q.lazy && !q.entries.is_empty() {
            q.eager();
        }
        q.submitted += 1;
        q.entries.push_back(Entry::Task(task));
        if !q.lazy || q.parked {
            self.inner.work.notify_one();
        }
        q.submitted
    }

    /// Waits until every task enqueued so far has run; returns (and
    /// clears) the first failure since the last synchronize. Without a
    /// timeout this thread runs queued tasks itself; with one it only
    /// waits (and gets the worker going), and `Err(None)` means the
    /// timeout passed first.
    pub fn synchronize(&self, timeout: Option<Duration>) -> Result<(), Option<E>> {
        let mut q = lock(&self.inner.q);
        let target = q.submitted;
        q = match timeout {
            None => self.run_to(q, target),
            Some(t) => {
                let deadline = Instant::now() + t;
                self.inner.start_worker(&mut q);
                while q.finished < target {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(None);
                    }
                    q = wait_done(&self.inner, q, Some(deadline - now));
                }
                q
            }
        };
        match q.error.take() {
            Some(e) => Err(Some(e)),
            None => Ok(()),
        }
    }

    /// Waits until the entry at `place` (from [`Stream::enqueue`]) has
    /// run, running queued tasks on this thread; failures stay for the
    /// next synchronize.
    pub fn wait_for(&self, place: u64) {
        let q = lock(&self.inner.q);
        drop(self.run_to(q, place));
    }

    /// Runs `f` on this thread in its turn: after every entry enqueued
    /// before (run here if the worker has not taken them) and before any
    /// enqueued after.
    pub fn run_here<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut q = lock(&self.inner.q);
        q.submitted += 1;
        let place = q.submitted;
        q.entries.push_back(Entry::Here);
        q = self.run_to(q, place - 1);
        // Every entry before has finished; the front is ours once the
        // entry running now (the last before it) is done.
        while q.busy.is_some() || !matches!(q.entries.front(), Some(Entry::Here)) {
            q = wait_done(&self.inner, q, None);
        }
        q.entries.pop_front();
        q.busy = Some(Instant::now());
        drop(q);
        // Passes the turn on also if `f` panics.
        struct Turn<'a, E>(&'a Inner<E>);
        impl<E> Drop for Turn<'_, E> {
            fn drop(&mut self) {
                drop(finish(self.0, None));
            }
        }
        let _turn = Turn(&self.inner);
        f()
    }

    /// Runs (or waits for) the entries up to `place`, `q` locked; returns
    /// it locked with them finished.
    fn run_to<'a>(
        &'a self,
        mut q: MutexGuard<'a, Queue<E>>,
        place: u64,
    ) -> MutexGuard<'a, Queue<E>> {
        while q.finished < place {
            // A task before `place` not yet taken is at the front.
            if q.finished + u64::from(q.busy.is_some()) < place {
                if let Some(task) = q.take_as_waiter() {
                    drop(q);
                    q = run_one(&self.inner, task);
                    continue;
                }
            }
            q = wait_done(&self.inner, q, None);
        }
        q
    }

    /// True if every entry enqueued so far has run. A caller that polls
    /// this waits without running anything: when some are left, the
    /// worker is made to start them.
    pub fn is_idle(&self) -> bool {
        let mut q = lock(&self.inner.q);
        let idle = q.finished == q.submitted;
        if !idle {
            self.inner.start_worker(&mut q);
        }
        idle
    }

    /// Makes the worker start what is queued now (for a thread about to
    /// wait without running the tasks).
    pub fn kick(&self) {
        self.inner.kick();
    }

    /// A [`Kicker`] of this stream.
    pub fn kicker(&self) -> Kicker {
        let weak: Weak<Inner<E>> = Arc::downgrade(&self.inner);
        Kicker(weak)
    }

    /// True in lazy mode (module doc).
    #[cfg(test)]
    fn is_lazy(&self) -> bool {
        lock(&self.inner.q).lazy
    }

    /// Runs what is queued, then stops the worker (`aclrtDestroyStream`).
    pub fn close(&self) {
        lock(&self.inner.q).closed = true;
        self.inner.work.notify_one();
        if let Some(w) = lock(&self.worker).take() {
            let _ = w.join();
        }
    }
}

impl<E: Send + 'static> Drop for Stream<E> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<E> Inner<E> {
    /// Eager again, and the worker woken, if anything is queued.
    fn start_worker(&self, q: &mut Queue<E>) {
        if q.lazy && !q.entries.is_empty() {
            q.eager();
            self.work.notify_one();
        }
    }
}

impl<E: Send> Kick for Inner<E> {
    fn kick(&self) {
        self.start_worker(&mut lock(&self.q));
    }
}

/// The worker: runs tasks as they come until the stream is closed and
/// drained; in lazy mode it looks every [`GRACE`] (longer while a task
/// runs: nothing else can start then) and starts only a task that has
/// waited a whole look.
fn run<E>(inner: &Inner<E>) {
    let mut q = lock(&inner.q);
    // Entries submitted by the last look, and looks in a row with none new.
    let (mut seen, mut idle_looks) = (q.submitted, 0u32);
    loop {
        if !q.lazy || q.closed || q.finished < seen {
            if let Some(task) = q.take() {
                // Nobody waited for it within a look: the program is
                // overlapping, so start its tasks at once from now on.
                q.eager();
                drop(q);
                q = run_one(inner, task);
                continue;
            }
        }
        if q.closed && q.entries.is_empty() && q.busy.is_none() {
            return;
        }
        if q.lazy && idle_looks < IDLE_LOOKS {
            idle_looks = if q.submitted == seen {
                idle_looks + 1
            } else {
                0
            };
            seen = q.submitted;
            let look = q.busy.map_or(GRACE, |t| t.elapsed().max(GRACE));
            q = wait_timeout(&inner.work, q, look);
        } else {
            q.parked = true;
            q = wait(&inner.work, q);
            q.parked = false;
            // What woke it is new: not seen by a look yet.
            (seen, idle_looks) = (q.finished, 0);
        }
    }
}

/// Runs a task taken with [`Queue::take`] on this thread and books its
/// result; returns the queue locked again.
fn run_one<E>(inner: &Inner<E>, task: Task<E>) -> MutexGuard<'_, Queue<E>> {
    // A panicking task (a bug) fails the task, not the stream.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task))
        .unwrap_or_else(|_| Err((inner.on_panic)()));
    finish(inner, r.err())
}

/// Books the end of the running entry (and its failure); returns the
/// queue locked.
fn finish<E>(inner: &Inner<E>, failure: Option<E>) -> MutexGuard<'_, Queue<E>> {
    let mut q = lock(&inner.q);
    if let Some(e) = failure {
        q.error.get_or_insert(e);
    }
    q.busy = None;
    q.finished += 1;
    if q.done_waiters > 0 {
        inner.done.notify_all();
    }
    // Only the worker waits on `work`, and only for a task it can take
    // (or the close): no wake-up when nothing is left, so a waiting thread
    // that ran the task itself does not wake the worker for nothing. What
    // is left may be beyond what this thread waits for (another thread
    // queued it meanwhile), so the worker is woken even in lazy mode; a
    // waiter that wants it still gets it first (the queue is returned to
    // it locked).
    if !q.entries.is_empty() || q.closed {
        inner.work.notify_one();
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    fn stream() -> Stream<u32> {
        Stream::new("test-stream", || 999).unwrap()
    }

    fn push(s: &Stream<u32>, log: &Arc<Mutex<Vec<u32>>>, i: u32, fail: bool) -> u64 {
        let log = Arc::clone(log);
        s.enqueue(Box::new(move || {
            log.lock().unwrap().push(i);
            if fail {
                Err(100 + i)
            } else {
                Ok(())
            }
        }))
    }

    #[test]
    fn tasks_run_in_order_and_synchronize_returns_the_first_failure_once() {
        let s = stream();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5u32 {
            push(&s, &log, i, i == 2 || i == 3);
        }
        assert_eq!(s.synchronize(None), Err(Some(102)));
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(s.synchronize(None), Ok(()), "the error was cleared");
    }

    #[test]
    fn a_panicking_task_fails_with_the_streams_code_and_the_next_still_run() {
        let s = stream();
        s.enqueue(Box::new(|| panic!("a bug")));
        let log = Arc::new(Mutex::new(Vec::new()));
        push(&s, &log, 1, false);
        assert_eq!(s.synchronize(None), Err(Some(999)));
        assert_eq!(*log.lock().unwrap(), vec![1]);
    }

    #[test]
    fn enqueue_returns_before_the_task_runs() {
        let s = stream();
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
    fn an_untimed_wait_runs_the_tasks_itself_in_order() {
        // No worker: only the waiting thread can run them.
        let s = Stream::with_worker("t", || 999u32, false).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let first = push(&s, &log, 0, false);
        push(&s, &log, 1, true);
        push(&s, &log, 2, false);
        // A timed one must stay free to return, so it runs nothing.
        assert_eq!(s.synchronize(Some(Duration::from_millis(5))), Err(None));
        assert!(log.lock().unwrap().is_empty());
        s.wait_for(first);
        assert_eq!(*log.lock().unwrap(), vec![0], "only up to its place");
        assert_eq!(s.synchronize(None), Err(Some(101)));
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2]);
        assert!(s.is_idle());
    }

    #[test]
    fn run_here_runs_after_the_entries_before_and_before_those_after() {
        let s = Arc::new(Stream::with_worker("t", || 999u32, false).unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        push(&s, &log, 0, false);
        push(&s, &log, 1, false);
        let l = Arc::clone(&log);
        s.run_here(|| l.lock().unwrap().push(2));
        push(&s, &log, 3, false);
        assert_eq!(s.synchronize(None), Ok(()));
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3]);
        // A panic in it passes the turn on.
        let s2 = Arc::clone(&s);
        assert!(std::thread::spawn(move || s2.run_here(|| panic!("a bug")))
            .join()
            .is_err());
        push(&s, &log, 4, false);
        assert_eq!(s.synchronize(None), Ok(()));
        assert_eq!(log.lock().unwrap().last(), Some(&4));
    }

    #[test]
    fn the_worker_and_waiting_threads_run_one_entry_at_a_time_in_order() {
        let s = Arc::new(stream());
        let log = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(AtomicBool::new(false));
        let waiters: Vec<_> = (0..2)
            .map(|k| {
                let (s, log, running) = (Arc::clone(&s), Arc::clone(&log), Arc::clone(&running));
                std::thread::spawn(move || {
                    for i in 0..200 {
                        if k == 0 {
                            assert_eq!(s.synchronize(None), Ok(()));
                        } else {
                            // Blocking entries between the tasks.
                            s.run_here(|| {
                                assert!(!running.swap(true, Ordering::SeqCst), "two runners");
                                log.lock().unwrap().push(10_000 + i);
                                running.store(false, Ordering::SeqCst);
                            });
                        }
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
        for t in waiters {
            t.join().unwrap();
        }
        assert_eq!(s.synchronize(None), Ok(()), "no task panicked");
        let log = log.lock().unwrap();
        let tasks: Vec<u32> = log.iter().copied().filter(|&i| i < 10_000).collect();
        let heres: Vec<u32> = log.iter().copied().filter(|&i| i >= 10_000).collect();
        assert_eq!(tasks, (0..2000).collect::<Vec<_>>());
        assert_eq!(heres, (10_000..10_200).collect::<Vec<_>>());
    }

    /// Enqueue-and-synchronize until the stream turns lazy (the worker
    /// may take a task now and then, which starts the count again).
    fn make_lazy(s: &Stream<u32>) {
        for _ in 0..10_000 {
            s.enqueue(Box::new(|| Ok(())));
            assert_eq!(s.synchronize(None), Ok(()));
            if s.is_lazy() {
                return;
            }
        }
        panic!("the stream never turned lazy");
    }

    #[test]
    fn a_lazy_stream_still_starts_a_task_nobody_waits_for() {
        let s = stream();
        make_lazy(&s);
        let (tx, rx) = std::sync::mpsc::channel();
        s.enqueue(Box::new(move || {
            tx.send(()).unwrap();
            Ok(())
        }));
        // No wait: the worker's look must start it.
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the task never ran");
        assert!(
            !s.is_lazy(),
            "a task the worker had to start makes it eager"
        );
        assert_eq!(s.synchronize(None), Ok(()));
    }

    #[test]
    fn a_task_queued_behind_an_unstarted_one_makes_a_lazy_stream_eager() {
        let s = stream();
        make_lazy(&s);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // The first blocks its runner until the second is queued.
        s.enqueue(Box::new(move || {
            let _ = rx.recv_timeout(Duration::from_secs(10));
            Ok(())
        }));
        s.enqueue(Box::new(|| Ok(())));
        assert!(!s.is_lazy());
        tx.send(()).unwrap();
        assert_eq!(s.synchronize(None), Ok(()));
    }

    #[test]
    fn waits_that_run_nothing_themselves_get_a_lazy_stream_going() {
        let s = stream();
        make_lazy(&s);
        s.enqueue(Box::new(|| Ok(())));
        assert_eq!(s.synchronize(Some(Duration::from_secs(10))), Ok(()));
        make_lazy(&s);
        s.enqueue(Box::new(|| Ok(())));
        let t0 = Instant::now();
        while !s.is_idle() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "a polled stream never ran"
            );
            std::thread::yield_now();
        }
    }
}
