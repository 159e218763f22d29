//! The handle of an asynchronous collective.

use std::sync::Arc;
use std::thread::JoinHandle;

use hccl_hw::sync::DoneSlot;

use super::drain::Tracker;
use super::CommError;

/// A collective running on its own thread. Ops on one communicator still
/// run in the order they were called (each takes its sequence number when
/// called). Dropping the handle without waiting lets the op finish in the
/// background: its output is then lost (errors still break the
/// communicator and show in [`super::Comm::async_error`]), but not its
/// data: [`super::Comm::destroy`], and dropping the `Comm`, wait for it, so
/// a dropped `send_async` is still delivered.
#[derive(Debug)]
pub struct OpHandle<T> {
    slot: Arc<DoneSlot<Result<T, CommError>>>,
    thread: Option<JoinHandle<()>>,
    /// Where the op's failure waits to be seen ([`Tracker::seen`]).
    seen: Option<(Arc<Tracker>, u64)>,
}

impl<T: Send + 'static> OpHandle<T> {
    pub(crate) fn spawn(
        name: String,
        f: impl FnOnce() -> Result<T, CommError> + Send + 'static,
    ) -> OpHandle<T> {
        let slot = DoneSlot::new();
        let s = Arc::clone(&slot);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || s.set(f()));
        match thread {
            Ok(t) => OpHandle {
                slot,
                thread: Some(t),
                seen: None,
            },
            Err(e) => {
                slot.set(Err(CommError::Unsupported(format!(
                    "cannot start a thread for the op: {e}"
                ))));
                OpHandle {
                    slot,
                    thread: None,
                    seen: None,
                }
            }
        }
    }

    /// Marks op `id` of `tracker` as reported once this handle is waited.
    pub(crate) fn reported_to(mut self, tracker: &Arc<Tracker>, id: u64) -> OpHandle<T> {
        self.seen = Some((Arc::clone(tracker), id));
        self
    }

    /// True once the op has finished (successfully or not). Never blocks.
    pub fn is_done(&self) -> bool {
        self.slot.is_set()
    }

    /// Blocks until the op finishes and returns its output buffer.
    ///
    /// # Errors
    /// The op's error.
    pub fn wait(mut self) -> Result<T, CommError> {
        let r = self
            .slot
            .wait_take()
            .unwrap_or_else(|| Err(CommError::Broken("op result already taken".into())));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some((tracker, id)) = self.seen.take() {
            tracker.seen(id);
        }
        r
    }
}
