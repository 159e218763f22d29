//! The interpreter's exit, for the threads of this module that are not
//! Python's (a communicator's worker thread, which completes async ops).
//!
//! Such a thread attaches to Python to run an op's done callbacks (the
//! torch futures DDP waits on) and to release a buffer export
//! (`PyBuffer_Release`). A thread that attaches, or waits to, while the
//! interpreter finalizes is ended by CPython with `pthread_exit` when it
//! takes the GIL, and that forced unwinding through Rust frames aborts the
//! process; PyO3's `try_attach` only checks the state on entry ("best
//! effort"). So every such attach goes through [`attach`], and the
//! package's `atexit` handler ([`at_exit`], registered by
//! `hccl_rs/__init__.py` when it is imported, so it runs after the
//! handlers registered later, torch.py's among them) stops new attaches
//! and waits, the GIL released, for the ones under way, before
//! finalization begins. After it, callbacks are not run (nobody waits on
//! them: the program is exiting) and buffer exports are left to the
//! process's end.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Set by [`at_exit`]: no thread attaches any more.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Threads inside [`attach`].
static ATTACHING: AtomicUsize = AtomicUsize::new(0);

/// How long exit waits for attaches under way (a callback that never
/// returns must not hang the exit for ever): as torch.py's
/// `_Completer.EXIT_WAIT_S`.
const EXIT_WAIT: Duration = Duration::from_secs(60);

/// Runs `f` attached to Python, unless the interpreter is exiting
/// ([`at_exit`] ran) or cannot be attached to: then `None`, `f` not run.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    // SeqCst with at_exit's store and load: a thread either sees EXITING
    // or is counted before at_exit reads the count.
    ATTACHING.fetch_add(1, Ordering::SeqCst);
    let r = if EXITING.load(Ordering::SeqCst) {
        None
    } else {
        Python::try_attach(f)
    };
    ATTACHING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// The package's `atexit` handler: stops [`attach`], then waits (the GIL
/// released, so those threads can take it) up to a minute for the threads
/// inside it to finish.
#[pyfunction]
pub(crate) fn at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let end = Instant::now() + EXIT_WAIT;
        while ATTACHING.load(Ordering::SeqCst) > 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
