//! `SIGUSR1` dumps the flight record of every live communicator of the
//! process (PyTorch's flight recorder and `py-spy`-style "what is it
//! doing now" without attaching a debugger). A thread of its own waits
//! for the signal (`signal_hook`'s iterator: the handler only wakes it),
//! so a dump runs outside signal context and never on an op's thread.
//! Installed once, by the first communicator with a dump directory; a
//! process whose communicators have none keeps `SIGUSR1`'s default.

use std::sync::OnceLock;

use crate::flight::DumpReason;

/// Starts the dump thread, once per process. A failure to install the
/// handler is logged (the dumps on failure still work).
pub(crate) fn install() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let signals = match signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR1]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("hccl: SIGUSR1 will not dump the flight recorder: {e}");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("hccl-flight-sigusr1".into())
            .spawn(move || {
                let mut signals = signals;
                for _ in signals.forever() {
                    super::recorder::dump_all(&super::crossed::live(), DumpReason::Signal);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("hccl: SIGUSR1 will not dump the flight recorder: {e}");
        }
    });
}
