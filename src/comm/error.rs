//! The communicator's error type and its HCCL result codes.

use std::sync::Arc;

use hccl_algos::algo::AlgoError;
use hccl_algos::collective::ArgsError;
use hccl_hw::tcp::{AbortKind, TcpError};
use hccl_sim::hang::HangReport;
use hccl_topology::TopologyError;

/// Everything a [`super::Comm`] call can fail with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CommError {
    /// Bad collective arguments (root out of range, in-place not supported, ...).
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// No algorithm can run the call.
    #[error(transparent)]
    Algo(#[from] AlgoError),
    /// A buffer has the wrong length for the call.
    #[error("{op}: {what} has {got} bytes, the call needs {expected}")]
    Buffer {
        /// The op: `comm 'world' AllReduce` for a collective refused
        /// before it takes a turn (a blocking call; an async one's op is
        /// named as the backends name it, `comm 'world' AllReduce #0`),
        /// `Send` ... for a point-to-point call.
        op: String,
        /// Which buffer.
        what: &'static str,
        /// Bytes needed.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// A [`super::DeviceBuffer`] passed to a communicator of another
    /// device (another rank's, another NPU's, another CANN library's),
    /// refused before anything moves (`HCCL_E_PARA`).
    #[error("{op}: the {what} is a device buffer of {from}, not of this communicator's device, {here}; allocate it with Comm::device_buffer of a communicator on this rank's device")]
    WrongDevice {
        /// The op (`AllReduce`, `Send`, `BatchSendRecv item 1 (Recv)`, ...).
        op: String,
        /// Which buffer (`send buffer`, `receive buffer`, ...).
        what: &'static str,
        /// The device the buffer was allocated on.
        from: String,
        /// This communicator's device and rank.
        here: String,
    },
    /// A typed buffer cannot be split as the collective needs.
    #[error("{op}: {detail}")]
    Shape {
        /// The op.
        op: String,
        /// What does not divide or match.
        detail: String,
    },
    /// A point-to-point call names a peer that is out of range or this rank.
    #[error("{op}: peer rank {peer} is not another rank of this communicator (this is rank {rank} of {size}); pass a rank in 0..{size} other than {rank}")]
    Peer {
        /// `Send`, `Recv`, or `BatchSendRecv item <i> (Send|Recv)`.
        op: String,
        /// The rank named.
        peer: u32,
        /// This rank.
        rank: u32,
        /// Ranks in the communicator.
        size: u32,
    },
    /// A V-variant's counts or displacements do not fit the call: a list
    /// of the wrong length (`index` is `None`, `value` the length), or an
    /// entry whose block leaves its buffer or overlaps another receive
    /// block.
    #[error("{op}: {}; {reason}", match index { Some(i) => format!("{field}[{i}] = {value}"), None => format!("{field} has {value} entries") })]
    Counts {
        /// The op (`AllGatherV`, ...).
        op: &'static str,
        /// The argument (`recv_counts`, `send_displs`, ...).
        field: &'static str,
        /// The entry (a rank), or `None` for the list's length.
        index: Option<usize>,
        /// The entry's value, or the list's length.
        value: u64,
        /// What is wrong, with the numbers it was checked against.
        reason: String,
    },
    /// The TCP transport failed (bootstrap, connection, protocol, ...)
    /// in a way no backend-neutral variant names; a TCP timeout, mismatch,
    /// remote failure or lost peer is [`CommError::Timeout`],
    /// [`CommError::Mismatch`], [`CommError::Remote`] or
    /// [`CommError::PeerLost`].
    #[error(transparent)]
    Tcp(TcpError),
    /// An op or message outlived `HCCL_EXEC_TIMEOUT`, on any backend
    /// (`HCCL_E_TIMEOUT`). The text names the op, the ranks waited for
    /// and, where known, where they wait instead.
    #[error(transparent)]
    Timeout(BackendError),
    /// The ranks disagree on an op's arguments (count, data type, root,
    /// algorithm, reduce precision, a message's count or type), on any
    /// backend (`HCCL_E_REMOTE`). The text names the field, both values
    /// and both ranks.
    #[error(transparent)]
    Mismatch(BackendError),
    /// Another rank failed an op or aborted the communicator, on any
    /// backend (`HCCL_E_REMOTE`). The text names the rank and its reason.
    #[error(transparent)]
    Remote(BackendError),
    /// A rank this op needs is gone (its connection closed, or it
    /// destroyed its communicator), on any backend (`HCCL_E_TCP_TRANSFER`).
    #[error(transparent)]
    PeerLost(BackendError),
    /// The simulator backend failed (`HCCL_E_INTERNAL`).
    #[error("simulator: {0}")]
    Sim(String),
    /// The simulator backend's op hung (no rank could go on before
    /// `HCCL_EXEC_TIMEOUT` in simulated time): the simulator's hang report
    /// (root causes, every unfinished rank, the wait-for graph), printed
    /// as its text after the op (`HCCL_E_TIMEOUT`, as a TCP op that waits
    /// that long).
    #[error("{}simulator: the simulated op hung: {}", op_prefix(op), report.to_text())]
    Hang {
        /// The op that hung on this rank: `comm 'world' AllReduce #1` ("":
        /// not known where the error was made).
        op: String,
        /// The report, the same on every rank of the tree.
        report: Box<HangReport>,
    },
    /// An environment variable is missing or malformed.
    #[error("{}", env_text(var, value, reason))]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value ("" if unset).
        value: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The rank table (or another topology input) cannot be used: the
    /// topology error, printed as is (it names the file's problem), but
    /// for a file that cannot be read ([`TopologyError::Io`]), printed
    /// `rank table <path>: cannot read: <reason>`. `HCCL_E_OPEN_FILE_FAILURE`
    /// for an unreadable file, `HCCL_E_PARA` for bad content.
    /// Shared (an `Arc`) because `CommError` is `Clone` and a
    /// [`TopologyError`] holds an `std::io::Error`, which is not.
    #[error("{}", rank_table_text(.0))]
    RankTable(Arc<TopologyError>),
    /// A sub-communicator's rank list ([`super::Comm::sub_comm`]) is
    /// empty, names a rank twice or out of range, or lacks the caller
    /// (`HCCL_E_PARA`). The text names the entry.
    #[error("{0}")]
    RankList(String),
    /// CANN failed under the Ascend backend (`--features ascend`): a
    /// library or symbol that is not there, or an HCCL / ACL call's error
    /// with its function, code, CANN's text and what to check. The
    /// `HcclResult` is the call's own ([`hccl_ascend_sys::AscendError::hccl_result`]).
    #[cfg(feature = "ascend")]
    #[error("{}{error}", op_prefix(op))]
    Ascend {
        /// The op (`comm 'world' AllReduce #3`; "" outside an op).
        op: String,
        /// CANN's error.
        error: hccl_ascend_sys::AscendError,
    },
    /// The call is not available on this backend or configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A blocking call waits for communicators of this process that no
    /// thread drives: the thread that created them with
    /// [`super::Comm::init_all`] called one and blocks in it (see
    /// [`super::group()`]). The message names the op and the ranks.
    #[error("{0}")]
    Undriven(String),
    /// The communicator was aborted or failed before; destroy it.
    #[error("communicator is unusable: {0}")]
    Broken(String),
    /// [`super::Comm::destroy`] found data that was not delivered: async
    /// ops still running after its linger (they are aborted), or failed
    /// while nobody waited for their handle, or messages that reached this
    /// rank and that no receive took. The message counts and names them.
    #[error("{0}")]
    Undelivered(String),
    /// An op on a sub-communicator ([`super::Comm::split`]) failed with
    /// `source`, whose ranks are the communicator's own: printed with each
    /// one's rank in the world it was split from, "rank 1 (global 3)"
    /// (same `HcclResult` code as `source`).
    #[error("{}", super::ranks::name_global(&source.to_string(), global))]
    SubComm {
        /// The communicator's name (`world/split0/color1`).
        comm: String,
        /// World rank of each of its ranks.
        global: Vec<u32>,
        /// The error, in the communicator's ranks.
        source: Box<CommError>,
    },
}

/// `"<op>: "`, or nothing for an unknown op.
fn op_prefix(op: &str) -> String {
    if op.is_empty() {
        String::new()
    } else {
        format!("{op}: ")
    }
}

/// [`CommError::Env`]'s text: `RANK is unset: ...` for an unset
/// variable, `WORLD_SIZE="abc": ...` for a malformed one.
fn env_text(var: &str, value: &str, reason: &str) -> String {
    if value.is_empty() {
        format!("{var} is unset: {reason}")
    } else {
        format!("{var}={value:?}: {reason}")
    }
}

/// [`CommError::RankTable`]'s text: the topology error's, but what a file
/// that cannot be read is (the rank table, here).
fn rank_table_text(e: &TopologyError) -> String {
    match e {
        TopologyError::Io { path, error } => {
            format!("rank table {}: cannot read: {error}", path.display())
        }
        e => e.to_string(),
    }
}

/// What a backend said about a failure that [`CommError`] names
/// backend-neutrally ([`CommError::Timeout`], [`CommError::Mismatch`],
/// [`CommError::Remote`], [`CommError::PeerLost`]): match the
/// `CommError` variant to handle the failure alike on every backend, this
/// for the backend's own detail.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The TCP transport's error, with its fields (op, seq, ranks, ...).
    #[error(transparent)]
    Tcp(TcpError),
    /// The simulator backend's account: names the op and the ranks, in
    /// the words TCP uses.
    #[error("{0}")]
    Sim(String),
    /// The Ascend backend's account (`--features ascend`): its check of
    /// the ranks' op signatures before HCCL runs the op, in the words TCP
    /// uses.
    #[cfg(feature = "ascend")]
    #[error("{0}")]
    Ascend(String),
}

