//! Same-host fast path: Linux cross-memory attach (`process_vm_readv(2)`,
//! through `nix`'s safe wrapper), in the manner of Open MPI's vader/CMA
//! transport.
//!
//! Over loopback TCP every byte is copied four times: into a send piece,
//! into the kernel's socket buffer, out of it, and into (or reduced into)
//! the receive buffer. With this path a sender copies nothing: for a peer
//! on the same host it writes only a 32-byte [`PieceDesc`] per piece of a
//! send region (address and length of the piece in its own op buffer, the
//! user's input or output or the op's scratch, plus the address and
//! expected value of its [`LendWord`]) on the TCP connection; the peer
//! copies the piece straight out of the sender's address space with one
//! system call (into the posted receive region itself for a plain receive,
//! else into a receive chunk), checks the lend word with a second one, and
//! answers with an ack naming the piece. This is Open MPI's single-copy
//! CMA scheme (vader's `process_vm_readv` of the sender's own buffer). The
//! TCP connection stays the control channel: frame order, matching, length
//! and signature checks, the byte budget and every failure path are
//! unchanged.
//!
//! **Turning it on, per pair.** Right after the hello, each rank sends
//! on every connection a [`CmaProbe`]: its pid and the address of a
//! communicator-lifetime [`Token`] (session id and 16 random bytes), plus
//! the token's bytes. The peer reads the token out of that pid and compares:
//! equal bytes prove it can read this process (same host, same pid
//! namespace, ptrace permission), and it answers "cma ok"; anything else
//! (`EPERM` under ptrace restrictions, `ESRCH` from another pid namespace or
//! host, different bytes) gets "cma off" and a debug log line. The pair
//! uses the path only if both answers are "ok", then for every message
//! over [`MAX_INLINE_ON_CMA`](super::wire::MAX_INLINE_ON_CMA) bytes both
//! ways (shorter ones go as bytes): were it on one way only (say a parent
//! that may read its child under Yama's `ptrace_scope=1` but not the
//! reverse), a long byte-stream message one way could hold up the acks the
//! other way's sender waits for. A reader reads only from the pid it
//! verified, never one named in a data frame. `HCCL_INTRA_CMA_ENABLE=0`
//! turns it off (the rank neither offers nor reads); on targets other than
//! Linux it is always off.
//!
//! **A lent piece of an op buffer is read only while its op lends it.**
//! Two rules keep the guarantee that nothing is ever read out of a buffer
//! after the caller got it back:
//!
//! 1. *Success waits for the acks.* A send step whose pieces are lent
//!    completes only when the peer has acked every one of them (not when
//!    the descriptors are written), and an op does not finish while any
//!    piece is unacked. The schedule verifier makes every later write to a
//!    sent region depend on its send step, so the region stays unchanged
//!    while it is lent; its deadlock check assumes rendezvous sends, which
//!    this is. After a successful op no peer reads anything of it.
//! 2. *Failure withdraws the loan.* An op that fails (timeout, lost peer,
//!    abort, mismatch, a dropped op) may return while peers still hold
//!    descriptors of its buffers. So every piece is valid only while this
//!    rank's [`LendWord`] holds the value its descriptor names (a number
//!    fresh for each op), and before a failing op returns, and whenever an
//!    op ends, the word is set to [`LEND_POISON`] followed by a sequentially
//!    consistent fence. A reader copies the piece, issues a sequentially
//!    consistent fence, then reads the word (second `process_vm_readv`),
//!    and keeps the bytes only if the word still holds the expected value;
//!    otherwise the receiving op fails with `TcpError::LenderFailed` and the
//!    bytes are never applied as a success.
//!
//! Why the fences make the check sound (the message-passing pattern): on
//! the sender, `W(word := poison); F; ... the caller writes its buffer`;
//! on the reader, `R(piece bytes); F; R(word)`. If any byte the reader
//! copied was written by the caller after the failure, that write is
//! ordered after the poison store (program order across the fence, or a
//! hand-off to another thread, which synchronizes), and the reader's fence
//! orders its read of the word after its read of that byte; on the
//! multi-copy-atomic machines Linux runs on (x86-TSO, ARMv8), a load
//! ordered after one that observed a store sees every store ordered
//! before that one, so the word read returns the poison (each of its
//! bytes, so a torn 8-byte read cannot assemble the expected value: no
//! store follows the poison while such a reader exists). The kernel's copy
//! is plain loads on the reader's CPU; the fences compile to full barriers
//! (`mfence`, `dmb ish`). If the buffer was freed and its pages reused,
//! the same holds (the free comes after the poison); if they were
//! unmapped, the copy fails with `EFAULT` and the op fails as with a lost
//! peer. The word itself is leaked (8 bytes per communicator), so it is
//! mapped for as long as any peer could read it. A piece whose word check
//! passed is a copy of bytes that were unchanged throughout: its send
//! cannot have completed (no ack yet), so nothing wrote them.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use hccl_algos::schedule::StepId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{
    CmaProbe, FrameHeader, FrameKind, PieceDesc, SessionId, CMA_PROBE_LEN, CMA_TOKEN_LEN,
    FRAME_HEADER_LEN, LEND_POISON, SIG_LEN,
};

