//! Dumps on a failure learned between ops (TCP): a peer lost (its
//! connection closed without a goodbye) or a peer's abort frame, while
//! this rank runs no op. A TCP rank reads its connections only while it
//! runs an op or is asked ([`super::Comm::async_error`]), so without this
//! an idle rank would dump only when its next op fails, or never. A thread
//! of its own looks every [`PERIOD`] at each idle communicator that has a
//! dump directory and has written no dump for a failure yet, as
//! `async_error` does (without breaking the communicator: its next op
//! fails as it would have), and dumps the first failure it finds
//! ([`super::recorder::Trigger::Event`]). The simulator backend dumps its
//! idle ranks itself when its cluster hangs.

use std::sync::OnceLock;
use std::time::Duration;

use super::recorder::{self, Trigger};
use super::{BackendKind, Shared};

/// How often idle communicators are looked at: a failure between ops is
/// dumped within about this long.
pub(crate) const PERIOD: Duration = Duration::from_millis(100);

/// Starts the watch thread, once per process (by the first communicator
/// with a dump directory). A failure to start it is logged.
pub(crate) fn install() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("hccl-flight-watch".into())
            .spawn(|| loop {
                std::thread::sleep(PERIOD);
                for sh in super::crossed::live() {
                    look(&sh);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("hccl: a peer lost between ops will not dump the flight recorder: {e}");
        }
    });
}

/// Dumps `sh` if, idle, it has learned of a failure.
fn look(sh: &Shared) {
    let Some(f) = sh.flight.as_ref().filter(|f| f.wants_event()) else {
        return;
    };
    if sh.kind != BackendKind::Tcp {
        return;
    }
    // Busy: an op runs, and its failure dumps.
    let Ok(mut st) = sh.state.try_lock() else {
        return;
    };
    let e = st.backend.as_mut().and_then(|b| b.async_error());
    drop(st);
    if let Some(e) = e.map(|e| sh.name_ranks(e)) {
        let why = (recorder::reason_of(&e), Trigger::Event);
        f.dump_logged(sh, why, Some(e.to_string()));
    }
}
