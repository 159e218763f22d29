//! The flight recorder of one communicator rank: a bounded ring of its
//! last ops (`HCCL_FLIGHT_RECORDER_ENTRIES`), and its dumps to
//! `HCCL_FLIGHT_RECORDER_DIR` (format: [`crate::flight`]).
//!
//! An op costs three short lock holds (queued, running, ended) of the
//! ring's own mutex, never the communicator's state lock, so a dump from
//! another thread (a signal, an abort) never waits for a running op.
//! Strings are made only when a dump is taken.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::CollectiveArgs;
use hccl_algos::{DataType, ReduceOp};

use super::{lock, BackendError, CommError, Shared};
use crate::flight::{
    self, Dump, DumpReason, ErrorKind, FlightError, Header, OpError, OpRecord, OpState, WaitKind,
    WaitOn,
};

/// Microseconds since the Unix epoch, now.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What an op is, as recorded when it is called.
pub(crate) struct OpDesc {
    pub(crate) seq: Option<u64>,
    pub(crate) turn: u64,
    pub(crate) kind: &'static str,
    pub(crate) count: u64,
    pub(crate) dtype: DataType,
    pub(crate) op: Option<ReduceOp>,
    pub(crate) root: Option<u32>,
    pub(crate) peers: Vec<u32>,
    pub(crate) bytes: u64,
}

impl OpDesc {
    /// A collective `args` with sequence number `seq` at turn `turn`.
    pub(crate) fn collective(turn: u64, seq: u64, args: &CollectiveArgs) -> OpDesc {
        OpDesc {
            seq: Some(seq),
            turn,
            kind: kind_name(args),
            count: args.count,
            dtype: args.dtype,
            op: args.kind.is_reduction().then_some(args.op),
            root: args.kind.is_rooted().then_some(args.root),
            peers: Vec::new(),
            bytes: args.message_bytes(),
        }
    }
}

/// `AllReduce`, ... as errors name the op (`{:?}` of the kind, without
/// formatting on the op path).
fn kind_name(args: &CollectiveArgs) -> &'static str {
    use hccl_algos::collective::CollectiveKind as K;
    match args.kind {
        K::AllReduce => "AllReduce",
        K::ReduceScatter => "ReduceScatter",
        K::AllGather => "AllGather",
        K::Broadcast => "Broadcast",
        K::Reduce => "Reduce",
        K::Scatter => "Scatter",
        K::Gather => "Gather",
        K::AllToAll => "AllToAll",
        K::AllToAllV => "AllToAllV",
        K::AllGatherV => "AllGatherV",
        K::ReduceScatterV => "ReduceScatterV",
        K::SendRecv => "SendRecv",
        K::BatchSendRecv => "BatchSendRecv",
        K::Barrier => "Barrier",
    }
}

struct Entry {
    id: u64,
    desc: OpDesc,
    algorithm: Option<AlgoSpec>,
    state: OpState,
    queued_us: u64,
    started_us: Option<u64>,
    ended_us: Option<u64>,
    waits: Vec<WaitOn>,
    error: Option<OpError>,
}

#[derive(Default)]
struct Ring {
    ops: VecDeque<Entry>,
    /// Ops recorded so far (the next op's id).
    recorded: u64,
}

impl Ring {
    fn get(&mut self, id: u64) -> Option<&mut Entry> {
        let first = self.ops.front()?.id;
        self.ops.get_mut(id.checked_sub(first)? as usize)
    }
}

/// One communicator rank's recorder.
pub(crate) struct Recorder {
    cap: usize,
    ring: Mutex<Ring>,
    created_us: u64,
    /// `HCCL_FLIGHT_RECORDER_DIR` when the communicator was made.
    dir: Option<PathBuf>,
    /// Set by the first failed op's dump: later failures (every op of a
    /// broken communicator) write none.
    failure_dumped: AtomicBool,
}

/// `HCCL_FLIGHT_RECORDER_ENTRIES` (`None`: unset).
///
/// # Errors
/// [`CommError::Env`] for a value that is not a non-negative integer.
pub(crate) fn entries_from(value: Option<&str>) -> Result<usize, CommError> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(flight::DEFAULT_ENTRIES);
    };
    v.parse::<usize>().map_err(|_| CommError::Env {
        var: flight::ENV_ENTRIES,
        value: v.into(),
        reason: format!(
            "not a number of ops; use 0 (off) or a count such as {}",
            flight::DEFAULT_ENTRIES
        ),
    })
}

/// Checks `HCCL_FLIGHT_RECORDER_ENTRIES` for the constructors.
///
/// # Errors
/// As [`entries_from`].
pub(crate) fn check_env() -> Result<(), CommError> {
    entries_from(std::env::var(flight::ENV_ENTRIES).ok().as_deref()).map(|_| ())
}

