//! Wire formats: bootstrap control messages and data-plane frames.
//!
//! Everything is little-endian and fixed-layout; decoding never panics and
//! never allocates more than a small, constant bound before the header has
//! been checked.
//!
//! **Control message** (bootstrap with the root, peer hello), 28-byte header:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic `"HCCL"` |
//! | 4..6 | protocol version ([`VERSION`]) |
//! | 6 | kind ([`CtrlKind`]) |
//! | 7 | reserved (0) |
//! | 8..24 | session id (u128) |
//! | 24..28 | body length (u32, at most [`MAX_CTRL_BODY`]) |
//!
//! **Data frame**, 88-byte header, then `len` payload bytes:
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..4 | magic |
//! | 4..6 | version |
//! | 6 | kind ([`FrameKind`]) |
//! | 7 | reserved (0) |
//! | 8..24 | session id |
//! | 24..32 | communicator id |
//! | 32..40 | op sequence number |
//! | 40..44 | step tag |
//! | 44..48 | reserved (0) |
//! | 48..56 | payload length (u64) |
//! | 56..88 | op signature ([`SIG_LEN`] bytes, opaque here) |
//!
//! **Same-host fast path** (cross-memory attach, see [`super::cma`]): frames
//! of kinds [`FrameKind::DataCma`], [`FrameKind::CmaProbe`],
//! [`FrameKind::CmaReply`] and [`FrameKind::CmaAck`] use the same header.
//! A `DataCma` message's `len` payload bytes are not in the stream: its
//! header is followed by one [`PieceDesc`] (32 bytes: address u64 and
//! length u64 of a piece of the sender's own op buffer, then address u64
//! and expected value u64 of the sender's lend word), and each further
//! piece comes as a [`FrameKind::CmaMore`] frame (same seq and tag, `len`
//! 32) with its descriptor, until the pieces add up to `len`. The receiver
//! copies each piece out of the sender's address space, then reads the
//! lend word and keeps the bytes only if it still holds the expected value
//! (see [`super::cma`]), and answers with a `CmaAck` frame carrying the
//! same descriptor. Because every piece is a whole frame, acks may travel
//! between the pieces of a message.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// `"HCCL"` as the first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"HCCL";
/// Protocol version; a peer with another version is refused. Version 2
/// added the cross-memory probe after the hello (see [`CmaProbe`]);
/// version 3 lends the sender's own buffer: a [`PieceDesc`] grew from 16
/// to 32 bytes (the lend word's address and expected value); version 5
/// added the shared-memory offer after the probe ([`ShmOffer`]); version 6
/// carries each rank's CPU set in its [`Join`] (a count before).
pub const VERSION: u16 = 6;
/// A random 128-bit id shared by all ranks of one bootstrap.
pub type SessionId = u128;
/// Bytes of the op signature carried by every data frame.
pub const SIG_LEN: usize = 32;
/// An op signature as bytes (see `OpSignature` in the facade).
pub type Signature = [u8; SIG_LEN];
/// Size of a control message header.
pub const CTRL_HEADER_LEN: usize = 28;
/// Largest control body accepted (1 MiB: a table of ~45,000 ranks).
pub const MAX_CTRL_BODY: u32 = 1 << 20;
/// Size of a data frame header.
pub const FRAME_HEADER_LEN: usize = 88;
/// Largest abort reason accepted, bytes.
pub const MAX_ABORT_REASON: u64 = 4096;
/// Bytes of an encoded socket address.
const ADDR_LEN: usize = 19;
/// Bytes of an encoded [`PieceDesc`].
pub const PIECE_DESC_LEN: usize = 32;
/// The value a sender's lend word holds whenever no op of it is lending
/// (before its first op, between ops, and for good once an op failed): a
/// [`PieceDesc`] never expects it, so a reader that finds it discards the
/// piece (see [`super::cma::LendWord`]).
pub const LEND_POISON: u64 = 0;
/// Largest piece a [`PieceDesc`] may name (1 MiB, the size senders use).
pub const MAX_CMA_PIECE: u64 = 1 << 20;
/// Largest byte-stream ([`FrameKind::Data`]) payload on a connection with
/// the cross-memory path: shorter messages cost less as bytes than as a
/// piece plus an ack, and one this short is a single write, so it never
/// holds up the acks going the same way. 32 KiB, measured with
/// `tcp_allreduce_bench` (2-core VM): at 256 KiB, 2 processes got 1.8–2.8
/// GB/s busbw at 128–512 KiB and 4 processes 0.85–1.24 at 512 KiB–1 MiB;
/// at 64 KiB 3.9–5.6 and 1.37–1.54. With 1 MiB pieces and doubling for
/// small AllReduces (3 quiet runs each), 32 KiB against 64 KiB: 2
/// processes 64 KiB in 25.6–26.3 µs against 39.6–41.1 (the same elsewhere
/// or better), 4 processes the same up to 128 KiB and 0.9–1.2× the time at
/// 256 KiB–2 MiB; 16 KiB made 4 processes slower at 32 KiB (93–107 µs
/// against 71–74).
pub const MAX_INLINE_ON_CMA: u64 = 32 << 10;
/// Largest byte-stream payload on a pair whose frames travel in
/// shared-memory rings (`hccl_hw::shm`), where a rank sends messages up
/// to this length as bytes when its host runs more ranks than CPUs
/// (`TcpRank::connect`; up to [`MAX_INLINE_ON_CMA`] otherwise). There a
/// lent piece makes the sender wait for the peer's ack, and with two
/// ranks per core the peer is often not running, while a message in the
/// ring completes when written; but bytes cost a copy in and a copy out,
/// a lent piece one copy, and with two ranks per core every copy is wall
/// time. Session 11 (AMD EPYC) set 64 KiB (4 processes, 64 KiB: 268 →
/// 175 µs against lending), measured before session 14 found that the
/// kernel's copies of lent pieces ran 4-6× slower there at the
/// benchmark's buffer offsets. Session 15 (Intel Xeon, 4 processes,
/// `tcp_allreduce_bench` against the 64 KiB build, 4 series of 5-11
/// interleaved rounds, medians): 32 KiB took 64 KiB from 140-164 to
/// 106-125 µs, 128 KiB from 194-215 to 154-180, 256 KiB 329-359 → 279-293,
/// level at 1 MiB and 512 KiB (1 of 4 series slower), 2 MiB 1989 → 1722
/// (bench/tcp.md, session 15). Not re-measured on the AMD machine.
pub const MAX_INLINE_ON_RINGS: u64 = 32 << 10;
/// Bytes of the random token a [`CmaProbe`] names.
pub const CMA_TOKEN_LEN: usize = 32;
/// Bytes of an encoded [`ShmOffer`].
pub const SHM_OFFER_LEN: usize = 1 + 4 + 8 + SHM_TOKEN_LEN;
/// Bytes of the token that names a pair's shared segment.
pub const SHM_TOKEN_LEN: usize = 32;
/// Bytes of an encoded [`CmaProbe`].
pub const CMA_PROBE_LEN: usize = 1 + 4 + 8 + CMA_TOKEN_LEN;

