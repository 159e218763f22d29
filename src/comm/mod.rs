//! The communicator API, in HCCL's model.
//!
//! | HCCL | here |
//! | --- | --- |
//! | `HcclGetRootInfo` | [`RootInfo::new`] (`hccl_hw::tcp::RootInfo`) |
//! | `HcclCommInitRootInfo` | [`Comm::init_root_info`] |
//! | `HcclCommInitClusterInfo` | [`Comm::init_cluster_info`] |
//! | `HcclCommInitAll` | [`Comm::init_all`] |
//! | one thread's calls on every communicator, then a stream sync (NCCL `ncclGroupStart`/`End`) | [`group`] |
//! | (torchrun / mpirun env) | [`Comm::from_env`] |
//! | `HcclCommSplit` (NCCL `ncclCommSplit`) | [`Comm::split`] |
//! | `HcclAllReduce`, ... | [`Comm::all_reduce`], ... (typed), [`Comm::collective`] (bytes) |
//! | `HcclAllGatherV`, `HcclReduceScatterV`, `HcclAlltoAllV` | [`Comm::all_gather_v`], [`Comm::reduce_scatter_v`], [`Comm::all_to_all_v`] |
//! | `HcclSend` / `HcclRecv` | [`Comm::send`] / [`Comm::recv`] (typed), [`Comm::send_bytes`] / [`Comm::recv_bytes`], [`Comm::send_async`] / [`Comm::recv_async`] |
//! | `HcclBatchSendRecv` | [`Comm::batch_send_recv`] with [`P2pItem`]s |
//! | `HcclGetCommAsyncError` | [`Comm::async_error`] |
//! | `HcclCommAbort` / `HcclCommDestroy` | [`Comm::abort`] / [`Comm::destroy`] or drop |
//!
//! **Backends.** `HCCL_BACKEND=tcp` (default) runs ranks as processes or
//! threads over TCP ([`hccl_hw::tcp`]); `HCCL_BACKEND=sim` runs the ranks of
//! [`Comm::init_all`] on the simulator ([`hccl_sim`], data mode), so a
//! program written against `Comm` moves to a simulated cluster by changing
//! one variable. The simulator backend needs every rank in one process.
//!
//! **Algorithms.** `HCCL_ALGO` (HCCL's syntax, e.g. `level0:ring` or
//! `allreduce=level0:NA;level1:H-D_R`) if it names one for the collective,
//! else `hccl_algos::select` with host-TCP link costs.
//!
//! **Ordering.** Ops on one communicator run in the order they are called,
//! from any thread; async ops take their sequence number when called.

mod crossed;
mod drain;
mod element;
mod error;
mod group;
mod handle;
mod hccl_env;
pub mod launch;
mod local;
mod p2p;
mod profile;
mod ranks;
mod signature;
mod sim_backend;
mod vvar;

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use hccl_algos::algo::AlgoSpec;
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::transport::OpContext;
use hccl_hw::tcp::{AbortHandle, OpBuffers, OpInfo, TcpConfig, TcpError, TcpRank};
use local::{CallGuard, LocalWorld, Waits};

pub use element::Element;
pub use error::CommError;
pub use group::{group, Group};
pub use handle::OpHandle;
pub use hccl_algos::{DataType, ReduceOp, ReducePrecision};
pub use p2p::{P2pItem, P2pKind};

use element::{bytes, bytes_mut};
use profile::{CommProfile, OpTime};
use sim_backend::SimWorld;

/// Which backend runs a communicator's ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Real TCP connections between processes, hosts or threads.
    Tcp,
    /// The discrete-event simulator, all ranks in this process.
    Sim,
}

impl BackendKind {
    /// `HCCL_BACKEND` (`tcp` or `sim`, in any case), default `tcp`.
    ///
    /// # Errors
    /// [`CommError::Env`] for another value.
    pub fn from_env() -> Result<BackendKind, CommError> {
        BackendKind::parse(std::env::var("HCCL_BACKEND").ok().as_deref())
    }

    /// [`BackendKind::from_env`] of a value (`None`: unset).
    ///
    /// # Errors
    /// [`CommError::Env`] for a value other than `tcp` or `sim`.
    pub fn parse(value: Option<&str>) -> Result<BackendKind, CommError> {
        let v = value.unwrap_or("").trim();
        match v.to_ascii_lowercase().as_str() {
            "" | "tcp" => Ok(BackendKind::Tcp),
            "sim" => Ok(BackendKind::Sim),
            _ => Err(CommError::Env {
                var: "HCCL_BACKEND",
                value: v.into(),
                reason: "accepted: tcp, sim (in any case)".into(),
            }),
        }
    }
}

/// The root info of a bootstrap (HCCL's `HcclRootInfo`): an opaque,
/// serializable blob (address, port, 128-bit session id). See
/// [`hccl_hw::tcp::RootInfo`] for its byte and string forms.
pub type RootInfo = hccl_hw::tcp::RootInfo;

enum Backend {
    Tcp(Box<TcpRank>),
    Sim(Arc<SimWorld>),
}

struct State {
    backend: Option<Backend>,
    /// Turn (call-order ticket) of the op allowed to run now.
    turn: u64,
    scratch: Vec<u8>,
    /// Point-to-point messages sent to each rank (the pair's next p2p number).
    p2p_sent: Vec<u64>,
    /// Point-to-point messages received from each rank.
    p2p_received: Vec<u64>,
}

/// What an op gets when called: its turn among every op of this rank (the
/// order ops run in) and, for collectives, its communicator-wide sequence
/// number (the same on every rank; point-to-point ops take none).
#[derive(Default)]
struct Tickets {
    /// Next turn to hand out.
    turn: u64,
    /// Next collective sequence number.
    coll: u64,
}

struct Shared {
    rank: u32,
    size: u32,
    id: u64,
    name: String,
    state: Mutex<State>,
    turn_cv: Condvar,
    /// Next turn and collective sequence number to hand out.
    tickets: Mutex<Tickets>,
    /// First error (kept outside `state` so queries never wait for an op).
    error: Mutex<Option<CommError>>,
    abort: Option<AbortHandle>,
    aborted: Mutex<bool>,
    /// Hosts the ranks run on ([`TcpRank::hosts`]; 1 on the simulator):
    /// steers the algorithm choice.
    hosts: u32,
    /// The simulated world, reachable without the state lock (which a
    /// running op holds): abort and failures are posted there at once.
    sim: Option<Arc<SimWorld>>,
    /// Per-op records when `HCCL_PROFILING_ENABLE=1` (see [`profile`]).
    profile: Option<CommProfile>,
    /// The other communicators of this process's `init_all`, if it made
    /// this one: a blocking call only this thread could complete fails
    /// with advice ([`local`]).
    local: OnceLock<Arc<LocalWorld>>,
    /// Async ops still running, which destroy waits for ([`drain`]).
    asyncs: Arc<drain::Tracker>,
    /// `HCCL_EXEC_TIMEOUT` of the backend (`None`: never): bounds that wait.
    exec_timeout: Option<std::time::Duration>,
    /// For a communicator made by [`Comm::split`]: the world rank of each
    /// of its ranks, which its errors name too ([`CommError::SubComm`]).
    global: OnceLock<Vec<u32>>,
    /// The precision of fp16/bf16 partial sums (`HCCL_REDUCE_PRECISION`).
    precision: Mutex<ReducePrecision>,
}

