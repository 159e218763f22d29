//! Building communicators: the constructors (HCCL's `HcclCommInitRootInfo`,
//! `HcclCommInitClusterInfo`, `HcclCommInitAll`, a launcher's
//! environment, `HcclCommSplit`), the process's `HCCL_*` settings they
//! check first, and the one place that picks a backend.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use hccl_hw::tcp::{TcpConfig, TcpError};
use hccl_topology::TopologyError;

use super::backend::sim_cluster::Cluster;
use super::backend::sim_settings::SimSettings;
use super::backend::sim_world::SimWorld;
use super::backend::{Backend, SimBackend, Splitter, TcpBackend};
use super::local::{self, LocalWorld};
use super::ordering::Tickets;
use super::p2p::P2pItem;
use super::plan;
use super::profile::{self, CommProfile};
use super::recorder::{self, Recorder};
use super::{
    comm_id, crossed, hccl_env, launch, lock, BackendKind, Comm, CommError, ReducePrecision,
    RootInfo, Shared, State,
};

/// The process's `HCCL_*` settings, checked before a communicator is
/// built: the transport's ([`TcpConfig::from_env`]), `HCCL_ALGO` and the
/// profiling variables, so a bad value fails the constructor, not the
/// first op.
pub(crate) fn settings() -> Result<TcpConfig, CommError> {
    let cfg = TcpConfig::from_env()?;
    plan::algo_env()?;
    profile::check_env()?;
    recorder::check_env()?;
    hccl_env::check_env()?;
    precision_from_env()?;
    Ok(cfg)
}

/// Checks the process's `HCCL_*` settings as [`Comm`]'s constructors do
/// (`HCCL_BACKEND`, the transport's, `HCCL_ALGO`, profiling,
/// `HCCL_FLIGHT_RECORDER_ENTRIES`,
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

/// The refusal of the constructors that join ranks of other processes
/// ([`Comm::init_root_info`], [`Comm::init_cluster_info`],
/// [`Comm::from_env`]) under `HCCL_BACKEND=sim`: the simulator has no
/// wire, so they would bootstrap over TCP and time out instead.
fn refuse_sim() -> Result<(), CommError> {
    if BackendKind::from_env()? == BackendKind::Sim {
        return Err(CommError::Unsupported(
            "HCCL_BACKEND=sim runs every rank in one process: use Comm::init_all".into(),
        ));
    }
    Ok(())
}

/// The refusal of the Ascend constructors in a build without the
/// `ascend` feature.
#[cfg(not(feature = "ascend"))]
fn no_ascend() -> CommError {
    CommError::Unsupported(
        "the Ascend backend (HCCL_BACKEND=ascend) is not in this build: rebuild with `--features ascend`".into(),
    )
}

