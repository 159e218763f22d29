//! The flight recorder of one communicator rank: a bounded ring of its
//! last ops (`HCCL_FLIGHT_RECORDER_ENTRIES`), and its dumps to
//! `HCCL_FLIGHT_RECORDER_DIR` (format: [`crate::flight`]).
//!
//! An op costs two short holds of the ring's own mutex (queued, ended),
//! never the communicator's state lock, so a dump from another thread (a
//! signal, an abort) never waits for a running op; "running" is one
//! atomic store (ops of a communicator run one at a time). It reads the
//! clock once, when the op is called: the start and end of a collective
//! are the instants the backend measured anyway. Strings are made only
//! when a dump is taken.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::{CollectiveArgs, CountMatrix, VCounts};
use hccl_algos::{DataType, ReduceOp};

use super::backend::sim_cluster::{Called, Cluster};
use super::profile::OpTime;
use super::{lock, BackendError, CommError, Shared};
use crate::flight::{
    self, Dump, DumpReason, ErrorKind, FlightError, Header, OpError, OpRecord, OpState, P2pDir,
    P2pRecord, WaitKind, WaitOn,
};
use hccl_sim::hang::HangReport;

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
    /// Point-to-point: (send, peer, count) per item, in item order.
    pub(crate) items: Vec<(bool, u32, u64)>,
    /// AllGatherV / ReduceScatterV counts (shared with the op's args: a
    /// reference count, not a copy, on the op path).
    pub(crate) counts: Option<Arc<VCounts>>,
    /// AllToAllV's count matrix (shared likewise).
    pub(crate) matrix: Option<Arc<CountMatrix>>,
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
            items: Vec::new(),
            counts: args.counts.clone(),
            matrix: args.send_matrix.clone(),
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
    /// A call the simulator's fault plan skipped: the rank never made it,
    /// so its dumps leave it out.
    skipped: bool,
}

#[derive(Default)]
struct Ring {
    ops: VecDeque<Entry>,
    /// Ops recorded so far (the next op's id).
    recorded: u64,
    /// Of those, calls skipped by a fault plan.
    skipped: u64,
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
    /// The instant of `created_us`, to turn the backend's instants into
    /// wall-clock µs.
    created: Instant,
    /// Id + 1 of the op on the backend now (0: none).
    current: AtomicU64,
    /// `HCCL_FLIGHT_RECORDER_DIR` when the communicator was made.
    dir: Option<PathBuf>,
    /// Set by the first failed op's dump: later failures (every op of a
    /// broken communicator) write none.
    failure_dumped: AtomicBool,
    /// Set by any dump for a failure (this communicator's, another of the
    /// rank's, a peer's learned between ops): a failure learned between
    /// ops ([`Trigger::Event`]) dumps only if none was written before.
    event_dumped: AtomicBool,
    /// Held while a dump is taken and written, so that the file on disk is
    /// the latest snapshot.
    dumping: Mutex<()>,
}

