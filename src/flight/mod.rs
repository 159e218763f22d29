//! The flight recorder's dump format (schema in `docs/flight_recorder.md`).
//!
//! Every communicator rank keeps a bounded ring of its last ops
//! (`HCCL_FLIGHT_RECORDER_ENTRIES`, default [`DEFAULT_ENTRIES`]; `0` turns
//! it off) and writes it to `HCCL_FLIGHT_RECORDER_DIR` when an op fails
//! (timeout, mismatch, a peer's failure, a lost peer), on abort, on
//! `SIGUSR1` and on [`crate::Comm::dump_flight_record`]. `hccl doctor DIR`
//! reads the dumps of all ranks and names the root cause.
//!
//! A dump file is JSON Lines: one [`Header`] line, then one [`OpRecord`]
//! line per op, oldest first. Each line is an object whose `"type"` is
//! `"header"` or `"op"` ([`Line`]). A file may hold several dumps one after
//! the other (each starting with its header); readers use the last dump of
//! each (communicator, rank) ([`read_dumps`]). Times are microseconds
//! since the Unix epoch (this host's wall clock), so that ranks on one host
//! compare directly. A reader rejects a `version` above [`VERSION`];
//! fields added later are optional, and unknown fields are ignored.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod doctor;
mod render;
pub mod replay;

pub use doctor::{diagnose, Diagnosis};

/// `HCCL_FLIGHT_RECORDER_ENTRIES`: ops kept per communicator rank (0: off).
pub const ENV_ENTRIES: &str = "HCCL_FLIGHT_RECORDER_ENTRIES";
/// `HCCL_FLIGHT_RECORDER_DIR`: where dumps go (created if missing).
pub const ENV_DIR: &str = "HCCL_FLIGHT_RECORDER_DIR";
/// Ops kept per communicator rank when `HCCL_FLIGHT_RECORDER_ENTRIES` is
/// unset (PyTorch's flight recorder keeps 2000 by default; a record here
/// is about 150 bytes, so 2048 is ~300 KiB per communicator rank).
pub const DEFAULT_ENTRIES: usize = 2048;
/// The `format` field of every header.
pub const FORMAT: &str = "hccl-flight-recorder";
/// The schema version this build writes and the highest it reads.
pub const VERSION: u32 = 1;

/// One line of a dump file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// The first line of a dump.
    Header(Header),
    /// One op of the ring, oldest first.
    Op(OpRecord),
}

/// Why a dump was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DumpReason {
    /// An op outlived `HCCL_EXEC_TIMEOUT` on this rank.
    Timeout,
    /// The ranks called an op with different arguments (EI0005).
    Mismatch,
    /// Another rank failed the op or aborted and told this one.
    Remote,
    /// A peer's connection closed or it died while an op needed it.
    PeerLost,
    /// Another failure of an op (a transport error, a local check).
    Failed,
    /// [`crate::Comm::abort`] (or destroy ending ops still running).
    Abort,
    /// The process got `SIGUSR1`.
    Signal,
    /// [`crate::Comm::dump_flight_record`].
    OnDemand,
}

/// The header line of a dump: who wrote it, when and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// The schema version ([`VERSION`] when written by this build).
    pub version: u32,
    /// The communicator's name (`world`, `world/split0/color1`, ...): the
    /// same on every rank, so dumps of one communicator match by it.
    pub comm: String,
    /// The communicator id every member computes alike (FNV-1a of the
    /// name, the id TCP frames carry), 16 hex digits.
    pub comm_id: String,
    /// This rank in the communicator, `0..size`.
    pub rank: u32,
    /// Ranks in the communicator.
    pub size: u32,
    /// For a communicator made by a split: the world rank of each of its
    /// ranks (index: communicator rank). `None` for a world communicator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_ranks: Option<Vec<u32>>,
    /// `tcp` or `sim` (`HCCL_BACKEND`).
    pub backend: String,
    /// The host name of the machine that wrote the dump.
    pub host: String,
    /// The writing process.
    pub pid: u32,
    /// Why the dump was written.
    pub reason: DumpReason,
    /// The error or event behind the dump, as the program saw it
    /// (`None` for a signal or an on-demand dump).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the dump was taken, µs since the Unix epoch.
    pub dumped_us: u64,
    /// When the communicator rank was created, µs since the Unix epoch.
    pub created_us: u64,
    /// The ring's capacity (`HCCL_FLIGHT_RECORDER_ENTRIES`).
    pub entries: u64,
    /// Ops recorded since the communicator was created: more than the
    /// op lines that follow when the ring dropped its oldest.
    pub recorded: u64,
    /// `HCCL_EXEC_TIMEOUT`, seconds (`None`: ops wait forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_timeout_s: Option<f64>,
}