/// True on targets where the fast path exists (Linux).
pub const AVAILABLE: bool = cfg!(target_os = "linux");

/// The bytes a rank proves its identity with: session id then 16 random
/// bytes, boxed so the address stays fixed for the communicator's life.
#[derive(Debug)]
pub struct Token(Box<[u8; CMA_TOKEN_LEN]>);

impl Token {
    /// A fresh token for `session`.
    pub fn new(session: SessionId) -> Token {
        let mut b = [0u8; CMA_TOKEN_LEN];
        b[..16].copy_from_slice(&session.to_le_bytes());
        let random: [u8; 16] = rand::random();
        b[16..].copy_from_slice(&random);
        Token(Box::new(b))
    }

    /// The probe this process sends: `offer` false says "off".
    pub fn probe(&self, offer: bool) -> CmaProbe {
        CmaProbe {
            offer,
            pid: std::process::id(),
            addr: self.0.as_ptr() as u64,
            token: *self.0,
        }
    }
}

/// A failed cross-memory read: bytes copied before the failure and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    /// Bytes copied before the failure.
    pub got: u64,
    /// The system's words (`EFAULT: Bad address`, ...).
    pub reason: String,
}

/// Fills `buf` with the `buf.len()` bytes at `addr` in process `pid`.
///
/// # Errors
/// [`ReadError`] on `EFAULT` (an address not mapped there), `ESRCH` (no
/// such process), `EPERM` (not permitted), a read that makes no progress,
/// or on targets without cross-memory attach.
#[cfg(target_os = "linux")]
pub fn read_remote(pid: u32, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    use nix::unistd::Pid;
    use std::io::IoSliceMut;

    let fail = |got: usize, reason: String| ReadError {
        got: got as u64,
        reason,
    };
    let pid = i32::try_from(pid).map_err(|_| fail(0, format!("pid {pid} out of range")))?;
    let mut got = 0usize;
    // The kernel may stop at a page it cannot read after copying some:
    // continue from there, and fail on the first call that copies nothing.
    while got < buf.len() {
        let base = usize::try_from(addr)
            .ok()
            .and_then(|a| a.checked_add(got))
            .ok_or_else(|| fail(got, format!("address {addr:#x} out of range")))?;
        let remote = [RemoteIoVec {
            base,
            len: buf.len() - got,
        }];
        match process_vm_readv(
            Pid::from_raw(pid),
            &mut [IoSliceMut::new(&mut buf[got..])],
            &remote,
        ) {
            Ok(0) => return Err(fail(got, "the read copied nothing".into())),
            Ok(n) => got += n,
            Err(e) => return Err(fail(got, e.to_string())),
        }
    }
    Ok(())
}