impl Shared {
    /// `e` as this communicator reports it: on a split one, with the
    /// world rank of every rank it names.
    fn name_ranks(&self, e: CommError) -> CommError {
        match (self.global.get(), e) {
            (_, e @ CommError::SubComm { .. }) | (None, e) => e,
            (Some(g), e) => CommError::SubComm {
                comm: self.name.clone(),
                global: g.clone(),
                source: Box::new(e),
            },
        }
    }

    /// The world rank of this communicator's rank `r`.
    fn global_rank(&self, r: u32) -> u32 {
        self.global
            .get()
            .and_then(|g| g.get(r as usize).copied())
            .unwrap_or(r)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A communicator: one rank's handle on a group of ranks. See the module
/// docs. `Send + Sync`; ops from several threads run one at a time in call order.
pub struct Comm {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("name", &self.shared.name)
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .finish()
    }
}

/// The user's memory for one call.
enum UserBufs<'a> {
    Separate(&'a [u8], &'a mut [u8]),
    InPlace(&'a mut [u8]),
}

/// `fnv1a64(name)`: a communicator id every member computes alike.
fn comm_id(name: &str) -> u64 {
    launch::hash128(&[name.as_bytes()]) as u64
}

/// The algorithm for `args` (`HCCL_ALGO` where it fits, else the selector
/// with host-TCP costs; see [`hccl_hw::tcp::choose_algo`]). A
/// communicator's layout is flat, so a hierarchical `HCCL_ALGO` setting
/// that cannot compose for the collective runs its first level that plans
/// flat (`hccl_algos::select::HcclAlgo::spec_fitting`). `hosts` is
/// [`hccl_hw::tcp::TcpRank::hosts`] on TCP; the simulator backend passes 1
/// and runs what TCP would run with every rank on one host.
/// The process's `HCCL_*` settings, checked before a communicator is
/// built: the transport's ([`TcpConfig::from_env`]), `HCCL_ALGO` and the
/// profiling variables, so a bad value fails the constructor, not the
/// first op.
fn settings() -> Result<TcpConfig, CommError> {
    let cfg = TcpConfig::from_env()?;
    hccl_hw::tcp::select::check_algo_env()?;
    profile::check_env()?;
    hccl_env::check_env()?;
    precision_from_env()?;
    Ok(cfg)
}

/// Checks the process's `HCCL_*` settings as [`Comm`]'s constructors do
/// (`HCCL_BACKEND`, the transport's, `HCCL_ALGO`, profiling,
/// `HCCL_DETERMINISTIC` and the other HCCL switches,
/// `HCCL_REDUCE_PRECISION`), without building a communicator: for tools
/// that run the simulator directly and must refuse the same bad values.
///
/// # Errors
/// [`CommError::Env`] (or the transport's config error) naming the first
/// variable whose value is not accepted.
pub fn check_env() -> Result<(), CommError> {
    BackendKind::from_env()?;
    settings().map(|_| ())
}

/// `HCCL_REDUCE_PRECISION`: `native` (unset: the default) or `fp32`; see
/// [`ReducePrecision`].
fn precision_from_env() -> Result<ReducePrecision, CommError> {
    match std::env::var("HCCL_REDUCE_PRECISION") {
        Err(_) => Ok(ReducePrecision::Native),
        Ok(v) => ReducePrecision::parse(&v).map_err(|reason| CommError::Env {
            var: "HCCL_REDUCE_PRECISION",
            value: v,
            reason,
        }),
    }
}

fn pick_algo(args: &CollectiveArgs, hosts: u32) -> Result<AlgoSpec, CommError> {
    Ok(hccl_hw::tcp::choose_algo(args, hosts)?)
}

impl Comm {
    fn new(name: String, rank: u32, size: u32, backend: Backend) -> Comm {
        let (abort, hosts, sim, exec_timeout) = match &backend {
            Backend::Tcp(t) => (
                Some(t.abort_handle()),
                t.hosts(),
                None,
                t.config().exec_timeout,
            ),
            Backend::Sim(w) => (None, 1, Some(Arc::clone(w)), w.exec_timeout()),
        };
        // `settings()` checked HCCL_PROFILING_* already; should the
        // directory have gone since, every op fails with the message.
        let (profile, error) = match CommProfile::from_env(&name, rank) {
            Ok(p) => (p, None),
            Err(m) => (None, Some(CommError::Broken(format!("profiling: {m}")))),
        };
        let comm = Comm {
            shared: Arc::new(Shared {
                rank,
                size,
                id: comm_id(&name),
                name,
                state: Mutex::new(State {
                    backend: Some(backend),
                    turn: 0,
                    scratch: Vec::new(),
                    p2p_sent: vec![0; size as usize],
                    p2p_received: vec![0; size as usize],
                }),
                turn_cv: Condvar::new(),
                tickets: Mutex::new(Tickets::default()),
                error: Mutex::new(error),
                abort,
                aborted: Mutex::new(false),
                hosts,
                sim,
                profile,
                local: OnceLock::new(),
                asyncs: Arc::default(),
                exec_timeout,
                global: OnceLock::new(),
                // `settings()` checked it; a split re-reads it, then takes
                // its parent's setting.
                precision: Mutex::new(precision_from_env().unwrap_or_default()),
            }),
        };
        crossed::register(&comm.shared);
        comm
    }

    fn tcp(
        name: &str,
        cfg: TcpConfig,
        root: &RootInfo,
        nranks: u32,
        rank: u32,
    ) -> Result<Comm, CommError> {
        let t = TcpRank::connect(cfg, root, nranks, rank, comm_id(name))?;
        Ok(Comm::new(
            name.to_string(),
            rank,
            nranks,
            Backend::Tcp(Box::new(t)),
        ))
    }

