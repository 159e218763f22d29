//! Per-op profiling records of a communicator, switched on by HCCL's
//! `HCCL_PROFILING_ENABLE=1` (see [`crate::profiling`]).
//!
//! Each op appends one [`OpRecord`]; the file
//! (`hccl_profile_<comm>_rank<r>_<pid>.json`) is written when the
//! communicator is destroyed or dropped. When profiling is off the
//! communicator holds `None` and an op pays one branch. On TCP, times are
//! wall-clock nanoseconds since the communicator was created, as this rank
//! saw them; on the simulator backend they are the virtual times of the
//! simulated cluster, which run across ops (`simulated: true`), so the
//! records of a program form its timeline.
//! Per-message (`steps`) and per-link (`links`) records come from the
//! simulator-driven `hccl test`; a communicator's records leave them empty.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_sim::busbw_factor;

use super::error::CommError;
use crate::profiling::{OpRecord, ProfileWriter, ProfilingConfig, ProfilingError};

/// The op's time as this rank knows it.
pub(crate) enum OpTime {
    /// Measured on this host between the op's start and its end here.
    Measured(Instant, Instant),
    /// The simulator's virtual (start, end) of the op on this rank, ns
    /// since the communicator tree was made.
    Simulated(u64, u64),
}

/// The records of one communicator rank.
pub(crate) struct CommProfile {
    writer: Mutex<Option<ProfileWriter>>,
    created: Instant,
}

/// The profiling settings, read once per process.
fn config() -> &'static Result<Option<ProfilingConfig>, ProfilingError> {
    static CONFIG: OnceLock<Result<Option<ProfilingConfig>, ProfilingError>> = OnceLock::new();
    CONFIG.get_or_init(ProfilingConfig::from_env)
}

/// Checks the `HCCL_PROFILING_*` settings (and that the output directory
/// can be created) before a communicator is built, so that a bad value
/// fails its constructor like any other `HCCL_*` variable.
///
/// # Errors
/// [`CommError::Env`] naming the variable and its value.
pub(crate) fn check_env() -> Result<(), CommError> {
    match config() {
        Ok(None) => Ok(()),
        Ok(Some(cfg)) => cfg.check_writable().map_err(|e| CommError::Env {
            var: crate::profiling::ENV_OUTPUT_PATH,
            value: cfg.dir.display().to_string(),
            reason: match e {
                ProfilingError::Unwritable { path, error, .. } => format!(
                    "cannot write {}: {error}; set it to a writable directory",
                    path.display()
                ),
                ProfilingError::NotADirectory { .. } => {
                    "is not a directory; set it to a writable directory".into()
                }
                e => e.to_string(),
            },
        }),
        Err(ProfilingError::BadValue {
            var,
            value,
            accepted,
        }) => Err(CommError::Env {
            var,
            value: value.clone(),
            reason: format!("not accepted; use {accepted}"),
        }),
        Err(e) => Err(CommError::Env {
            var: crate::profiling::ENV_ENABLE,
            value: std::env::var(crate::profiling::ENV_ENABLE).unwrap_or_default(),
            reason: e.to_string(),
        }),
    }
}

impl CommProfile {
    /// A recorder for rank `rank` of communicator `comm` if profiling is on.
    ///
    /// # Errors
    /// A bad `HCCL_PROFILING_*` value, as text naming the variable.
    pub(crate) fn from_env(comm: &str, rank: u32) -> Result<Option<CommProfile>, String> {
        // Bad values, and an unusable directory found now rather than
        // when the file is written at destroy (where an error can only be
        // logged): the constructors' own check.
        check_env().map_err(|e| e.to_string())?;
        let Ok(Some(cfg)) = config() else {
            return Ok(None);
        };
        let cfg = cfg.clone();
        Ok(Some(CommProfile {
            writer: Mutex::new(Some(ProfileWriter::new(cfg, format!("{comm}_rank{rank}")))),
            created: Instant::now(),
        }))
    }

    /// Appends the record of op `seq` on communicator `comm`.
    pub(crate) fn record(
        &self,
        comm: &str,
        seq: u64,
        args: &CollectiveArgs,
        spec: &AlgoSpec,
        time: OpTime,
    ) {
        let (start_ns, end_ns, simulated) = match time {
            OpTime::Measured(a, b) => (
                a.saturating_duration_since(self.created).as_nanos() as u64,
                b.saturating_duration_since(self.created).as_nanos() as u64,
                false,
            ),
            OpTime::Simulated(a, b) => (a, b, true),
        };
        let bytes = args.message_bytes();
        let span = end_ns.saturating_sub(start_ns);
        let algbw = if span > 0 {
            bytes as f64 / span as f64
        } else {
            0.0
        };
        let record = OpRecord {
            op: args.kind.name().into(),
            comm: comm.into(),
            seq,
            algorithm: spec.to_string(),
            count: args.count,
            dtype: args.dtype.to_string(),
            bytes,
            start_ns,
            end_ns,
            algbw_gbps: algbw,
            busbw_gbps: algbw * busbw_factor(args.kind, args.world_size),
            simulated,
            steps: Vec::new(),
            links: Vec::new(),
        };
        if let Some(w) = super::lock(&self.writer).as_mut() {
            w.push(record);
        }
    }

    /// Writes the file, once: its path, or `None` if it was written
    /// before.
    ///
    /// # Errors
    /// [`ProfilingError::Io`]: the records are lost; the caller says so.
    pub(crate) fn finish(&self) -> Result<Option<std::path::PathBuf>, ProfilingError> {
        let Some(w) = super::lock(&self.writer).take() else {
            return Ok(None);
        };
        let path = w.finish()?;
        tracing::info!("hccl: profile written to {}", path.display());
        Ok(Some(path))
    }

    /// [`CommProfile::finish`] while the communicator is dropped, where an
    /// error cannot be returned: it is reported as an error (on stderr when
    /// no `tracing` subscriber is installed), never dropped.
    pub(crate) fn finish_on_drop(&self) {
        if let Err(e) = self.finish() {
            crate::logging::report_error(&format!("hccl: the profile is lost: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_that_cannot_be_written_at_the_end_is_an_error() {
        let dir = std::env::temp_dir().join(format!("hccl-comm-prof-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = ProfilingConfig::from_values(Some("1"), dir.to_str(), None)
            .unwrap()
            .unwrap();
        cfg.check_writable().unwrap();
        let p = CommProfile {
            writer: Mutex::new(Some(ProfileWriter::new(cfg, "world_rank0"))),
            created: Instant::now(),
        };
        // The directory was fine at the start; by the end a file took its
        // place.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, b"x").unwrap();
        let e = p.finish().unwrap_err().to_string();
        assert!(e.contains("cannot write"), "{e}");
        assert!(e.contains("HCCL_PROFILING_OUTPUT_PATH"), "{e}");
        // Written (or failed) once: a second call has nothing to write.
        assert!(p.finish().unwrap().is_none());
        let _ = std::fs::remove_file(&dir);
    }
}
