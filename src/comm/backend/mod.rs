//! The seam under [`super::Comm`]: a [`Backend`] runs what the facade has
//! checked and planned. The facade keeps ordering, argument and buffer
//! checks, precision widening, planning ([`super::plan`]), profiling and
//! the error bookkeeping; a backend moves bytes and reports failures.
//!
//! | backend | file | `HCCL_BACKEND` |
//! | --- | --- | --- |
//! | [`TcpBackend`] | `tcp.rs` (over [`hccl_hw::tcp::TcpRank`]) | `tcp` |
//! | [`SimBackend`] | `sim.rs` (over a [`sim_world::SimWorld`] shared by the ranks) | `sim` |
//! | `AscendBackend` (`--features ascend`) | `ascend.rs` (an HCCL communicator of CANN, through `hccl_ascend_sys`), `ascend_schedule.rs` (its schedule mode) | `ascend` |
//!
//! **Adding a backend** is one new file here: a type implementing
//! [`Backend`] (and a [`Splitter`] for [`super::Comm::split`] and
//! [`super::Comm::sub_comm`]), a
//! `BackendKind` variant with its `HCCL_BACKEND` name, and one arm in the
//! constructor that builds it (`Comm::init_all_on` and the other
//! constructors in `init.rs`). Nothing else matches on the backend.

#[cfg(feature = "ascend")]
pub(crate) mod ascend;
#[cfg(feature = "ascend")]
mod ascend_schedule;
pub(crate) mod sim;
pub(crate) mod sim_cluster;
pub(crate) mod sim_settings;
pub(crate) mod sim_world;
mod tcp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hccl_algos::collective::{CollectiveArgs, OpSignature};
use hccl_hw::tcp::AbortKind;

use super::p2p::P2pItem;
use super::plan::{HostFit, PlannedOp};
use super::profile::OpTime;
use super::run::UserBufs;
use super::{BackendKind, CommError, Shared};

pub(crate) use sim::SimBackend;
pub(crate) use tcp::TcpBackend;

/// Ends a running op at once and tells the peers `reason`; callable from
/// any thread while an op holds the communicator's state (an abort, or a
/// blocking call found stuck).
pub(crate) type Interrupt = Arc<dyn Fn(&str) + Send + Sync>;

/// A collective the facade has checked and planned, as a backend runs it.
pub(crate) struct Prepared<'a> {
    /// The communicator-wide sequence number (the same on every rank).
    pub(crate) seq: u64,
    /// What runs: the call, or its f32 form when widened.
    pub(crate) args: &'a CollectiveArgs,
    /// What the user called (errors describe it).
    pub(crate) called: &'a CollectiveArgs,
    /// The call's signature for the cross-rank check, built once by the
    /// facade; each backend carries it its own way (TCP: encoded in the
    /// op's first frames; the simulator: compared in the shared world).
    pub(crate) sig: OpSignature,
    /// The op runs widened to f32 (`HCCL_REDUCE_PRECISION=fp32`).
    pub(crate) wide: bool,
    /// Algorithm, buffer sizes and this rank's plan.
    pub(crate) planned: PlannedOp,
}

/// Builds a new communicator's backend from its parent's ([`super::Comm::split`],
/// [`super::Comm::sub_comm`]), in two steps: the new communicator's rank 0
/// hosts it and gets a token of [`Splitter::token_len`] bytes; the parent
/// carries the token to the other members (an AllGather for a split,
/// point-to-point sends for a sub-communicator); every member joins with it.
/// Taken from the parent's [`Backend`] so that those exchanges run without
/// holding its state.
pub(crate) trait Splitter: Send {
    /// The token's length, the same on every rank of a backend.
    fn token_len(&self) -> usize;

    /// Run by the new communicator's rank 0 only: starts it (a root on
    /// TCP, a sub-world on the simulator) for the parent ranks `members`
    /// (in new rank order) and returns the token.
    ///
    /// # Errors
    /// The root's errors (no port, bad `HCCL_*` setting).
    fn host(&self, members: &[u32]) -> Result<Vec<u8>, CommError>;

    /// This member's backend of the new communicator `name` of `size`
    /// ranks, as `new_rank`, from rank 0's token.
    ///
    /// # Errors
    /// A token of another kind; the new communicator's bootstrap errors.
    fn join(
        self: Box<Self>,
        token: &[u8],
        name: &str,
        size: u32,
        new_rank: u32,
    ) -> Result<Box<dyn Backend>, CommError>;
}

