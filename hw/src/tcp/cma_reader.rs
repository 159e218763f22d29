//! The reader task of a connection with the same-host fast path
//! ([`super::cma`]): every frame on it is small (pieces travel as
//! descriptors; byte-stream messages are at most [`MAX_INLINE_ON_CMA`]
//! bytes, [`MAX_INLINE_ON_RINGS`] on a ring link), so it reads whole frames, and it never lets a piece or message
//! that waits for the peer's byte budget hold up the frames behind it.
//!
//! Why: the peer's acks for this rank's lent pieces arrive on this same
//! connection. Were the reader to stop at a piece until the executor frees
//! budget (as the byte-stream reader must, the payload being in the
//! socket), the acks behind it would wait too, this rank's own sends would
//! stall at `LEND_AHEAD` unacked pieces, and a schedule whose receive
//! waits on such a send would deadlock. Here a piece waiting for budget
//! is queued (its bytes stay in the peer's op buffer), acks are
//! handled at once, and other frames queue behind the piece so that the
//! executor sees every event in wire order. The queue is bounded by
//! [`MAX_QUEUED`]; a peer that sends more without acks simply is not read
//! further until the queue drains.

use std::collections::VecDeque;

use hccl_algos::kernels::copy::extend;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc::UnboundedSender;

use super::chunk::Chunk;
use super::io::Event;
use super::wire::{
    FrameHeader, FrameKind, PieceDesc, SessionId, WireError, FRAME_HEADER_LEN, MAX_CMA_PIECE,
    MAX_INLINE_ON_CMA, MAX_INLINE_ON_RINGS, PIECE_DESC_LEN,
};
use crate::sync::ByteBudget;

// A ring link's longer inline messages are still small frames.
const _: () =
    assert!(MAX_INLINE_ON_RINGS >= MAX_INLINE_ON_CMA && MAX_INLINE_ON_RINGS < MAX_QUEUED_BYTES);

/// Most frames held behind a piece that waits for budget.
pub(crate) const MAX_QUEUED: usize = 1024;
/// Most bytes of small byte-stream messages held that way (on top of the
/// budget, which they acquire in turn).
pub(crate) const MAX_QUEUED_BYTES: u64 = 4 << 20;

/// Most chunk buffers a [`ChunkPool`] keeps (16 MiB at 1 MiB pieces).
pub(crate) const CHUNK_POOL: usize = 16;

/// Receive chunk buffers shared by a rank's executor (which fills them
/// with pieces copied out of peers, and gives every consumed chunk of a
/// fast-path peer back) and its fast-path readers (which fill them with
/// small byte-stream messages): reuse without allocation, page faults or
/// zeroing, and a bound of [`CHUNK_POOL`] buffers kept. Both sides run on
/// the rank's one thread; the lock is never contended.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChunkPool(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

