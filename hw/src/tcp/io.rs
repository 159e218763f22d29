//! The I/O tasks: one reader and one writer per peer connection, on the
//! transport's tokio runtime. They talk to the executor's side only through
//! channels and the per-peer [`ByteBudget`]:
//!
//! - executor → writer: an unbounded channel of [`Outgoing`] pieces (memory
//!   is bounded by the op: a send step copies its region once);
//! - readers and writers → executor: one channel of [`Event`]s; payload
//!   chunks carry a [`Permit`] of the peer's budget, so bytes read but not
//!   yet consumed never exceed `HCCL_BUFFSIZE` per peer;
//! - a per-writer count of frames queued and not yet written: while it is
//!   zero the caller writes whole frames to the socket itself (the runtime
//!   is driven by the caller's thread, so the two never write at once).
//!
//! With the same-host fast path ([`super::cma`]) on, a writer sends
//! [`Outgoing::Lent`] pieces as descriptors of the sender's own op
//! buffer, and the connection's reader ([`super::cma_reader`]) reports
//! each as an [`Event::Piece`], which the caller copies out of the peer's
//! memory, checks against the peer's lend word, and acks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hccl_algos::schedule::StepId;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::chunk::Chunk;
use super::wire::{
    FrameHeader, FrameKind, PieceDesc, SessionId, WireError, FRAME_HEADER_LEN, PIECE_DESC_LEN,
};
use crate::sync::{ByteBudget, Permit};
use crate::tcp::error::AbortKind;

/// Payload bytes the reader takes off the socket at a time.
pub(crate) const CHUNK: u64 = 256 << 10;

/// A frame for a writer task.
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// A piece of a data frame (the first piece starts with the header);
    /// [`Event::SendDone`] returns the buffer once it is written, naming the
    /// step on the last piece of a message.
    Data {
        /// Bytes to write.
        bytes: Vec<u8>,
        /// Op sequence number, for the completion.
        seq: u64,
        /// The step, on a message's last piece.
        step: Option<StepId>,
    },
    /// A piece lent to a same-host peer: one whole frame (a `DataCma`
    /// header on the message's first piece, `CmaMore` after) and the
    /// piece's descriptor. No [`Event::SendDone`] follows: the piece, and
    /// with the last one the send step, completes with the peer's
    /// [`Event::CmaAck`].
    Lent {
        /// Header and descriptor.
        frame: [u8; FRAME_HEADER_LEN + PIECE_DESC_LEN],
    },
    /// A control frame (op start, abort, bye): no completion.
    Control(Vec<u8>),
    /// An ack frame from this rank's reader: written between frames, held
    /// back while a byte-stream message is half written.
    Ack(Vec<u8>),
    /// Answer on the channel once every earlier frame is written.
    Flush(UnboundedSender<()>),
    /// Shut the socket's write side and stop (the reader keeps a sender
    /// for its acks, so the channel alone never closes while it runs).
    End,
}

