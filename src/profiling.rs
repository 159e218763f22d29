//! Per-op profiling records, switched on by HCCL's profiling variables.
//!
//! - `HCCL_PROFILING_ENABLE=1` turns profiling on (`0` or unset: off; any
//!   other value is an error).
//! - `HCCL_PROFILING_OUTPUT_PATH=DIR`: where files go (created if missing;
//!   default [`default_dir`]: `$ASCEND_WORK_PATH/profiling_data`, CANN's
//!   directory for profile data, else `$HOME/ascend/profiling_data`, next
//!   to CANN's default `$HOME/ascend/log`; never the current directory,
//!   where a run inside a checkout would leave an untracked folder).
//! - `HCCL_PROFILING_OUTPUT_FORMAT=json`: the only format (default json).
//!
//! When off, nothing is collected: callers ask [`ProfilingConfig::from_env`]
//! once and install no observer when it returns `None`.
//!
//! A file holds one run: `{"format": "hccl-rs-profile-v1", "run": ..,
//! "records": [OpRecord, ...]}`. Times are nanoseconds (virtual time on the
//! simulator, `simulated: true`), bandwidths GB/s with G = 10^9.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// `HCCL_PROFILING_ENABLE`.
pub const ENV_ENABLE: &str = "HCCL_PROFILING_ENABLE";
/// `HCCL_PROFILING_OUTPUT_PATH`.
pub const ENV_OUTPUT_PATH: &str = "HCCL_PROFILING_OUTPUT_PATH";
/// `HCCL_PROFILING_OUTPUT_FORMAT`.
pub const ENV_OUTPUT_FORMAT: &str = "HCCL_PROFILING_OUTPUT_FORMAT";
/// The directory under `ASCEND_WORK_PATH` (or `$HOME/ascend`) used when
/// `HCCL_PROFILING_OUTPUT_PATH` is unset: CANN's `profiling_data`.
pub const DEFAULT_DIR: &str = "profiling_data";

/// Where profiles go when `HCCL_PROFILING_OUTPUT_PATH` is unset, given the
/// values of `ASCEND_WORK_PATH` and `HOME`: `$ASCEND_WORK_PATH/profiling_data`
/// (CANN environment variable reference: the profiling tool's data under
/// `ASCEND_WORK_PATH`), else `$HOME/ascend/profiling_data` (beside CANN's
/// `$HOME/ascend/log`), else `profiling_data` in the system's temporary
/// directory.
pub fn default_dir(ascend_work_path: Option<&str>, home: Option<&str>) -> PathBuf {
    let set = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    match (set(ascend_work_path), set(home)) {
        (Some(w), _) => w.join(DEFAULT_DIR),
        (None, Some(h)) => h.join("ascend").join(DEFAULT_DIR),
        (None, None) => std::env::temp_dir().join(DEFAULT_DIR),
    }
}

/// Error of reading the profiling settings or writing a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfilingError {
    /// A variable has a value outside its accepted set.
    #[error("{var}={value:?} is not accepted; use {accepted}")]
    BadValue {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is accepted.
        accepted: &'static str,
    },
    /// [`ProfilingConfig::check_writable`]: no file can be written in the
    /// output directory.
    #[error("{ENV_OUTPUT_PATH}={}: cannot write {}: {error}; set it to a writable directory", dir.display(), path.display())]
    Unwritable {
        /// The directory.
        dir: PathBuf,
        /// What could not be created: the directory or a probe file in it.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// [`ProfilingConfig::check_writable`]: the output path exists and is
    /// not a directory (a file such as `/etc/passwd`).
    #[error("{ENV_OUTPUT_PATH}={} is not a directory; set it to a writable directory", dir.display())]
    NotADirectory {
        /// The path.
        dir: PathBuf,
    },
    /// The output directory or file could not be written.
    #[error(
        "profiling: cannot write {path}: {error}; set {ENV_OUTPUT_PATH} to a writable directory"
    )]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error (in the message, not chained as a source: a chain
        /// would print it twice).
        error: std::io::Error,
    },
}

/// Output format of profile files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProfilingFormat {
    /// One JSON document per run.
    Json,
}

/// Profiling switched on: where and how to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilingConfig {
    /// Output directory.
    pub dir: PathBuf,
    /// Output format.
    pub format: ProfilingFormat,
}