impl ChunkPool {
    /// A buffer from the pool, or a new empty one.
    pub(crate) fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .map(|mut v| v.pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Gives `buf` back (dropped if the pool is full).
    pub(crate) fn give(&self, buf: Vec<u8>) {
        if let Ok(mut v) = self.0.lock() {
            if v.len() < CHUNK_POOL {
                v.push(buf);
            }
        }
    }
}

/// Whole frames off the socket. Cancel-safe: bytes read stay buffered.
struct Framer<R> {
    r: R,
    buf: Vec<u8>,
    /// A small byte-stream message being read: header and payload so far.
    body: Option<(FrameHeader, Vec<u8>)>,
    /// Chunk buffers, shared with the executor.
    pool: ChunkPool,
    /// Longest byte-stream payload accepted: [`MAX_INLINE_ON_CMA`], or
    /// [`MAX_INLINE_ON_RINGS`] on a ring link.
    max_inline: u64,
}

/// Why the framer stopped.
enum Stop {
    Io(String),
    Wire(WireError),
}

impl<R: AsyncRead + Unpin> Framer<R> {
    /// The header and body of the next frame.
    async fn next(&mut self, session: SessionId) -> Result<(FrameHeader, Vec<u8>), Stop> {
        loop {
            if let Some((h, v)) = self.body.take() {
                if v.len() as u64 == h.len {
                    return Ok((h, v));
                }
                self.body = Some((h, v));
            }
            if let Some((h, v)) = self.body.as_mut() {
                let need = h.len - v.len() as u64;
                match (&mut self.r).take(need).read_buf(v).await {
                    Ok(0) => {
                        return Err(Stop::Io(format!(
                            "connection closed by the peer after {} of {} bytes of a message",
                            v.len(),
                            h.len
                        )))
                    }
                    Ok(_) => continue,
                    Err(e) => return Err(Stop::Io(e.to_string())),
                }
            }
            if let Some(f) = self.parse(session).map_err(Stop::Wire)? {
                return Ok(f);
            }
            if self.body.is_some() {
                continue;
            }
            // Room for a whole inline message and its headers: one read
            // (one syscall) takes a small message at once.
            self.buf.reserve(MAX_INLINE_ON_CMA as usize + 1024);
            match self.r.read_buf(&mut self.buf).await {
                Ok(0) => {
                    return Err(Stop::Io(if self.buf.is_empty() {
                        "connection closed by the peer".into()
                    } else {
                        format!(
                            "connection closed by the peer inside a frame ({} bytes of it read)",
                            self.buf.len()
                        )
                    }))
                }
                Ok(_) => {}
                Err(e) => return Err(Stop::Io(e.to_string())),
            }
        }
    }

    fn parse(&mut self, session: SessionId) -> Result<Option<(FrameHeader, Vec<u8>)>, WireError> {
        let Some(hb) = self.buf.get(..FRAME_HEADER_LEN) else {
            return Ok(None);
        };
        let hb: &[u8; FRAME_HEADER_LEN] =
            hb.try_into().map_err(|_| WireError::Malformed("header"))?;
        let h = FrameHeader::decode(hb, session)?;
        let body = match h.kind {
            FrameKind::Data if h.len > self.max_inline => {
                return Err(WireError::TooLong {
                    what: "byte-stream payload on a cross-memory connection",
                    len: h.len,
                    max: self.max_inline,
                })
            }
            FrameKind::Data if h.len > 0 => {
                // Streamed into a chunk by `next`, not through `buf`.
                let mut v = self.pool.take();
                v.clear();
                v.reserve(h.len as usize);
                let n = (self.buf.len() - FRAME_HEADER_LEN).min(h.len as usize);
                extend(&mut v, &self.buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + n]);
                self.buf.drain(..FRAME_HEADER_LEN + n);
                self.body = Some((h, v));
                return Ok(None);
            }
            FrameKind::CmaProbe
            | FrameKind::CmaReply
            | FrameKind::ShmOffer
            | FrameKind::ShmReply => {
                return Err(WireError::Malformed(
                    "cross-memory probe after the connection was set up",
                ))
            }
            FrameKind::DataCma | FrameKind::CmaMore | FrameKind::CmaAck => PIECE_DESC_LEN,
            // Bounded by FrameHeader::decode (MAX_ABORT_REASON).
            FrameKind::Abort => h.len as usize,
            FrameKind::Data | FrameKind::OpStart | FrameKind::Bye => 0,
        };
        let end = FRAME_HEADER_LEN + body;
        if self.buf.len() < end {
            return Ok(None);
        }
        let b = self.buf[FRAME_HEADER_LEN..end].to_vec();
        self.buf.drain(..end);
        Ok(Some((h, b)))
    }
}

/// A frame's effect, held in wire order.
enum Item {
    /// An event that needs no budget.
    Event(Event),
    /// A small byte-stream message's payload, read whole.
    Inline(Vec<u8>),
    /// A piece to copy out of the peer.
    Piece {
        desc: PieceDesc,
        seq: u64,
        tag: u32,
        /// The message's length and its bytes before this piece.
        msg_len: u64,
        before: u64,
    },
}