/// Error of decoding bytes from the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The first four bytes are not `"HCCL"`.
    #[error("bad magic {0:02x?} (expected \"HCCL\"): not an hccl-rs peer")]
    BadMagic([u8; 4]),
    /// Another protocol version.
    #[error("protocol version {got}, this build speaks {VERSION}: run the same hccl-rs version on every rank")]
    BadVersion {
        /// The peer's version.
        got: u16,
    },
    /// The session id is not this bootstrap's.
    #[error("session id {got:032x} is not this session's: the peer belongs to another communicator or a stale root info, or the ranks disagree on WORLD_SIZE / MASTER_ADDR / MASTER_PORT / HCCL_SESSION_ID (torchrun-style launch) or read different rank tables; give every rank the same values")]
    BadSession {
        /// The peer's session id.
        got: SessionId,
    },
    /// Unknown message kind.
    #[error("unknown message kind {0}")]
    BadKind(u8),
    /// A length field over its bound.
    #[error("{what} length {len} exceeds the bound {max}")]
    TooLong {
        /// Which length.
        what: &'static str,
        /// The announced length.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// A body that does not parse.
    #[error("malformed {0}")]
    Malformed(&'static str),
}

/// Kinds of control messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CtrlKind {
    /// Rank to root: nranks, rank, CPUs, data listen address.
    Join = 1,
    /// Root to ranks: every rank's CPUs and data address.
    Table = 2,
    /// Root to rank: refused, timed out or expired ([`RejectCode`] + reason).
    Reject = 3,
    /// Rank to peer on a data connection: from, to.
    Hello = 4,
    /// Peer's acceptance of a hello.
    HelloAck = 5,
}

impl CtrlKind {
    fn from_u8(v: u8) -> Option<CtrlKind> {
        [
            CtrlKind::Join,
            CtrlKind::Table,
            CtrlKind::Reject,
            CtrlKind::Hello,
            CtrlKind::HelloAck,
        ]
        .into_iter()
        .find(|k| *k as u8 == v)
    }
}

/// Why the root refused a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RejectCode {
    /// The bootstrap deadline passed before every rank joined.
    Timeout = 1,
    /// The session is over (timed out or complete) before this rank joined.
    Expired = 2,
    /// Bad request: rank out of range, duplicate rank, nranks disagree.
    Refused = 3,
    /// A rank that had joined closed its connection to the root before
    /// every rank joined (its process exited or crashed).
    RankLeft = 4,
}

/// A checked control header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlHeader {
    /// The kind.
    pub kind: CtrlKind,
    /// The session id presented.
    pub session: SessionId,
    /// Body bytes that follow.
    pub body_len: u32,
}

/// Encodes a control message.
pub fn encode_ctrl(kind: CtrlKind, session: SessionId, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(CTRL_HEADER_LEN + body.len());
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&VERSION.to_le_bytes());
    v.push(kind as u8);
    v.push(0);
    v.extend_from_slice(&session.to_le_bytes());
    v.extend_from_slice(&(body.len() as u32).to_le_bytes());
    v.extend_from_slice(body);
    v
}

