//! The TCP transport's error type.

use std::net::SocketAddr;

use hccl_algos::exec::ExecError;

use super::wire::WireError;

/// What to do about a port in use. Under a launcher (`MASTER_PORT`) every
/// rank must know the root's port before it starts, so port 0 (the OS
/// picks) cannot work there; for `HCCL_IF_BASE_PORT` on the root it can.
fn bind_advice(var: &str) -> String {
    if var == "MASTER_PORT" {
        "set MASTER_PORT to another free port, the same for every rank (not 0: the other ranks must know the root's port)".into()
    } else {
        format!("set {var} to another free port (or to 0 to let the OS choose)")
    }
}

/// What else to do when the root's port is held by another job's root.
fn taken_advice(var: &str) -> String {
    if var == "MASTER_PORT" {
        "for a separate job, set MASTER_PORT to another free port, the same for every rank".into()
    } else {
        format!("for a separate job, set {var} to another free port (or to 0 to let the OS choose)")
    }
}

/// What to do about a listen address that is not this host's.
fn addr_advice(var: &str) -> String {
    if var == "MASTER_ADDR" {
        "run rank 0 on the host MASTER_ADDR names, or set MASTER_ADDR to an address of rank 0's host (`ip addr` lists them)".into()
    } else {
        format!("set {var} to one of this host's addresses (`ip addr` lists them), or unset it to let hccl choose")
    }
}

