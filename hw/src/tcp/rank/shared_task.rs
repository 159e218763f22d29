//! A ring reader's future that two drivers poll: the runtime, as a task,
//! and the rank's thread, directly, while it spins waiting for an op.
//!
//! A scheduler pass (`block_on` with a `yield_now`) polls the I/O driver,
//! an `epoll_wait`: with every peer on shared-memory rings that was 5 of
//! the 6.4 system calls per rank-op of an 8 KiB AllReduce (bench/tcp.md,
//! session 13). The ring readers await only their ring and the peer's
//! byte budget, both plain wakers, so the spinning thread can poll them
//! itself. Both drivers poll it with one waker of its own, which wakes
//! the task (so every waker the future registers still reaches the
//! runtime once the thread stops spinning and sleeps in it) and marks the
//! future woken (so the spinning thread polls it too). Both drivers run on the
//! rank's one thread (the runtime is a current-thread one driven by
//! `block_on`), never at once: the lock is never contended.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The waker the future gets: it wakes the task and marks the future
/// woken, so that the spinning thread polls it too (a reader woken by
/// the budget this thread freed has no bytes in its ring to show it).
struct Notify {
    woken: AtomicBool,
    /// The task's waker, from its last poll by the runtime.
    task: Mutex<Option<Waker>>,
}

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let w = self.task.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// The future, shared by its task ([`SharedTask::task`]) and the rank's
/// thread ([`SharedTask::poll_here`]).
pub(crate) struct SharedTask {
    /// `None` once it has finished.
    fut: Mutex<Option<BoxFuture>>,
    notify: Arc<Notify>,
    /// The waker both drivers poll it with (`notify`'s).
    waker: Waker,
}

impl std::fmt::Debug for SharedTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTask")
    }
}

impl SharedTask {
    /// Shares `fut`; spawn [`SharedTask::task`] of the result on the runtime.
    pub(crate) fn new(fut: impl Future<Output = ()> + Send + 'static) -> Arc<SharedTask> {
        let notify = Arc::new(Notify {
            woken: AtomicBool::new(false),
            task: Mutex::new(None),
        });
        Arc::new(SharedTask {
            fut: Mutex::new(Some(Box::pin(fut))),
            waker: Waker::from(Arc::clone(&notify)),
            notify,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<BoxFuture>> {
        // A panicking poll leaves the slot as it was: nothing to heal.
        self.fut.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether something woke the future since its last poll.
    pub(crate) fn woken(&self) -> bool {
        self.notify.woken.load(Ordering::Acquire)
    }

    /// The runtime's side: a future that polls the shared one.
    pub(crate) fn task(self: &Arc<SharedTask>) -> impl Future<Output = ()> + Send + 'static {
        let me = Arc::clone(self);
        std::future::poll_fn(move |cx| {
            let mut s = me.lock();
            {
                let mut task = me.notify.task.lock().unwrap_or_else(|p| p.into_inner());
                if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                    *task = Some(cx.waker().clone());
                }
            }
            me.notify.woken.store(false, Ordering::Release);
            poll_slot(&mut s, &mut Context::from_waker(&me.waker))
        })
    }

    /// The rank thread's side: polls the future once with the waker that
    /// wakes its task (a no-op before the runtime first polled it: the
    /// task's first poll comes before any op). Returns false once it has
    /// finished.
    pub(crate) fn poll_here(&self) -> bool {
        let mut s = self.lock();
        let polled = self.notify.task.lock().map(|t| t.is_some()).unwrap_or(true);
        if !polled {
            return s.is_some();
        }
        self.notify.woken.store(false, Ordering::Release);
        if poll_slot(&mut s, &mut Context::from_waker(&self.waker)).is_ready() {
            // The task learns it is done at its next poll.
            self.waker.wake_by_ref();
            return false;
        }
        true
    }
}

fn poll_slot(s: &mut Option<BoxFuture>, cx: &mut Context<'_>) -> Poll<()> {
    let Some(fut) = s.as_mut() else {
        return Poll::Ready(());
    };
    let r = fut.as_mut().poll(cx);
    if r.is_ready() {
        *s = None;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    #[test]
    fn the_thread_and_the_task_drive_one_future_to_its_end() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (in_tx, mut in_rx) = unbounded_channel::<u32>();
        let (out_tx, mut out_rx) = unbounded_channel::<u32>();
        let shared = SharedTask::new(async move {
            while let Some(v) = in_rx.recv().await {
                let _ = out_tx.send(v * 2);
            }
        });
        let task = rt.spawn(shared.task());
        // The runtime polls it first (it then waits on `in_rx`).
        rt.block_on(tokio::task::yield_now());
        in_tx.send(1).expect("send");
        // Polled here, without the runtime: the value goes through.
        assert!(shared.poll_here());
        assert_eq!(out_rx.try_recv().ok(), Some(2));
        // Nothing new: still pending, nothing sent.
        assert!(shared.poll_here());
        assert!(out_rx.try_recv().is_err());
        // The waker the thread's poll registered is the task's: the
        // runtime alone takes the next value.
        in_tx.send(5).expect("send");
        assert_eq!(rt.block_on(out_rx.recv()), Some(10));
        // The end, seen here; the task then finishes too.
        drop(in_tx);
        assert!(!shared.poll_here());
        rt.block_on(task).expect("the task finishes");
        assert!(!shared.poll_here());
    }
}