/// Fills `buf` from process `pid`: not available on this target.
///
/// # Errors
/// Always.
#[cfg(not(target_os = "linux"))]
pub fn read_remote(_pid: u32, _addr: u64, _buf: &mut [u8]) -> Result<(), ReadError> {
    Err(ReadError {
        got: 0,
        reason: "cross-memory attach exists on Linux only".into(),
    })
}

/// Checks a peer's probe: reads its token out of its process and compares.
///
/// # Errors
/// Why the fast path stays off towards this peer (for the debug log).
pub fn verify(p: &CmaProbe) -> Result<(), String> {
    if !p.offer {
        return Err("the peer has it off".into());
    }
    let mut got = [0u8; CMA_TOKEN_LEN];
    read_remote(p.pid, p.addr, &mut got).map_err(|e| {
        format!(
            "reading pid {} at {:#x} failed: {} (another host or pid namespace, or ptrace not permitted)",
            p.pid, p.addr, e.reason
        )
    })?;
    if got != p.token {
        return Err(format!(
            "pid {} holds other bytes at {:#x}: it is another process of the same number (another host or pid namespace)",
            p.pid, p.addr
        ));
    }
    Ok(())
}

/// What the probe exchange settled for one peer connection: on in both
/// directions (each side read the other's token) or off in both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerCma {
    /// The peer reads this rank's pieces: send descriptors to it.
    pub send: bool,
    /// This rank reads the peer's pieces from this verified pid.
    pub recv_pid: Option<u32>,
    /// The pid the peer's probe named (verified only if `recv_pid` is
    /// set): where the shared-memory offer looks for its segment.
    pub peer_pid: u32,
}

/// A control frame's header on a fresh data connection (the probe and
/// the shared-memory offer exchanges).
pub(super) fn frame(
    kind: FrameKind,
    session: SessionId,
    comm: u64,
    tag: u32,
    len: u64,
) -> FrameHeader {
    FrameHeader {
        kind,
        session,
        comm,
        seq: 0,
        tag,
        len,
        sig: [0; SIG_LEN],
    }
}

/// Reads one frame header of `kind` (anything else is an error naming it).
pub(super) async fn read_frame(
    s: &mut TcpStream,
    session: SessionId,
    kind: FrameKind,
) -> Result<FrameHeader, String> {
    let mut hb = [0u8; FRAME_HEADER_LEN];
    s.read_exact(&mut hb).await.map_err(|e| e.to_string())?;
    let h = FrameHeader::decode(&hb, session).map_err(|e| e.to_string())?;
    if h.kind != kind {
        return Err(format!("{:?} instead of {kind:?}", h.kind));
    }
    Ok(h)
}

/// The probe exchange on one fresh data connection (both sides run it at
/// once: each writes before it reads, and every frame fits in the socket
/// buffer, so neither waits on the other's read). `mine` is this rank's
/// probe (from [`Token::probe`]; with `offer` false this rank neither
/// offers nor reads). Returns what was settled; `peer` names the other
/// rank in the debug log. The token must live until this returns: the
/// peer reads it before it answers.
///
/// # Errors
/// Socket errors and bad frames, as text for the caller's error.
pub async fn exchange(
    s: &mut TcpStream,
    mine: CmaProbe,
    session: SessionId,
    comm: u64,
    peer: u32,
) -> Result<PeerCma, String> {
    let offer = mine.offer;
    let mut out = frame(FrameKind::CmaProbe, session, comm, 0, CMA_PROBE_LEN as u64)
        .encode()
        .to_vec();
    out.extend_from_slice(&mine.encode());
    s.write_all(&out).await.map_err(|e| e.to_string())?;
    read_frame(s, session, FrameKind::CmaProbe).await?;
    let mut body = [0u8; CMA_PROBE_LEN];
    s.read_exact(&mut body).await.map_err(|e| e.to_string())?;
    let theirs = CmaProbe::decode(&body).map_err(|e| e.to_string())?;
    let ok = if offer {
        match verify(&theirs) {
            Ok(()) => true,
            Err(why) => {
                tracing::debug!("hccl: cross-memory attach off from rank {peer}: {why}");
                false
            }
        }
    } else {
        false
    };
    let reply = frame(FrameKind::CmaReply, session, comm, u32::from(ok), 0);
    s.write_all(&reply.encode())
        .await
        .map_err(|e| e.to_string())?;
    let answer = read_frame(s, session, FrameKind::CmaReply).await?;
    // Both directions or neither: on a pair where only one side could read,
    // byte-stream messages one way would hold up acks the other way.
    let on = ok && answer.tag == 1;
    Ok(PeerCma {
        send: on,
        recv_pid: on.then_some(theirs.pid),
        peer_pid: theirs.pid,
    })
}