/// Everything that can go wrong in the TCP transport. Messages name the
/// rank, op, sequence number, peer and byte counts involved, and what to do.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TcpError {
    /// An environment variable does not parse.
    #[error("{var}={value:?}: {reason}")]
    Config {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// No usable network interface.
    #[error("network interface: {detail}")]
    Interface {
        /// What was looked for and seen.
        detail: String,
    },
    /// A listening socket could not be opened (typically: port in use).
    #[error("cannot listen on {addr}: {reason}; {}", bind_advice(var))]
    Bind {
        /// The address tried.
        addr: SocketAddr,
        /// The variable that chose the port.
        var: &'static str,
        /// The OS error.
        reason: String,
    },
    /// The address to listen on is not one of this host's (the OS says
    /// `EADDRNOTAVAIL`): the variable that chose the IP names another host.
    #[error("cannot listen on {addr}: {reason}; {} is not an address of this host: {}", addr.ip(), addr_advice(var))]
    AddrNotLocal {
        /// The address tried.
        addr: SocketAddr,
        /// The variable that chose the IP (`HCCL_IF_IP`,
        /// `HCCL_SOCKET_IFNAME`, `MASTER_ADDR`).
        var: &'static str,
        /// The OS error.
        reason: String,
    },
    /// A rank other than the root was told the root listens on port 0.
    /// Port 0 asks the root's OS for any free port, which only the root
    /// learns, so this rank could never reach it; fails at once instead of
    /// retrying until `HCCL_CONNECT_TIMEOUT`.
    #[error("rank {rank}: the root's port is 0 ({root}): port 0 lets rank 0's OS pick a port no other rank knows, so rank {rank} cannot reach it; set MASTER_PORT to the port rank 0 listens on (a free port, the same on every rank)")]
    RootPortZero {
        /// The root address given.
        root: SocketAddr,
        /// This rank.
        rank: u32,
    },
    /// The root's deadline passed before every rank joined.
    #[error("bootstrap timed out after {secs} s: {joined} of {nranks} ranks connected, missing {missing:?}; start the missing ranks or raise HCCL_CONNECT_TIMEOUT")]
    BootstrapTimeout {
        /// The timeout (`HCCL_CONNECT_TIMEOUT`), seconds.
        secs: f64,
        /// Ranks that joined.
        joined: u32,
        /// World size.
        nranks: u32,
        /// Ranks that never joined.
        missing: Vec<u32>,
    },
    /// This rank reached the root after its session ended.
    #[error("session expired: the root at {root} closed its session before rank {rank} joined ({reason}); restart all ranks with a fresh root info")]
    SessionExpired {
        /// The root address.
        root: SocketAddr,
        /// This rank.
        rank: u32,
        /// The root's words.
        reason: String,
    },
    /// Another rank left the bootstrap (closed its connection to the root)
    /// before every rank joined, so the root ended the session.
    #[error("bootstrap failed for rank {rank}: the root at {root} ended the session because {reason}; fix what stopped that rank (see its output), then restart all ranks with a fresh root info")]
    BootstrapRankLeft {
        /// The root address.
        root: SocketAddr,
        /// This rank.
        rank: u32,
        /// The root's words: which rank left, from where, how many had joined.
        reason: String,
    },
    /// The root refused this rank (bad rank, duplicate, nranks disagree, wrong session).
    #[error("root at {root} refused rank {rank}: {reason}")]
    Rejected {
        /// The root address.
        root: SocketAddr,
        /// This rank.
        rank: u32,
        /// The root's words.
        reason: String,
    },
    /// The root could not be reached before the deadline.
    #[error("rank {rank}: cannot reach the root at {root} within {secs} s (last error: {reason}); check the address, the firewall and that the root process runs, or raise HCCL_CONNECT_TIMEOUT")]
    RootUnreachable {
        /// The root address.
        root: SocketAddr,
        /// This rank.
        rank: u32,
        /// Seconds waited.
        secs: f64,
        /// Last socket error.
        reason: String,
    },
    /// The process at the root's address accepted the connection but did
    /// not answer as an hccl-rs root: it closed the connection, sent bytes
    /// of another protocol, or sent nothing in time.
    #[error("rank {rank}: the listener at {root} {what}; it is not an hccl-rs root of this job (another program on that port, or a root whose process exited or hung): check MASTER_ADDR / MASTER_PORT (or the root info) and the root's output")]
    NotARoot {
        /// The root address.
        root: SocketAddr,
        /// This rank.
        rank: u32,
        /// What the listener did.
        what: String,
    },
    /// The root's port is held by another hccl-rs root: the port-in-use
    /// case of [`TcpError::Bind`] when the holder answers as a root.
    #[error("cannot listen on {addr}: another hccl-rs root already listens there, so rank 0 is already taken (was a second process started with RANK=0?); give every process its own rank in 0..WORLD_SIZE, or {}", taken_advice(var))]
    RootTaken {
        /// The address tried.
        addr: SocketAddr,
        /// The variable that chose the port.
        var: &'static str,
    },
    /// A data connection to a peer could not be made during the bootstrap.
    #[error("rank {rank}: cannot connect to rank {peer} at {addr}: {reason}")]
    PeerConnect {
        /// This rank.
        rank: u32,
        /// The peer.
        peer: u32,
        /// Its address.
        addr: SocketAddr,
        /// What failed.
        reason: String,
    },
    /// Bad bytes from a peer or the root.
    #[error("protocol error from {from}: {error}")]
    Protocol {
        /// Who sent it ("rank 3", "root at ...").
        from: String,
        /// What was wrong.
        error: WireError,
    },
    /// Bad arguments to the transport (regions out of bounds, bad rank, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer closed its connection or died while this rank needed it.
    #[error("{op} {}: rank {rank} lost rank {peer} ({reason}) {}; check that process and its log",
        OpSeq(*seq), if *sending { format!("while sending {expected} bytes to it") } else if *expected == 0 { "while waiting for it to take part in the op".to_string() } else { format!("while waiting for {expected} bytes from it (received {received})") })]
    PeerLost {
        /// Op name.
        op: String,
        /// Op sequence number.
        seq: u64,
        /// This rank.
        rank: u32,
        /// The lost peer.
        peer: u32,
        /// Bytes the waiting step expected from it (0 if nothing was posted).
        expected: u64,
        /// Bytes received of that message.
        received: u64,
        /// True if the failed step was a send of `expected` bytes.
        sending: bool,
        /// The socket's words.
        reason: String,
    },
    /// A same-host peer's op failed while it lent this rank a piece of its
    /// buffer: after copying the piece, this rank found the peer's lend
    /// word withdrawn (see [`super::cma`]), so the bytes may have been
    /// rewritten and were discarded. The peer reports the original error.
    #[error("{op} {}: rank {peer}'s op failed while lending its buffer: rank {rank} discarded {len} bytes it had read out of it (its lend word at {word:#x} holds {found}, the piece was lent under {expected}); see rank {peer}'s error", OpSeq(*seq))]
    LenderFailed {
        /// Op name (of this rank's op).
        op: String,
        /// Op sequence number.
        seq: u64,
        /// This rank.
        rank: u32,
        /// The lender.
        peer: u32,
        /// Bytes of the discarded piece.
        len: u64,
        /// Address of the lender's lend word in its process.
        word: u64,
        /// The value the descriptor named.
        expected: u64,
        /// The value found.
        found: u64,
    },
    /// A message's length differs from the receiving step's.
    #[error("{op} {}: rank {rank} expected {expected} bytes from rank {peer} (tag {tag}) but the message has {received} bytes", OpSeq(*seq))]
    LengthMismatch {
        /// Op name.
        op: String,
        /// Op sequence number.
        seq: u64,
        /// This rank.
        rank: u32,
        /// The sender.
        peer: u32,
        /// Step tag.
        tag: u32,
        /// Bytes the step expects.
        expected: u64,
        /// Bytes announced by the frame.
        received: u64,
    },
    /// Ranks called the op with different arguments.
    #[error("{op} {}: {detail}", OpSeq(*seq))]
    Mismatch {
        /// Op name.
        op: String,
        /// Op sequence number.
        seq: u64,
        /// Which field, both values and both ranks.
        detail: String,
    },
    /// The op did not finish within `HCCL_EXEC_TIMEOUT`.
    #[error("{op} {}: rank {rank} timed out after {secs} s waiting for {waiting}; the peer is slow, hung or skipped the op (raise HCCL_EXEC_TIMEOUT if it is only slow)", OpSeq(*seq))]
    Timeout {
        /// Op name.
        op: String,
        /// Op sequence number.
        seq: u64,
        /// This rank.
        rank: u32,
        /// The timeout, seconds.
        secs: f64,
        /// What it waited for: peer, tag, bytes expected and received.
        waiting: String,
        /// The peers `waiting` names (ranks that never called the op,
        /// unfinished messages from or to them, missing confirmations),
        /// ascending: for records such as the flight recorder's.
        peers: Vec<u32>,
    },
    /// Another rank failed the op and told this one.
    #[error("{op} {}: aborted by rank {by}: {reason}", OpSeq(*seq))]
    Aborted {
        /// Op name.
        op: String,
        /// Op sequence number.
        seq: u64,
        /// The rank that failed first (as far as this rank knows).
        by: u32,
        /// Its error.
        reason: String,
        /// What kind of failure it was (a timeout, a mismatch, another),
        /// so that this rank reports the same kind.
        kind: AbortKind,
    },
    /// The unexpected-message buffer of a peer is full and nothing posted matches.
    #[error("{op} {}: rank {rank} holds {held} bytes of early messages from rank {peer} (bound {bound}, HCCL_BUFFSIZE) and none matches a posted step; raise HCCL_BUFFSIZE or check that all ranks run the same ops", OpSeq(*seq))]
    BufferFull {
        /// Op name.
        op: String,
        /// Op sequence number.
        seq: u64,
        /// This rank.
        rank: u32,
        /// The peer.
        peer: u32,
        /// Bytes held.
        held: u64,
        /// The bound.
        bound: u64,
    },
    /// The communicator was aborted or failed earlier; destroy it.
    #[error("communicator is unusable: {0}")]
    Broken(String),
    /// A reduce kernel refused its operands (a schedule bug).
    #[error("reduce kernel: {0}")]
    Kernel(String),
    /// The executor reported a transport bug.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// An I/O or runtime failure outside a peer connection.
    #[error("{what}: {reason}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        reason: String,
    },
}