impl ProfilingConfig {
    /// Reads the three variables; `Ok(None)` when profiling is off.
    ///
    /// # Errors
    /// [`ProfilingError::BadValue`] for an enable value other than 0/1 or a
    /// format other than json.
    pub fn from_env() -> Result<Option<ProfilingConfig>, ProfilingError> {
        let get = |k| std::env::var(k).ok();
        Self::from_values(
            get(ENV_ENABLE).as_deref(),
            get(ENV_OUTPUT_PATH).as_deref(),
            get(ENV_OUTPUT_FORMAT).as_deref(),
        )
    }

    /// As [`ProfilingConfig::from_env`], from given values (`None` = unset;
    /// an unset path is [`default_dir`] of this process's `ASCEND_WORK_PATH`
    /// and `HOME`).
    ///
    /// # Errors
    /// As [`ProfilingConfig::from_env`].
    pub fn from_values(
        enable: Option<&str>,
        path: Option<&str>,
        format: Option<&str>,
    ) -> Result<Option<ProfilingConfig>, ProfilingError> {
        match enable.map(str::trim) {
            None | Some("") | Some("0") => return Ok(None),
            Some("1") => {}
            Some(other) => {
                return Err(ProfilingError::BadValue {
                    var: ENV_ENABLE,
                    value: other.into(),
                    accepted: "0 or 1",
                })
            }
        }
        let format = match format.map(|f| f.trim().to_ascii_lowercase()) {
            None => ProfilingFormat::Json,
            Some(f) if f.is_empty() || f == "json" => ProfilingFormat::Json,
            Some(f) => {
                return Err(ProfilingError::BadValue {
                    var: ENV_OUTPUT_FORMAT,
                    value: f,
                    accepted: "json",
                })
            }
        };
        let dir = path.filter(|p| !p.trim().is_empty()).map_or_else(
            || {
                let get = |k| std::env::var(k).ok();
                default_dir(get("ASCEND_WORK_PATH").as_deref(), get("HOME").as_deref())
            },
            PathBuf::from,
        );
        Ok(Some(ProfilingConfig { dir, format }))
    }

    /// Checks, before a run or communicator starts, that profile files can
    /// be written: creates the directory and a probe file in it (removed
    /// again), so an unwritable path fails at once instead of losing the
    /// records when the file is written at the end.
    ///
    /// # Errors
    /// [`ProfilingError::NotADirectory`] for a path that is a file;
    /// [`ProfilingError::Unwritable`] naming the path and the OS error.
    pub fn check_writable(&self) -> Result<(), ProfilingError> {
        let io = |path: &Path| {
            let (dir, path) = (self.dir.clone(), path.to_path_buf());
            move |error| ProfilingError::Unwritable { dir, path, error }
        };
        if self.dir.exists() && !self.dir.is_dir() {
            return Err(ProfilingError::NotADirectory {
                dir: self.dir.clone(),
            });
        }
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let probe = self
            .dir
            .join(format!(".hccl_profile_probe_{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(io(&probe))?;
        let _ = std::fs::remove_file(&probe);
        Ok(())
    }
}

/// One message of an op (a send and its matching receive): the simulator's
/// message record, written without its scenario op index.
pub use hccl_sim::Delivered as StepRecord;

/// Traffic of one directed link during an op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkRecord {
    /// Link id (fabric edge index).
    pub link: u32,
    /// Node the link leaves.
    pub from: String,
    /// Node the link enters.
    pub to: String,
    /// Link class (`hccs`, `roce`, ...).
    pub class: String,
    /// Bandwidth per direction, GB/s.
    pub bandwidth_gbps: f64,
    /// Bytes of the op's messages that crossed it.
    pub bytes: u64,
    /// Start of the first message on it, ns.
    pub first_ns: u64,
    /// End of the last message on it, ns.
    pub last_ns: u64,
    /// Union of the intervals of the messages that crossed it, ns (an
    /// upper bound of the time it was transmitting: intervals include α
    /// and latency).
    pub active_ns: u64,
}

/// One collective op.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpRecord {
    /// Collective (`all_reduce`, ...).
    pub op: String,
    /// Communicator name.
    pub comm: String,
    /// Sequence number on the communicator.
    pub seq: u64,
    /// Algorithm (HCCL's names, `level0:..;level1:..` for hierarchical).
    pub algorithm: String,
    /// Elements (HCCL's count argument).
    pub count: u64,
    /// Element type.
    pub dtype: String,
    /// nccl-tests' size of the op, bytes.
    pub bytes: u64,
    /// Earliest start over ranks, ns.
    pub start_ns: u64,
    /// Latest end over ranks, ns.
    pub end_ns: u64,
    /// `bytes / (end - start)`, GB/s.
    pub algbw_gbps: f64,
    /// `algbw ×` nccl-tests' bus factor, GB/s.
    pub busbw_gbps: f64,
    /// True when times are the simulator's virtual time.
    pub simulated: bool,
    /// Every message of the op.
    pub steps: Vec<StepRecord>,
    /// Every link the op's messages crossed, by link id.
    pub links: Vec<LinkRecord>,
}