/// Where an op is, as this rank saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpState {
    /// Called, waiting for its turn behind this rank's earlier ops.
    Queued,
    /// Running: checked, planned and handed to the backend (a dump taken
    /// now shows the op this rank is in).
    Started,
    /// Finished on this rank.
    Done,
    /// Failed on this rank; [`OpRecord::error`] says how.
    Failed,
}

/// The kind of an op's failure: the [`crate::CommError`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`crate::CommError::Timeout`] (`HCCL_EXEC_TIMEOUT`).
    Timeout,
    /// [`crate::CommError::Mismatch`]: ranks called it with other arguments.
    Mismatch,
    /// [`crate::CommError::Remote`]: another rank failed it or aborted.
    Remote,
    /// [`crate::CommError::PeerLost`]: a rank it needs is gone.
    PeerLost,
    /// The communicator was aborted or broken before
    /// ([`crate::CommError::Broken`]).
    Broken,
    /// Bad arguments or buffers, found on this rank before anything moved.
    Args,
    /// Anything else (a transport error, the simulator's hang report, ...).
    Other,
}

/// Why an op waits on a peer, when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitKind {
    /// The peer never started the op (its signature never came).
    NeverCalled,
    /// The peer started the op; a message from or to it did not complete.
    Data,
    /// The peer's connection closed or it died.
    Lost,
    /// The peer failed the op (or aborted) and told this rank.
    FailedBy,
}

/// A peer that a failed op waited on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitOn {
    /// The peer's rank in the communicator.
    pub peer: u32,
    /// Why.
    pub why: WaitKind,
}

/// How an op failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpError {
    /// The error's kind.
    pub kind: ErrorKind,
    /// The error's text, as `Display` prints it.
    pub text: String,
}

/// One op of the ring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRecord {
    /// The communicator-wide sequence number of a collective (the same on
    /// every rank: `#3` in error texts); `None` for a point-to-point op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The op's place among all ops of this rank on this communicator
    /// (collectives and point-to-point, in call order), from 0.
    pub turn: u64,
    /// The op as errors name it: `AllReduce`, `Broadcast`, ... (HCCL's
    /// collective names), `Send`, `Recv` or `BatchSendRecv`.
    pub kind: String,
    /// Elements (a collective's `count`; a point-to-point op's total).
    pub count: u64,
    /// Element type (`fp32`, `int8`, ...).
    pub dtype: String,
    /// Reduce op (`sum`, ...) of a reduction; else `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Root rank of a rooted collective; else `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    /// Peers of a point-to-point op, in item order; empty for a collective.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<u32>,
    /// AllGatherV and ReduceScatterV: the elements of each rank's block
    /// (index: communicator rank); empty for other ops, and in dumps of
    /// builds before these fields (the replay leaves such records out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counts: Vec<u64>,
    /// AllToAllV: `matrix[i][j]` elements rank `i` sends to rank `j`, the
    /// same on every rank; empty for other ops.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matrix: Vec<Vec<u64>>,
    /// A point-to-point op's items in item order (`peers[i]` is
    /// `items[i].peer`): direction, peer and elements; empty for a
    /// collective.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<P2pRecord>,
    /// Bytes of the message (hccl_test's size: `count` × element size for
    /// most collectives).
    pub bytes: u64,
    /// The algorithm it ran with (`ring`, `level0:ring;level1:H-D_R`);
    /// set when the op ends; `None` for point-to-point ops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Where the op is.
    pub state: OpState,
    /// When it was called, µs since the Unix epoch.
    pub queued_us: u64,
    /// When the backend started it, as the backend measured it (done or
    /// failed); `None` while it runs, on the simulator backend (virtual
    /// times) and for an op that failed before the backend started it
    /// (then `queued_us` is its start, to within the wait for its turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_us: Option<u64>,
    /// When it ended here, done or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_us: Option<u64>,
    /// For a failed op: the peers it waited on and why, ascending by peer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<WaitOn>,
    /// For a failed op: its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<OpError>,
}