impl TcpError {
    /// An [`TcpError::Io`] from any displayable error.
    pub fn io(what: impl Into<String>, e: impl std::fmt::Display) -> TcpError {
        TcpError::Io {
            what: what.into(),
            reason: e.to_string(),
        }
    }
}

/// The kind of failure an abort frame reports, so that the ranks it
/// tells report the same kind as the rank that failed
/// ([`TcpError::Aborted`]'s `kind`). Carried in the abort frame's `tag`
/// (meaningful within one build only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AbortKind {
    /// Any failure but a timeout or a mismatch.
    #[default]
    Failed,
    /// The op outlived `HCCL_EXEC_TIMEOUT` ([`TcpError::Timeout`]).
    Timeout,
    /// The ranks disagree on the op's arguments or a message's length
    /// ([`TcpError::Mismatch`], [`TcpError::LengthMismatch`]).
    Mismatch,
}

impl AbortKind {
    /// The kind of failure `e` is; a peer's abort keeps its kind.
    pub fn of(e: &TcpError) -> AbortKind {
        match e {
            TcpError::Timeout { .. } => AbortKind::Timeout,
            TcpError::Mismatch { .. } | TcpError::LengthMismatch { .. } => AbortKind::Mismatch,
            TcpError::Aborted { kind, .. } => *kind,
            _ => AbortKind::Failed,
        }
    }