impl Recorder {
    /// The recorder the environment asks for (`None`: off).
    ///
    /// # Errors
    /// A bad `HCCL_FLIGHT_RECORDER_ENTRIES`.
    pub(crate) fn from_env() -> Result<Option<Recorder>, CommError> {
        let cap = entries_from(std::env::var(flight::ENV_ENTRIES).ok().as_deref())?;
        let dir = std::env::var_os(flight::ENV_DIR)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        Ok(Recorder::new(cap, dir))
    }

    /// A recorder of `cap` ops dumping to `dir` (`None` for `cap == 0`).
    pub(crate) fn new(cap: usize, dir: Option<PathBuf>) -> Option<Recorder> {
        if dir.is_some() {
            super::signal::install();
        }
        (cap > 0).then(|| Recorder {
            cap,
            ring: Mutex::new(Ring::default()),
            created_us: now_us(),
            dir,
            failure_dumped: AtomicBool::new(false),
        })
    }

    /// Records a called op (queued); its id for the calls below.
    pub(crate) fn queue(&self, desc: OpDesc) -> u64 {
        let queued_us = now_us();
        let mut r = lock(&self.ring);
        let id = r.recorded;
        r.recorded += 1;
        if r.ops.len() == self.cap {
            r.ops.pop_front();
        }
        r.ops.push_back(Entry {
            id,
            desc,
            algorithm: None,
            state: OpState::Queued,
            queued_us,
            started_us: None,
            ended_us: None,
            waits: Vec::new(),
            error: None,
        });
        id
    }

    /// Op `id` runs now, with `algo` (`None` for point-to-point).
    pub(crate) fn running(&self, id: u64, algo: Option<AlgoSpec>) {
        let t = now_us();
        if let Some(e) = lock(&self.ring).get(id) {
            e.state = OpState::Started;
            e.started_us = Some(t);
            e.algorithm = algo;
        }
    }

    /// The running collective with sequence number `seq`, from the back
    /// (the run path knows its seq, not its id).
    pub(crate) fn running_seq(&self, seq: u64, algo: AlgoSpec) {
        let t = now_us();
        let mut r = lock(&self.ring);
        if let Some(e) = r.ops.iter_mut().rev().find(|e| e.desc.seq == Some(seq)) {
            e.state = OpState::Started;
            e.started_us = Some(t);
            e.algorithm = Some(algo);
        }
    }

    /// The peers failed op `id` waited on.
    pub(crate) fn waits(&self, id: u64, waits: Vec<WaitOn>) {
        if let Some(e) = lock(&self.ring).get(id) {
            e.waits = waits;
        }
    }

    /// [`Recorder::waits`] of the collective with sequence number `seq`.
    pub(crate) fn waits_seq(&self, seq: u64, waits: Vec<WaitOn>) {
        let mut r = lock(&self.ring);
        if let Some(e) = r.ops.iter_mut().rev().find(|e| e.desc.seq == Some(seq)) {
            e.waits = waits;
        }
    }

    /// Op `id` ended with `r`.
    pub(crate) fn end<T>(&self, id: u64, r: &Result<T, CommError>) {
        let t = now_us();
        let error = r.as_ref().err().map(|e| OpError {
            kind: error_kind(e),
            text: e.to_string(),
        });
        if let Some(e) = lock(&self.ring).get(id) {
            e.ended_us = Some(t);
            e.started_us.get_or_insert(t);
            e.state = if error.is_some() {
                OpState::Failed
            } else {
                OpState::Done
            };
            e.error = error;
        }
    }

    /// True the first time it is called: the first failure dumps.
    pub(crate) fn first_failure(&self) -> bool {
        !self.failure_dumped.swap(true, Ordering::AcqRel)
    }

    /// The ring now, as a dump of `sh` for `reason`.
    pub(crate) fn snapshot(&self, sh: &Shared, reason: DumpReason, detail: Option<String>) -> Dump {
        let (ops, recorded) = {
            let r = lock(&self.ring);
            let ops: Vec<OpRecord> = r.ops.iter().map(record).collect();
            (ops, r.recorded)
        };
        Dump {
            header: Header {
                format: flight::FORMAT.into(),
                version: flight::VERSION,
                comm: sh.name.clone(),
                comm_id: format!("{:016x}", sh.id),
                rank: sh.rank,
                size: sh.size,
                global_ranks: sh.global.get().cloned(),
                backend: match sh.kind {
                    super::BackendKind::Tcp => "tcp",
                    super::BackendKind::Sim => "sim",
                }
                .into(),
                host: host_name(),
                pid: std::process::id(),
                reason,
                detail,
                dumped_us: now_us(),
                created_us: self.created_us,
                entries: self.cap as u64,
                recorded,
                exec_timeout_s: sh.exec_timeout.map(|t| t.as_secs_f64()),
            },
            ops,
            path: None,
        }
    }