/// Direction of a point-to-point item (HCCL's `HcclSendRecvType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2pDir {
    /// This rank sends the item to its peer.
    Send,
    /// This rank receives the item from its peer.
    Recv,
}

/// One item of a point-to-point op (`Send`, `Recv`: one; `BatchSendRecv`:
/// any number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pRecord {
    /// Send or receive.
    pub dir: P2pDir,
    /// The peer's rank in the communicator.
    pub peer: u32,
    /// Elements (of the op's `dtype`).
    pub count: u64,
}

/// One rank's dump of one communicator: its header and its ops, oldest
/// first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dump {
    /// The header line.
    pub header: Header,
    /// The op lines.
    pub ops: Vec<OpRecord>,
    /// The file it was read from (`None` when built in memory).
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

/// Error of reading a dump.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlightError {
    /// A file or directory cannot be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A line is not a dump line of a version this build reads.
    #[error("{}:{line}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Line number, from 1.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

impl Dump {
    /// The dump as JSON Lines (each line ends with `\n`).
    pub fn to_jsonl(&self) -> String {
        let mut s = line_json(&Line::Header(self.header.clone()));
        for op in &self.ops {
            s.push_str(&line_json(&Line::Op(op.clone())));
        }
        s
    }

    /// The dumps in `text` (JSON Lines; one or more dumps, each a header
    /// then its ops); `path` names the file in errors. Blank lines are
    /// skipped.
    ///
    /// # Errors
    /// [`FlightError::Parse`] naming the line: not JSON of a [`Line`], an
    /// op before any header, another `format`, or a `version` above
    /// [`VERSION`].
    pub fn parse_all(text: &str, path: &Path) -> Result<Vec<Dump>, FlightError> {
        Dump::parse(text, path, false).map(|(dumps, _)| dumps)
    }

    /// As [`Dump::parse_all`], except that a last line cut short (JSON
    /// that ends early: a file truncated after it was written, by hand or
    /// a partial copy; a dump is never seen half-written, as it is
    /// renamed into place whole) is left out: the dumps of the complete
    /// lines, and the warning naming the file and line.
    ///
    /// # Errors
    /// As [`Dump::parse_all`], for every other bad line.
    pub fn parse_complete(
        text: &str,
        path: &Path,
    ) -> Result<(Vec<Dump>, Option<String>), FlightError> {
        Dump::parse(text, path, true)
    }

    fn parse(
        text: &str,
        path: &Path,
        cut_last: bool,
    ) -> Result<(Vec<Dump>, Option<String>), FlightError> {
        let mut dumps: Vec<Dump> = Vec::new();
        let last = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .last()
            .map(|(i, _)| i);
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let err = |reason: String| FlightError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                reason,
            };
            let line: Line = match serde_json::from_str(l) {
                Ok(line) => line,
                Err(e) if cut_last && e.is_eof() && Some(i) == last => {
                    let warning = format!(
                        "{}:{}: the last line is cut short ({e}); read the {} line(s) before it (a dump is written whole and renamed into place, so the file was cut after it was written: an edit or a partial copy); that rank's record may miss its last op",
                        path.display(),
                        i + 1,
                        i
                    );
                    return Ok((dumps, Some(warning)));
                }
                Err(e) => return Err(err(e.to_string())),
            };
            match line {
                Line::Header(h) => {
                    if h.format != FORMAT {
                        return Err(err(format!(
                            "format {:?} is not {FORMAT:?}: not a flight-recorder dump",
                            h.format
                        )));
                    }
                    if h.version > VERSION {
                        return Err(err(format!(
                            "version {} is newer than this build reads ({VERSION}); use a newer hccl",
                            h.version
                        )));
                    }
                    dumps.push(Dump {
                        header: h,
                        ops: Vec::new(),
                        path: Some(path.to_path_buf()),
                    });
                }
                Line::Op(op) => match dumps.last_mut() {
                    Some(d) => d.ops.push(op),
                    None => return Err(err("an op line before any header line".into())),
                },
            }
        }
        Ok((dumps, None))
    }
}

fn line_json(l: &Line) -> String {
    let mut s = serde_json::to_string(l).expect("a dump line serializes");
    s.push('\n');
    s
}