/// A cross-memory message whose pieces are still arriving.
struct Msg {
    seq: u64,
    tag: u32,
    len: u64,
    left: u64,
}

fn desc_of(body: &[u8], left: u64, max: u64) -> Result<PieceDesc, WireError> {
    let b: &[u8; PIECE_DESC_LEN] = body
        .try_into()
        .map_err(|_| WireError::Malformed("piece descriptor"))?;
    PieceDesc::decode(b, left, max)
}

/// Files one frame: acks go to the executor at once, the rest into `queue`.
/// Returns false once the connection is over (the end is queued).
fn on_frame(
    peer: u32,
    h: FrameHeader,
    body: Vec<u8>,
    msg: &mut Option<Msg>,
    max_piece: u64,
    queue: &mut VecDeque<Item>,
    ev: &UnboundedSender<Event>,
) -> Result<bool, WireError> {
    match h.kind {
        FrameKind::CmaMore | FrameKind::CmaAck => {}
        // A failing sender cuts its message short (see `TcpOp::fail`).
        FrameKind::Abort | FrameKind::Bye => *msg = None,
        _ if msg.is_some() => {
            return Err(WireError::Malformed("frame inside a cross-memory message"))
        }
        _ => {}
    }
    match h.kind {
        FrameKind::CmaAck => {
            let desc = desc_of(&body, MAX_CMA_PIECE, MAX_CMA_PIECE)?;
            let _ = ev.send(Event::CmaAck { peer, desc });
        }
        FrameKind::DataCma | FrameKind::CmaMore => {
            if h.kind == FrameKind::DataCma {
                if h.len == 0 {
                    return Err(WireError::Malformed("empty cross-memory message"));
                }
                queue.push_back(Item::Event(Event::Header { peer, h }));
                *msg = Some(Msg {
                    seq: h.seq,
                    tag: h.tag,
                    len: h.len,
                    left: h.len,
                });
            }
            let Some(m) = msg.as_mut().filter(|m| m.seq == h.seq && m.tag == h.tag) else {
                return Err(WireError::Malformed(
                    "cross-memory piece outside its message",
                ));
            };
            let desc = desc_of(&body, m.left, max_piece)?;
            queue.push_back(Item::Piece {
                desc,
                seq: m.seq,
                tag: m.tag,
                msg_len: m.len,
                before: m.len - m.left,
            });
            m.left -= desc.len;
            if m.left == 0 {
                *msg = None;
            }
        }
        FrameKind::Data => {
            queue.push_back(Item::Event(Event::Header { peer, h }));
            if h.len > 0 {
                queue.push_back(Item::Inline(body));
            }
        }
        FrameKind::OpStart => queue.push_back(Item::Event(Event::OpStart { peer, h })),
        FrameKind::Abort => queue.push_back(Item::Event(Event::Abort {
            peer,
            seq: h.seq,
            reason: String::from_utf8_lossy(&body).into_owned(),
            kind: crate::tcp::AbortKind::from_tag(h.tag),
        })),
        FrameKind::Bye => {
            queue.push_back(Item::Event(Event::Closed {
                peer,
                reason: "the peer destroyed its communicator".into(),
                graceful: true,
            }));
            return Ok(false);
        }
        FrameKind::CmaProbe | FrameKind::CmaReply | FrameKind::ShmOffer | FrameKind::ShmReply => {
            return Err(WireError::Malformed(
                "cross-memory probe after the connection was set up",
            ))
        }
    }
    Ok(true)
}