/// Static facts about a link, for [`link_records`].
#[derive(Debug, Clone, PartialEq)]
pub struct LinkInfo {
    /// Node the link leaves.
    pub from: String,
    /// Node the link enters.
    pub to: String,
    /// Class name.
    pub class: String,
    /// Bandwidth per direction, GB/s.
    pub bandwidth_gbps: f64,
}

/// Per-link records from messages and their routes (link ids), sorted by
/// link id; `info(link)` names a link.
pub fn link_records<'a>(
    messages: impl IntoIterator<Item = (&'a StepRecord, &'a [u32])>,
    info: impl Fn(u32) -> LinkInfo,
) -> Vec<LinkRecord> {
    let mut per_link: BTreeMap<u32, (u64, Vec<(u64, u64)>)> = BTreeMap::new();
    for (m, route) in messages {
        for &l in route {
            let e = per_link.entry(l).or_default();
            e.0 += m.bytes;
            e.1.push((m.start_ns, m.end_ns));
        }
    }
    per_link
        .into_iter()
        .map(|(link, (bytes, mut iv))| {
            iv.sort_unstable();
            let first_ns = iv.first().map_or(0, |x| x.0);
            let last_ns = iv.iter().map(|x| x.1).max().unwrap_or(0);
            let mut active_ns = 0;
            let mut cur: Option<(u64, u64)> = None;
            for (s, e) in iv {
                cur = match cur {
                    Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
                    Some((cs, ce)) => {
                        active_ns += ce - cs;
                        Some((s, e))
                    }
                    None => Some((s, e)),
                };
            }
            if let Some((cs, ce)) = cur {
                active_ns += ce - cs;
            }
            let i = info(link);
            LinkRecord {
                link,
                from: i.from,
                to: i.to,
                class: i.class,
                bandwidth_gbps: i.bandwidth_gbps,
                bytes,
                first_ns,
                last_ns,
                active_ns,
            }
        })
        .collect()
}

#[derive(Serialize)]
struct ProfileFile<'a> {
    format: &'static str,
    run: &'a str,
    records: &'a [OpRecord],
}

/// Collects the records of one run and writes them at the end.
#[derive(Debug)]
pub struct ProfileWriter {
    config: ProfilingConfig,
    run: String,
    records: Vec<OpRecord>,
}

impl ProfileWriter {
    /// A writer for a run named `run` (used in the file name).
    pub fn new(config: ProfilingConfig, run: impl Into<String>) -> ProfileWriter {
        ProfileWriter {
            config,
            run: run.into(),
            records: Vec::new(),
        }
    }

    /// Adds one op.
    pub fn push(&mut self, record: OpRecord) {
        self.records.push(record);
    }

    /// Records so far.
    pub fn records(&self) -> &[OpRecord] {
        &self.records
    }

    /// The file [`ProfileWriter::finish`] writes:
    /// `DIR/hccl_profile_<run>_<pid>.json` (run name with characters
    /// outside `[A-Za-z0-9_-]` replaced by `_`).
    pub fn path(&self) -> PathBuf {
        let run: String = self
            .run
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.config
            .dir
            .join(format!("hccl_profile_{run}_{}.json", std::process::id()))
    }