    /// Writes the dump of `sh` for `reason` to the directory, if one is
    /// set: the file's path.
    ///
    /// # Errors
    /// [`FlightError::Io`] if the directory or file cannot be written.
    pub(crate) fn dump(
        &self,
        sh: &Shared,
        reason: DumpReason,
        detail: Option<String>,
    ) -> Result<Option<PathBuf>, FlightError> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let d = self.snapshot(sh, reason, detail);
        write(dir, &d).map(Some)
    }

    /// [`Recorder::dump`] where an error cannot be returned: logged.
    pub(crate) fn dump_logged(&self, sh: &Shared, reason: DumpReason, detail: Option<String>) {
        match self.dump(sh, reason, detail) {
            Ok(Some(p)) => tracing::info!("hccl: flight record written to {}", p.display()),
            Ok(None) => {}
            Err(e) => crate::logging::report_error(&format!(
                "hccl: the flight record is lost: {e}; set {} to a writable directory",
                flight::ENV_DIR
            )),
        }
    }
}

/// Writes `d` to `dir` (created if missing) under its file name, through
/// a temporary file renamed into place: a reader never sees half a dump.
fn write(dir: &Path, d: &Dump) -> Result<PathBuf, FlightError> {
    let io = |path: &Path, error| FlightError::Io {
        path: path.to_path_buf(),
        error,
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let name = flight::file_name(&d.header.comm, d.header.rank, d.header.pid);
    let path = dir.join(&name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, d.to_jsonl()).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))?;
    Ok(path)
}

fn record(e: &Entry) -> OpRecord {
    let d = &e.desc;
    OpRecord {
        seq: d.seq,
        turn: d.turn,
        kind: d.kind.into(),
        count: d.count,
        dtype: d.dtype.to_string(),
        op: d.op.map(|o| o.to_string()),
        root: d.root,
        peers: d.peers.clone(),
        bytes: d.bytes,
        algorithm: e.algorithm.map(|a| a.to_string()),
        state: e.state,
        queued_us: e.queued_us,
        started_us: e.started_us,
        ended_us: e.ended_us,
        waits: e.waits.clone(),
        error: e.error.clone(),
    }
}

/// Records the end of op `id` of `sh` (if recorded) with `r`; the
/// communicator's first failed op writes a dump.
pub(crate) fn ended<T>(sh: &Shared, id: Option<u64>, r: &Result<T, CommError>) {
    let (Some(f), Some(id)) = (&sh.flight, id) else {
        return;
    };
    f.end(id, r);
    let Err(e) = r else {
        return;
    };
    if !f.first_failure() {
        return;
    }
    f.dump_logged(sh, reason_of(e), Some(e.to_string()));
    // The same world rank's other communicators of this process too: a
    // rank blocked here has not called their next ops, which `hccl
    // doctor` needs to see (two communicators entered in different
    // orders). Their own first failure dumps them again.
    let me = sh.global_rank(sh.rank);
    for other in super::crossed::live() {
        if std::ptr::eq(Arc::as_ptr(&other), sh) || other.global_rank(other.rank) != me {
            continue;
        }
        if let Some(of) = &other.flight {
            let why = format!("comm '{}' rank {} failed: {e}", sh.name, sh.rank);
            of.dump_logged(&other, reason_of(e), Some(why));
        }
    }
}

/// The peers an op failing with `e` waited on: `never` (ranks that never
/// started it, from the backend), then what the error names, one entry
/// per peer, ascending.
pub(crate) fn waits_of(e: &CommError, never: Vec<u32>) -> Vec<WaitOn> {
    use hccl_hw::tcp::TcpError;
    let mut w: Vec<WaitOn> = never
        .into_iter()
        .map(|peer| WaitOn {
            peer,
            why: WaitKind::NeverCalled,
        })
        .collect();
    let tcp = match e {
        CommError::Timeout(BackendError::Tcp(t))
        | CommError::Mismatch(BackendError::Tcp(t))
        | CommError::Remote(BackendError::Tcp(t))
        | CommError::PeerLost(BackendError::Tcp(t))
        | CommError::Tcp(t) => Some(t),
        CommError::SubComm { source, .. } => {
            return waits_of(source, w.into_iter().map(|x| x.peer).collect())
        }
        _ => None,
    };
    let named: Vec<(u32, WaitKind)> = match tcp {
        Some(TcpError::Timeout { peers, .. }) => {
            peers.iter().map(|&p| (p, WaitKind::Data)).collect()
        }
        Some(TcpError::PeerLost { peer, .. }) => vec![(*peer, WaitKind::Lost)],
        Some(TcpError::Aborted { by, .. }) => vec![(*by, WaitKind::FailedBy)],
        Some(TcpError::LengthMismatch { peer, .. } | TcpError::BufferFull { peer, .. }) => {
            vec![(*peer, WaitKind::Data)]
        }
        _ => Vec::new(),
    };
    for (peer, why) in named {
        match w.iter_mut().find(|x| x.peer == peer) {
            // A lost or failing peer also never started the op: say the
            // more specific.
            Some(x) if matches!(why, WaitKind::Lost | WaitKind::FailedBy) => x.why = why,
            Some(_) => {}
            None => w.push(WaitOn { peer, why }),
        }
    }
    w.sort_by_key(|x| x.peer);
    w
}