    /// The abort frame's `tag` for this kind.
    pub fn tag(self) -> u32 {
        match self {
            AbortKind::Failed => 0,
            AbortKind::Timeout => 1,
            AbortKind::Mismatch => 2,
        }
    }

    /// The kind an abort frame's `tag` names ([`AbortKind::Failed`] for
    /// an unknown one).
    pub fn from_tag(tag: u32) -> AbortKind {
        match tag {
            1 => AbortKind::Timeout,
            2 => AbortKind::Mismatch,
            _ => AbortKind::Failed,
        }
    }
}

/// The reason rank `rank` sends its peers when its op fails with the
/// error text `text`: [`own_reason`] of it after "rank R failed: ", or
/// alone if it starts by naming rank R ("rank 3 timed out ..."), so that
/// the peers' "aborted by rank R: ..." names it once.
pub fn told_reason(rank: u32, text: &str) -> String {
    let own = own_reason(text);
    if own.starts_with(&format!("rank {rank} ")) {
        own.to_string()
    } else {
        format!("rank {rank} failed: {own}")
    }
}

/// An op's sequence number as errors print it: `#n` for a collective,
/// `p2p #n` for the `n`-th point-to-point message of a pair
/// ([`super::rank::P2P_SEQ_BIT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpSeq(pub u64);

impl std::fmt::Display for OpSeq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if super::rank::is_p2p_seq(self.0) {
            write!(f, "p2p #{}", self.0 & !super::rank::P2P_SEQ_BIT)
        } else {
            write!(f, "#{}", self.0)
        }
    }
}

/// An op error's text without the backend and op prefix that a peer's
/// abort text repeats itself ("simulator: comm 'world' AllReduce #0: x"
/// is "x"), for the reason a failed rank sends its peers, whose own
/// error names their op already. Text of another form is returned whole.
pub fn own_reason(text: &str) -> &str {
    let t = text.strip_prefix("simulator: ").unwrap_or(text);
    let Some(rest) = t.strip_prefix("comm '") else {
        return t;
    };
    // "<name>' <Kind> #<seq>: reason" (the name may hold ": ").
    match rest.find("' ").map(|i| &rest[i + 2..]) {
        Some(op) => match op.find(": ") {
            Some(j) if op[..j].contains('#') => &op[j + 2..],
            _ => t,
        },
        None => t,
    }
}

#[cfg(test)]
mod op_seq_tests {
    use super::{own_reason, told_reason, AbortKind, OpSeq};
    use crate::tcp::rank::P2P_SEQ_BIT;

    #[test]
    fn p2p_sequence_numbers_print_without_the_namespace_bit() {
        assert_eq!(OpSeq(7).to_string(), "#7");
        assert_eq!(OpSeq(P2P_SEQ_BIT | 3).to_string(), "p2p #3");
    }

    #[test]
    fn own_reason_drops_the_backend_and_op_prefix_only() {
        assert_eq!(
            own_reason("simulator: comm 'world' AllReduce #0: count: rank 0 sends 5"),
            "count: rank 0 sends 5"
        );
        assert_eq!(
            own_reason("comm 'w/s' Broadcast #3: rank 1 lost rank 0"),
            "rank 1 lost rank 0"
        );
        assert_eq!(own_reason("bad root: 9"), "bad root: 9");
        assert_eq!(own_reason("comm 'x' has no op: y"), "comm 'x' has no op: y");
    }

    #[test]
    fn a_told_reason_names_the_failed_rank_once() {
        assert_eq!(
            told_reason(3, "comm 'w' AllReduce #0: rank 3 timed out after 1 s"),
            "rank 3 timed out after 1 s"
        );
        assert_eq!(
            told_reason(1, "comm 'w' AllReduce #0: receive buffer has 16 bytes"),
            "rank 1 failed: receive buffer has 16 bytes"
        );
        // Another rank named first is not this one.
        assert_eq!(
            told_reason(1, "rank 10 lost rank 2"),
            "rank 1 failed: rank 10 lost rank 2"
        );
    }

    #[test]
    fn abort_kinds_survive_their_tag() {
        for k in [AbortKind::Failed, AbortKind::Timeout, AbortKind::Mismatch] {
            assert_eq!(AbortKind::from_tag(k.tag()), k);
        }
        assert_eq!(AbortKind::from_tag(77), AbortKind::Failed);
    }
}
