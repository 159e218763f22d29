//! The communicator API, in HCCL's model.
//!
//! | HCCL | here |
//! | --- | --- |
//! | `HcclGetRootInfo` | [`RootInfo::new`] (`hccl_hw::tcp::RootInfo`) |
//! | `HcclCommInitRootInfo` | [`Comm::init_root_info`] |
//! | `HcclCommInitClusterInfo` | [`Comm::init_cluster_info`] |
//! | `HcclCommInitAll` | [`Comm::init_all`] |
//! | one thread's calls on every communicator, then a stream sync (NCCL `ncclGroupStart`/`End`) | [`group()`] |
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
//! With `--features ascend`, `HCCL_BACKEND=ascend` runs each rank on an
//! Ascend NPU through CANN's HCCL, opened at run time (`Comm::init_all_ascend`,
//! `Comm::from_env`, `Comm::init_cluster_info`; `HCCL_ASCEND_MODE=native`
//! or `schedule`).
//!
//! **Algorithms.** `HCCL_ALGO` (HCCL's syntax, e.g. `level0:ring` or
//! `allreduce=level0:NA;level1:H-D_R`) if it names one for the collective,
//! else `hccl_algos::select` with host-TCP link costs.
//!
//! **Ordering.** Ops on one communicator run in the order they are called,
//! from any thread; async ops take their sequence number when called.
//!
//! **Code map.** This file holds [`Comm`] and its shared state;
//! `init.rs` builds communicators (the one place that picks a backend),
//! `ordering.rs` runs ops in call order, `run.rs` checks a collective's
//! buffers, widens and plans it (`plan.rs`, one plan for every backend),
//! `typed.rs` has the typed collectives (on any [`Buffer`]: host
//! slices or `device.rs`'s [`DeviceBuffer`]s), `p2p.rs` and `vvar.rs` the
//! point-to-point and V calls, `lifecycle.rs` queries, abort and destroy;
//! `recorder.rs` the flight recorder (every op's record, dumps;
//! [`crate::flight`]), `flight_hang.rs` a simulated hang as a rank's
//! record states it, `signal.rs` its `SIGUSR1` dump and `watch.rs` its
//! dump on a failure learned between ops;
//! `backend/` holds the `Backend` trait and one file per backend.

mod backend;
mod crossed;
mod device;
mod drain;
mod element;
mod error;
mod flight_hang;
mod group;
mod handle;
mod hccl_env;
mod init;
#[cfg(feature = "ascend")]
mod init_ascend;
pub mod launch;
mod lifecycle;
mod local;
mod ordering;
mod p2p;
mod plan;
mod profile;
mod ranks;
mod recorder;
mod run;
mod signal;
mod signature;
mod typed;
mod vvar;
mod watch;

use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use backend::{Backend, Interrupt};
use hccl_algos::select::HcclAlgo;
use local::LocalWorld;
use ordering::Tickets;
use plan::HostFit;
use profile::CommProfile;

#[cfg(feature = "ascend")]
pub use backend::ascend::{AscendMode, AscendSettings};
pub use backend::sim_settings::SimSettings;
pub use device::{Buffer, BufferMut, DeviceBuffer};
pub use element::Element;
pub use error::{BackendError, CommError};
pub use group::{group, Group};
pub use handle::OpHandle;
pub use hccl_algos::{DataType, ReduceOp, ReducePrecision};
pub use init::check_env;
pub use p2p::{P2pItem, P2pKind};

/// Which backend runs a communicator's ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Real TCP connections between processes, hosts or threads.
    Tcp,
    /// The discrete-event simulator, all ranks in this process.
    Sim,
    /// CANN's HCCL on Ascend NPUs (`--features ascend`; without it,
    /// constructors on this backend fail with [`CommError::Unsupported`]).
    Ascend,
}

impl BackendKind {
    /// `HCCL_BACKEND` (`tcp`, `sim` or `ascend`, in any case), default `tcp`.
    ///
    /// # Errors
    /// [`CommError::Env`] for another value.
    pub fn from_env() -> Result<BackendKind, CommError> {
        BackendKind::parse(std::env::var("HCCL_BACKEND").ok().as_deref())
    }

    /// [`BackendKind::from_env`] of a value (`None`: unset).
    ///
    /// # Errors
    /// [`CommError::Env`] for a value other than `tcp`, `sim` or `ascend`.
    pub fn parse(value: Option<&str>) -> Result<BackendKind, CommError> {
        let v = value.unwrap_or("").trim();
        match v.to_ascii_lowercase().as_str() {
            "" | "tcp" => Ok(BackendKind::Tcp),
            "sim" => Ok(BackendKind::Sim),
            "ascend" => Ok(BackendKind::Ascend),
            _ => Err(CommError::Env {
                var: "HCCL_BACKEND",
                value: v.into(),
                reason: "accepted: tcp, sim, ascend (in any case)".into(),
            }),
        }
    }
}

/// The root info of a bootstrap (HCCL's `HcclRootInfo`): an opaque,
/// serializable blob (address, port, 128-bit session id). See
/// [`hccl_hw::tcp::RootInfo`] for its byte and string forms.
pub type RootInfo = hccl_hw::tcp::RootInfo;

pub(crate) struct State {
    /// `None` once aborted or closed.
    backend: Option<Box<dyn Backend>>,
    /// Turn (call-order ticket) of the op allowed to run now.
    turn: u64,
    /// Point-to-point messages sent to each rank (the pair's next p2p number).
    p2p_sent: Vec<u64>,
    /// Point-to-point messages received from each rank.
    p2p_received: Vec<u64>,
    /// What the backend said about the collective that just ran, for its
    /// flight record (taken by the run path as the op ends).
    ran: Option<recorder::Ran>,
}

pub(crate) struct Shared {
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
    /// The backend's interrupt, reachable without the state lock (which a
    /// running op holds): abort and failures are posted there at once.
    interrupt: Interrupt,
    aborted: Mutex<bool>,
    /// Which backend runs the ops.
    kind: BackendKind,
    /// Where the ranks run (the backend's `host_fit`): planning input.
    fit: HostFit,
    /// `HCCL_ALGO`, parsed when the communicator was built: planning input.
    algo: Option<HcclAlgo>,
    /// Per-op records when `HCCL_PROFILING_ENABLE=1` (see [`profile`]).
    profile: Option<CommProfile>,
    /// The flight recorder's ring (`None`: `HCCL_FLIGHT_RECORDER_ENTRIES=0`).
    flight: Option<recorder::Recorder>,
    /// The simulated cluster's view of this rank (`None` on TCP): a
    /// crashed simulated rank records and dumps nothing more.
    sim: Option<backend::sim_cluster::SimRank>,
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
    /// The device this rank's [`DeviceBuffer`]s are on (see `device.rs`).
    home: OnceLock<device::Home>,
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

    /// Whether this rank is a simulated rank that crashed (a dead process).
    fn crashed(&self) -> bool {
        self.sim.as_ref().is_some_and(|s| s.crashed())
    }

    /// The world rank of this communicator's rank `r`.
    fn global_rank(&self, r: u32) -> u32 {
        self.global
            .get()
            .and_then(|g| g.get(r as usize).copied())
            .unwrap_or(r)
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

/// `fnv1a64(name)`: a communicator id every member computes alike.
pub(crate) fn comm_id(name: &str) -> u64 {
    launch::hash128(&[name.as_bytes()]) as u64
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
        // Closing the backend says goodbye to the peers (TCP), or tells
        // them that this rank is gone (the simulator).
        lock(&self.state).backend = None;
        if let Some(p) = &self.profile {
            p.finish_on_drop();
        }
    }
}
