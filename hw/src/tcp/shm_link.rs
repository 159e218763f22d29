//! Turning a same-host pair's connection into a ring link
//! ([`crate::shm`]) at connect, right after the cross-memory probe.
//!
//! Both ranks send a [`ShmOffer`]: the lower rank creates the pair's
//! segment (a `memfd` with two rings of [`SHM_RING`] bytes and a random
//! token in its header) and names its descriptor; the higher rank only
//! says whether it is willing. If both are, the higher rank opens the
//! descriptor through `/proc/<pid>/fd/<fd>` of the pid the probe
//! exchange reported, checks the token, and answers [`FrameKind::ShmReply`]
//! 1 (mapped) or 0; the lower rank closes its descriptor after the answer
//! either way, so from then on the segment lives only in the two
//! mappings. A pair whose answer is 0 (another host, pid or network
//! namespace, `/proc` not readable, `HCCL_SHM_DISABLE=1` on either side)
//! stays on the socket, with a debug log line saying why.
//!
//! Ranks in two network namespaces of one kernel (containers with their
//! own network, or the netns test hosts) could map each other's memory,
//! but the rings would then bypass the network their operator gave them:
//! a cut link would no longer cut anything. Such pairs stay on the socket.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::cma::{frame, read_frame};
use super::wire::{FrameKind, SessionId, ShmOffer, SHM_OFFER_LEN, SHM_TOKEN_LEN};
use crate::shm::segment::Segment;

/// Bytes of each ring of a pair's segment (two per pair, one each way):
/// room for eight 32 KiB byte-stream messages
/// ([`MAX_INLINE_ON_CMA`](super::wire::MAX_INLINE_ON_CMA)) and small
/// enough to stay in a core's L2 cache.
pub const SHM_RING: u64 = 256 << 10;

/// The offer exchange on one connection (see the module docs); `lower`:
/// this rank is the pair's lower one; `peer_pid`: the peer's process as
/// the probe reported it; `willing`: this rank has the path on. Returns
/// the mapped segment, or `None` for a pair that stays on the socket.
///
/// # Errors
/// Socket errors and bad frames, as text for the caller's error.
pub(crate) async fn exchange(
    s: &mut TcpStream,
    (session, comm): (SessionId, u64),
    (lower, peer, peer_pid): (bool, u32, u32),
    willing: bool,
) -> Result<Option<Segment>, String> {
    let mut mine = ShmOffer {
        willing,
        fd: 0,
        cap: 0,
        token: [0; SHM_TOKEN_LEN],
    };
    let mut created = None;
    if willing && lower {
        mine.token = rand::random();
        mine.cap = SHM_RING;
        match Segment::create(SHM_RING, &mine.token) {
            Ok((seg, file)) => {
                use std::os::fd::AsRawFd;
                mine.fd = file.as_raw_fd() as u32;
                created = Some((seg, file));
            }
            Err(why) => {
                tracing::debug!("hccl: shared memory off towards rank {peer}: {why}");
                mine.willing = false;
            }
        }
    }
    let mut out = frame(FrameKind::ShmOffer, session, comm, 0, SHM_OFFER_LEN as u64)
        .encode()
        .to_vec();
    out.extend_from_slice(&mine.encode());
    s.write_all(&out).await.map_err(|e| e.to_string())?;
    read_frame(s, session, FrameKind::ShmOffer).await?;
    let mut body = [0u8; SHM_OFFER_LEN];
    s.read_exact(&mut body).await.map_err(|e| e.to_string())?;
    let theirs = ShmOffer::decode(&body).map_err(|e| e.to_string())?;
    if !(mine.willing && theirs.willing) {
        return Ok(None);
    }
    if lower {
        let answer = read_frame(s, session, FrameKind::ShmReply).await?;
        // The peer has mapped it (or given up): the descriptor can go.
        let (seg, file) = created.ok_or("no segment")?;
        drop(file);
        return Ok((answer.tag == 1).then_some(seg));
    }
    let opened = if theirs.cap != SHM_RING {
        Err(format!("rings of {} bytes, not {SHM_RING}", theirs.cap))
    } else {
        same_network_namespace(peer_pid)
            .and_then(|()| Segment::open(peer_pid, theirs.fd, theirs.cap, &theirs.token))
    };
    let seg = match opened {
        Ok(seg) => Some(seg),
        Err(why) => {
            tracing::debug!("hccl: shared memory off towards rank {peer}: {why}");
            None
        }
    };
    let reply = frame(
        FrameKind::ShmReply,
        session,
        comm,
        u32::from(seg.is_some()),
        0,
    )
    .encode();
    s.write_all(&reply).await.map_err(|e| e.to_string())?;
    Ok(seg)
}

/// `Ok` if process `pid` is in this process's network namespace (the
/// targets of `/proc/self/ns/net` and `/proc/<pid>/ns/net` agree,
/// proc(5)); otherwise the reason, for the debug log.
fn same_network_namespace(pid: u32) -> Result<(), String> {
    let ns = |p: &str| std::fs::read_link(p).map_err(|e| format!("reading {p}: {e}"));
    let (mine, theirs) = (
        ns("/proc/self/ns/net")?,
        ns(&format!("/proc/{pid}/ns/net"))?,
    );
    if mine == theirs {
        Ok(())
    } else {
        Err(format!(
            "pid {pid} is in network namespace {}, this process in {}",
            theirs.display(),
            mine.display()
        ))
    }
}