/// The file name of rank `rank`'s dump of communicator `comm` written by
/// process `pid`: `hccl_flight_<comm>_rank<rank>_<pid>.jsonl`, with `/`
/// and other characters outside `[A-Za-z0-9._-]` of the name as `-`.
pub fn file_name(comm: &str, rank: u32, pid: u32) -> String {
    let safe: String = comm
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("hccl_flight_{safe}_rank{rank}_{pid}.jsonl")
}

/// Every dump in the `*.jsonl` files of `dir`, keeping for each
/// (communicator, rank) the dump taken last (by `dumped_us`, then file
/// order); sorted by communicator name, then rank. A file whose last line
/// is cut short is read up to it ([`Dump::parse_complete`]) and the
/// warning is logged (`tracing`); [`read_dumps_noting`] returns it.
///
/// # Errors
/// [`FlightError::Io`] if `dir` or a file cannot be read;
/// [`FlightError::Parse`] for a line that is not a dump line.
pub fn read_dumps(dir: &Path) -> Result<Vec<Dump>, FlightError> {
    let read = read_dumps_noting(dir)?;
    for w in &read.warnings {
        tracing::warn!("{w}");
    }
    Ok(read.dumps)
}

/// What [`read_dumps_noting`] read: the dumps, and a warning per file
/// whose last line was cut short.
#[derive(Debug)]
pub struct ReadDumps {
    /// As [`read_dumps`] returns them.
    pub dumps: Vec<Dump>,
    /// `path:line: the last line is cut short (...) ...`, one per such file.
    pub warnings: Vec<String>,
}