/// The rank table's bytes; an unreadable file is a
/// [`CommError::RankTable`] holding [`TopologyError::Io`]
/// (`HCCL_E_OPEN_FILE_FAILURE`).
fn read_rank_table(path: &Path) -> Result<Vec<u8>, CommError> {
    std::fs::read(path).map_err(|error| {
        TopologyError::Io {
            path: path.to_path_buf(),
            error,
        }
        .into()
    })
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

#[cfg(not(feature = "ascend"))]
impl Comm {
    fn ascend_cluster_info(_path: &Path, _rank: u32) -> Result<Comm, CommError> {
        Err(no_ascend())
    }
}

impl Comm {
    /// Rank `rank` of `size` of the communicator `name`, run by `backend`.
    pub(crate) fn new(name: String, rank: u32, size: u32, backend: Box<dyn Backend>) -> Comm {
        let (interrupt, kind, fit, exec_timeout, sim) = (
            backend.interrupter(),
            backend.kind(),
            backend.host_fit(),
            backend.exec_timeout(),
            backend.sim_rank(),
        );
        // `settings()` checked HCCL_PROFILING_* already; should the
        // directory have gone since, every op fails with the message.
        let (profile, error) = match CommProfile::from_env(&name, rank) {
            Ok(p) => (p, None),
            Err(m) => (None, Some(CommError::Broken(format!("profiling: {m}")))),
        };
        // Parsed once, here (`settings()` refused a bad value already;
        // should it have changed since, every op fails naming it).
        let (algo, error) = match plan::algo_env() {
            Ok(a) => (a, error),
            Err(e) => (None, error.or(Some(e))),
        };
        // `settings()` refused a bad value already; should it have changed
        // since, every op fails naming it.
        let (flight, error) = match Recorder::from_env() {
            Ok(f) => (f, error),
            Err(e) => (None, error.or(Some(e))),
        };
        // An NPU's communicators share its memory; a host rank's home is
        // made on first use (a split takes its parent's).
        let home = OnceLock::new();
        #[cfg(feature = "ascend")]
        if let Some((lib, device)) = backend.npu() {
            let _ = home.set(super::device::Home::Npu { lib, device });
        }
        let comm = Comm {
            shared: Arc::new(Shared {
                rank,
                size,
                id: comm_id(&name),
                name,
                state: Mutex::new(State {
                    backend: Some(backend),
                    turn: 0,
                    p2p_sent: vec![0; size as usize],
                    p2p_received: vec![0; size as usize],
                    ran: None,
                }),
                turn_cv: Condvar::new(),
                tickets: Mutex::new(Tickets::default()),
                error: Mutex::new(error),
                interrupt,
                aborted: Mutex::new(false),
                kind,
                fit,
                algo,
                profile,
                flight,
                sim,
                local: OnceLock::new(),
                asyncs: Arc::default(),
                exec_timeout,
                global: OnceLock::new(),
                home,
                // `settings()` checked it; a split re-reads it, then takes
                // its parent's setting.
                precision: Mutex::new(precision_from_env().unwrap_or_default()),
            }),
        };
        crossed::register(&comm.shared);
        comm
    }

    pub(crate) fn tcp(
        name: &str,
        cfg: TcpConfig,
        root: &RootInfo,
        nranks: u32,
        rank: u32,
    ) -> Result<Comm, CommError> {
        let t = TcpBackend::connect(name, cfg, root, nranks, rank)?;
        Ok(Comm::new(name.to_string(), rank, nranks, Box::new(t)))
    }

    /// Joins a communicator of `nranks` ranks as `rank`, through the root
    /// `root_info` (from [`RootInfo::new`] on one rank, sent to the
    /// others). Blocks until every rank has joined or `HCCL_CONNECT_TIMEOUT`
    /// passes. HCCL's `HcclCommInitRootInfo`.
    ///
    /// # Errors
    /// [`CommError::Unsupported`] under `HCCL_BACKEND=sim`; bootstrap
    /// failures ("bootstrap timed out after N s: k of n ranks
    /// connected, missing [...]", "session expired", port in use, ...).
    pub fn init_root_info(nranks: u32, root_info: &RootInfo, rank: u32) -> Result<Comm, CommError> {
        refuse_sim()?;
        if BackendKind::from_env()? == BackendKind::Ascend {
            return Err(CommError::Unsupported(
                "HCCL_BACKEND=ascend: Comm::init_root_info takes hccl-rs's TCP root info; use Comm::init_ascend_root_info with CANN's (Comm::ascend_root_info), Comm::init_cluster_info or Comm::from_env".into(),
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
    /// [`CommError::Unsupported`] under `HCCL_BACKEND=sim` (before reading
    /// the table); unreadable or invalid table (naming the JSON path),
    /// bootstrap failures.
    pub fn init_cluster_info(
        rank_table_path: impl AsRef<Path>,
        rank: u32,
    ) -> Result<Comm, CommError> {
        refuse_sim()?;
        let path = rank_table_path.as_ref();
        if BackendKind::from_env()? == BackendKind::Ascend {
            return Comm::ascend_cluster_info(path, rank);
        }
        let bytes = read_rank_table(path)?;
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
    /// [`group`](super::group()) (HCCL's loop over communicators, whose calls only enqueue
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
        Comm::init_all_with(backend, ndev, &SimSettings::from_env())
    }

    /// [`Comm::init_all`] on the simulator, on the cluster `sim` describes
    /// (instead of the `HCCL_SIM_*` variables [`SimSettings::from_env`]
    /// reads): its fabric, fault plan and seed.
    ///
    /// # Errors
    /// [`CommError::Env`] for a setting that does not fit (naming the
    /// variable it stands for and the value); any rank's bootstrap error.
    pub fn init_all_sim(ndev: u32, sim: &SimSettings) -> Result<Vec<Comm>, CommError> {
        Comm::init_all_with(BackendKind::Sim, ndev, sim)
    }

    fn init_all_with(
        backend: BackendKind,
        ndev: u32,
        sim: &SimSettings,
    ) -> Result<Vec<Comm>, CommError> {
        if ndev == 0 {
            return Err(CommError::Unsupported(
                "init_all(0): a communicator has at least one rank".into(),
            ));
        }
        let mut cfg = settings()?;
        let local = LocalWorld::new(ndev, local::grace(cfg.exec_timeout));
        let comms: Vec<Comm> = match backend {
            BackendKind::Sim => {
                let cluster = Arc::new(Cluster::new(sim.resolve(ndev)?, ndev));
                let w = SimWorld::new(ndev, cfg.exec_timeout, cfg.unexpected_bound, cluster);
                (0..ndev)
                    .map(|r| {
                        let b = SimBackend::new(Arc::clone(&w), r);
                        Comm::new("world".into(), r, ndev, Box::new(b))
                    })
                    .collect()
            }
            #[cfg(feature = "ascend")]
            BackendKind::Ascend => {
                let s = super::AscendSettings::from_env()?;
                return Comm::init_all_ascend_with(ndev, &s, &cfg, local);
            }
            #[cfg(not(feature = "ascend"))]
            BackendKind::Ascend => return Err(no_ascend()),
            BackendKind::Tcp => {
                if cfg.if_ip.is_none() && cfg.socket_ifname.is_none() {
                    cfg.if_ip = Some(std::net::Ipv4Addr::LOCALHOST.into());
                }
                let root = RootInfo::create(&cfg)?;
                let cfg = cfg.clone();
                on_rank_threads(ndev, "TCP", move |r| {
                    Comm::tcp("world", cfg.clone(), &root, ndev, r)
                })?
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
    /// Missing or bad variables ([`CommError::Env`], `MASTER_PORT=0` too,
    /// at once on every rank); [`CommError::Unsupported`] under
    /// `HCCL_BACKEND=sim`; `MASTER_PORT` in use; bootstrap failures.
    pub fn from_env() -> Result<Comm, CommError> {
        Comm::from_env_on(BackendKind::from_env()?)
    }

    /// [`Comm::from_env`] on an explicit backend: `Tcp`, or `Ascend`,
    /// where the ranks first join over TCP as `from_env` does, rank 0's
    /// `HcclGetRootInfo` is broadcast over that, and every rank then joins
    /// CANN's communicator with it (`HcclCommInitRootInfo`) on its NPU
    /// (`ASCEND_DEVICE_ID`, else the launcher's local rank, else rank
    /// modulo the NPUs seen).
    ///
    /// # Errors
    /// As [`Comm::from_env`]; [`CommError::Unsupported`] for `Sim`, and
    /// for `Ascend` in a build without `--features ascend`; CANN's errors.
    pub fn from_env_on(backend: BackendKind) -> Result<Comm, CommError> {
        match backend {
            BackendKind::Sim => {
                return Err(CommError::Unsupported(
                    "HCCL_BACKEND=sim runs every rank in one process: use Comm::init_all".into(),
                ))
            }
            #[cfg(feature = "ascend")]
            BackendKind::Ascend => return Comm::ascend_from_env(),
            #[cfg(not(feature = "ascend"))]
            BackendKind::Ascend => return Err(no_ascend()),
            BackendKind::Tcp => {}
        }
        Comm::tcp_from_env()
    }

    /// [`Comm::from_env`] over TCP.
    pub(crate) fn tcp_from_env() -> Result<Comm, CommError> {
        let l = launch::EnvLaunch::from_env()?;
        let cfg = settings()?;
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
        let splitter = self.splitter()?;
        let len = splitter.token_len();
        let members: Vec<u32> = match color {
            None => Vec::new(),
            Some(color) => {
                let mut m: Vec<(u64, u32)> = (0..n)
                    .filter(|&r| all[2 * r] == u64::from(color) + 1)
                    .map(|r| (all[2 * r + 1], r as u32))
                    .collect();
                m.sort();
                m.into_iter().map(|(_, r)| r).collect()
            }
        };
        let new_rank = members.iter().position(|&r| r == self.shared.rank);
        // 2. Each color's rank 0 hosts it; every rank's token is gathered
        // (zeros from the others, so that every rank takes part).
        let mine = match new_rank {
            Some(0) => splitter.host(&members)?,
            _ => vec![0u8; len],
        };
        let tokens = self.gather_bytes(&mine)?;
        let (Some(color), Some(new_rank)) = (color, new_rank) else {
            return Ok(None);
        };
        let at = members[0] as usize * len;
        let name = format!("{}/split{split_no}/color{color}", self.shared.name);
        self.join_new(splitter, &tokens[at..at + len], &name, &members, new_rank)
            .map(Some)
    }

    /// A communicator of this one's ranks `rank_ids` (HCCL's
    /// `HcclCreateSubCommConfig`): `rank_ids[i]` is its rank `i`, and only
    /// those ranks call it, each with the same `rank_ids` and `name`. Its
    /// rank 0 hosts it and sends the token to the others over this
    /// communicator's point-to-point path, so this communicator must not
    /// run other point-to-point calls between these ranks at the same time.
    ///
    /// # Errors
    /// [`CommError::RankList`] for an empty list, a rank out of
    /// range or listed twice, or a list without this rank; the exchange's
    /// and the new bootstrap's errors.
    pub fn sub_comm(&self, rank_ids: &[u32], name: &str) -> Result<Comm, CommError> {
        let size = self.shared.size;
        let bad = |m: String| Err(CommError::RankList(m));
        if rank_ids.is_empty() {
            return bad("sub_comm: rank_ids is empty".into());
        }
        for (i, &r) in rank_ids.iter().enumerate() {
            if r >= size {
                return bad(format!(
                    "sub_comm: rank_ids[{i}] = {r} is not a rank of '{}' ({size} ranks)",
                    self.shared.name
                ));
            }
            if rank_ids[..i].contains(&r) {
                return bad(format!("sub_comm: rank {r} is listed twice in rank_ids"));
            }
        }
        let me = self.shared.rank;
        let Some(new_rank) = rank_ids.iter().position(|&r| r == me) else {
            return bad(format!(
                "sub_comm: this rank ({me}) is not in rank_ids {rank_ids:?}"
            ));
        };
        let splitter = self.splitter()?;
        let token = if new_rank == 0 {
            let token = splitter.host(rank_ids)?;
            let mut sends: Vec<P2pItem<'_>> = rank_ids[1..]
                .iter()
                .map(|&r| P2pItem::send(&token[..], r))
                .collect();
            self.batch_send_recv(&mut sends)?;
            token
        } else {
            let mut token = vec![0u8; splitter.token_len()];
            self.recv(&mut token[..], rank_ids[0])?;
            token
        };
        self.join_new(splitter, &token, name, rank_ids, new_rank)
    }

    /// The splitter of this communicator's backend.
    fn splitter(&self) -> Result<Box<dyn Splitter>, CommError> {
        // Taken now, used without the state lock: the exchanges are ops
        // on this communicator.
        match lock(&self.shared.state).backend.as_ref() {
            Some(b) => Ok(b.splitter()),
            None => Err(CommError::Broken("the communicator was aborted".into())),
        }
    }

    /// Rank `new_rank` of the communicator `name` of this one's ranks
    /// `members`, joined with its rank 0's `token`.
    fn join_new(
        &self,
        splitter: Box<dyn Splitter>,
        token: &[u8],
        name: &str,
        members: &[u32],
        new_rank: usize,
    ) -> Result<Comm, CommError> {
        let size = members.len() as u32;
        let b = splitter.join(token, name, size, new_rank as u32)?;
        let c = Comm::new(name.to_string(), new_rank as u32, size, b);
        c.set_reduce_precision(self.reduce_precision());
        // The same device: the parent's buffers are the new one's (an
        // NPU's home is set already and stays).
        let _ = c.shared.home.set(self.shared.home().clone());
        // Its errors name world ranks too (issue 13 item 11).
        let global: Vec<u32> = members
            .iter()
            .map(|&r| self.shared.global_rank(r))
            .collect();
        if global.iter().enumerate().any(|(i, &g)| g != i as u32) {
            let _ = c.shared.global.set(global);
        }
        Ok(c)
    }
}

impl Comm {
    /// AllGather of equal byte blocks, for a split's exchanges.
    pub(crate) fn gather_bytes(&self, mine: &[u8]) -> Result<Vec<u8>, CommError> {
        let mut all = vec![0u8; mine.len() * self.shared.size as usize];
        self.all_gather(mine, &mut all)?;
        Ok(all)
    }
}

/// `setup(rank)` for ranks `0..n` of this process, each on a thread of
/// its own (the ranks meet each other during setup, so they must run at
/// once), collected in rank order; a setup thread that panicked is its
/// rank's [`CommError::Broken`], naming `what` (the backend).
///
/// # Errors
/// The first rank's error, in rank order.
pub(crate) fn on_rank_threads<T: Send + 'static>(
    n: u32,
    what: &str,
    setup: impl Fn(u32) -> Result<T, CommError> + Clone + Send + 'static,
) -> Result<Vec<T>, CommError> {
    let hs: Vec<_> = (0..n)
        .map(|r| {
            let setup = setup.clone();
            std::thread::spawn(move || setup(r))
        })
        .collect();
    hs.into_iter()
        .enumerate()
        .map(|(r, h)| {
            h.join().unwrap_or_else(|_| {
                Err(CommError::Broken(format!(
                    "init_all: the {what} setup thread of rank {r} panicked"
                )))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_rank_table_is_an_open_file_failure_naming_the_file() {
        let e = read_rank_table(Path::new("nonexist.json")).unwrap_err();
        assert!(
            matches!(&e, CommError::RankTable(t) if matches!(**t, TopologyError::Io { .. })),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("rank table nonexist.json: cannot read: "),
            "{text}"
        );
        assert_eq!(e.hccl_result(), 10, "HCCL_E_OPEN_FILE_FAILURE");
    }
}