/// What runs a communicator's ops. Called with the communicator's state
/// held, one op at a time, in call order.
pub(crate) trait Backend: Send {
    /// Which backend this is (`HCCL_BACKEND`'s value).
    fn kind(&self) -> BackendKind;

    /// Where the ranks run: planning input (the same on every rank).
    fn host_fit(&self) -> HostFit;

    /// How long an op waits for its peers (`HCCL_EXEC_TIMEOUT`; `None`:
    /// forever); destroy's wait for async ops is bounded by it too.
    fn exec_timeout(&self) -> Option<Duration>;

    /// The handle that interrupts a running op from another thread.
    fn interrupter(&self) -> Interrupt;

    /// Runs a planned collective on the user's buffers (checked against
    /// the call already) and says how long it took.
    ///
    /// # Errors
    /// The transport's errors; the cross-rank consistency check's.
    fn run(
        &mut self,
        sh: &Shared,
        op: Prepared<'_>,
        user: UserBufs<'_>,
    ) -> Result<OpTime, CommError>;

    /// Runs checked point-to-point `items` (numbered `numbers` within
    /// their pairs; see `p2p.rs`); `name` labels errors.
    ///
    /// # Errors
    /// The transport's errors; count and data-type mismatches.
    fn p2p(
        &mut self,
        sh: &Shared,
        name: &str,
        items: &mut [P2pItem<'_>],
        numbers: &[u64],
    ) -> Result<(), CommError>;

    /// This rank failed an op or aborted: tell the peers `reason`, a
    /// failure of `kind` (they fail naming this rank, with
    /// [`CommError::Timeout`] or [`CommError::Mismatch`] for those kinds,
    /// else [`CommError::Remote`]); later ops of this backend fail.
    fn fail(&mut self, reason: &str, kind: AbortKind);

    /// A failure found while no op ran (a peer's abort, a lost peer).
    fn async_error(&mut self) -> Option<CommError>;

    /// Messages that reached this rank and no receive took: (sender,
    /// message number of the pair, bytes), ascending.
    fn unreceived(&mut self) -> Vec<(u32, u64, u64)>;

    /// Ops a peer has started that this rank has not called yet: (peer,
    /// seq, collective name), for a timeout elsewhere that looks for
    /// ranks blocked in this communicator. Empty if the backend cannot tell.
    fn ops_ahead(&mut self) -> Vec<(u32, u64, String)> {
        Vec::new()
    }

    /// Ranks that never started collective `seq`, as far as this rank
    /// knows (for the flight recorder's record of a failed op). Empty if
    /// the backend cannot tell.
    fn never_started(&mut self, _seq: u64) -> Vec<u32> {
        Vec::new()
    }

    /// When the last op this backend ran started here, as it measured
    /// it (for the flight record of a failed op). `None` if it does not
    /// measure (the simulator: its times are virtual).
    fn started(&self) -> Option<Instant> {
        None
    }

    /// The simulated cluster this rank is on, for the flight recorder (a
    /// crashed simulated rank is a dead process: it records and dumps
    /// nothing more). `None` on a real transport.
    fn sim_rank(&self) -> Option<sim_cluster::SimRank> {
        None
    }

    /// The splitter for [`super::Comm::split`] and [`super::Comm::sub_comm`].
    fn splitter(&self) -> Box<dyn Splitter>;

    /// The NPU this rank runs on (its library and device id), where
    /// [`super::Comm::device_buffer`] allocates; `None`: host memory.
    #[cfg(feature = "ascend")]
    fn npu(&self) -> Option<(Arc<hccl_ascend_sys::Library>, i32)> {
        None
    }

    /// Whether [`Backend::run_device`] runs `args` on device memory
    /// directly; if not, the facade stages device buffers through host
    /// memory and calls [`Backend::run`].
    #[cfg(feature = "ascend")]
    fn direct(&self, _args: &CollectiveArgs) -> bool {
        false
    }

    /// Runs a planned collective on device memory (called only when
    /// [`Backend::direct`] says so), buffers checked against the call.
    ///
    /// # Errors
    /// As [`Backend::run`].
    #[cfg(feature = "ascend")]
    fn run_device(
        &mut self,
        _sh: &Shared,
        op: Prepared<'_>,
        _bufs: super::device::DevBufs<'_>,
    ) -> Result<OpTime, CommError> {
        Err(CommError::Unsupported(format!(
            "{:?} on device buffers: this backend has no device memory",
            op.args.kind
        )))
    }
}