    /// Joins a communicator of `nranks` ranks as `rank`, through the root
    /// `root_info` (from [`RootInfo::new`] on one rank, sent to the
    /// others). Blocks until every rank has joined or `HCCL_CONNECT_TIMEOUT`
    /// passes. HCCL's `HcclCommInitRootInfo`.
    ///
    /// # Errors
    /// Bootstrap failures ("bootstrap timed out after N s: k of n ranks
    /// connected, missing [...]", "session expired", port in use, ...).
    pub fn init_root_info(nranks: u32, root_info: &RootInfo, rank: u32) -> Result<Comm, CommError> {
        if BackendKind::from_env()? == BackendKind::Sim {
            return Err(CommError::Unsupported(
                "HCCL_BACKEND=sim runs every rank in one process: use Comm::init_all".into(),
            ));
        }
        Comm::tcp("world", settings()?, root_info, nranks, rank)
    }

    /// Joins the communicator described by an HCCL rank table (JSON, version
    /// 1.0 or 1.2) as `rank`. The root is rank 0's host (`host_ip`, else an IP
    /// `server_id`) at `HCCL_IF_BASE_PORT` (default 60000, HCCL's); rank 0's
    /// process serves it. HCCL's `HcclCommInitClusterInfo`.
    ///
    /// # Errors
    /// Unreadable or invalid table (naming the JSON path), bootstrap failures.
    pub fn init_cluster_info(
        rank_table_path: impl AsRef<Path>,
        rank: u32,
    ) -> Result<Comm, CommError> {
        let path = rank_table_path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| CommError::Env {
            var: "rank table",
            value: path.display().to_string(),
            reason: format!("cannot read: {e}"),
        })?;
        let cfg = settings()?;
        let t = launch::from_rank_table(&bytes, cfg.base_port)?;
        let root = if rank == 0 {
            RootInfo::serve(&cfg, t.root, t.session, "HCCL_IF_BASE_PORT").map_err(|e| match e {
                // The address is the table's, not HCCL_IF_IP's.
                TcpError::AddrNotLocal { addr, .. } => CommError::Env {
                    var: "rank table",
                    value: path.display().to_string(),
                    reason: format!(
                        "rank 0 serves the bootstrap at its server's address, {} (the server's host_ip, else its server_id), which is not an address of this host; run rank 0 on that server or fix the table",
                        addr.ip()
                    ),
                },
                e => e.into(),
            })?
        } else {
            RootInfo {
                addr: t.root,
                session: t.session,
            }
        };
        Comm::tcp("world", cfg, &root, t.world_size, rank)
    }

    /// All `ndev` ranks in this process, one thread each during setup
    /// (HCCL's `HcclCommInitAll`). On TCP they talk over loopback; with
    /// `HCCL_BACKEND=sim` they run on the simulator. A blocking collective
    /// returns when every rank has called it, so drive each `Comm` from its
    /// own thread, or issue one thread's calls on all of them together with
    /// [`group`] (HCCL's loop over communicators, whose calls only enqueue
    /// work on streams). A blocking call from the creating thread that
    /// waits for communicators of this set that no thread has ever called
    /// fails within 5 s (or half of `HCCL_EXEC_TIMEOUT`) with
    /// [`CommError::Undriven`], instead of timing out.
    ///
    /// # Errors
    /// Any rank's bootstrap error.
    pub fn init_all(ndev: u32) -> Result<Vec<Comm>, CommError> {
        Comm::init_all_on(BackendKind::from_env()?, ndev)
    }