/// What makes a dump, which decides whether it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// Asked for (signal, abort, on demand): always written.
    Asked,
    /// A failure of an op of this rank (this communicator's or another
    /// of the rank's): always written.
    Failure,
    /// A failure learned while no op needed it (a lost peer, a peer's
    /// abort, a simulated cluster's hang): written once, and not after a
    /// failure's dump.
    Event,
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
            super::watch::install();
        }
        (cap > 0).then(|| Recorder {
            cap,
            ring: Mutex::new(Ring::default()),
            created_us: now_us(),
            created: Instant::now(),
            current: AtomicU64::new(0),
            dir,
            failure_dumped: AtomicBool::new(false),
            event_dumped: AtomicBool::new(false),
            dumping: Mutex::new(()),
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
            skipped: false,
        });
        id
    }

    /// The running op was a call the fault plan skipped (the simulator):
    /// it leaves the record.
    fn skip_running(&self) {
        let Some(id) = self.current.load(Ordering::Acquire).checked_sub(1) else {
            return;
        };
        let mut r = lock(&self.ring);
        let hit = r.get(id).map(|e| !std::mem::replace(&mut e.skipped, true));
        if hit == Some(true) {
            r.skipped += 1;
        }
    }

    /// The running op is called with `c`'s arguments (a `wrong_args`
    /// fault of the simulator).
    fn amend_running(&self, c: Called) {
        let Some(id) = self.current.load(Ordering::Acquire).checked_sub(1) else {
            return;
        };
        if let Some(e) = lock(&self.ring).get(id) {
            let d = &mut e.desc;
            if let Some(count) = c.count {
                d.bytes = d.bytes / d.count.max(1) * count;
                d.count = count;
            }
            if let Some(t) = c.dtype {
                d.bytes = d.bytes / d.dtype.size().max(1) * t.size();
                d.dtype = t;
            }
            d.op = c.op.or(d.op);
            d.root = c.root.or(d.root);
        }
    }

    /// Op `id` runs now (its turn came).
    pub(crate) fn running(&self, id: u64) {
        self.current.store(id + 1, Ordering::Release);
    }

    /// `t` as µs since the Unix epoch.
    fn us(&self, t: Instant) -> u64 {
        self.created_us + t.saturating_duration_since(self.created).as_micros() as u64
    }

    /// Op `id` ended with `r`; `ran` is what the backend said about it.
    pub(crate) fn end<T>(&self, id: u64, r: &Result<T, CommError>, ran: Option<Ran>) {
        let _ = self
            .current
            .compare_exchange(id + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
        let ran = ran.unwrap_or_default();
        let error = r.as_ref().err().map(|e| OpError {
            kind: ran.kind.unwrap_or_else(|| error_kind(e)),
            text: e.to_string(),
        });
        let (algo, waits) = (ran.algo, ran.waits);
        // The backend's own instants when it timed the op; else now.
        let started = ran.started.map(|a| self.us(a));
        let ended = ran.ended.map_or_else(now_us, |b| self.us(b));
        if let Some(e) = lock(&self.ring).get(id) {
            e.ended_us = Some(ended);
            e.started_us = started;
            e.algorithm = algo.or(e.algorithm);
            e.state = if error.is_some() {
                OpState::Failed
            } else {
                OpState::Done
            };
            e.error = error;
            e.waits = waits;
        }
    }

    /// Whether a failure learned between ops would be dumped: a dump
    /// directory is set and no dump for a failure was written yet.
    pub(crate) fn wants_event(&self) -> bool {
        self.dir.is_some() && !self.event_dumped.load(Ordering::Acquire)
    }

    /// True the first time it is called: the first failure dumps.
    pub(crate) fn first_failure(&self) -> bool {
        !self.failure_dumped.swap(true, Ordering::AcqRel)
    }

    /// The ring now, as a dump of `sh` for `reason`.
    pub(crate) fn snapshot(&self, sh: &Shared, reason: DumpReason, detail: Option<String>) -> Dump {
        let (ops, recorded) = self.ops();
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
                    super::BackendKind::Ascend => "ascend",
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

    /// The ring's records (the op on the backend now `started`; skipped
    /// calls left out) and the count of ops recorded.
    fn ops(&self) -> (Vec<OpRecord>, u64) {
        let running = self.current.load(Ordering::Acquire).checked_sub(1);
        let r = lock(&self.ring);
        let ops = r.ops.iter().filter(|e| !e.skipped).map(|e| {
            let mut o = record(e);
            if Some(e.id) == running && o.state == OpState::Queued {
                o.state = OpState::Started;
            }
            o
        });
        (ops.collect(), r.recorded - r.skipped)
    }

    /// Writes the dump of `sh` for `reason` to the directory, if one is
    /// set and `trigger` calls for it: the file's path. A crashed
    /// simulated rank writes none (a dead process).
    ///
    /// # Errors
    /// [`FlightError::Io`] if the directory or file cannot be written.
    pub(crate) fn dump(
        &self,
        sh: &Shared,
        (reason, trigger): (DumpReason, Trigger),
        detail: Option<String>,
    ) -> Result<Option<PathBuf>, FlightError> {
        let Some(dir) = self.dir.as_ref().filter(|_| !sh.crashed()) else {
            return Ok(None);
        };
        let _one = lock(&self.dumping);
        let earlier = match trigger {
            Trigger::Asked => false,
            Trigger::Failure | Trigger::Event => self.event_dumped.swap(true, Ordering::AcqRel),
        };
        if earlier && trigger == Trigger::Event {
            return Ok(None);
        }
        let d = self.snapshot(sh, reason, detail);
        write(dir, &d).map(Some)
    }

    /// [`Recorder::dump`] where an error cannot be returned: logged.
    pub(crate) fn dump_logged(
        &self,
        sh: &Shared,
        why: (DumpReason, Trigger),
        detail: Option<String>,
    ) {
        match self.dump(sh, why, detail) {
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
        peers: d.items.iter().map(|&(_, peer, _)| peer).collect(),
        counts: d
            .counts
            .as_ref()
            .map_or_else(Vec::new, |c| c.counts().to_vec()),
        matrix: d.matrix.as_ref().map_or_else(Vec::new, |m| {
            (0..m.n())
                .map(|i| (0..m.n()).map(|j| m.get(i, j)).collect())
                .collect()
        }),
        items: d
            .items
            .iter()
            .map(|&(send, peer, count)| P2pRecord {
                dir: if send { P2pDir::Send } else { P2pDir::Recv },
                peer,
                count,
            })
            .collect(),
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

/// What the backend said about an op that ran, for its record.
#[derive(Default)]
pub(crate) struct Ran {
    /// The algorithm (`None`: point-to-point).
    pub(crate) algo: Option<AlgoSpec>,
    /// Its start as the backend measured it (`None`: not measured).
    pub(crate) started: Option<Instant>,
    /// Its end as the backend measured it (`None`: when it is recorded).
    pub(crate) ended: Option<Instant>,
    /// For a failure: the peers it waited on.
    pub(crate) waits: Vec<WaitOn>,
    /// For a failure: its kind, where the error alone does not tell it
    /// (a simulated hang is each rank's own: a lost peer, a timeout).
    pub(crate) kind: Option<ErrorKind>,
}

impl Ran {
    /// Collective `seq` of `sh` run with `algo`, which returned `r`;
    /// `started` is the backend's start of it, `never` asks the backend
    /// which ranks never started it (called on failure only).
    pub(crate) fn of(
        sh: &Shared,
        (seq, algo, started): (u64, AlgoSpec, Option<Instant>),
        r: &Result<OpTime, CommError>,
        never: impl FnOnce() -> Vec<u32>,
    ) -> Ran {
        let mut ran = match r {
            Ok(OpTime::Measured(a, b)) => Ran {
                started: Some(*a),
                ended: Some(*b),
                ..Ran::default()
            },
            Ok(OpTime::Simulated(..)) => Ran::default(),
            Err(e) => Ran::failed(sh, Some(seq), e, never(), started),
        };
        ran.algo = Some(algo);
        ran
    }

    /// An op of `sh` (collective `seq`, `None` for point-to-point) that
    /// the backend started at `started` and that failed with `e`; `never`:
    /// the ranks that never started it, by the backend.
    pub(crate) fn failed(
        sh: &Shared,
        seq: Option<u64>,
        e: &CommError,
        never: Vec<u32>,
        started: Option<Instant>,
    ) -> Ran {
        let (kind, waits) = match super::flight_hang::hang_of(e) {
            Some(h) => {
                let (k, w) = super::flight_hang::view(sh, seq, h);
                (Some(k), w)
            }
            None => (None, waits_of(e, never)),
        };
        Ran {
            started,
            waits,
            kind,
            ..Ran::default()
        }
    }
}

/// Records a called op of `sh` (queued); its id for the calls below
/// (`None`: no recorder, or a crashed simulated rank, whose record ended).
pub(crate) fn queue(sh: &Shared, desc: OpDesc) -> Option<u64> {
    let f = sh.flight.as_ref().filter(|_| !sh.crashed())?;
    Some(f.queue(desc))
}

/// Marks op `id` of `sh` (if recorded) as running.
pub(crate) fn running(sh: &Shared, id: Option<u64>) {
    if let (Some(f), Some(id)) = (&sh.flight, id) {
        f.running(id);
    }
}

/// The running op of `sh` is a call the simulator's fault plan skipped:
/// the rank never made it, so its record leaves it out.
pub(crate) fn skipped(sh: &Shared) {
    if let Some(f) = &sh.flight {
        f.skip_running();
    }
}

/// The running op of `sh` is called with `c`'s arguments (a simulated
/// `wrong_args` fault): its record shows them.
pub(crate) fn called_as(sh: &Shared, c: Called) {
    if let Some(f) = &sh.flight {
        f.amend_running(c);
    }
}

/// Records the end of op `id` of `sh` (if recorded) with `r`; the
/// communicator's first failed op writes a dump. A simulated rank that
/// crashed in it records nothing: its record ends there.
pub(crate) fn ended<T>(sh: &Shared, id: Option<u64>, r: &Result<T, CommError>, ran: Option<Ran>) {
    let (Some(f), Some(id)) = (&sh.flight, id) else {
        return;
    };
    if sh.crashed() {
        return;
    }
    let kind = r.as_ref().err().map(|e| {
        ran.as_ref()
            .and_then(|x| x.kind)
            .unwrap_or_else(|| error_kind(e))
    });
    f.end(id, r, ran);
    let (Err(e), Some(kind)) = (r, kind) else {
        return;
    };
    if !f.first_failure() {
        return;
    }
    let why = (reason_of_kind(kind), Trigger::Failure);
    f.dump_logged(sh, why, Some(e.to_string()));
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
            let detail = format!("comm '{}' rank {} failed: {e}", sh.name, sh.rank);
            of.dump_logged(&other, why, Some(detail));
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
        | CommError::WrongDevice { .. }
        | CommError::Shape { .. }
        | CommError::Peer { .. }
        | CommError::Counts { .. } => ErrorKind::Args,
        CommError::SubComm { source, .. } => error_kind(source),
        _ => ErrorKind::Other,
    }
}

/// The dump reason of an op failing with `e`.
pub(crate) fn reason_of(e: &CommError) -> DumpReason {
    reason_of_kind(error_kind(e))
}

/// The dump reason of an op failing with an error of `kind`.
fn reason_of_kind(kind: ErrorKind) -> DumpReason {
    match kind {
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
            r.dump_logged(sh, (reason, Trigger::Asked), None);
        }
    }
}

/// Dumps every live rank of the simulated `cluster` that has written no
/// dump for a failure yet, for its first `hang` (a real job's ranks
/// learn of a failure even between ops; see [`Trigger::Event`]).
pub(crate) fn dump_tree(cluster: &Cluster, hang: &HangReport) {
    let text = hang.to_text();
    let first = text.lines().next().unwrap_or("");
    let detail = format!("the simulated cluster hung: {first}");
    for sh in super::crossed::live() {
        let on = sh.sim.as_ref().is_some_and(|s| s.on(cluster));
        if let Some(f) = sh.flight.as_ref().filter(|_| on) {
            f.dump_logged(
                &sh,
                (DumpReason::Remote, Trigger::Event),
                Some(detail.clone()),
            );
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
            items: Vec::new(),
            counts: None,
            matrix: None,
            bytes: 16,
        }
    }

    #[test]
    fn the_ring_keeps_the_last_ops_and_counts_all() {
        let r = Recorder::new(2, None).unwrap();
        for t in 0..5 {
            let id = r.queue(desc(t));
            r.running(id);
            r.end::<()>(id, &Ok(()), None);
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
        let queued = r.queue(desc(1));
        r.running(id);
        // A dump while it runs shows it started, the next one queued.
        let states: Vec<OpState> = r.ops().0.iter().map(|o| o.state).collect();
        assert_eq!(states, [OpState::Started, OpState::Queued]);
        let e: Result<(), _> = Err(CommError::Broken("gone".into()));
        let w = vec![WaitOn {
            peer: 1,
            why: flight::WaitKind::Lost,
        }];
        let algo = AlgoSpec::Flat(hccl_algos::algo::Algorithm::Ring);
        let ran = Ran {
            waits: waits_of(&e.clone().unwrap_err(), vec![1]),
            ..Ran::default()
        };
        assert_eq!(
            ran.waits,
            [WaitOn {
                peer: 1,
                why: flight::WaitKind::NeverCalled
            }]
        );
        r.end(
            id,
            &e,
            Some(Ran {
                algo: Some(algo),
                started: Some(r.created),
                waits: w.clone(),
                ..Ran::default()
            }),
        );
        let _ = queued;
        let ring = lock(&r.ring);
        let rec = record(&ring.ops[0]);
        assert_eq!(rec.state, OpState::Failed);
        assert_eq!(rec.waits, w);
        assert_eq!(rec.error.unwrap().kind, ErrorKind::Broken);
        assert!(rec.algorithm.is_some());
        // A failed op keeps the start the backend measured.
        assert_eq!(rec.started_us, Some(r.created_us));
    }
}

/// The recorder's own cost per op (`cargo test --release -p hccl --lib
/// recorder_cost -- --ignored --nocapture`): prints the CPU time per op
/// of this thread (Linux's schedstat, so time spent waiting for a CPU on
/// a loaded machine does not count) and the wall time; asserts nothing
/// (bench/tcp.md has the figures).
#[cfg(test)]
#[test]
#[ignore = "a measurement, not a check"]
fn recorder_cost() {
    let cpu_ns = || -> u64 {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let args = CollectiveArgs::new(
        hccl_algos::collective::CollectiveKind::AllReduce,
        2048,
        DataType::Fp32,
        2,
    );
    let algo = AlgoSpec::Flat(hccl_algos::algo::Algorithm::Ring);
    let r = Recorder::new(flight::DEFAULT_ENTRIES, None).unwrap();
    let n = 1_000_000u64;
    let (mut cpu, mut wall) = (Vec::new(), Vec::new());
    let (a, b) = (Instant::now(), Instant::now());
    for _ in 0..5 {
        let (t, c) = (Instant::now(), cpu_ns());
        for seq in 0..n {
            let id = r.queue(OpDesc::collective(seq, seq, &args));
            r.running(id);
            let ran = Ran {
                algo: Some(algo),
                started: Some(a),
                ended: Some(b),
                ..Ran::default()
            };
            r.end::<()>(id, &Ok(()), Some(ran));
        }
        cpu.push((cpu_ns() - c) as f64 / n as f64);
        wall.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    cpu.sort_by(f64::total_cmp);
    wall.sort_by(f64::total_cmp);
    println!(
        "recorder: {:.0} ns CPU per op, {:.0} ns wall (medians of 5 x {n}; CPU {cpu:.0?})",
        cpu[2], wall[2]
    );
}