fn check_magic_version(b: &[u8]) -> Result<(), WireError> {
    let magic: [u8; 4] = b[0..4]
        .try_into()
        .map_err(|_| WireError::Malformed("header"))?;
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    let got = u16::from_le_bytes([b[4], b[5]]);
    if got != VERSION {
        return Err(WireError::BadVersion { got });
    }
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn u128_at(b: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(b[at..at + 16].try_into().unwrap_or([0; 16]))
}

/// Decodes and checks a control header (magic, version, kind, body bound).
/// The session is returned, not checked: the caller knows which it expects.
///
/// # Errors
/// The first check that fails.
pub fn decode_ctrl_header(b: &[u8; CTRL_HEADER_LEN]) -> Result<CtrlHeader, WireError> {
    check_magic_version(b)?;
    let kind = CtrlKind::from_u8(b[6]).ok_or(WireError::BadKind(b[6]))?;
    let body_len = u32_at(b, 24);
    if body_len > MAX_CTRL_BODY {
        return Err(WireError::TooLong {
            what: "control body",
            len: body_len.into(),
            max: MAX_CTRL_BODY.into(),
        });
    }
    Ok(CtrlHeader {
        kind,
        session: u128_at(b, 8),
        body_len,
    })
}

/// Encodes a socket address in 19 bytes (family 4/6, 16 address bytes, port).
pub fn encode_addr(a: &SocketAddr, out: &mut Vec<u8>) {
    let mut ip = [0u8; 16];
    let fam = match a.ip() {
        IpAddr::V4(v4) => {
            ip[..4].copy_from_slice(&v4.octets());
            4
        }
        IpAddr::V6(v6) => {
            ip.copy_from_slice(&v6.octets());
            6
        }
    };
    out.push(fam);
    out.extend_from_slice(&ip);
    out.extend_from_slice(&a.port().to_le_bytes());
}

/// Decodes [`encode_addr`]'s bytes.
///
/// # Errors
/// [`WireError::Malformed`] if short or the family is unknown.
pub fn decode_addr(b: &[u8]) -> Result<SocketAddr, WireError> {
    if b.len() < ADDR_LEN {
        return Err(WireError::Malformed("address"));
    }
    let port = u16::from_le_bytes([b[17], b[18]]);
    let ip = match b[0] {
        4 => IpAddr::V4(Ipv4Addr::new(b[1], b[2], b[3], b[4])),
        6 => {
            let o: [u8; 16] = b[1..17]
                .try_into()
                .map_err(|_| WireError::Malformed("address"))?;
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return Err(WireError::Malformed("address family")),
    };
    Ok(SocketAddr::new(ip, port))
}

/// The CPUs a process may run on (its affinity mask), as a bitmap: bit
/// `i % 64` of word `i / 64` is CPU `i`. What the root needs to tell
/// whether the ranks of one host have a CPU each: ranks pinned to distinct
/// CPUs (`mpirun`'s default binding, Slurm's `--cpu-bind`) fit even though
/// each sees one CPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// Most words a [`CpuSet`] takes on the wire: 65,536 CPUs.
pub const MAX_CPU_SET_WORDS: usize = 1024;

impl CpuSet {
    /// The set of the CPUs in `cpus` (ids at or above 64 ×
    /// [`MAX_CPU_SET_WORDS`] are left out).
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut set = CpuSet::default();
        for c in cpus {
            let w = (c / 64) as usize;
            if w >= MAX_CPU_SET_WORDS {
                continue;
            }
            if set.words.len() <= w {
                set.words.resize(w + 1, 0);
            }
            set.words[w] |= 1 << (c % 64);
        }
        set
    }

    /// CPUs 0 to `n - 1`: what a process that cannot read its affinity
    /// reports, `n` being `available_parallelism`.
    pub fn first(n: u32) -> CpuSet {
        CpuSet::from_cpus(0..n)
    }

    /// Number of CPUs in the set.
    pub fn count(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// Adds the CPUs of `other`.
    pub fn union_with(&mut self, other: &CpuSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }
}

/// A rank's join request to the root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    /// World size the rank was told.
    pub nranks: u32,
    /// The rank.
    pub rank: u32,
    /// Where its data listener is.
    pub data_addr: SocketAddr,
    /// CPUs the rank's process may run on (its affinity mask).
    pub cpus: CpuSet,
}

impl Join {
    /// Body bytes: nranks u32, rank u32, word count u32, the address, then
    /// the CPU set's words (u64 each).
    pub fn encode(&self) -> Vec<u8> {
        let words = &self.cpus.words[..self.cpus.words.len().min(MAX_CPU_SET_WORDS)];
        let mut v = Vec::with_capacity(12 + ADDR_LEN + 8 * words.len());
        v.extend_from_slice(&self.nranks.to_le_bytes());
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&(words.len() as u32).to_le_bytes());
        encode_addr(&self.data_addr, &mut v);
        for w in words {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v
    }

    /// Parses a body.
    ///
    /// # Errors
    /// [`WireError::Malformed`] if the body is not exactly a join (its
    /// length must match its word count, at most [`MAX_CPU_SET_WORDS`]).
    pub fn decode(b: &[u8]) -> Result<Join, WireError> {
        if b.len() < 12 + ADDR_LEN {
            return Err(WireError::Malformed("join"));
        }
        let n = u32_at(b, 8) as usize;
        if n > MAX_CPU_SET_WORDS || b.len() != 12 + ADDR_LEN + 8 * n {
            return Err(WireError::Malformed("join"));
        }
        let words = b[12 + ADDR_LEN..]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .collect();
        Ok(Join {
            nranks: u32_at(b, 0),
            rank: u32_at(b, 4),
            data_addr: decode_addr(&b[12..12 + ADDR_LEN])?,
            cpus: CpuSet { words },
        })
    }
}

/// One rank's entry of the root's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableEntry {
    /// Where its data listener is.
    pub data_addr: SocketAddr,
    /// CPUs the ranks of its host may run on together: the size of the
    /// union of the [`Join::cpus`] of every rank whose listener has the
    /// same IP address (the root computes it; the same for all of them).
    pub cpus: u32,
}

