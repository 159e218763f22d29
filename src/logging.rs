//! Making the library's `tracing` events visible: [`init_logging`].
//!
//! hccl-rs reports what it cannot return as an error (a stranger on the
//! root port, why the same-host path is off, a profile that could not be
//! written) as `tracing` events. Nothing is printed until a subscriber is
//! installed: the `hccl` and `hccl-test` programs call [`init_logging`]
//! at start; a program using [`crate::Comm`] calls it once (or installs its
//! own `tracing` subscriber instead).
//!
//! Level, first that is set:
//! - `RUST_LOG` (tracing-subscriber's `EnvFilter` syntax, e.g. `hccl=debug`);
//! - `ASCEND_GLOBAL_LOG_LEVEL` with CANN's values (CANN environment variable
//!   reference): 0 DEBUG, 1 INFO, 2 WARNING, 3 ERROR, 4 NULL (nothing);
//! - otherwise warnings and errors ([`DEFAULT_LEVEL`]).
//!
//! Destination: standard error, or standard output when
//! `ASCEND_SLOG_PRINT_TO_STDOUT=1` (CANN's switch for printing logs to the
//! screen; 0, unset or anything else: standard error, as CANN falls back to
//! its default for other values). Colour codes only when that stream is a
//! terminal.

use std::io::IsTerminal;

use tracing::level_filters::LevelFilter;

/// `ASCEND_GLOBAL_LOG_LEVEL`: CANN's global log level, 0-4.
pub const ENV_LOG_LEVEL: &str = "ASCEND_GLOBAL_LOG_LEVEL";
/// `ASCEND_SLOG_PRINT_TO_STDOUT`: `1` sends logs to standard output.
pub const ENV_PRINT_TO_STDOUT: &str = "ASCEND_SLOG_PRINT_TO_STDOUT";
/// The level when neither `RUST_LOG` nor `ASCEND_GLOBAL_LOG_LEVEL` is set:
/// warnings and errors.
pub const DEFAULT_LEVEL: LevelFilter = LevelFilter::WARN;

/// The level `ASCEND_GLOBAL_LOG_LEVEL=value` means (CANN: 0 DEBUG, 1 INFO,
/// 2 WARNING, 3 ERROR, 4 NULL = off), or `None` for any other value.
pub fn ascend_level(value: &str) -> Option<LevelFilter> {
    match value.trim() {
        "0" => Some(LevelFilter::DEBUG),
        "1" => Some(LevelFilter::INFO),
        "2" => Some(LevelFilter::WARN),
        "3" => Some(LevelFilter::ERROR),
        "4" => Some(LevelFilter::OFF),
        _ => None,
    }
}

/// What [`init_logging`] installs, decided from the variables' values
/// (`None` = unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// An `EnvFilter` directive string (`RUST_LOG`'s, or a level name).
    pub filter: String,
    /// Write to standard output instead of standard error.
    pub to_stdout: bool,
    /// A variable with a value outside its accepted set, said once as a
    /// warning when the subscriber is up: (variable, value).
    pub rejected: Option<(&'static str, String)>,
}

impl LogSettings {
    /// The settings for `RUST_LOG`, `ASCEND_GLOBAL_LOG_LEVEL` and
    /// `ASCEND_SLOG_PRINT_TO_STDOUT` with these values.
    pub fn from_values(
        rust_log: Option<&str>,
        ascend_level: Option<&str>,
        print_to_stdout: Option<&str>,
    ) -> LogSettings {
        let mut rejected = None;
        let filter = match (rust_log.filter(|v| !v.trim().is_empty()), ascend_level) {
            (Some(v), _) => v.trim().to_string(),
            (None, Some(v)) if !v.trim().is_empty() => match self::ascend_level(v) {
                Some(l) => l.to_string(),
                None => {
                    rejected = Some((ENV_LOG_LEVEL, v.to_string()));
                    DEFAULT_LEVEL.to_string()
                }
            },
            _ => DEFAULT_LEVEL.to_string(),
        };
        let to_stdout = print_to_stdout.map(str::trim) == Some("1");
        LogSettings {
            filter,
            to_stdout,
            rejected,
        }
    }