/// A rank's lend word: one `u64` that tells readers whether the pieces
/// they were lent are still valid (see the module docs). It holds the
/// running op's lend number while the op runs and [`LEND_POISON`]
/// otherwise. Leaked on creation (8 bytes per communicator): a peer may
/// read it for as long as it holds a descriptor, which can outlive the
/// communicator after a failure, and a freed and reused word could hold
/// the expected value by chance.
#[derive(Clone, Copy, Debug)]
pub struct LendWord(&'static AtomicU64);

impl Default for LendWord {
    fn default() -> LendWord {
        LendWord::new()
    }
}

impl LendWord {
    /// A new word holding [`LEND_POISON`].
    pub fn new() -> LendWord {
        LendWord(Box::leak(Box::new(AtomicU64::new(LEND_POISON))))
    }

    /// Its address in this process (8-byte aligned), for descriptors.
    pub fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }

    /// Its value now.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Starts lending under `id` (not [`LEND_POISON`]; fresh for each op).
    /// Every descriptor sent afterwards names `id`; the socket write that
    /// carries it orders this store before the reader's reads.
    pub fn open(&self, id: u64) {
        debug_assert_ne!(id, LEND_POISON);
        self.0.store(id, Ordering::SeqCst);
    }

    /// Withdraws every piece lent under the current value: stores
    /// [`LEND_POISON`], then a sequentially consistent fence, so any write
    /// the caller makes to its buffers afterwards is ordered after the
    /// poison (the sender's half of the pattern in the module docs). Call
    /// it before a failing op returns.
    pub fn poison(&self) {
        self.0.store(LEND_POISON, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
}

/// Why a lent piece could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LentReadError {
    /// The piece or the lend word could not be read (the sender's memory
    /// is gone or the process is): treat the peer as lost.
    Read(ReadError),
    /// The bytes were read, but the lend word holds `found`, not the
    /// descriptor's value: the sender's op failed (or ended) while the
    /// piece was lent, so the bytes may be anything. Discard them.
    Withdrawn {
        /// The word's value.
        found: u64,
    },
}

/// Copies the lent piece `d` out of process `pid` into `buf` (`d.len`
/// bytes) and checks its lend word afterwards (the reader's half of the
/// pattern in the module docs: read the piece, fence, read the word).
/// On an error `buf` holds bytes that must not be used.
///
/// # Errors
/// [`LentReadError::Read`] if a read fails, [`LentReadError::Withdrawn`]
/// if the word no longer holds `d.expected`.
pub fn read_lent(pid: u32, d: &PieceDesc, buf: &mut [u8]) -> Result<(), LentReadError> {
    read_remote(pid, d.addr, buf).map_err(LentReadError::Read)?;
    fence(Ordering::SeqCst);
    let mut word = [0u8; 8];
    read_remote(pid, d.word, &mut word).map_err(|e| {
        LentReadError::Read(ReadError {
            got: 0,
            reason: format!("reading its lend word at {:#x}: {}", d.word, e.reason),
        })
    })?;
    // Same host, so the same byte order as the sender's AtomicU64.
    let found = u64::from_ne_bytes(word);
    if found != d.expected {
        return Err(LentReadError::Withdrawn { found });
    }
    Ok(())
}

/// A piece lent to a peer: its descriptor and the send step (of op `seq`)
/// whose message it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LentPiece {
    /// What the peer was sent.
    pub desc: PieceDesc,
    /// The op's sequence number.
    pub seq: u64,
    /// The send step.
    pub step: StepId,
}