/// Bytes of a [`TableEntry`] on the wire.
const ENTRY_LEN: usize = 4 + ADDR_LEN;

/// Body of a table: every rank's entry, by rank.
pub fn encode_table(entries: &[TableEntry]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + entries.len() * ENTRY_LEN);
    v.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        v.extend_from_slice(&e.cpus.to_le_bytes());
        encode_addr(&e.data_addr, &mut v);
    }
    v
}

/// Parses a table body.
///
/// # Errors
/// [`WireError::Malformed`] if the count and length disagree.
pub fn decode_table(b: &[u8]) -> Result<Vec<TableEntry>, WireError> {
    if b.len() < 4 {
        return Err(WireError::Malformed("table"));
    }
    let n = u32_at(b, 0) as usize;
    if b.len() != 4 + n.saturating_mul(ENTRY_LEN) {
        return Err(WireError::Malformed("table"));
    }
    b[4..]
        .chunks(ENTRY_LEN)
        .map(|e| {
            Ok(TableEntry {
                cpus: u32_at(e, 0),
                data_addr: decode_addr(&e[4..])?,
            })
        })
        .collect()
}

/// Body of a reject.
pub fn encode_reject(code: RejectCode, reason: &str) -> Vec<u8> {
    let mut v = vec![code as u8];
    v.extend_from_slice(reason.as_bytes());
    v
}

/// Parses a reject body (lossy UTF-8).
///
/// # Errors
/// [`WireError::Malformed`] for an empty body or an unknown code.
pub fn decode_reject(b: &[u8]) -> Result<(RejectCode, String), WireError> {
    let code = match b.first() {
        Some(1) => RejectCode::Timeout,
        Some(2) => RejectCode::Expired,
        Some(3) => RejectCode::Refused,
        Some(4) => RejectCode::RankLeft,
        _ => return Err(WireError::Malformed("reject")),
    };
    Ok((code, String::from_utf8_lossy(&b[1..]).into_owned()))
}

/// Body of a hello: (from rank, to rank).
pub fn encode_hello(from: u32, to: u32) -> Vec<u8> {
    let mut v = from.to_le_bytes().to_vec();
    v.extend_from_slice(&to.to_le_bytes());
    v
}

/// Parses a hello body.
///
/// # Errors
/// [`WireError::Malformed`] unless exactly 8 bytes.
pub fn decode_hello(b: &[u8]) -> Result<(u32, u32), WireError> {
    if b.len() != 8 {
        return Err(WireError::Malformed("hello"));
    }
    Ok((u32_at(b, 0), u32_at(b, 4)))
}

/// Reads one control message, checking magic, version, kind, the body
/// bound and (if `expect`) the session, before reading the body.
///
/// # Errors
/// `Err(Ok(wire))` for bad bytes, `Err(Err(io))` for socket errors.
pub async fn read_ctrl<R: AsyncRead + Unpin>(
    r: &mut R,
    expect: Option<SessionId>,
) -> Result<(CtrlHeader, Vec<u8>), Result<WireError, std::io::Error>> {
    let mut h = [0u8; CTRL_HEADER_LEN];
    r.read_exact(&mut h).await.map_err(Err)?;
    let head = decode_ctrl_header(&h).map_err(Ok)?;
    if let Some(s) = expect {
        if head.session != s {
            return Err(Ok(WireError::BadSession { got: head.session }));
        }
    }
    let mut body = vec![0u8; head.body_len as usize];
    r.read_exact(&mut body).await.map_err(Err)?;
    Ok((head, body))
}

/// Writes one control message.
///
/// # Errors
/// The socket's error.
pub async fn write_ctrl<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: CtrlKind,
    session: SessionId,
    body: &[u8],
) -> std::io::Result<()> {
    w.write_all(&encode_ctrl(kind, session, body)).await?;
    w.flush().await
}