/// What the I/O tasks tell the caller.
#[derive(Debug)]
pub(crate) enum Event {
    /// A data frame from `peer` starts; `h.len` bytes follow as chunks.
    Header {
        /// Sender.
        peer: u32,
        /// The checked header.
        h: FrameHeader,
    },
    /// The next payload bytes of `peer`'s current data frame.
    Chunk {
        /// Sender.
        peer: u32,
        /// Bytes.
        data: Chunk,
        /// The budget they hold until consumed.
        permit: Permit,
    },
    /// The next piece of `peer`'s current cross-memory message, still in
    /// `peer`'s memory (a connection with the fast path): the caller copies
    /// it out (straight into a posted plain receive, else into a chunk)
    /// and acks it.
    Piece {
        /// Sender.
        peer: u32,
        /// Where the piece is in the sender's process.
        desc: PieceDesc,
        /// The budget it holds until consumed.
        permit: Permit,
        /// The message's op seq and tag (for the ack).
        seq: u64,
        /// Step tag.
        tag: u32,
        /// The message's length and its bytes before this piece (for errors).
        msg_len: u64,
        /// Bytes of the message before this piece.
        before: u64,
    },
    /// `peer` started an op.
    OpStart {
        /// Sender.
        peer: u32,
        /// Its header (seq, signature).
        h: FrameHeader,
    },
    /// `peer` failed op `seq`.
    Abort {
        /// Sender.
        peer: u32,
        /// Op sequence number.
        seq: u64,
        /// Its error.
        reason: String,
        /// The failure's kind (the frame's tag).
        kind: AbortKind,
    },
    /// A piece of a data frame was handed to the kernel.
    SendDone {
        /// Receiver.
        peer: u32,
        /// Op sequence number.
        seq: u64,
        /// The send step, if this was the message's last piece.
        step: Option<StepId>,
        /// The piece's buffer, for reuse.
        buf: Vec<u8>,
    },
    /// `peer` has copied the lent piece `desc` out of this process.
    CmaAck {
        /// The reader.
        peer: u32,
        /// The piece it names (checked against what was lent).
        desc: PieceDesc,
    },
    /// The connection to `peer` is gone.
    Closed {
        /// The peer.
        peer: u32,
        /// Why.
        reason: String,
        /// True if the peer said goodbye first (destroyed its communicator).
        graceful: bool,
    },
    /// Writing to `peer` failed. Not fatal by itself: the reader reports the
    /// connection's end, after any abort frame the peer sent before it went.
    SendFailed {
        /// The peer.
        peer: u32,
        /// The socket's words.
        reason: String,
    },
    /// The communicator was aborted from another thread: by the user
    /// (`None`), or by the facade with a reason the peers are told.
    LocalAbort(Option<String>),
    /// `peer` sent bytes that are not a valid frame; the connection is dropped.
    Protocol {
        /// The peer.
        peer: u32,
        /// What was wrong.
        error: WireError,
    },
}

/// Writes frames in order until the channel closes or the socket fails.
/// `queued` counts the frames handed to this writer and not yet written
/// (the sender adds, the writer subtracts): at zero the caller may write a
/// whole frame to the socket itself (see `TcpRank::flush_outbox`).
/// `w` is the socket's write half, or the outgoing ring of a same-host
/// pair ([`crate::shm::pipe::ShmWriter`]).
pub(crate) async fn writer<W: AsyncWrite + Unpin>(
    peer: u32,
    mut w: W,
    mut rx: UnboundedReceiver<Outgoing>,
    ev: UnboundedSender<Event>,
    queued: Arc<AtomicUsize>,
) {
    // Acks wait while a byte-stream message is half written (its pieces
    // must be contiguous on the wire).
    let mut mid_message = false;
    let mut held_acks: Vec<Vec<u8>> = Vec::new();
    let written_one = |n: usize| queued.fetch_sub(n, Ordering::AcqRel);
    while let Some(out) = rx.recv().await {
        let (written, done) = match out {
            Outgoing::Data { bytes, seq, step } => {
                let mut r = w.write_all(&bytes).await;
                mid_message = step.is_none();
                if !mid_message {
                    let held = held_acks.len();
                    for a in held_acks.drain(..) {
                        if r.is_ok() {
                            r = w.write_all(&a).await;
                        }
                    }
                    written_one(held);
                }
                (r, Some((seq, step, bytes)))
            }
            Outgoing::Lent { frame } => (w.write_all(&frame).await, None),
            Outgoing::Ack(bytes) if mid_message => {
                held_acks.push(bytes);
                continue;
            }
            Outgoing::Ack(bytes) | Outgoing::Control(bytes) => (w.write_all(&bytes).await, None),
            Outgoing::Flush(ack) => {
                let _ = w.flush().await;
                let _ = ack.send(());
                written_one(1);
                continue;
            }
            Outgoing::End => break,
        };
        written_one(1);
        if let Err(e) = written {
            let _ = ev.send(Event::SendFailed {
                peer,
                reason: format!("send failed: {e}"),
            });
            return;
        }
        if let Some((seq, step, buf)) = done {
            let _ = ev.send(Event::SendDone {
                peer,
                seq,
                step,
                buf,
            });
        }
    }
    let _ = w.shutdown().await;
}