/// A message with pieces lent: how many are unacked, and whether its last
/// piece has been lent.
#[derive(Debug)]
struct LentMsg {
    seq: u64,
    step: StepId,
    unacked: u32,
    all_lent: bool,
}

/// The pieces lent to one peer (their descriptors written, their acks not
/// yet received), in lending order, and the messages they belong to: a
/// message's send step completes when the ack of its last unacked piece
/// arrives after all its pieces were lent.
#[derive(Debug, Default)]
pub struct LentPieces {
    pieces: VecDeque<LentPiece>,
    msgs: VecDeque<LentMsg>,
}

impl LentPieces {
    /// Records that `desc` was lent as a piece of send step `step` of op
    /// `seq`; `last` if it is the message's last piece.
    pub fn lend(&mut self, desc: PieceDesc, seq: u64, step: StepId, last: bool) {
        self.pieces.push_back(LentPiece { desc, seq, step });
        let m = match self
            .msgs
            .iter_mut()
            .find(|m| m.seq == seq && m.step == step && !m.all_lent)
        {
            Some(m) => m,
            None => {
                self.msgs.push_back(LentMsg {
                    seq,
                    step,
                    unacked: 0,
                    all_lent: false,
                });
                let i = self.msgs.len() - 1;
                &mut self.msgs[i]
            }
        };
        m.unacked += 1;
        m.all_lent |= last;
    }

    /// Takes the ack of `d` (the oldest lent piece equal to it); returns
    /// the send step (op seq, step) that it completes, if it was the last
    /// unacked piece of a message whose pieces were all lent.
    ///
    /// # Errors
    /// A description if no lent piece has that descriptor (the peer acked
    /// something it was never lent, or twice).
    pub fn ack(&mut self, d: PieceDesc) -> Result<Option<(u64, StepId)>, String> {
        let Some(i) = self.pieces.iter().position(|p| p.desc == d) else {
            return Err(format!(
                "ack for a piece at {:#x} ({} bytes, lend word {:#x} = {}) that is not lent",
                d.addr, d.len, d.word, d.expected
            ));
        };
        let p = self.pieces.remove(i).unwrap_or(LentPiece {
            desc: d,
            seq: 0,
            step: 0,
        });
        let Some(j) = self
            .msgs
            .iter()
            .position(|m| m.seq == p.seq && m.step == p.step)
        else {
            return Ok(None);
        };
        let m = &mut self.msgs[j];
        m.unacked = m.unacked.saturating_sub(1);
        if m.unacked > 0 || !m.all_lent {
            return Ok(None);
        }
        self.msgs.remove(j);
        Ok(Some((p.seq, p.step)))
    }

