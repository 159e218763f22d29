//! The two structures shared between tasks and threads: a byte budget (I/O
//! task ↔ executor) and a one-shot result slot (worker thread ↔ user thread).
//!
//! Both are small `Mutex`-based types so that `loom` can check every
//! interleaving. Run the model tests with
//! `RUSTFLAGS="--cfg loom" cargo test -p hccl-hw --lib --release loom`
//! (they are compiled only under `--cfg loom`).

use std::task::{Context, Poll, Waker};

#[cfg(loom)]
use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it;
    // the state (plain counters) is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Debug)]
struct BudgetState {
    available: u64,
    closed: bool,
    waker: Option<Waker>,
}

/// A bound on bytes in flight from one reader task to the executor: the
/// reader acquires before reading a chunk off the socket, the executor
/// releases (by dropping the [`Permit`]) once the chunk has been copied into
/// a posted buffer. When the budget is spent the reader stops reading, TCP's
/// window fills and the sender blocks: backpressure with a hard memory bound.
///
/// A cheap handle (clones share one budget). One acquirer at a time (the
/// peer's reader task); any thread may release.
#[derive(Clone, Debug)]
pub struct ByteBudget(Arc<BudgetInner>);

#[derive(Debug)]
struct BudgetInner {
    capacity: u64,
    state: Mutex<BudgetState>,
}

/// Error of acquiring from a closed budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("byte budget closed")]
pub struct Closed;

/// `n` bytes of a [`ByteBudget`], returned when dropped.
#[derive(Debug)]
pub struct Permit {
    budget: ByteBudget,
    n: u64,
}

impl Permit {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.n
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.release(self.n);
    }
}

impl ByteBudget {
    /// A budget of `capacity` bytes.
    pub fn new(capacity: u64) -> ByteBudget {
        ByteBudget(Arc::new(BudgetInner {
            capacity,
            state: Mutex::new(BudgetState {
                available: capacity,
                closed: false,
                waker: None,
            }),
        }))
    }

    /// The capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.0.capacity
    }

    /// Bytes currently held by permits.
    pub fn held(&self) -> u64 {
        self.0.capacity - lock(&self.0.state).available
    }

    /// Takes `n` bytes (at most the capacity: larger requests are clamped)
    /// or registers the waker and returns `Pending`.
    pub fn poll_acquire(&self, cx: &mut Context<'_>, n: u64) -> Poll<Result<Permit, Closed>> {
        let n = n.min(self.0.capacity);
        let mut s = lock(&self.0.state);
        if s.closed {
            return Poll::Ready(Err(Closed));
        }
        if s.available >= n {
            s.available -= n;
            return Poll::Ready(Ok(Permit {
                budget: self.clone(),
                n,
            }));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Waits for `n` bytes (clamped to the capacity).
    ///
    /// # Errors
    /// [`Closed`] once [`ByteBudget::close`] was called.
    pub async fn acquire(&self, n: u64) -> Result<Permit, Closed> {
        std::future::poll_fn(|cx| self.poll_acquire(cx, n)).await
    }

    fn release(&self, n: u64) {
        let waker = {
            let mut s = lock(&self.0.state);
            s.available = (s.available + n).min(self.0.capacity);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Fails the waiting and every later acquire (the communicator is closing).
    pub fn close(&self) {
        let waker = {
            let mut s = lock(&self.0.state);
            s.closed = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A one-shot result slot: a worker thread sets it once, any number of
/// threads can poll or wait for it. The async op handle of a communicator.
#[derive(Debug)]
pub struct DoneSlot<T> {
    value: Mutex<Option<T>>,
    cv: Condvar,
}

impl<T> Default for DoneSlot<T> {
    fn default() -> Self {
        DoneSlot {
            value: Mutex::new(None),
            cv: Condvar::new(),
        }
    }
}

impl<T> DoneSlot<T> {
    /// An empty slot.
    pub fn new() -> Arc<DoneSlot<T>> {
        Arc::new(DoneSlot::default())
    }

    /// Stores the result (a second call is ignored: the first result wins)
    /// and wakes every waiter.
    pub fn set(&self, v: T) {
        let mut g = lock(&self.value);
        if g.is_none() {
            *g = Some(v);
        }
        drop(g);
        self.cv.notify_all();
    }

    /// True once a result is stored.
    pub fn is_set(&self) -> bool {
        lock(&self.value).is_some()
    }

    /// Blocks until a result is stored, then takes it (`None` if another
    /// thread took it first).
    pub fn wait_take(&self) -> Option<T> {
        let mut g = lock(&self.value);
        loop {
            if g.is_some() {
                return g.take();
            }
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn budget_blocks_when_spent_and_resumes_on_release() {
        let b = ByteBudget::new(10);
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let p = match b.poll_acquire(&mut cx, 8) {
            Poll::Ready(Ok(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(b.held(), 8);
        assert!(b.poll_acquire(&mut cx, 4).is_pending(), "only 2 bytes left");
        drop(p);
        assert_eq!(b.held(), 0);
        let big = match b.poll_acquire(&mut cx, 1000) {
            Poll::Ready(Ok(p)) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(big.bytes(), 10, "requests above capacity are clamped");
        b.close();
        drop(big);
        assert!(matches!(
            b.poll_acquire(&mut cx, 1),
            Poll::Ready(Err(Closed))
        ));
    }

    #[test]
    fn slot_keeps_the_first_value() {
        let s = DoneSlot::new();
        assert!(!s.is_set());
        s.set(1);
        s.set(2);
        assert!(s.is_set());
        assert_eq!(s.wait_take(), Some(1));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    #[test]
    fn loom_budget_never_loses_a_wakeup_or_bytes() {
        loom::model(|| {
            let b = ByteBudget::new(4);
            let first = loom::future::block_on(b.acquire(3)).unwrap();
            let b2 = b.clone();
            let reader = loom::thread::spawn(move || {
                // Needs the 3 bytes the caller still holds: must be woken.
                let p = loom::future::block_on(b2.acquire(4)).unwrap();
                assert_eq!(p.bytes(), 4);
            });
            drop(first);
            reader.join().unwrap();
            assert_eq!(b.held(), 0);
        });
    }

    #[test]
    fn loom_close_wakes_a_blocked_reader() {
        loom::model(|| {
            let b = ByteBudget::new(2);
            let held = loom::future::block_on(b.acquire(2)).unwrap();
            let b2 = b.clone();
            let reader =
                loom::thread::spawn(move || loom::future::block_on(b2.acquire(1)).is_err());
            b.close();
            assert!(reader.join().unwrap(), "closed budget fails the waiter");
            drop(held);
        });
    }

    #[test]
    fn loom_slot_delivers_to_a_waiter_exactly_once() {
        loom::model(|| {
            let s = DoneSlot::new();
            let s2 = Arc::clone(&s);
            let setter = loom::thread::spawn(move || s2.set(7u32));
            assert_eq!(s.wait_take(), Some(7));
            setter.join().unwrap();
            assert!(!s.is_set());
        });
    }
}