/// [`read_dumps`], returning the warnings instead of logging them (`hccl
/// doctor` prints them).
///
/// # Errors
/// As [`read_dumps`].
pub fn read_dumps_noting(dir: &Path) -> Result<ReadDumps, FlightError> {
    let io = |path: &Path, error| FlightError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut best: std::collections::BTreeMap<(String, u32), Dump> = Default::default();
    let mut warnings = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| io(&f, e))?;
        let (dumps, warning) = Dump::parse_complete(&text, &f)?;
        warnings.extend(warning);
        for d in dumps {
            let key = (d.header.comm.clone(), d.header.rank);
            match best.get(&key) {
                Some(old) if old.header.dumped_us > d.header.dumped_us => {}
                _ => {
                    best.insert(key, d);
                }
            }
        }
    }
    Ok(ReadDumps {
        dumps: best.into_values().collect(),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Dump {
        Dump {
            header: Header {
                format: FORMAT.into(),
                version: VERSION,
                comm: "world/split0/color1".into(),
                comm_id: "00000000deadbeef".into(),
                rank: 1,
                size: 2,
                global_ranks: Some(vec![1, 3]),
                backend: "tcp".into(),
                host: "node-a".into(),
                pid: 4242,
                reason: DumpReason::Timeout,
                detail: Some("comm 'world' AllReduce #1: rank 1 timed out".into()),
                dumped_us: 1_700_000_000_000_000,
                created_us: 1_699_999_999_000_000,
                entries: 2048,
                recorded: 3,
                exec_timeout_s: Some(1.5),
            },
            ops: vec![
                OpRecord {
                    seq: Some(0),
                    turn: 0,
                    kind: "AllReduce".into(),
                    count: 2048,
                    dtype: "fp32".into(),
                    op: Some("sum".into()),
                    root: None,
                    peers: vec![],
                    counts: vec![],
                    matrix: vec![],
                    items: vec![],
                    bytes: 8192,
                    algorithm: Some("ring".into()),
                    state: OpState::Done,
                    queued_us: 1,
                    started_us: Some(2),
                    ended_us: Some(3),
                    waits: vec![],
                    error: None,
                },
                OpRecord {
                    seq: None,
                    turn: 1,
                    kind: "Send".into(),
                    count: 4,
                    dtype: "int8".into(),
                    op: None,
                    root: None,
                    peers: vec![0],
                    counts: vec![],
                    matrix: vec![],
                    items: vec![P2pRecord {
                        dir: P2pDir::Send,
                        peer: 0,
                        count: 4,
                    }],
                    bytes: 4,
                    algorithm: None,
                    state: OpState::Queued,
                    queued_us: 4,
                    started_us: None,
                    ended_us: None,
                    waits: vec![],
                    error: None,
                },
                OpRecord {
                    seq: Some(1),
                    turn: 2,
                    kind: "Broadcast".into(),
                    count: 1,
                    dtype: "bf16".into(),
                    op: None,
                    root: Some(0),
                    peers: vec![],
                    counts: vec![],
                    matrix: vec![],
                    items: vec![],
                    bytes: 2,
                    algorithm: Some("tree".into()),
                    state: OpState::Failed,
                    queued_us: 5,
                    started_us: Some(6),
                    ended_us: Some(7),
                    waits: vec![WaitOn {
                        peer: 0,
                        why: WaitKind::NeverCalled,
                    }],
                    error: Some(OpError {
                        kind: ErrorKind::Timeout,
                        text: "timed out".into(),
                    }),
                },
            ],
            path: None,
        }
    }

    #[test]
    fn a_dump_round_trips_through_json_lines() {
        let d = sample();
        let text = d.to_jsonl();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(
            text.starts_with(r#"{"type":"header","format":"hccl-flight-recorder","version":1,"#)
        );
        let p = Path::new("x.jsonl");
        let back = Dump::parse_all(&text, p).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].header, d.header);
        assert_eq!(back[0].ops, d.ops);
        // Two dumps in one file read as two.
        let two = format!("{text}\n{text}");
        assert_eq!(Dump::parse_all(&two, p).unwrap().len(), 2);
    }

    #[test]
    fn bad_lines_are_named() {
        let p = Path::new("d.jsonl");
        let op_first = r#"{"type":"op","turn":0,"kind":"Send","count":1,"dtype":"int8","bytes":1,"state":"done","queued_us":0}"#;
        let e = Dump::parse_all(op_first, p).unwrap_err().to_string();
        assert!(e.contains("d.jsonl:1: an op line before any header"), "{e}");
        let newer = sample()
            .to_jsonl()
            .replacen("\"version\":1", "\"version\":9", 1);
        let e = Dump::parse_all(&newer, p).unwrap_err().to_string();
        assert!(e.contains("version 9 is newer"), "{e}");
        let e = Dump::parse_all("{\"type\":\"x\"}", p)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("d.jsonl:1: unknown variant"), "{e}");
    }

    #[test]
    fn a_last_line_cut_short_is_left_out_with_a_warning() {
        let dir = std::env::temp_dir().join(format!("hccl-flight-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = sample().to_jsonl();
        // Cut in the middle of the last op line, with and without the
        // newline an editor adds.
        let cut = &text[..text.len() - 40];
        for (name, body) in [
            ("a.jsonl", cut.to_string()),
            ("b.jsonl", format!("{cut}\n")),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, &body).unwrap();
            let (dumps, warning) = Dump::parse_complete(&body, &p).unwrap();
            assert_eq!(dumps.len(), 1);
            assert_eq!(
                dumps[0].ops.len(),
                sample().ops.len() - 1,
                "the complete ops"
            );
            let w = warning.unwrap();
            assert!(
                w.starts_with(&format!("{}:4: the last line is cut short", p.display())),
                "{w}"
            );
            // Strict parsing still refuses it; a cut line that is not the
            // last is an error either way.
            assert!(Dump::parse_all(&body, &p).is_err());
            let middle = format!("{cut}\n{text}");
            let e = Dump::parse_complete(&middle, &p).unwrap_err().to_string();
            assert!(e.contains(":4: EOF while parsing"), "{e}");
            std::fs::remove_file(&p).unwrap();
        }
        std::fs::write(dir.join("r.jsonl"), cut).unwrap();
        let read = read_dumps_noting(&dir).unwrap();
        assert_eq!((read.dumps.len(), read.warnings.len()), (1, 1));
        assert!(
            read.warnings[0].contains("r.jsonl:4:"),
            "{:?}",
            read.warnings
        );
        // A header cut short leaves nothing of that file, and no error.
        std::fs::write(dir.join("r.jsonl"), &text[..30]).unwrap();
        let read = read_dumps_noting(&dir).unwrap();
        assert!(read.dumps.is_empty() && read.warnings[0].contains("r.jsonl:1:"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn file_names_keep_a_split_comm_in_one_file_name() {
        assert_eq!(
            file_name("world/split0/color1", 3, 77),
            "hccl_flight_world-split0-color1_rank3_77.jsonl"
        );
    }
}