    /// Pieces lent now.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// True if nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Gives up on every lent piece (their op failed and the lend word
    /// withdrew them); returns the bytes they named.
    pub fn forget_all(&mut self) -> u64 {
        self.msgs.clear();
        self.pieces.drain(..).map(|p| p.desc.len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(addr: u64, len: u64) -> PieceDesc {
        PieceDesc {
            addr,
            len,
            word: 0x1000,
            expected: 1,
        }
    }

    #[test]
    fn a_message_completes_with_the_ack_of_its_last_unacked_piece() {
        let mut l = LentPieces::default();
        let (a, b, c) = (desc(0x10000, 100), desc(0x10064, 50), desc(0x20000, 8));
        l.lend(a, 3, 1, false);
        l.lend(b, 3, 1, true);
        l.lend(c, 3, 2, true);
        assert!(l.ack(desc(a.addr, 99)).is_err(), "wrong length");
        assert!(
            l.ack(PieceDesc { expected: 2, ..a }).is_err(),
            "wrong lend value"
        );
        assert!(l.ack(desc(8, 100)).is_err(), "never lent");
        assert_eq!(l.len(), 3, "failed acks take nothing");
        // The last piece acked first: its message still has a piece out.
        assert_eq!(l.ack(b), Ok(None));
        assert!(l.ack(b).is_err(), "a second ack of the same piece");
        assert_eq!(l.ack(c), Ok(Some((3, 2))));
        assert_eq!(l.ack(a), Ok(Some((3, 1))), "now step 1 is complete");
        assert!(l.is_empty());
    }

    #[test]
    fn a_message_is_not_complete_before_its_last_piece_is_lent() {
        let mut l = LentPieces::default();
        let (a, b) = (desc(0x10000, 100), desc(0x10064, 100));
        l.lend(a, 0, 4, false);
        assert_eq!(l.ack(a), Ok(None), "more pieces are to come");
        l.lend(b, 0, 4, true);
        // The same bytes lent twice (say two sends of one region): each
        // ack takes one.
        l.lend(a, 0, 5, true);
        l.lend(a, 0, 6, true);
        assert_eq!(l.ack(b), Ok(Some((0, 4))));
        assert_eq!(l.ack(a), Ok(Some((0, 5))));
        assert_eq!(l.len(), 1);
        assert_eq!(l.forget_all(), 100);
        assert!(l.is_empty());
        assert!(l.ack(a).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_lent_piece_reads_only_while_its_word_holds_the_expected_value() {
        let w = LendWord::new();
        assert_eq!(w.get(), LEND_POISON, "nothing is lent at first");
        assert_eq!(w.addr() % 8, 0);
        w.open(42);
        let src: Vec<u8> = (0..5000u32).map(|i| (i % 241) as u8).collect();
        let d = PieceDesc {
            addr: src.as_ptr() as u64,
            len: src.len() as u64,
            word: w.addr(),
            expected: 42,
        };
        let me = std::process::id();
        let mut dst = vec![0u8; src.len()];
        assert_eq!(read_lent(me, &d, &mut dst), Ok(()));
        assert_eq!(dst, src);
        w.poison();
        assert_eq!(
            read_lent(me, &d, &mut dst),
            Err(LentReadError::Withdrawn { found: LEND_POISON })
        );
        w.open(43);
        assert_eq!(
            read_lent(me, &d, &mut dst),
            Err(LentReadError::Withdrawn { found: 43 }),
            "a later op's value does not validate an older piece"
        );
        let gone = PieceDesc { word: 8, ..d };
        match read_lent(me, &gone, &mut dst) {
            Err(LentReadError::Read(e)) => assert!(e.reason.contains("lend word"), "{e:?}"),
            r => panic!("{r:?}"),
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_passes_its_own_probe_and_a_wrong_token_fails() {
        let t = Token::new(0x1234);
        let p = t.probe(true);
        assert_eq!(p.pid, std::process::id());
        assert_eq!(&p.token[..16], &0x1234u128.to_le_bytes());
        assert_eq!(verify(&p), Ok(()));
        let mut wrong = p;
        wrong.token[31] ^= 1;
        assert!(verify(&wrong).unwrap_err().contains("other bytes"));
        assert!(verify(&t.probe(false)).is_err());
        let mut unmapped = p;
        unmapped.addr = 8;
        let e = verify(&unmapped).unwrap_err();
        assert!(e.contains("EFAULT"), "{e}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn remote_read_copies_exact_bytes_and_names_failures() {
        let src: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        read_remote(std::process::id(), src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        let e = read_remote(std::process::id(), 16, &mut dst[..10]).unwrap_err();
        assert_eq!(e.got, 0);
        assert!(e.reason.contains("EFAULT"), "{}", e.reason);
    }
}