    /// Writes the file and returns its path.
    ///
    /// # Errors
    /// [`ProfilingError::Io`].
    pub fn finish(self) -> Result<PathBuf, ProfilingError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| ProfilingError::Io { path, error }
        };
        std::fs::create_dir_all(&self.config.dir).map_err(io(&self.config.dir))?;
        let path = self.path();
        let body = ProfileFile {
            format: "hccl-rs-profile-v1",
            run: &self.run,
            records: &self.records,
        };
        let json = serde_json::to_vec_pretty(&body).map_err(|e| ProfilingError::Io {
            path: path.clone(),
            error: std::io::Error::other(e),
        })?;
        std::fs::write(&path, json).map_err(io(&path))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_switch_and_validate() {
        assert_eq!(
            ProfilingConfig::from_values(None, None, None).unwrap(),
            None
        );
        assert_eq!(
            ProfilingConfig::from_values(Some("0"), Some("/x"), None).unwrap(),
            None
        );
        let c = ProfilingConfig::from_values(Some("1"), Some("/tmp/p"), Some("JSON"))
            .unwrap()
            .unwrap();
        assert_eq!(c.dir, PathBuf::from("/tmp/p"));
        let c = ProfilingConfig::from_values(Some("1"), None, None)
            .unwrap()
            .unwrap();
        assert!(c.dir.ends_with("profiling_data"), "{}", c.dir.display());
        assert!(
            c.dir.is_absolute(),
            "not the current directory: {}",
            c.dir.display()
        );
        let e = ProfilingConfig::from_values(Some("yes"), None, None).unwrap_err();
        assert!(
            e.to_string().contains("HCCL_PROFILING_ENABLE=\"yes\""),
            "{e}"
        );
        let e = ProfilingConfig::from_values(Some("1"), None, Some("csv")).unwrap_err();
        assert!(e.to_string().contains("use json"), "{e}");
    }

    #[test]
    fn the_default_directory_is_canns_not_the_current_one() {
        assert_eq!(
            default_dir(Some("/work/ascend"), Some("/home/u")),
            PathBuf::from("/work/ascend/profiling_data")
        );
        assert_eq!(
            default_dir(None, Some("/home/u")),
            PathBuf::from("/home/u/ascend/profiling_data")
        );
        assert_eq!(
            default_dir(Some(" "), None),
            std::env::temp_dir().join("profiling_data")
        );
    }

    #[test]
    fn an_unwritable_directory_is_found_before_the_run() {
        let base = std::env::temp_dir().join(format!("hccl-prof-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let ok = ProfilingConfig::from_values(Some("1"), base.join("d").to_str(), None)
            .unwrap()
            .unwrap();
        ok.check_writable().unwrap();
        assert_eq!(
            std::fs::read_dir(base.join("d")).unwrap().count(),
            0,
            "probe removed"
        );
        // /proc exists, but nobody (root included) can create a file there:
        // creating the directory alone would pass.
        let proc = ProfilingConfig::from_values(Some("1"), Some("/proc"), None)
            .unwrap()
            .unwrap();
        let e = proc.check_writable().unwrap_err().to_string();
        assert!(
            e.starts_with("HCCL_PROFILING_OUTPUT_PATH=/proc: cannot write /proc/"),
            "{e}"
        );
        // A file where the directory should be.
        std::fs::write(base.join("f"), b"x").unwrap();
        let file = ProfilingConfig::from_values(Some("1"), base.join("f").to_str(), None)
            .unwrap()
            .unwrap();
        assert!(file.check_writable().is_err());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_step_is_written_with_the_profile_field_names() {
        let s = StepRecord {
            op: 3,
            src: 1,
            dst: 2,
            tag: 7,
            bytes: 64,
            start_ns: 10,
            end_ns: 25,
        };
        assert_eq!(
            serde_json::to_value(s).unwrap(),
            serde_json::json!({"src": 1, "dst": 2, "tag": 7, "bytes": 64, "start_ns": 10, "end_ns": 25})
        );
    }

    #[test]
    fn link_activity_is_the_union_of_intervals() {
        let m = |s, e, b| StepRecord {
            op: 0,
            src: 0,
            dst: 1,
            tag: 0,
            bytes: b,
            start_ns: s,
            end_ns: e,
        };
        let a = m(0, 10, 5);
        let b = m(5, 20, 7);
        let c = m(30, 35, 1);
        let r1: &[u32] = &[3, 4];
        let r2: &[u32] = &[3];
        let recs = link_records([(&a, r1), (&b, r2), (&c, r2)], |l| LinkInfo {
            from: format!("a{l}"),
            to: "b".into(),
            class: "hccs".into(),
            bandwidth_gbps: 1.0,
        });
        assert_eq!(recs.len(), 2);
        // Link 3: [0,20] + [30,35] = 25 ns, 13 bytes.
        assert_eq!(
            (recs[0].link, recs[0].bytes, recs[0].active_ns),
            (3, 13, 25)
        );
        assert_eq!((recs[0].first_ns, recs[0].last_ns), (0, 35));
        assert_eq!((recs[1].link, recs[1].bytes, recs[1].active_ns), (4, 5, 10));
    }
}