/// Kinds of data-plane frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A message of one step: `len` payload bytes follow.
    Data = 1,
    /// Start of op `seq` on the sender, with its signature (no payload);
    /// sent to every peer. `tag` 0 is the start itself; `tag`
    /// [`super::rank::LATE_TAG`] and [`super::rank::AGREED_TAG`] are the
    /// late-rank exchange (see [`super::rank`]'s consistency docs).
    OpStart = 2,
    /// The sender failed op `seq`; payload is a UTF-8 reason (bounded).
    Abort = 3,
    /// The sender is closing the communicator on purpose (no payload).
    Bye = 4,
    /// A message of one step whose `len` payload bytes stay in the sender's
    /// memory: the first piece's [`PieceDesc`] follows.
    DataCma = 5,
    /// The sender's cross-memory offer: exactly [`CMA_PROBE_LEN`] bytes of
    /// [`CmaProbe`] follow.
    CmaProbe = 6,
    /// The answer to a probe (no payload): `tag` 1 = "cma ok" (the
    /// receiver read the token and will read `DataCma` pieces), 0 = off.
    CmaReply = 7,
    /// The receiver has copied a piece: one [`PieceDesc`] follows.
    CmaAck = 8,
    /// The next piece of the `DataCma` message in progress on this
    /// connection (same seq and tag): one [`PieceDesc`] follows.
    CmaMore = 9,
    /// The sender's shared-memory offer, right after the probe exchange:
    /// exactly [`SHM_OFFER_LEN`] bytes of [`ShmOffer`] follow.
    ShmOffer = 10,
    /// The answer of the pair's higher rank to the lower one's segment
    /// (no payload): `tag` 1 = mapped, every later frame of the pair
    /// travels in the rings; 0 = stay on the socket.
    ShmReply = 11,
}

/// A data-plane frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The kind.
    pub kind: FrameKind,
    /// Session id.
    pub session: SessionId,
    /// Communicator id.
    pub comm: u64,
    /// Op sequence number.
    pub seq: u64,
    /// Step tag (from the schedule).
    pub tag: u32,
    /// Payload bytes that follow.
    pub len: u64,
    /// Signature of the sender's op.
    pub sig: Signature,
}

impl FrameHeader {
    /// The 88 header bytes.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut b = [0u8; FRAME_HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6] = self.kind as u8;
        b[8..24].copy_from_slice(&self.session.to_le_bytes());
        b[24..32].copy_from_slice(&self.comm.to_le_bytes());
        b[32..40].copy_from_slice(&self.seq.to_le_bytes());
        b[40..44].copy_from_slice(&self.tag.to_le_bytes());
        b[48..56].copy_from_slice(&self.len.to_le_bytes());
        b[56..88].copy_from_slice(&self.sig);
        b
    }

    /// Decodes and checks magic, version, kind and session; abort reasons
    /// over [`MAX_ABORT_REASON`], payloads on control-only kinds and probe
    /// or ack payloads of any other than their fixed length are refused.
    ///
    /// # Errors
    /// The first check that fails.
    pub fn decode(
        b: &[u8; FRAME_HEADER_LEN],
        session: SessionId,
    ) -> Result<FrameHeader, WireError> {
        check_magic_version(b)?;
        let kind = match b[6] {
            1 => FrameKind::Data,
            2 => FrameKind::OpStart,
            3 => FrameKind::Abort,
            4 => FrameKind::Bye,
            5 => FrameKind::DataCma,
            6 => FrameKind::CmaProbe,
            7 => FrameKind::CmaReply,
            8 => FrameKind::CmaAck,
            9 => FrameKind::CmaMore,
            10 => FrameKind::ShmOffer,
            11 => FrameKind::ShmReply,
            k => return Err(WireError::BadKind(k)),
        };
        let got = u128_at(b, 8);
        if got != session {
            return Err(WireError::BadSession { got });
        }
        let len = u64_at(b, 48);
        let (min, max) = match kind {
            FrameKind::Data | FrameKind::DataCma => (0, u64::MAX),
            FrameKind::Abort => (0, MAX_ABORT_REASON),
            FrameKind::OpStart | FrameKind::Bye | FrameKind::CmaReply | FrameKind::ShmReply => {
                (0, 0)
            }
            FrameKind::ShmOffer => (SHM_OFFER_LEN as u64, SHM_OFFER_LEN as u64),
            FrameKind::CmaProbe => (CMA_PROBE_LEN as u64, CMA_PROBE_LEN as u64),
            FrameKind::CmaAck | FrameKind::CmaMore => {
                (PIECE_DESC_LEN as u64, PIECE_DESC_LEN as u64)
            }
        };
        if len < min {
            return Err(WireError::Malformed(
                "frame payload shorter than its kind's",
            ));
        }
        if len > max {
            return Err(WireError::TooLong {
                what: "frame payload",
                len,
                max,
            });
        }
        let mut sig = [0u8; SIG_LEN];
        sig.copy_from_slice(&b[56..88]);
        Ok(FrameHeader {
            kind,
            session: got,
            comm: u64_at(b, 24),
            seq: u64_at(b, 32),
            tag: u32_at(b, 40),
            len,
            sig,
        })
    }
}