/// Reads frames, checks each header, streams payloads in [`CHUNK`]s under
/// the peer's budget, until the peer says goodbye or the socket fails.
/// For a connection without the fast path; [`super::cma_reader::reader`]
/// reads one with it.
/// `r` is the socket's read half, or the incoming ring of a same-host
/// pair ([`crate::shm::pipe::ShmReader`]).
pub(crate) async fn reader<R: AsyncRead + Unpin>(
    peer: u32,
    mut r: R,
    session: SessionId,
    budget: ByteBudget,
    ev: UnboundedSender<Event>,
    mut recycled: UnboundedReceiver<Vec<u8>>,
) {
    let closed = |reason: String, graceful: bool| Event::Closed {
        peer,
        reason,
        graceful,
    };
    loop {
        let mut hb = [0u8; FRAME_HEADER_LEN];
        if let Err(e) = r.read_exact(&mut hb).await {
            let reason = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "connection closed by the peer".to_string()
            } else {
                e.to_string()
            };
            let _ = ev.send(closed(reason, false));
            return;
        }
        let h = match FrameHeader::decode(&hb, session) {
            Ok(h) => h,
            Err(error) => {
                tracing::warn!("hccl: dropping connection to rank {peer}: {error}");
                let _ = ev.send(Event::Protocol { peer, error });
                return;
            }
        };
        match h.kind {
            FrameKind::OpStart => {
                let _ = ev.send(Event::OpStart { peer, h });
            }
            FrameKind::CmaProbe
            | FrameKind::CmaReply
            | FrameKind::CmaAck
            | FrameKind::DataCma
            | FrameKind::CmaMore
            | FrameKind::ShmOffer
            | FrameKind::ShmReply => {
                // The probe exchange settled this connection as bytes only.
                let error = WireError::Malformed(
                    "cross-memory frame on a connection without the fast path",
                );
                tracing::warn!("hccl: dropping connection to rank {peer}: {error}");
                let _ = ev.send(Event::Protocol { peer, error });
                return;
            }
            FrameKind::Bye => {
                let _ = ev.send(closed("the peer destroyed its communicator".into(), true));
                return;
            }
            FrameKind::Abort => {
                // Bounded by FrameHeader::decode (MAX_ABORT_REASON).
                let mut reason = vec![0u8; h.len as usize];
                if let Err(e) = r.read_exact(&mut reason).await {
                    let _ = ev.send(closed(e.to_string(), false));
                    return;
                }
                let reason = String::from_utf8_lossy(&reason).into_owned();
                let _ = ev.send(Event::Abort {
                    peer,
                    seq: h.seq,
                    reason,
                    kind: AbortKind::from_tag(h.tag),
                });
            }
            FrameKind::Data => {
                if ev.send(Event::Header { peer, h }).is_err() {
                    return;
                }
                let mut left = h.len;
                while left > 0 {
                    let want = left.min(CHUNK).min(budget.capacity());
                    let Ok(permit) = budget.acquire(want).await else {
                        return;
                    };
                    // A buffer the caller gave back, if any: no allocation,
                    // no zeroing (read_buf fills spare capacity).
                    let mut data = recycled.try_recv().unwrap_or_default();
                    data.clear();
                    data.reserve(want as usize);
                    let mut got = Ok(());
                    while (data.len() as u64) < want {
                        let limit = want - data.len() as u64;
                        match (&mut r).take(limit).read_buf(&mut data).await {
                            Ok(0) => {
                                got = Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                                break;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                got = Err(e);
                                break;
                            }
                        }
                    }
                    if let Err(e) = got {
                        let _ = ev.send(closed(
                            format!("{e} after {} of {} bytes of a message", h.len - left, h.len),
                            false,
                        ));
                        return;
                    }
                    left -= want;
                    let data = Chunk::whole(data);
                    if ev.send(Event::Chunk { peer, data, permit }).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
