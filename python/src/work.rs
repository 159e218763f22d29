//! `Work`: the handle of an async op (`wait()`, `is_completed()`, done
//! callbacks for torch futures).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hccl::CommError;
use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;

use crate::error::to_py;

#[derive(Default)]
struct State {
    /// The op's result, once it finished.
    result: Option<Result<(), CommError>>,
    /// Called (with the GIL) when it finishes.
    callbacks: Vec<Py<PyAny>>,
    /// The result is in and the callbacks have run: `wait` returns.
    finished: bool,
    /// Threads in `wait` on the condition variable: `set` wakes only when
    /// some are (a wake is a system call even with nobody waiting).
    waiters: u32,
}

/// Where an op's result lands.
#[derive(Default)]
pub(crate) struct Done {
    state: Mutex<State>,
    cv: Condvar,
}

impl Done {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the result, runs the callbacks (on this thread, with the
    /// GIL; an exception in one is reported as unraisable), then wakes
    /// `wait`: a program that waited may exit, and this thread must not
    /// take the GIL after that (a thread taking it while the interpreter
    /// finalizes is ended by CPython in the middle of its frames; see
    /// `exit`).
    pub(crate) fn set(&self, r: Result<(), CommError>) {
        let callbacks = {
            let mut s = self.lock();
            s.result = Some(r);
            std::mem::take(&mut s.callbacks)
        };
        if !callbacks.is_empty() {
            // None once the interpreter is exiting: nobody waits then.
            let _ = crate::exit::attach(|py| {
                for cb in callbacks {
                    if let Err(e) = cb.call0(py) {
                        e.write_unraisable(py, Some(cb.bind(py)));
                    }
                }
            });
        }
        let wake = {
            let mut s = self.lock();
            s.finished = true;
            s.waiters > 0
        };
        if wake {
            self.cv.notify_all();
        }
    }
}

/// The handle of an async op (`async_op=True`). The op's buffers are in
/// use until it completes: do not read or write them before `wait()`.
#[pyclass(frozen, module = "hccl_rs")]
pub(crate) struct Work {
    pub(crate) done: Arc<Done>,
    /// "AllReduce", ... for repr.
    pub(crate) what: String,
    /// The communicator's stream and the op's place in it: an untimed
    /// `wait()` runs the op itself if the worker has not started it.
    pub(crate) stream: Arc<crate::stream::Stream>,
    pub(crate) place: u64,
}

#[pymethods]
impl Work {
    /// Blocks (the GIL released) until the op finishes; returns True.
    /// Without a timeout this thread runs the op (and those queued before
    /// it) itself if the worker has not started it.
    /// Raises the op's HcclError if it failed (every time it is called),
    /// TimeoutError if `timeout` seconds pass first.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let done = Arc::clone(&self.done);
        let (stream, place) = (Arc::clone(&self.stream), self.place);
        let r = py.detach(move || {
            match timeout {
                None => stream.wait_for(place),
                Some(_) => stream.kick(),
            }
            let mut s = done.lock();
            let until =
                timeout.map(|t| std::time::Instant::now() + Duration::from_secs_f64(t.max(0.0)));
            while !s.finished {
                s.waiters += 1;
                match until {
                    None => s = done.cv.wait(s).unwrap_or_else(|p| p.into_inner()),
                    Some(u) => {
                        let left = u.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            s.waiters -= 1;
                            return None;
                        }
                        s = done
                            .cv
                            .wait_timeout(s, left)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                }
                s.waiters -= 1;
            }
            s.result.clone()
        });
        match r {
            None => Err(PyTimeoutError::new_err(format!(
                "{} did not finish within {} s",
                self.what,
                timeout.unwrap_or(0.0)
            ))),
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => Err(to_py(py, &e)),
        }
    }

    /// True once the op has finished, successfully or not. Never blocks.
    fn is_completed(&self) -> bool {
        self.done.lock().result.is_some()
    }

    /// True once the op has finished successfully.
    fn is_success(&self) -> bool {
        matches!(self.done.lock().result, Some(Ok(())))
    }

    /// The op's HcclError if it failed, else None (also while running).
    fn exception(&self, py: Python<'_>) -> Option<PyErr> {
        match &self.done.lock().result {
            Some(Err(e)) => Some(to_py(py, e)),
            _ => None,
        }
    }

    /// Calls `callback()` when the op finishes (at once if it has), on the
    /// thread that finished it, with the GIL.
    fn add_done_callback(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        {
            let mut s = self.done.lock();
            if s.result.is_none() {
                s.callbacks.push(callback);
                return Ok(());
            }
        }
        callback.call0(py).map(drop)
    }

    fn __repr__(&self) -> String {
        let state = match &self.done.lock().result {
            None => "running",
            Some(Ok(())) => "done",
            Some(Err(_)) => "failed",
        };
        format!("<hccl_rs.Work {} {state}>", self.what)
    }
}