/// A piece of the sender's memory that holds the next bytes of a
/// [`FrameKind::DataCma`] message: `len` bytes at virtual address `addr` in
/// the sender's process (whose pid the receiver verified with a
/// [`CmaProbe`]; a descriptor never names a process), valid only while the
/// sender's lend word (8 bytes at `word`, an aligned `u64` in native byte
/// order) holds `expected`. The piece lies in the sender's op buffer (its
/// user's input or output, or the op's scratch), not in a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PieceDesc {
    /// Virtual address in the sender's process.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// Address of the sender's lend word (8-byte aligned, not 0).
    pub word: u64,
    /// The value the lend word holds while the piece is valid (never
    /// [`LEND_POISON`]).
    pub expected: u64,
}

impl PieceDesc {
    /// The 32 bytes: address, length, word address, expected value (u64
    /// little-endian each).
    pub fn encode(&self) -> [u8; PIECE_DESC_LEN] {
        let mut b = [0u8; PIECE_DESC_LEN];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.word.to_le_bytes());
        b[24..32].copy_from_slice(&self.expected.to_le_bytes());
        b
    }

    /// Decodes a descriptor of the message whose next `left` bytes it must
    /// carry, at most `max` bytes per piece.
    ///
    /// # Errors
    /// [`WireError::Malformed`] for an empty piece, an address range that
    /// wraps, a lend word at 0, unaligned or wrapping, or an expected value
    /// of [`LEND_POISON`]; [`WireError::TooLong`] for a piece longer than
    /// `left` or `max`.
    pub fn decode(b: &[u8; PIECE_DESC_LEN], left: u64, max: u64) -> Result<PieceDesc, WireError> {
        let d = PieceDesc {
            addr: u64_at(b, 0),
            len: u64_at(b, 8),
            word: u64_at(b, 16),
            expected: u64_at(b, 24),
        };
        if d.len == 0 {
            return Err(WireError::Malformed("empty piece descriptor"));
        }
        if d.addr.checked_add(d.len).is_none() {
            return Err(WireError::Malformed(
                "piece descriptor wraps the address space",
            ));
        }
        if d.word == 0 || !d.word.is_multiple_of(8) || d.word.checked_add(8).is_none() {
            return Err(WireError::Malformed(
                "piece descriptor's lend word is null, unaligned or wraps",
            ));
        }
        if d.expected == LEND_POISON {
            return Err(WireError::Malformed(
                "piece descriptor expects the lend word's poison value",
            ));
        }
        if d.len > left {
            return Err(WireError::TooLong {
                what: "piece descriptor (bytes left in the message)",
                len: d.len,
                max: left,
            });
        }
        if d.len > max {
            return Err(WireError::TooLong {
                what: "piece descriptor",
                len: d.len,
                max,
            });
        }
        Ok(d)
    }
}

/// A rank's cross-memory offer, sent once on each data connection right
/// after the hello: "I am process `pid`; at `addr` I hold `token`". The
/// peer reads [`CMA_TOKEN_LEN`] bytes at `addr` from `pid` and compares
/// them with `token`: equal bytes prove that it can read this process's
/// memory (same host, same pid namespace, ptrace permission).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaProbe {
    /// False if the sender has the fast path off (`HCCL_INTRA_CMA_ENABLE=0`
    /// or not Linux): the peer answers "off" without reading.
    pub offer: bool,
    /// The sender's process id.
    pub pid: u32,
    /// Address of the token in the sender's process.
    pub addr: u64,
    /// The token's bytes (session id and random bytes).
    pub token: [u8; CMA_TOKEN_LEN],
}

impl CmaProbe {
    /// The [`CMA_PROBE_LEN`] payload bytes: offer u8, pid u32, addr u64, token.
    pub fn encode(&self) -> [u8; CMA_PROBE_LEN] {
        let mut b = [0u8; CMA_PROBE_LEN];
        b[0] = u8::from(self.offer);
        b[1..5].copy_from_slice(&self.pid.to_le_bytes());
        b[5..13].copy_from_slice(&self.addr.to_le_bytes());
        b[13..].copy_from_slice(&self.token);
        b
    }

    /// Parses [`CmaProbe::encode`]'s bytes.
    ///
    /// # Errors
    /// [`WireError::Malformed`] if the offer byte is neither 0 nor 1.
    pub fn decode(b: &[u8; CMA_PROBE_LEN]) -> Result<CmaProbe, WireError> {
        let offer = match b[0] {
            0 => false,
            1 => true,
            _ => return Err(WireError::Malformed("cma probe")),
        };
        let mut token = [0u8; CMA_TOKEN_LEN];
        token.copy_from_slice(&b[13..]);
        Ok(CmaProbe {
            offer,
            pid: u32_at(b, 1),
            addr: u64_at(b, 5),
            token,
        })
    }
}