impl From<TopologyError> for CommError {
    fn from(e: TopologyError) -> CommError {
        CommError::RankTable(Arc::new(e))
    }
}

/// A TCP failure as the facade reports it: a timeout, a mismatch, a
/// remote failure or a lost peer as the backend-neutral variant (with the
/// [`TcpError`] inside), anything else as [`CommError::Tcp`]. A peer's
/// abort for its timeout or mismatch is a timeout or mismatch here too.
impl From<TcpError> for CommError {
    fn from(e: TcpError) -> CommError {
        match e {
            TcpError::Timeout { .. }
            | TcpError::Aborted {
                kind: AbortKind::Timeout,
                ..
            } => CommError::Timeout(BackendError::Tcp(e)),
            TcpError::Mismatch { .. }
            | TcpError::Aborted {
                kind: AbortKind::Mismatch,
                ..
            } => CommError::Mismatch(BackendError::Tcp(e)),
            TcpError::Aborted { .. } | TcpError::LenderFailed { .. } => {
                CommError::Remote(BackendError::Tcp(e))
            }
            TcpError::PeerLost { .. } => CommError::PeerLost(BackendError::Tcp(e)),
            e => CommError::Tcp(e),
        }
    }
}

impl CommError {
    /// The kind of failure `self` is, for the peers it is told to: they
    /// report a timeout or a mismatch as such, anything else as
    /// [`CommError::Remote`].
    pub(crate) fn abort_kind(&self) -> AbortKind {
        match self {
            CommError::Timeout(_) => AbortKind::Timeout,
            CommError::Mismatch(_) => AbortKind::Mismatch,
            CommError::SubComm { source, .. } => source.abort_kind(),
            _ => AbortKind::Failed,
        }
    }

