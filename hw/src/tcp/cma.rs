//! Same-host fast path: Linux cross-memory attach (`process_vm_readv(2)`,
//! through `nix`'s safe wrapper), in the manner of Open MPI's vader/CMA
//! transport.
//!
//! Over loopback TCP every byte is copied four times: into a send piece,
//! into the kernel's socket buffer, out of it, and into (or reduced into)
//! the receive buffer. With this path a sender still copies the send region
//! into its 256 KiB staging pieces, but for a peer on the same host it
//! writes only a 16-byte [`PieceDesc`] (address and length of the piece in
//! its own memory) on the TCP connection; the peer copies the piece
//! straight out of the sender's address space with one system call (into
//! the posted receive region itself for a plain receive, else into a
//! receive chunk) and answers with an ack naming the piece. The TCP
//! connection stays the control channel: frame order, matching, length and
//! signature checks, the byte budget and every failure path are unchanged.
//!
//! **Turning it on, per pair.** Right after the hello, each rank sends
//! on every connection a [`CmaProbe`]: its pid and the address of a
//! communicator-lifetime [`Token`] (session id and 16 random bytes), plus
//! the token's bytes. The peer reads the token out of that pid and compares:
//! equal bytes prove it can read this process (same host, same pid
//! namespace, ptrace permission), and it answers "cma ok"; anything else
//! (`EPERM` under ptrace restrictions, `ESRCH` from another pid namespace or
//! host, different bytes) gets "cma off" and a debug log line. The pair
//! uses the path only if both answers are "ok", then for every non-empty
//! message both ways: were it on one way only (say a parent that may read
//! its child under Yama's `ptrace_scope=1` but not the reverse), a
//! byte-stream message one way, whose pieces must stay contiguous, could
//! hold up the acks the other way's sender waits for. A reader reads only
//! from the pid it verified, never one named in a data frame.
//! `HCCL_INTRA_CMA_ENABLE=0` turns it off (the rank neither offers nor
//! reads); on targets other than Linux it is always off.
//!
//! **Staging memory is never reused before its ack.** A lent piece goes
//! back to the send pool only when the peer's ack names it. Pieces still
//! lent when the communicator goes away are leaked, not freed: the peer may
//! still read them, and a freed and reallocated buffer would hand it other
//! bytes silently. A closed connection does not prove the peer's reader has
//! stopped (the two halves close separately), so the leak is the rule; it is
//! bounded by `PIECES_AHEAD` pieces of 256 KiB per peer (4 MiB), and
//! happens only when an op failed or a peer vanished mid-op.

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wire::{
    CmaProbe, FrameHeader, FrameKind, PieceDesc, SessionId, CMA_PROBE_LEN, CMA_TOKEN_LEN,
    FRAME_HEADER_LEN, SIG_LEN,
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
}

fn frame(kind: FrameKind, session: SessionId, comm: u64, tag: u32, len: u64) -> FrameHeader {
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

async fn read_frame(
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
    })
}

/// The send pieces lent to one peer (their descriptors written, their acks
/// not yet received), by address. A piece leaves only through
/// [`LentPieces::ack`] (back to the pool) or [`LentPieces::leak_all`].
#[derive(Debug, Default)]
pub struct LentPieces {
    lent: HashMap<u64, Vec<u8>>,
}

impl LentPieces {
    /// Takes `piece` (its payload is all of `piece`) and returns the
    /// descriptor that names it. The heap buffer does not move while lent.
    pub fn lend(&mut self, piece: Vec<u8>) -> PieceDesc {
        let d = PieceDesc {
            addr: piece.as_ptr() as u64,
            len: piece.len() as u64,
        };
        if let Some(old) = self.lent.insert(d.addr, piece) {
            // Two live buffers never share an address; if it ever happened,
            // the old one must not be freed while a peer may read it.
            std::mem::forget(old);
        }
        d
    }

    /// Returns the piece `d` names, now free for reuse.
    ///
    /// # Errors
    /// A description if no lent piece has that address and length (the
    /// peer acked something it was never lent).
    pub fn ack(&mut self, d: PieceDesc) -> Result<Vec<u8>, String> {
        match self.lent.get(&d.addr) {
            Some(p) if p.len() as u64 == d.len => Ok(self.lent.remove(&d.addr).unwrap_or_default()),
            Some(p) => Err(format!(
                "ack for the piece at {:#x} with {} bytes, but it holds {}",
                d.addr,
                d.len,
                p.len()
            )),
            None => Err(format!(
                "ack for a piece at {:#x} ({} bytes) that is not lent",
                d.addr, d.len
            )),
        }
    }

    /// Pieces lent now.
    pub fn len(&self) -> usize {
        self.lent.len()
    }

    /// True if nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.lent.is_empty()
    }

    /// Gives up on every lent piece without freeing it (see the module
    /// docs); returns the bytes leaked.
    pub fn leak_all(&mut self) -> u64 {
        let mut bytes = 0;
        for (_, p) in self.lent.drain() {
            bytes += p.capacity() as u64;
            std::mem::forget(p);
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_piece_comes_back_only_on_its_own_ack() {
        let mut l = LentPieces::default();
        let a = l.lend(vec![1u8; 100]);
        let b = l.lend(vec![2u8; 50]);
        assert_ne!(a.addr, b.addr);
        assert_eq!((a.len, b.len), (100, 50));
        assert!(
            l.ack(PieceDesc {
                addr: a.addr,
                len: 99
            })
            .is_err(),
            "wrong length"
        );
        assert!(
            l.ack(PieceDesc { addr: 8, len: 100 }).is_err(),
            "never lent"
        );
        assert_eq!(l.len(), 2, "failed acks return nothing");
        let back = l.ack(a).unwrap();
        assert_eq!(back, vec![1u8; 100]);
        assert_eq!(back.as_ptr() as u64, a.addr, "the same buffer");
        assert!(l.ack(a).is_err(), "a second ack of the same piece");
        assert_eq!(l.len(), 1);
        assert_eq!(l.leak_all(), 50);
        assert!(l.is_empty());
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