    /// The settings of this process's environment.
    pub fn from_env() -> LogSettings {
        let get = |k| std::env::var(k).ok();
        LogSettings::from_values(
            get("RUST_LOG").as_deref(),
            get(ENV_LOG_LEVEL).as_deref(),
            get(ENV_PRINT_TO_STDOUT).as_deref(),
        )
    }
}

/// Installs a `tracing` subscriber that prints hccl-rs's events (and any
/// other crate's) as one line each, at the level and to the stream the
/// environment names (see the [module docs](self)). Call it once, early;
/// later calls, or a subscriber installed by someone else, leave the
/// existing one in place.
///
/// Returns `true` if this call installed the subscriber. A `RUST_LOG` that
/// does not parse, or an `ASCEND_GLOBAL_LOG_LEVEL` outside 0-4, falls back
/// to warnings and says so in a warning naming the variable.
pub fn init_logging() -> bool {
    let s = LogSettings::from_env();
    let (filter, bad_rust_log) = match tracing_subscriber::EnvFilter::try_new(&s.filter) {
        Ok(f) => (f, None),
        Err(e) => (
            tracing_subscriber::EnvFilter::new(DEFAULT_LEVEL.to_string()),
            Some(e.to_string()),
        ),
    };
    // Colour codes only on a terminal: a file or pipe gets plain text.
    let ansi = if s.to_stdout {
        std::io::stdout().is_terminal()
    } else {
        std::io::stderr().is_terminal()
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .without_time();
    let installed = if s.to_stdout {
        builder.with_writer(std::io::stdout).try_init().is_ok()
    } else {
        builder.with_writer(std::io::stderr).try_init().is_ok()
    };
    if installed {
        if let Some((var, value)) = &s.rejected {
            tracing::warn!("{var}={value:?} is not a log level; use 0 (debug), 1 (info), 2 (warning), 3 (error) or 4 (none); logging warnings");
        }
        if let Some(e) = bad_rust_log {
            tracing::warn!(
                "RUST_LOG={:?} does not parse ({e}); logging warnings",
                s.filter
            );
        }
    }
    installed
}

/// Says `msg` as a `tracing` error, or on standard error when no
/// subscriber is installed: for failures that cannot be returned (a
/// profile that could not be written while a communicator is dropped) and
/// must not be lost.
pub(crate) fn report_error(msg: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::error!("{msg}");
    } else {
        eprintln!("hccl: error: {msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascend_levels_follow_canns_table() {
        assert_eq!(ascend_level("0"), Some(LevelFilter::DEBUG));
        assert_eq!(ascend_level("1"), Some(LevelFilter::INFO));
        assert_eq!(ascend_level(" 2 "), Some(LevelFilter::WARN));
        assert_eq!(ascend_level("3"), Some(LevelFilter::ERROR));
        assert_eq!(ascend_level("4"), Some(LevelFilter::OFF));
        assert_eq!(ascend_level("5"), None);
        assert_eq!(ascend_level("debug"), None);
    }

    #[test]
    fn rust_log_wins_then_ascend_level_then_warnings() {
        let s = LogSettings::from_values(Some("hccl=debug"), Some("3"), None);
        assert_eq!(s.filter, "hccl=debug");
        assert_eq!(s.rejected, None);
        let s = LogSettings::from_values(None, Some("1"), Some("1"));
        assert_eq!((s.filter.as_str(), s.to_stdout), ("info", true));
        let s = LogSettings::from_values(Some(" "), None, Some("0"));
        assert_eq!((s.filter.as_str(), s.to_stdout), ("warn", false));
        let s = LogSettings::from_values(None, Some("9"), Some("yes"));
        assert_eq!((s.filter.as_str(), s.to_stdout), ("warn", false));
        assert_eq!(s.rejected, Some((ENV_LOG_LEVEL, "9".to_string())));
    }
}