/// Reads `peer`'s frames until it says goodbye or the connection fails;
/// reports each lent piece, once it holds the peer's budget for it, as an
/// [`Event::Piece`] (the executor copies it out of the verified process
/// and acks it), and small byte-stream messages as [`Event::Chunk`]s,
/// exactly as the byte-stream reader does.
pub(crate) async fn reader<R: AsyncRead + Unpin>(
    peer: u32,
    r: R,
    session: SessionId,
    budget: ByteBudget,
    ev: UnboundedSender<Event>,
    pool: ChunkPool,
    max_inline: u64,
) {
    let mut framer = Framer {
        r,
        buf: Vec::with_capacity(8 << 10),
        body: None,
        pool,
        max_inline,
    };
    let mut queue: VecDeque<Item> = VecDeque::new();
    let mut msg: Option<Msg> = None;
    let mut reading = true;
    // Bytes of small byte-stream messages queued (read, no budget yet).
    let mut inline_bytes = 0u64;
    let max_piece = MAX_CMA_PIECE.min(budget.capacity());
    loop {
        while matches!(queue.front(), Some(Item::Event(_))) {
            if let Some(Item::Event(e)) = queue.pop_front() {
                let last = matches!(e, Event::Closed { .. } | Event::Protocol { .. });
                if ev.send(e).is_err() || last {
                    return;
                }
            }
        }
        let want = match queue.front() {
            Some(Item::Piece { desc, .. }) => Some(desc.len),
            Some(Item::Inline(data)) => Some(data.len() as u64),
            _ => None,
        };
        let room = queue.len() < MAX_QUEUED && inline_bytes < MAX_QUEUED_BYTES;
        tokio::select! {
            biased;
            permit = budget.acquire(want.unwrap_or(0)), if want.is_some() => {
                let Ok(permit) = permit else { return };
                let (desc, seq, tag, msg_len, before) = match queue.pop_front() {
                    Some(Item::Piece { desc, seq, tag, msg_len, before }) => (desc, seq, tag, msg_len, before),
                    Some(Item::Inline(data)) => {
                        inline_bytes -= data.len() as u64;
                        let data = Chunk::whole(data);
                        if ev.send(Event::Chunk { peer, data, permit }).is_err() {
                            return;
                        }
                        continue;
                    }
                    _ => return,
                };
                let piece = Event::Piece { peer, desc, permit, seq, tag, msg_len, before };
                if ev.send(piece).is_err() {
                    return;
                }
            }
            f = framer.next(session), if reading && room => {
                let end = match f {
                    Ok((h, body)) => {
                        if h.kind == FrameKind::Data {
                            inline_bytes += body.len() as u64;
                        }
                        match on_frame(peer, h, body, &mut msg, max_piece, &mut queue, &ev) {
                        Ok(more) => {
                            reading = more;
                            None
                        }
                        Err(error) => Some(Event::Protocol { peer, error }),
                        }
                    }
                    Err(Stop::Wire(error)) => Some(Event::Protocol { peer, error }),
                    Err(Stop::Io(reason)) => Some(Event::Closed { peer, reason, graceful: false }),
                };
                if let Some(e) = end {
                    if let Event::Protocol { error, .. } = &e {
                        tracing::warn!("hccl: dropping connection to rank {peer}: {error}");
                    }
                    queue.push_back(Item::Event(e));
                    reading = false;
                }
            }
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunk_pool_reuses_buffers_and_keeps_at_most_its_bound() {
        let pool = ChunkPool::default();
        assert_eq!(pool.take().capacity(), 0, "empty pool: a new buffer");
        let b = vec![1u8; 1000];
        let at = b.as_ptr();
        pool.give(b);
        let again = pool.clone().take();
        assert_eq!(again.as_ptr(), at, "the same buffer comes back");
        for _ in 0..CHUNK_POOL + 5 {
            pool.give(vec![0u8; 8]);
        }
        let kept = std::iter::from_fn(|| Some(pool.take()))
            .take_while(|v| v.capacity() > 0)
            .count();
        assert_eq!(kept, CHUNK_POOL);
    }
}