    /// [`Comm::init_all`] on an explicit backend (the one-line switch
    /// between TCP and the simulator).
    ///
    /// # Errors
    /// Any rank's bootstrap error.
    pub fn init_all_on(backend: BackendKind, ndev: u32) -> Result<Vec<Comm>, CommError> {
        if ndev == 0 {
            return Err(CommError::Unsupported(
                "init_all(0): a communicator has at least one rank".into(),
            ));
        }
        let mut cfg = settings()?;
        let local = LocalWorld::new(ndev, local::grace(cfg.exec_timeout));
        let comms: Vec<Comm> = match backend {
            BackendKind::Sim => {
                let w = SimWorld::new(ndev, cfg.exec_timeout, cfg.unexpected_bound)?;
                (0..ndev)
                    .map(|r| Comm::new("world".into(), r, ndev, Backend::Sim(Arc::clone(&w))))
                    .collect()
            }
            BackendKind::Tcp => {
                if cfg.if_ip.is_none() && cfg.socket_ifname.is_none() {
                    cfg.if_ip = Some(std::net::Ipv4Addr::LOCALHOST.into());
                }
                let root = RootInfo::create(&cfg)?;
                let hs: Vec<_> = (0..ndev)
                    .map(|r| {
                        let cfg = cfg.clone();
                        std::thread::spawn(move || Comm::tcp("world", cfg, &root, ndev, r))
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(CommError::Sim("a setup thread panicked".into()))
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        for c in &comms {
            let _ = c.shared.local.set(Arc::clone(&local));
        }
        Ok(comms)
    }

    /// Joins the communicator a launcher describes in the environment:
    /// torchrun's `MASTER_ADDR`, `MASTER_PORT`, `RANK`, `WORLD_SIZE`,
    /// `LOCAL_RANK`, or Open MPI's `OMPI_COMM_WORLD_RANK` /
    /// `OMPI_COMM_WORLD_SIZE` (so `mpirun -n 4 prog` works). Rank 0 serves
    /// the root at `MASTER_ADDR:MASTER_PORT` (defaults `127.0.0.1:29500`,
    /// torch's); see [`launch::EnvLaunch`] for the session id.
    ///
    /// # Errors
    /// Missing or bad variables; `MASTER_PORT` in use; bootstrap failures.
    pub fn from_env() -> Result<Comm, CommError> {
        let l = launch::EnvLaunch::from_env()?;
        let cfg = settings()?;
        if BackendKind::from_env()? == BackendKind::Sim {
            return Err(CommError::Unsupported(
                "HCCL_BACKEND=sim runs every rank in one process: use Comm::init_all".into(),
            ));
        }
        let root = if l.rank == 0 {
            RootInfo::serve(&cfg, l.root, l.session, "MASTER_PORT")?
        } else {
            RootInfo {
                addr: l.root,
                session: l.session,
            }
        };
        Comm::tcp("world", cfg, &root, l.world_size, l.rank)
    }

    /// This rank, `0..size`.
    pub fn rank(&self) -> u32 {
        self.shared.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.shared.size
    }

    /// The communicator's name (`world`, or `world/split0/color3`, ...).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The precision fp16/bf16 Sum/Prod/Avg reductions carry partial sums
    /// in: `HCCL_REDUCE_PRECISION` when the communicator was made (a split
    /// takes its parent's), [`ReducePrecision::Native`] by default.
    pub fn reduce_precision(&self) -> ReducePrecision {
        *lock(&self.shared.precision)
    }

    /// Sets the precision of this communicator's later fp16/bf16 Sum, Prod
    /// and Avg reductions. [`ReducePrecision::Fp32`] runs them in f32
    /// (twice the bytes; see [`ReducePrecision`]). Every rank must use the
    /// same setting for an op: a rank that differs fails the op on every
    /// rank with a "reduce precision mismatch" naming both settings.
    pub fn set_reduce_precision(&self, precision: ReducePrecision) {
        *lock(&self.shared.precision) = precision;
    }

    /// The backend running this communicator.
    pub fn backend(&self) -> BackendKind {
        match lock(&self.shared.state).backend {
            Some(Backend::Sim(_)) => BackendKind::Sim,
            _ => BackendKind::Tcp,
        }
    }

    /// The error that broke the communicator, if any (HCCL's
    /// `HcclGetCommAsyncError`). Never waits for a running op.
    pub fn async_error(&self) -> Option<CommError> {
        if let Some(e) = lock(&self.shared.error).clone() {
            return Some(e);
        }
        let mut st = self.shared.state.try_lock().ok()?;
        if let Some(Backend::Tcp(t)) = st.backend.as_mut() {
            if let Some(e) = t.async_error() {
                let e = self.shared.name_ranks(CommError::Tcp(e));
                lock(&self.shared.error).get_or_insert(e.clone());
                return Some(e);
            }
        }
        None
    }

    /// The algorithm this communicator runs `args` with: `HCCL_ALGO` where
    /// it fits, else the choice for host TCP ([`hccl_hw::tcp::choose_algo`],
    /// which depends on how many hosts the ranks run on). Every rank
    /// computes the same. For reports such as `hccl test`'s algorithm column.
    ///
    /// # Errors
    /// [`CommError`] if `HCCL_ALGO` does not parse.
    pub fn algorithm(&self, args: &CollectiveArgs) -> Result<AlgoSpec, CommError> {
        pick_algo(args, self.shared.hosts)
    }

    /// Aborts the communicator: interrupts a running op, tells the peers,
    /// closes the connections. Every later op fails. A second call is a no-op.
    pub fn abort(&self) {
        self.abort_because(format!(
            "rank {} aborted the communicator",
            self.shared.rank
        ));
    }

    /// [`Comm::abort`] telling the peers `reason`.
    fn abort_because(&self, reason: String) {
        {
            let mut a = lock(&self.shared.aborted);
            if *a {
                return;
            }
            *a = true;
        }
        if let Some(h) = &self.shared.abort {
            h.abort_with(&reason);
        }
        if let Some(w) = &self.shared.sim {
            w.fail(self.shared.rank, &reason);
        }
        let mut st = lock(&self.shared.state);
        if let Some(Backend::Tcp(t)) = st.backend.as_mut() {
            t.abort_with(&reason);
        }
        st.backend = None;
        lock(&self.shared.error).get_or_insert(CommError::Broken(reason));
        self.shared.turn_cv.notify_all();
    }

    /// Destroys the communicator (HCCL's `HcclCommDestroy`): waits for its
    /// async ops still running (handles dropped without waiting included),
    /// at most `HCCL_EXEC_TIMEOUT` and at most 30 s, then says goodbye to
    /// the peers and closes the connections once what was queued for them
    /// is written (TCP: a bounded linger). The process may exit right after.
    /// Dropping a `Comm` does the same and logs the error.
    ///
    /// # Errors
    /// [`CommError::Undelivered`] counting and naming the async ops (sends,
    /// receives, collectives, with their peers) still running after that
    /// wait (they are aborted, so the peers fail too), or that failed while
    /// their handle was dropped without waiting, with their errors; or
    /// naming the messages sent to this rank that no receive took ("1
    /// message from rank 0 (4096 bytes, message 0 of the pair) was never
    /// received"), whose senders saw them delivered.
    pub fn destroy(self) -> Result<(), CommError> {
        self.close()
    }

    /// [`Comm::destroy`] without consuming the communicator (for drop).
    fn close(&self) -> Result<(), CommError> {
        let linger = self
            .shared
            .exec_timeout
            .map_or(drain::DRAIN_LINGER, |t| t.min(drain::DRAIN_LINGER));
        let (asyncs, rank) = (&self.shared.asyncs, self.shared.rank);
        let mut r = drain::wait_idle(asyncs, rank, linger);
        if r.is_err() {
            self.abort();
            // Aborted ops end at once; let them go before closing.
            let _ = drain::wait_idle(asyncs, rank, std::time::Duration::from_secs(1));
        }
        // Failures nobody waited for; after a timeout those are the aborts.
        let unseen = asyncs.take_unseen(rank);
        // Messages that reached this rank and that no receive took: their
        // senders saw them delivered, so this is the only report.
        let mut st = lock(&self.shared.state);
        let msgs = match st.backend.as_mut() {
            Some(Backend::Tcp(t)) => t.unreceived(),
            Some(Backend::Sim(w)) => w.unreceived(rank),
            None => Vec::new(),
        };
        // Close now, on the caller's thread: were the last async thread to
        // drop the state, a caller that exits next would cut its goodbye.
        st.backend = None;
        drop(st);
        for e in [unseen, drain::unreceived(rank, &msgs)] {
            r = match (r, e) {
                (Ok(()), e) => e,
                (Err(a), Err(b)) => Err(CommError::Undelivered(format!("{a}; {b}"))),
                (r, Ok(())) => r,
            };
        }
        r
    }

    /// Writes this rank's profile file now (with `HCCL_PROFILING_ENABLE=1`)
    /// rather than when the communicator is dropped, so that a write error
    /// reaches the caller: the file's path, or `None` when profiling is off
    /// or the file was written already. Ops after this call are not
    /// recorded. (Without this call, a write error at drop is reported as
    /// an error log line, on stderr if no subscriber is installed.)
    ///
    /// # Errors
    /// [`crate::profiling::ProfilingError::Io`]: the directory or file
    /// could not be written.
    pub fn write_profile(
        &self,
    ) -> Result<Option<std::path::PathBuf>, crate::profiling::ProfilingError> {
        match &self.shared.profile {
            Some(p) => p.finish(),
            None => Ok(None),
        }
    }

    /// A collective's (turn, sequence number).
    fn take_ticket(&self) -> (u64, u64) {
        let mut t = lock(&self.shared.tickets);
        let r = (t.turn, t.coll);
        t.turn += 1;
        t.coll += 1;
        r
    }

    /// A point-to-point op's turn.
    fn take_turn(&self) -> u64 {
        let mut t = lock(&self.shared.tickets);
        t.turn += 1;
        t.turn - 1
    }

    /// Waits until it is turn `turn`, runs `f` on the state, then passes
    /// the turn on (whatever `f` returned) and records an error.
    fn at_turn<R>(
        shared: &Shared,
        turn: u64,
        f: impl FnOnce(&mut State) -> Result<R, CommError>,
    ) -> Result<R, CommError> {
        let mut st = lock(&shared.state);
        while st.turn != turn && st.backend.is_some() {
            st = shared.turn_cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let r = f(&mut st).map_err(|e| shared.name_ranks(e));
        if let Err(e) = &r {
            lock(&shared.error).get_or_insert(e.clone());
            // The other ranks may be waiting in this op: tell them now
            // (a failure the transport found, it has told them already).
            // Without this op's prefix, which the peers' text has already.
            let text = e.to_string();
            let reason = format!(
                "rank {} failed: {}",
                shared.rank,
                hccl_hw::tcp::own_reason(&text)
            );
            match st.backend.as_mut() {
                Some(Backend::Tcp(t)) => t.abort_with(&reason),
                Some(Backend::Sim(w)) => w.fail(shared.rank, &reason),
                None => {}
            }
        }
        st.turn = st.turn.max(turn + 1);
        shared.turn_cv.notify_all();
        r
    }

    /// Runs `args` with seq `seq` once it is turn `turn`.
    fn run_at(
        shared: &Shared,
        (turn, seq): (u64, u64),
        args: &CollectiveArgs,
        user: UserBufs<'_>,
    ) -> Result<(), CommError> {
        Comm::at_turn(shared, turn, |st| {
            Comm::run_locked(shared, st, seq, args, user)
        })
    }

    fn run_locked(
        shared: &Shared,
        st: &mut State,
        seq: u64,
        args: &CollectiveArgs,
        user: UserBufs<'_>,
    ) -> Result<(), CommError> {
        if let Some(e) = lock(&shared.error).clone() {
            return Err(e.into_broken());
        }
        let op = format!("{:?}", args.kind);
        args.validate()?;
        let rank = shared.rank;
        let (inb, outb) = args.io_bytes(rank);
        // Check the user's memory against the call before anything moves.
        let need = |what, expected: u64, got: usize| {
            if expected != got as u64 {
                Err(CommError::Buffer {
                    op: op.clone(),
                    what,
                    expected,
                    got: got as u64,
                })
            } else {
                Ok(())
            }
        };
        let alias = args.alias(rank);
        // A buffer this rank does not use (a non-root's receive buffer of
        // Gather or Reduce, its send buffer of Scatter) may have any size
        // and is left alone, as MPI and NCCL ignore it.
        let user = match user {
            UserBufs::Separate(i, o) => UserBufs::Separate(
                if inb == 0 { &i[..0] } else { i },
                if outb == 0 { &mut o[..0] } else { o },
            ),
            u => u,
        };
        match &user {
            UserBufs::Separate(i, o) => {
                need("send buffer", inb, i.len())?;
                need("receive buffer", outb, o.len())?;
            }
            UserBufs::InPlace(b) => {
                let len = match alias {
                    Some(a) => (a.input_at + inb).max(a.output_at + outb),
                    None => inb.max(outb),
                };
                need("in-place buffer", len, b.len())?;
            }
        }
        let precision = *lock(&shared.precision);
        let Some(wide) = precision.widened(args) else {
            let spec = pick_algo(args, shared.hosts)?;
            return Comm::run_on_backend(shared, st, seq, (args, args, false), spec, user);
        };
        // HCCL_REDUCE_PRECISION=fp32: the op in f32 on widened copies, the
        // output rounded once back into the user's buffer.
        let spec = pick_algo(&wide, shared.hosts)?;
        let kernel = |e: hccl_algos::kernels::KernelError| CommError::Shape {
            op: op.clone(),
            detail: e.to_string(),
        };
        let dtype = args.dtype;
        match user {
            UserBufs::Separate(i, o) => {
                let wi = hccl_algos::precision::widen(dtype, i).map_err(kernel)?;
                let mut wo = vec![0u8; 2 * o.len()];
                let bufs = UserBufs::Separate(&wi, &mut wo);
                Comm::run_on_backend(shared, st, seq, (&wide, args, true), spec, bufs)?;
                hccl_algos::precision::narrow(dtype, &wo, o).map_err(kernel)
            }
            UserBufs::InPlace(b) => {
                let mut wb = hccl_algos::precision::widen(dtype, b).map_err(kernel)?;
                let bufs = UserBufs::InPlace(&mut wb);
                Comm::run_on_backend(shared, st, seq, (&wide, args, true), spec, bufs)?;
                let at = alias.map_or(0, |a| a.output_at) as usize;
                let out = &mut b[at..at + outb as usize];
                let wout = &wb[2 * at..2 * (at + outb as usize)];
                hccl_algos::precision::narrow(dtype, wout, out).map_err(kernel)
            }
        }
    }

    /// Runs a checked op on the backend. `args` are what runs (f32 for a
    /// widened op), `sig_args` what the user called (the signature and the
    /// profile use them), `wide` whether the op was widened.
    fn run_on_backend(
        shared: &Shared,
        st: &mut State,
        seq: u64,
        (args, sig_args, wide): (&CollectiveArgs, &CollectiveArgs, bool),
        spec: AlgoSpec,
        user: UserBufs<'_>,
    ) -> Result<(), CommError> {
        let op = format!("{:?}", args.kind);
        let rank = shared.rank;
        let (inb, outb) = args.io_bytes(rank);
        let alias = args.alias(rank);
        let State {
            backend, scratch, ..
        } = st;
        match backend.as_mut() {
            None => Err(CommError::Broken("the communicator was aborted".into())),
            Some(Backend::Sim(w)) => {
                let (input, out_at) = match (&user, alias) {
                    (UserBufs::Separate(i, _), _) => (i.to_vec(), 0),
                    (UserBufs::InPlace(b), Some(a)) => (
                        b[a.input_at as usize..(a.input_at + inb) as usize].to_vec(),
                        a.output_at,
                    ),
                    (UserBufs::InPlace(b), None) => (b[..inb as usize].to_vec(), 0),
                };
                let (out, sim_ns) = w.run(&shared.name, rank, seq, (args, wide), spec, input)?;
                if let Some(p) = &shared.profile {
                    p.record(
                        &shared.name,
                        seq,
                        sig_args,
                        &spec,
                        OpTime::Simulated(sim_ns),
                    );
                }
                let dst: &mut [u8] = match user {
                    UserBufs::Separate(_, o) => o,
                    UserBufs::InPlace(b) => &mut b[out_at as usize..(out_at + outb) as usize],
                };
                if out.len() != dst.len() {
                    return Err(CommError::Sim(format!(
                        "{op}: simulator returned {} bytes for a {}-byte output",
                        out.len(),
                        dst.len()
                    )));
                }
                dst.copy_from_slice(&out);
                Ok(())
            }
            Some(Backend::Tcp(t)) => {
                let layout = GroupLayout::flat(shared.size);
                let (sizes, plan) =
                    hccl_hw::tcp::plan_op(args, &spec, &layout, rank, t.ranks_fit_cpus())?;
                // Grown, never re-zeroed: schedules write scratch before
                // reading it (the verifier checks), and zeroing a one-shot's
                // p − 1 vectors per op costs as much as the op.
                let need = sizes.scratch as usize;
                if scratch.len() < need {
                    scratch.resize(need, 0);
                }
                let scratch = &mut scratch[..need];
                let sig = sig_args.signature();
                let describe = |remote: &hccl_hw::tcp::wire::Signature, peer| {
                    signature::describe(sig_args, &sig, (&spec, wide), rank, remote, peer)
                };
                // Errors name the communicator: "comm 'world' AllReduce #3".
                let label = format!("comm '{}' {op}", shared.name);
                let info = OpInfo {
                    name: &label,
                    sig: signature::encode_full(&sig, &spec, wide),
                    describe: &describe,
                };
                let bufs = match (user, alias) {
                    (UserBufs::Separate(i, o), _) => OpBuffers::separate(i, o, scratch),
                    (UserBufs::InPlace(b), Some(a)) => {
                        OpBuffers::in_place(b, (a.input_at, inb), (a.output_at, outb), scratch)?
                    }
                    (UserBufs::InPlace(b), None) if outb == 0 => {
                        OpBuffers::separate(b, &mut [], scratch)
                    }
                    (UserBufs::InPlace(b), None) => OpBuffers::separate(&[], b, scratch),
                };
                let ctx = OpContext {
                    comm: shared.id,
                    seq,
                    rank,
                    dtype: args.dtype,
                };
                let start = std::time::Instant::now();
                t.run(&ctx, &info, bufs, plan)
                    .map_err(|e| crossed::explain(shared, t, seq, e))?;
                if let Some(p) = &shared.profile {
                    let end = std::time::Instant::now();
                    p.record(
                        &shared.name,
                        seq,
                        sig_args,
                        &spec,
                        OpTime::Measured(start, end),
                    );
                }
                Ok(())
            }
        }
    }

    /// Runs a collective on bytes: `input` and `output` sized as
    /// `args.io_bytes(rank)` says (HCCL's untyped calls with a data type).
    /// `args.world_size` must be this communicator's size.
    ///
    /// # Errors
    /// Argument, buffer-size, transport and consistency errors.
    pub fn collective(
        &self,
        args: &CollectiveArgs,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<(), CommError> {
        self.check_world(args).map_err(|e| self.fail_local(e))?;
        let t = self.take_ticket();
        let call = self.enter_blocking(&format!("{:?} #{}", args.kind, t.1), Waits::All);
        let r = Comm::run_at(&self.shared, t, args, UserBufs::Separate(input, output));
        Comm::end_blocking(call, r)
    }

    /// Runs a collective in place on one buffer placed as
    /// `CollectiveArgs::alias` says (`args.in_place` is set for you).
    ///
    /// # Errors
    /// As [`Comm::collective`]; kinds without an in-place form.
    pub fn collective_in_place(
        &self,
        args: &CollectiveArgs,
        buf: &mut [u8],
    ) -> Result<(), CommError> {
        self.check_world(args).map_err(|e| self.fail_local(e))?;
        let args = args.clone().with_in_place(true);
        let t = self.take_ticket();
        let call = self.enter_blocking(&format!("{:?} #{}", args.kind, t.1), Waits::All);
        let r = Comm::run_at(&self.shared, t, &args, UserBufs::InPlace(buf));
        Comm::end_blocking(call, r)
    }

    /// Marks a blocking call `op` as started for [`local`]'s check (only
    /// communicators made by [`Comm::init_all`] have one).
    fn enter_blocking(&self, op: &str, waits: Waits<'_>) -> Option<CallGuard> {
        let world = self.shared.local.get()?;
        let (rank, size) = (self.shared.rank, self.shared.size);
        let head = format!(
            "{op} on comm '{}' (rank {rank} of {size})",
            self.shared.name
        );
        let describe = move |peers: &[u32]| {
            format!(
                "{head} cannot complete: ranks {peers:?} are communicators of this process \
                 (Comm::init_all) that no thread has called, and the thread that created them \
                 is blocked in this call. In HCCL such a loop works because a call only \
                 enqueues work on a stream; here a blocking call returns when the op is done. \
                 Issue the calls together with hccl::group(|g| ...), call each communicator \
                 from its own thread, or use the async calls and wait on their handles"
            )
        };
        let sh = Arc::clone(&self.shared);
        let on_stuck = Box::new(move |msg: String| {
            lock(&sh.error).get_or_insert(CommError::Undriven(msg.clone()));
            if let Some(h) = &sh.abort {
                h.abort_with(&format!("rank {} failed: {msg}", sh.rank));
            }
            if let Some(w) = &sh.sim {
                w.fail(sh.rank, &msg);
            }
        });
        Some(world.enter(rank, waits, describe, on_stuck))
    }

    /// Runs `f` as an async op of `kind` on a thread named `name`: the
    /// rank counts as driven for [`local`]'s check, destroy waits for the
    /// op ([`drain`]), and a failure its handle never reports is kept for
    /// destroy's error.
    fn spawn_async<T: Send + 'static>(
        &self,
        name: String,
        kind: drain::AsyncKind,
        f: impl FnOnce(&Arc<Shared>) -> Result<T, CommError> + Send + 'static,
    ) -> OpHandle<T> {
        if let Some(w) = self.shared.local.get() {
            w.driven(self.shared.rank);
        }
        let shared = Arc::clone(&self.shared);
        let running = drain::AsyncGuard::new(&shared.asyncs, kind);
        let id = running.id();
        OpHandle::spawn(name, move || {
            let _running = running;
            let r = f(&shared);
            shared.asyncs.note_result(id, kind, &r);
            r
        })
        .reported_to(&self.shared.asyncs, id)
    }

    /// Ends a call [`Comm::enter_blocking`] started: a call failed as stuck
    /// returns [`CommError::Undriven`], not the abort it was ended with.
    fn end_blocking<R>(call: Option<CallGuard>, r: Result<R, CommError>) -> Result<R, CommError> {
        match (r, call.as_ref().and_then(CallGuard::stuck)) {
            (Err(_), Some(msg)) => Err(CommError::Undriven(msg)),
            (r, _) => r,
        }
    }

    /// [`Comm::collective`] on its own thread, with owned buffers: returns
    /// the output buffer (allocated to `args.io_bytes(rank).1` bytes).
    pub fn collective_async(&self, args: CollectiveArgs, input: Vec<u8>) -> OpHandle<Vec<u8>> {
        let checked = self.check_world(&args);
        let (turn, seq) = self.take_ticket();
        let kind = drain::AsyncKind::Collective(args.kind.name());
        self.spawn_async(format!("hccl-op-{seq}"), kind, move |shared| {
            // A failed check fails the op's turn, telling the peers; either
            // way `at_turn` runs and passes the turn on.
            let checked = checked.or_else(|e| Comm::at_turn(shared, turn, |_| Err(e)));
            checked.and_then(|()| {
                let mut out = vec![0u8; args.io_bytes(shared.rank).1 as usize];
                Comm::run_at(
                    shared,
                    (turn, seq),
                    &args,
                    UserBufs::Separate(&input, &mut out),
                )
                .map(|()| out)
            })
        })
    }

    /// An argument error a collective found before its op was queued still
    /// takes the op's turn and fails it like any other failed op
    /// ([`Comm::at_turn`]): the communicator breaks and the other ranks,
    /// which may be waiting in the op already, fail at once naming this
    /// rank's error. (A point-to-point argument error stays local: it
    /// names no peer that waits for it, and the communicator stays usable.)
    fn fail_local(&self, e: CommError) -> CommError {
        let (turn, _) = self.take_ticket();
        let _ = Comm::at_turn(&self.shared, turn, |_| Err::<(), _>(e.clone()));
        e
    }

    fn check_world(&self, args: &CollectiveArgs) -> Result<(), CommError> {
        if args.world_size != self.shared.size {
            return Err(CommError::Shape {
                op: format!("{:?}", args.kind),
                detail: format!(
                    "args.world_size = {} but the communicator has {} ranks",
                    args.world_size, self.shared.size
                ),
            });
        }
        Ok(())
    }

    fn args(&self, kind: CollectiveKind, count: u64, dtype: DataType) -> CollectiveArgs {
        CollectiveArgs::new(kind, count, dtype, self.shared.size)
    }

    fn per_rank(&self, kind: CollectiveKind, total: usize) -> Result<u64, CommError> {
        let n = self.shared.size as usize;
        if total % n != 0 {
            let e = CommError::Shape {
                op: format!("{kind:?}"),
                detail: format!("{total} elements do not split into {n} equal blocks"),
            };
            return Err(self.fail_local(e));
        }
        Ok((total / n) as u64)
    }

    /// AllReduce: `recv[i] = op over ranks of send[i]`; equal lengths.
    ///
    /// # Errors
    /// Lengths differ; transport and consistency errors.
    pub fn all_reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::AllReduce, send.len() as u64, T::DTYPE)
            .with_op(op);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// AllReduce in place on `buf`.
    ///
    /// # Errors
    /// Transport and consistency errors.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::AllReduce, buf.len() as u64, T::DTYPE)
            .with_op(op);
        self.collective_in_place(&a, bytes_mut(buf))
    }

    /// AllReduce on its own thread; returns the reduced buffer.
    pub fn all_reduce_async<T: Element>(&self, send: Vec<T>, op: ReduceOp) -> OpHandle<Vec<T>> {
        let a = self
            .args(CollectiveKind::AllReduce, send.len() as u64, T::DTYPE)
            .with_op(op);
        let h = self.collective_async(a, bytes(&send).to_vec());
        // Waiting `h` marks its failure seen: this handle reports it instead.
        let (asyncs, id) = (
            Arc::clone(&self.shared.asyncs),
            self.shared.asyncs.reserve(),
        );
        let kind = drain::AsyncKind::Collective(CollectiveKind::AllReduce.name());
        let report = Arc::clone(&asyncs);
        OpHandle::spawn("hccl-op-cast".into(), move || {
            let r = h.wait().map(|b| {
                let mut v =
                    vec![<T as bytemuck::Zeroable>::zeroed(); b.len() / std::mem::size_of::<T>()];
                bytes_mut(&mut v).copy_from_slice(&b);
                v
            });
            report.note_result(id, kind, &r);
            r
        })
        .reported_to(&asyncs, id)
    }

    /// ReduceScatter: `send` holds `size` blocks of `recv.len()` elements;
    /// rank r gets the reduction of every rank's block r.
    ///
    /// # Errors
    /// `send.len() != size * recv.len()`; transport and consistency errors.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::ReduceScatter, recv.len() as u64, T::DTYPE)
            .with_op(op);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// ReduceScatter in place: `buf` is the send buffer; rank r's result
    /// lands in its own block `buf[r*count..(r+1)*count]`.
    ///
    /// # Errors
    /// `buf.len()` not a multiple of `size`; transport and consistency errors.
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), CommError> {
        let count = self.per_rank(CollectiveKind::ReduceScatter, buf.len())?;
        let a = self
            .args(CollectiveKind::ReduceScatter, count, T::DTYPE)
            .with_op(op);
        self.collective_in_place(&a, bytes_mut(buf))
    }

    /// AllGather: `recv` = every rank's `send`, in rank order.
    ///
    /// # Errors
    /// `recv.len() != size * send.len()`; transport and consistency errors.
    pub fn all_gather<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let a = self.args(CollectiveKind::AllGather, send.len() as u64, T::DTYPE);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// AllGather in place: rank r's input is its own block of `buf`.
    ///
    /// # Errors
    /// `buf.len()` not a multiple of `size`; transport and consistency errors.
    pub fn all_gather_in_place<T: Element>(&self, buf: &mut [T]) -> Result<(), CommError> {
        let count = self.per_rank(CollectiveKind::AllGather, buf.len())?;
        let a = self.args(CollectiveKind::AllGather, count, T::DTYPE);
        self.collective_in_place(&a, bytes_mut(buf))
    }

    /// Broadcast `buf` from `root` to every rank (HCCL's `HcclBroadcast`, in place).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range; transport and consistency errors.
    pub fn broadcast<T: Element>(&self, buf: &mut [T], root: u32) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::Broadcast, buf.len() as u64, T::DTYPE)
            .with_root(root);
        self.collective_in_place(&a, bytes_mut(buf))
    }