    /// A simulated hang of `report`, in an op named later ([`CommError::in_op`]).
    pub(crate) fn hang(report: Box<HangReport>) -> CommError {
        CommError::Hang {
            op: String::new(),
            report,
        }
    }

    /// `self`, naming the op `name` if it is a hang that names none.
    pub(crate) fn in_op(self, name: &str) -> CommError {
        match self {
            CommError::Hang { op, report } if op.is_empty() => CommError::Hang {
                op: name.to_string(),
                report,
            },
            e => e,
        }
    }

    /// The error a later op of a communicator broken by `self` returns:
    /// [`CommError::Broken`] naming it (once, if it is already that).
    pub(crate) fn into_broken(self) -> CommError {
        match self {
            CommError::Broken(_) => self,
            e => CommError::Broken(e.to_string()),
        }
    }

    /// The matching `HcclResult` code (`hccl_types.h`: 1 `HCCL_E_PARA`,
    /// 5 `HCCL_E_NOT_SUPPORT`, 4 `HCCL_E_INTERNAL`, 9 `HCCL_E_TIMEOUT` (a
    /// simulated hang too),
    /// 10 `HCCL_E_OPEN_FILE_FAILURE`, 11 `HCCL_E_TCP_CONNECT`,
    /// 13 `HCCL_E_TCP_TRANSFER`, 21 `HCCL_E_REMOTE`).
    pub fn hccl_result(&self) -> u32 {
        match self {
            CommError::Args(_)
            | CommError::Buffer { .. }
            | CommError::WrongDevice { .. }
            | CommError::Shape { .. }
            | CommError::Peer { .. }
            | CommError::Counts { .. }
            | CommError::Env { .. }
            | CommError::RankList(_)
            | CommError::Undriven(_) => 1,
            CommError::Algo(_) | CommError::Unsupported(_) => 5,
            // HCCL: an unreadable file is HCCL_E_OPEN_FILE_FAILURE; a
            // table that is read but wrong is HCCL_E_PARA.
            CommError::RankTable(e) => match **e {
                TopologyError::Io { .. } => 10,
                _ => 1,
            },
            CommError::Tcp(e) => match e {
                TcpError::Config { .. }
                | TcpError::InvalidArgument(_)
                | TcpError::RootPortZero { .. } => 1,
                TcpError::Timeout { .. } | TcpError::BootstrapTimeout { .. } => 9,
                TcpError::Mismatch { .. }
                | TcpError::Aborted { .. }
                | TcpError::LenderFailed { .. } => 21,
                TcpError::Bind { .. }
                | TcpError::AddrNotLocal { .. }
                | TcpError::Interface { .. }
                | TcpError::SessionExpired { .. }
                | TcpError::Rejected { .. }
                | TcpError::BootstrapRankLeft { .. }
                | TcpError::RootUnreachable { .. }
                | TcpError::NotARoot { .. }
                | TcpError::RootTaken { .. }
                | TcpError::PeerConnect { .. } => 11,
                TcpError::PeerLost { .. }
                | TcpError::LengthMismatch { .. }
                | TcpError::Protocol { .. }
                | TcpError::BufferFull { .. } => 13,
                _ => 4,
            },
            CommError::Timeout(_) | CommError::Hang { .. } => 9,
            CommError::Mismatch(_) | CommError::Remote(_) => 21,
            CommError::PeerLost(_) => 13,
            CommError::Sim(_) | CommError::Broken(_) | CommError::Undelivered(_) => 4,
            CommError::SubComm { source, .. } => source.hccl_result(),
            #[cfg(feature = "ascend")]
            CommError::Ascend { error, .. } => error.hccl_result() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aborted(kind: AbortKind) -> CommError {
        CommError::from(TcpError::Aborted {
            op: "comm 'world' AllReduce".into(),
            seq: 0,
            by: 3,
            reason: "rank 3 timed out".into(),
            kind,
        })
    }

    #[test]
    fn a_peers_abort_keeps_the_kind_of_its_failure() {
        let e = aborted(AbortKind::Timeout);
        assert!(matches!(e, CommError::Timeout(_)), "{e:?}");
        assert_eq!((e.hccl_result(), e.abort_kind()), (9, AbortKind::Timeout));
        let e = aborted(AbortKind::Mismatch);
        assert!(matches!(e, CommError::Mismatch(_)), "{e:?}");
        assert_eq!((e.hccl_result(), e.abort_kind()), (21, AbortKind::Mismatch));
        let e = aborted(AbortKind::Failed);
        assert!(matches!(e, CommError::Remote(_)), "{e:?}");
        assert_eq!((e.hccl_result(), e.abort_kind()), (21, AbortKind::Failed));
    }
}
