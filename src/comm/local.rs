//! The communicators of one [`super::Comm::init_all`] call, all in this
//! process: which thread created them and whether any other thread has
//! called them, so that a blocking call only its own thread could complete
//! fails in seconds with advice instead of after `HCCL_EXEC_TIMEOUT`.
//!
//! In HCCL, `HcclCommInitAll` and then one thread calling `HcclAllReduce`
//! on every communicator in a loop works, because each call only enqueues
//! work on a stream. Here a blocking call returns when the op is done, so
//! the same loop waits in its first call for peers that nothing will ever
//! call: this thread is the only one that drives them, and it is blocked.
//! [`super::group()`] (or the async calls) is the supported way to issue
//! such calls from one thread; this module names the mistake.
//!
//! The rule: a blocking call on rank `r` is *suspect* when the calling
//! thread created the communicators, and every peer it waits for has never
//! been called from another thread and is in no call now. A suspect call
//! that is still waiting [`grace`] later, with no peer entered meanwhile,
//! fails. A program that hands the other communicators to threads which
//! first call them more than the grace later would be failed wrongly: the
//! grace is 5 s (or half of `HCCL_EXEC_TIMEOUT`, if shorter), far beyond the
//! time a spawned thread takes to reach its first call in SPMD code.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use super::lock;

/// The longest a suspect call waits before it fails.
const MAX_GRACE: Duration = Duration::from_secs(5);

/// How long a suspect call waits for a peer to be entered: [`MAX_GRACE`],
/// or half of `HCCL_EXEC_TIMEOUT` if that is shorter (so the advice comes
/// before the timeout would).
pub(crate) fn grace(exec_timeout: Option<Duration>) -> Duration {
    exec_timeout.map_or(MAX_GRACE, |t| (t / 2).min(MAX_GRACE))
}

#[derive(Default, Clone, Copy)]
struct Driven {
    /// Some thread other than the creator has called this rank.
    by_other_thread: bool,
    /// Calls in progress on this rank.
    in_call: u32,
    /// Calls ever entered (a change wakes a watching call).
    entered: u64,
}

/// The ranks of one `init_all`, shared by their communicators.
pub(crate) struct LocalWorld {
    creator: ThreadId,
    grace: Duration,
    ranks: Mutex<Vec<Driven>>,
    changed: Condvar,
}

/// Which ranks a blocking call waits for.
pub(crate) enum Waits<'a> {
    /// Every other rank (a collective).
    All,
    /// These ranks (point-to-point peers).
    Peers(&'a [u32]),
}

/// What a watched call does when it is found stuck: fail the op with the
/// message (called once, from the watching thread).
pub(crate) type OnStuck = Box<dyn FnOnce(String) + Send>;

impl LocalWorld {
    /// The world of `n` ranks created by the current thread; `grace` as
    /// [`grace`] gives.
    pub(crate) fn new(n: u32, grace: Duration) -> Arc<LocalWorld> {
        Arc::new(LocalWorld {
            creator: std::thread::current().id(),
            grace,
            ranks: Mutex::new(vec![Driven::default(); n as usize]),
            changed: Condvar::new(),
        })
    }

    /// Marks a blocking call of the current thread on `rank` as started.
    /// If it is suspect (see the module docs), a watcher thread fails it
    /// through `on_stuck(describe(peers))` unless a peer is entered within
    /// the grace or the call ends first. The returned guard ends the call.
    pub(crate) fn enter(
        self: &Arc<LocalWorld>,
        rank: u32,
        waits: Waits<'_>,
        describe: impl FnOnce(&[u32]) -> String + Send + 'static,
        on_stuck: OnStuck,
    ) -> CallGuard {
        let me = std::thread::current().id();
        let peers: Vec<u32> = match waits {
            Waits::All => (0..lock(&self.ranks).len() as u32)
                .filter(|&q| q != rank)
                .collect(),
            Waits::Peers(p) => p.iter().copied().filter(|&q| q != rank).collect(),
        };
        let done = Arc::new(Mutex::new(CallState::default()));
        let suspect = {
            let mut ranks = lock(&self.ranks);
            let d = &mut ranks[rank as usize];
            d.in_call += 1;
            d.entered += 1;
            d.by_other_thread |= me != self.creator;
            self.changed.notify_all();
            me == self.creator
                && !peers.is_empty()
                && peers.iter().all(|&q| {
                    let d = ranks[q as usize];
                    !d.by_other_thread && d.in_call == 0
                })
        };
        if suspect {
            let world = Arc::clone(self);
            let state = Arc::clone(&done);
            // A watcher that cannot be started only loses the advice: the
            // call still ends at HCCL_EXEC_TIMEOUT.
            let _ = std::thread::Builder::new()
                .name(format!("hccl-watch-{rank}"))
                .spawn(move || {
                    if world.stuck(&peers, &state) {
                        let msg = describe(&peers);
                        lock(&state).stuck = Some(msg.clone());
                        on_stuck(msg);
                    }
                });
        }
        CallGuard {
            world: Arc::clone(self),
            rank,
            state: done,
        }
    }

    /// Marks `rank` as driven by something other than its creator's
    /// blocking calls: an async op was issued on it (its op runs on a
    /// thread of its own).
    pub(crate) fn driven(&self, rank: u32) {
        let mut ranks = lock(&self.ranks);
        let d = &mut ranks[rank as usize];
        d.by_other_thread = true;
        d.entered += 1;
        self.changed.notify_all();
    }

    /// Waits up to the grace for the call to end or a peer to be entered;
    /// if neither happened, marks the call stuck and returns true.
    fn stuck(&self, peers: &[u32], state: &Mutex<CallState>) -> bool {
        let deadline = Instant::now() + self.grace;
        let entered = |ranks: &[Driven]| peers.iter().map(|&q| ranks[q as usize].entered).sum();
        let mut ranks = lock(&self.ranks);
        let before: u64 = entered(&ranks);
        loop {
            if lock(state).ended || entered(&ranks) != before {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                // Decided under the call's lock, so a call that ended
                // just now is never failed.
                let mut st = lock(state);
                st.failing = !st.ended;
                return st.failing;
            }
            ranks = self
                .changed
                .wait_timeout(ranks, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[derive(Default)]
struct CallState {
    ended: bool,
    /// The watcher decided to fail the call.
    failing: bool,
    /// The message the call was failed with.
    stuck: Option<String>,
}

/// A blocking call in progress ([`LocalWorld::enter`]); dropping it ends
/// the call.
pub(crate) struct CallGuard {
    world: Arc<LocalWorld>,
    rank: u32,
    state: Arc<Mutex<CallState>>,
}

impl CallGuard {
    /// The message the watcher failed this call with, if it did.
    pub(crate) fn stuck(&self) -> Option<String> {
        lock(&self.state).stuck.clone()
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        lock(&self.state).ended = true;
        let mut ranks = lock(&self.world.ranks);
        let d = &mut ranks[self.rank as usize];
        d.in_call = d.in_call.saturating_sub(1);
        self.world.changed.notify_all();
    }
}