/// The [`ErrorKind`] of `e`.
pub(crate) fn error_kind(e: &CommError) -> ErrorKind {
    match e {
        CommError::Timeout(_) => ErrorKind::Timeout,
        CommError::Mismatch(_) => ErrorKind::Mismatch,
        CommError::Remote(_) => ErrorKind::Remote,
        CommError::PeerLost(_) => ErrorKind::PeerLost,
        CommError::Broken(_) => ErrorKind::Broken,
        CommError::Args(_)
        | CommError::Buffer { .. }
        | CommError::Shape { .. }
        | CommError::Peer { .. }
        | CommError::Counts { .. } => ErrorKind::Args,
        CommError::SubComm { source, .. } => error_kind(source),
        _ => ErrorKind::Other,
    }
}

/// The dump reason of an op failing with `e`.
pub(crate) fn reason_of(e: &CommError) -> DumpReason {
    match error_kind(e) {
        ErrorKind::Timeout => DumpReason::Timeout,
        ErrorKind::Mismatch => DumpReason::Mismatch,
        ErrorKind::Remote => DumpReason::Remote,
        ErrorKind::PeerLost => DumpReason::PeerLost,
        _ => DumpReason::Failed,
    }
}

/// This host's name (Linux: the kernel's; else `$HOSTNAME`, else
/// `localhost`).
fn host_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "localhost".into())
    })
    .clone()
}

/// Dumps every live communicator of this process that has a recorder
/// (for `SIGUSR1`).
pub(crate) fn dump_all(comms: &[Arc<Shared>], reason: DumpReason) {
    for sh in comms {
        if let Some(r) = &sh.flight {
            r.dump_logged(sh, reason, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(turn: u64) -> OpDesc {
        OpDesc {
            seq: Some(turn),
            turn,
            kind: "AllReduce",
            count: 4,
            dtype: DataType::Fp32,
            op: Some(ReduceOp::Sum),
            root: None,
            peers: Vec::new(),
            bytes: 16,
        }
    }

    #[test]
    fn the_ring_keeps_the_last_ops_and_counts_all() {
        let r = Recorder::new(2, None).unwrap();
        for t in 0..5 {
            let id = r.queue(desc(t));
            r.end::<()>(id, &Ok(()));
        }
        let ring = lock(&r.ring);
        assert_eq!(ring.recorded, 5);
        let turns: Vec<u64> = ring.ops.iter().map(|e| e.desc.turn).collect();
        assert_eq!(turns, [3, 4]);
        assert!(ring.ops.iter().all(|e| e.state == OpState::Done));
    }

    #[test]
    fn zero_entries_is_off_and_bad_values_are_named() {
        assert!(Recorder::new(0, None).is_none());
        assert_eq!(entries_from(None).unwrap(), flight::DEFAULT_ENTRIES);
        assert_eq!(entries_from(Some(" 16 ")).unwrap(), 16);
        let e = entries_from(Some("lots")).unwrap_err().to_string();
        assert!(e.contains("HCCL_FLIGHT_RECORDER_ENTRIES=\"lots\""), "{e}");
    }

    #[test]
    fn a_failed_op_keeps_its_error_and_waits() {
        let r = Recorder::new(4, None).unwrap();
        let id = r.queue(desc(0));
        r.running_seq(0, AlgoSpec::Flat(hccl_algos::algo::Algorithm::Ring));
        let e: Result<(), _> = Err(CommError::Broken("gone".into()));
        let w = vec![WaitOn {
            peer: 1,
            why: flight::WaitKind::Lost,
        }];
        r.waits_seq(0, w.clone());
        r.end(id, &e);
        let ring = lock(&r.ring);
        let rec = record(&ring.ops[0]);
        assert_eq!(rec.state, OpState::Failed);
        assert_eq!(rec.waits, w);
        assert_eq!(rec.error.unwrap().kind, ErrorKind::Broken);
        assert!(rec.algorithm.is_some());
    }
}