    /// Reduce to `root`: `recv` (root only; ignored elsewhere, any size) = op over ranks of `send`.
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range, lengths; transport and consistency errors.
    pub fn reduce<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: u32,
    ) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::Reduce, send.len() as u64, T::DTYPE)
            .with_op(op)
            .with_root(root);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// Scatter from `root`: rank r gets block r of the root's `send`
    /// (`size * recv.len()` elements on the root; ignored elsewhere, any size).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range, lengths; transport and consistency errors.
    pub fn scatter<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: u32,
    ) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::Scatter, recv.len() as u64, T::DTYPE)
            .with_root(root);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// Gather to `root`: the root's `recv` = every rank's `send` in rank
    /// order (`recv` ignored elsewhere, any size).
    ///
    /// `root` is a rank of this communicator (`0..size`), not a world rank:
    /// on a [`Comm::split`] communicator, its own numbering.
    ///
    /// # Errors
    /// Root out of range, lengths; transport and consistency errors.
    pub fn gather<T: Element>(
        &self,
        send: &[T],
        recv: &mut [T],
        root: u32,
    ) -> Result<(), CommError> {
        let a = self
            .args(CollectiveKind::Gather, send.len() as u64, T::DTYPE)
            .with_root(root);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// AllToAll: block j of rank i's `send` goes to block i of rank j's
    /// `recv`; both hold `size` equal blocks.
    ///
    /// # Errors
    /// Lengths; transport and consistency errors.
    pub fn all_to_all<T: Element>(&self, send: &[T], recv: &mut [T]) -> Result<(), CommError> {
        let count = self.per_rank(CollectiveKind::AllToAll, send.len())?;
        let a = self.args(CollectiveKind::AllToAll, count, T::DTYPE);
        self.collective(&a, bytes(send), bytes_mut(recv))
    }

    /// Returns once every rank has entered the barrier.
    ///
    /// # Errors
    /// Transport errors.
    pub fn barrier(&self) -> Result<(), CommError> {
        let a = self.args(CollectiveKind::Barrier, 0, DataType::Uint8);
        self.collective(&a, &[], &mut [])
    }

    /// Splits the communicator (NCCL's `ncclCommSplit`): ranks with the same
    /// `color` form a new communicator, ordered by (`key`, old rank);
    /// `color = None` takes no part and gets `None`. Every rank must call it.
    /// On TCP the new communicator bootstraps through a root hosted by its
    /// lowest member, announced over this one.
    ///
    /// # Errors
    /// This communicator's op errors; the new bootstrap's errors.
    pub fn split(&self, color: Option<u32>, key: u32) -> Result<Option<Comm>, CommError> {
        let n = self.shared.size as usize;
        // 1. Everyone learns everyone's (color + 1, key); 0 = no color, so
        // every u32 is a color.
        let mine = [color.map_or(0, |c| u64::from(c) + 1), u64::from(key)];
        let mut all = vec![0u64; 2 * n];
        self.all_gather(&mine, &mut all)?;
        let split_no = lock(&self.shared.tickets).coll;
        let Some(color) = color else {
            // Still take part in the root-info exchange below.
            let mut infos = vec![0u8; hccl_hw::tcp::root::ROOT_INFO_LEN * n];
            if self.backend() == BackendKind::Tcp {
                self.all_gather(&[0u8; hccl_hw::tcp::root::ROOT_INFO_LEN], &mut infos)?;
            }
            return Ok(None);
        };
        let mut members: Vec<(u64, usize)> = (0..n)
            .filter(|&r| all[2 * r] == u64::from(color) + 1)
            .map(|r| (all[2 * r + 1], r))
            .collect();
        members.sort();
        let new_rank = members
            .iter()
            .position(|&(_, r)| r == self.shared.rank as usize)
            .unwrap_or(0) as u32;
        let size = members.len() as u32;
        let name = format!("{}/split{split_no}/color{color}", self.shared.name);
        // Its errors name world ranks too (issue 13 item 11).
        let global: Vec<u32> = members
            .iter()
            .map(|&(_, r)| self.shared.global_rank(r as u32))
            .collect();
        let renumbered = global.iter().enumerate().any(|(i, &g)| g != i as u32);
        let named = |c: Comm| {
            if renumbered {
                let _ = c.shared.global.set(global.clone());
            }
            Some(c)
        };
        if let Some(Backend::Sim(w)) = &lock(&self.shared.state).backend {
            let sub = w.split_world(split_no, color, global.clone())?;
            let c = Comm::new(name, new_rank, size, Backend::Sim(sub));
            c.set_reduce_precision(self.reduce_precision());
            return Ok(named(c));
        }
        // 2. The lowest member of each color starts a root; all infos are gathered.
        let len = hccl_hw::tcp::root::ROOT_INFO_LEN;
        let mut cfg = TcpConfig::from_env()?;
        if cfg.if_ip.is_none() && cfg.socket_ifname.is_none() {
            // Listen where this rank already listens for the parent.
            if let Some(Backend::Tcp(t)) = &lock(&self.shared.state).backend {
                cfg.if_ip = Some(t.local_ip());
            }
        }
        let leader = new_rank == 0;
        let my_info = if leader {
            RootInfo::create(&TcpConfig {
                base_port: 0,
                ..cfg.clone()
            })?
            .to_bytes()
        } else {
            [0u8; hccl_hw::tcp::root::ROOT_INFO_LEN]
        };
        let mut infos = vec![0u8; len * n];
        self.all_gather(&my_info, &mut infos)?;
        let leader_rank = members[0].1;
        let root = RootInfo::from_bytes(&infos[leader_rank * len..(leader_rank + 1) * len])
            .map_err(|e| CommError::Unsupported(format!("split: {e}")))?;
        let c = Comm::tcp(&name, cfg, &root, size, new_rank)?;
        c.set_reduce_precision(self.reduce_precision());
        Ok(named(c))
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("hccl: {e}");
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the backend (TcpRank's drop) says goodbye to the peers;
        // simulated peers learn that this rank is gone.
        lock(&self.state).backend = None;
        if let Some(w) = &self.sim {
            w.leave(self.rank);
        }
        if let Some(p) = &self.profile {
            p.finish_on_drop();
        }
    }
}