/// A rank's shared-memory offer on a same-host connection (see
/// `hccl_hw::tcp::shm_link`): the pair's lower rank names the segment it
/// created (descriptor `fd` in its process, rings of `cap` bytes, the
/// `token` in the segment's header); the higher rank only says whether it
/// is willing (`fd`, `cap`, `token` zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOffer {
    /// False if the sender has the path off (`HCCL_SHM_DISABLE=1`, or it
    /// could not create the segment).
    pub willing: bool,
    /// The segment's descriptor in the lower rank's process.
    pub fd: u32,
    /// Bytes of each of the segment's two rings.
    pub cap: u64,
    /// The bytes the segment's header holds.
    pub token: [u8; SHM_TOKEN_LEN],
}

impl ShmOffer {
    /// The [`SHM_OFFER_LEN`] payload bytes: willing u8, fd u32, cap u64, token.
    pub fn encode(&self) -> [u8; SHM_OFFER_LEN] {
        let mut b = [0u8; SHM_OFFER_LEN];
        b[0] = u8::from(self.willing);
        b[1..5].copy_from_slice(&self.fd.to_le_bytes());
        b[5..13].copy_from_slice(&self.cap.to_le_bytes());
        b[13..].copy_from_slice(&self.token);
        b
    }

    /// Parses [`ShmOffer::encode`]'s bytes.
    ///
    /// # Errors
    /// [`WireError::Malformed`] if the willing byte is neither 0 nor 1.
    pub fn decode(b: &[u8; SHM_OFFER_LEN]) -> Result<ShmOffer, WireError> {
        let willing = match b[0] {
            0 => false,
            1 => true,
            _ => return Err(WireError::Malformed("shm offer")),
        };
        let mut token = [0u8; SHM_TOKEN_LEN];
        token.copy_from_slice(&b[13..]);
        Ok(ShmOffer {
            willing,
            fd: u32_at(b, 1),
            cap: u64_at(b, 5),
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn shm_offer_round_trips_and_refuses_a_bad_flag() {
        let o = ShmOffer {
            willing: true,
            fd: 17,
            cap: 1 << 18,
            token: [9; SHM_TOKEN_LEN],
        };
        assert_eq!(ShmOffer::decode(&o.encode()), Ok(o));
        let mut b = o.encode();
        b[0] = 2;
        assert!(ShmOffer::decode(&b).is_err());
    }

    #[test]
    fn frame_header_round_trips() {
        let h = FrameHeader {
            kind: FrameKind::Data,
            session: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            comm: 9,
            seq: 17,
            tag: 3,
            len: 1 << 40,
            sig: [7; SIG_LEN],
        };
        assert_eq!(FrameHeader::decode(&h.encode(), h.session), Ok(h));
        assert_eq!(
            FrameHeader::decode(&h.encode(), 1),
            Err(WireError::BadSession { got: h.session })
        );
        let mut b = h.encode();
        b[0] = b'X';
        assert!(matches!(
            FrameHeader::decode(&b, h.session),
            Err(WireError::BadMagic(_))
        ));
        let mut b = h.encode();
        b[4] = 1;
        assert_eq!(
            FrameHeader::decode(&b, h.session),
            Err(WireError::BadVersion { got: 1 })
        );
    }

    #[test]
    fn abort_reason_is_bounded() {
        let h = FrameHeader {
            kind: FrameKind::Abort,
            session: 1,
            comm: 0,
            seq: 0,
            tag: 0,
            len: MAX_ABORT_REASON + 1,
            sig: [0; SIG_LEN],
        };
        assert!(matches!(
            FrameHeader::decode(&h.encode(), 1),
            Err(WireError::TooLong { .. })
        ));
    }

    #[test]
    fn control_bodies_round_trip() {
        let j = Join {
            nranks: 4,
            rank: 3,
            data_addr: "[::1]:5000".parse().unwrap(),
            cpus: CpuSet::from_cpus([0, 5, 63, 64, 200]),
        };
        assert_eq!(j.cpus.count(), 5);
        assert_eq!(Join::decode(&j.encode()), Ok(j.clone()));
        let empty = Join {
            cpus: CpuSet::default(),
            ..j.clone()
        };
        assert_eq!(Join::decode(&empty.encode()), Ok(empty));
        // A word count that disagrees with the length, or above the bound.
        let mut b = j.encode();
        b.pop();
        assert_eq!(Join::decode(&b), Err(WireError::Malformed("join")));
        let mut b = j.encode();
        b[8..12].copy_from_slice(&(MAX_CPU_SET_WORDS as u32 + 1).to_le_bytes());
        assert_eq!(Join::decode(&b), Err(WireError::Malformed("join")));
        let t: Vec<TableEntry> = vec![
            TableEntry {
                data_addr: "127.0.0.1:1".parse().unwrap(),
                cpus: 2,
            },
            TableEntry {
                data_addr: "10.1.2.3:65535".parse().unwrap(),
                cpus: u32::MAX,
            },
        ];
        assert_eq!(decode_table(&encode_table(&t)), Ok(t));
        assert_eq!(decode_hello(&encode_hello(1, 2)), Ok((1, 2)));
        assert_eq!(
            decode_reject(&encode_reject(RejectCode::Expired, "late")),
            Ok((RejectCode::Expired, "late".to_string()))
        );
        let mut h = [0u8; CTRL_HEADER_LEN];
        h.copy_from_slice(&encode_ctrl(CtrlKind::Join, 5, &[])[..CTRL_HEADER_LEN]);
        h[24..28].copy_from_slice(&(MAX_CTRL_BODY + 1).to_le_bytes());
        assert!(matches!(
            decode_ctrl_header(&h),
            Err(WireError::TooLong { .. })
        ));
    }

    #[test]
    fn cma_frames_have_fixed_lengths_and_descriptors_are_bounded() {
        let h = |kind, len| FrameHeader {
            kind,
            session: 1,
            comm: 0,
            seq: 0,
            tag: 0,
            len,
            sig: [0; SIG_LEN],
        };
        let probe_len = CMA_PROBE_LEN as u64;
        assert!(FrameHeader::decode(&h(FrameKind::CmaProbe, probe_len).encode(), 1).is_ok());
        for bad in [0, probe_len - 1, probe_len + 1, u64::MAX] {
            assert!(FrameHeader::decode(&h(FrameKind::CmaProbe, bad).encode(), 1).is_err());
        }
        assert!(FrameHeader::decode(&h(FrameKind::CmaAck, 32).encode(), 1).is_ok());
        for bad in [16, 31, 33] {
            assert!(FrameHeader::decode(&h(FrameKind::CmaAck, bad).encode(), 1).is_err());
            assert!(FrameHeader::decode(&h(FrameKind::CmaMore, bad).encode(), 1).is_err());
        }
        assert!(FrameHeader::decode(&h(FrameKind::CmaReply, 1).encode(), 1).is_err());
        assert!(FrameHeader::decode(&h(FrameKind::DataCma, 1 << 40).encode(), 1).is_ok());

        let d = PieceDesc {
            addr: 0x7f00_0000_1000,
            len: 4096,
            word: 0x5555_0000_0008,
            expected: 7,
        };
        assert_eq!(PieceDesc::decode(&d.encode(), 4096, 4096), Ok(d));
        assert_eq!(&d.encode()[16..24], &0x5555_0000_0008u64.to_le_bytes());
        for (word, expected) in [
            (0, 7),
            (0x5555_0000_0004, 7),
            (!7, 7),
            (d.word, LEND_POISON),
        ] {
            let bad = PieceDesc {
                word,
                expected,
                ..d
            };
            assert!(
                matches!(
                    PieceDesc::decode(&bad.encode(), 4096, 4096),
                    Err(WireError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            PieceDesc::decode(&d.encode(), 4095, 1 << 20),
            Err(WireError::TooLong {
                len: 4096,
                max: 4095,
                ..
            })
        ));
        assert!(matches!(
            PieceDesc::decode(&d.encode(), 1 << 20, 1024),
            Err(WireError::TooLong {
                len: 4096,
                max: 1024,
                ..
            })
        ));
        let empty = PieceDesc { len: 0, ..d };
        assert!(PieceDesc::decode(&empty.encode(), 10, 10).is_err());
        let wraps = PieceDesc {
            addr: u64::MAX - 1,
            len: 4,
            ..d
        };
        assert!(PieceDesc::decode(&wraps.encode(), 10, 10).is_err());

        let p = CmaProbe {
            offer: true,
            pid: 4242,
            addr: 0xdead_beef,
            token: [9; CMA_TOKEN_LEN],
        };
        assert_eq!(CmaProbe::decode(&p.encode()), Ok(p));
        let mut b = p.encode();
        b[0] = 2;
        assert!(CmaProbe::decode(&b).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut f = [0u8; FRAME_HEADER_LEN];
            let n = bytes.len().min(FRAME_HEADER_LEN);
            f[..n].copy_from_slice(&bytes[..n]);
            let _ = FrameHeader::decode(&f, 0);
            let mut c = [0u8; CTRL_HEADER_LEN];
            let n = bytes.len().min(CTRL_HEADER_LEN);
            c[..n].copy_from_slice(&bytes[..n]);
            let _ = decode_ctrl_header(&c);
            let _ = decode_table(&bytes);
            let _ = Join::decode(&bytes);
            let _ = decode_reject(&bytes);
            let _ = decode_addr(&bytes);
            let mut d = [0u8; PIECE_DESC_LEN];
            let n = bytes.len().min(PIECE_DESC_LEN);
            d[..n].copy_from_slice(&bytes[..n]);
            if let Ok(p) = PieceDesc::decode(&d, 1 << 30, MAX_CMA_PIECE) {
                prop_assert!(p.len > 0 && p.len <= MAX_CMA_PIECE);
                prop_assert!(p.word != 0 && p.word % 8 == 0 && p.expected != LEND_POISON);
            }
            let mut c = [0u8; CMA_PROBE_LEN];
            let n = bytes.len().min(CMA_PROBE_LEN);
            c[..n].copy_from_slice(&bytes[..n]);
            let _ = CmaProbe::decode(&c);
        }
    }
}
