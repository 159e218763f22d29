//! The I/O tasks: one reader and one writer per peer connection, on the
//! transport's tokio runtime. They talk to the executor's side only through
//! channels and the per-peer [`ByteBudget`]:
//!
//! - executor → writer: an unbounded channel of [`Outgoing`] pieces (memory
//!   is bounded by the op: a send step copies its region once);
//! - readers and writers → executor: one channel of [`Event`]s; payload
//!   chunks carry a [`Permit`] of the peer's budget, so bytes read but not
//!   yet consumed never exceed `HCCL_BUFFSIZE` per peer.
//!
//! With the same-host fast path ([`super::cma`]) on, a writer sends
//! [`Outgoing::Lent`] pieces as descriptors, and a reader fills its chunks
//! from the peer's memory instead of the socket (then acks each piece on
//! the peer's writer channel); the events are the same.

use hccl_algos::schedule::StepId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::cma;
use super::wire::{
    FrameHeader, FrameKind, PieceDesc, SessionId, WireError, FRAME_HEADER_LEN, MAX_CMA_PIECE,
    PIECE_DESC_LEN, SIG_LEN,
};
use crate::sync::{ByteBudget, Permit};

/// Payload bytes the reader takes off the socket at a time.
pub const CHUNK: u64 = 256 << 10;

/// A frame for a writer task.
#[derive(Debug)]
pub enum Outgoing {
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
    /// piece's descriptor; [`Event::SendDone`] without a buffer follows
    /// (the piece comes back with the peer's ack).
    Lent {
        /// Header and descriptor.
        frame: [u8; FRAME_HEADER_LEN + PIECE_DESC_LEN],
        /// Op sequence number, for the completion.
        seq: u64,
        /// The step, on a message's last piece.
        step: Option<StepId>,
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
pub enum Event {
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
        data: Vec<u8>,
        /// The budget they hold until consumed.
        permit: Permit,
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
    },
    /// A piece of a data frame was handed to the kernel.
    SendDone {
        /// Receiver.
        peer: u32,
        /// Op sequence number.
        seq: u64,
        /// The send step, if this was the message's last piece.
        step: Option<StepId>,
        /// The piece's buffer, for reuse; `None` for a lent piece (it
        /// comes back with [`Event::CmaAck`]).
        buf: Option<Vec<u8>>,
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
    /// The user aborted the communicator from another thread.
    LocalAbort,
    /// `peer` sent bytes that are not a valid frame; the connection is dropped.
    Protocol {
        /// The peer.
        peer: u32,
        /// What was wrong.
        error: WireError,
    },
}

/// Writes frames in order until the channel closes or the socket fails.
pub async fn writer(
    peer: u32,
    mut w: OwnedWriteHalf,
    mut rx: UnboundedReceiver<Outgoing>,
    ev: UnboundedSender<Event>,
) {
    // Acks wait while a byte-stream message is half written (its pieces
    // must be contiguous on the wire).
    let mut mid_message = false;
    let mut held_acks: Vec<Vec<u8>> = Vec::new();
    while let Some(out) = rx.recv().await {
        let (written, done) = match out {
            Outgoing::Data { bytes, seq, step } => {
                let mut r = w.write_all(&bytes).await;
                mid_message = step.is_none();
                if !mid_message {
                    for a in held_acks.drain(..) {
                        if r.is_ok() {
                            r = w.write_all(&a).await;
                        }
                    }
                }
                (r, Some((seq, step, Some(bytes))))
            }
            Outgoing::Lent { frame, seq, step } => {
                (w.write_all(&frame).await, Some((seq, step, None)))
            }
            Outgoing::Ack(bytes) if mid_message => {
                held_acks.push(bytes);
                continue;
            }
            Outgoing::Ack(bytes) | Outgoing::Control(bytes) => (w.write_all(&bytes).await, None),
            Outgoing::Flush(ack) => {
                let _ = w.flush().await;
                let _ = ack.send(());
                continue;
            }
            Outgoing::End => break,
        };
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

/// A reader's cross-memory side: the peer process it verified and the
/// peer's writer channel for acks.
#[derive(Debug)]
pub struct CmaRecv {
    /// The pid the probe verified (never one from a data frame).
    pub pid: u32,
    /// This rank's writer to the same peer, for acks.
    pub acks: UnboundedSender<Outgoing>,
    /// Communicator id, for the ack frames.
    pub comm: u64,
}

/// A cross-memory message being received: its key and bytes still due.
#[derive(Debug)]
struct CmaMsg {
    seq: u64,
    tag: u32,
    len: u64,
    left: u64,
}

/// Reads frames, checks each header, streams payloads in [`CHUNK`]s under
/// the peer's budget, until the peer says goodbye or the socket fails.
/// With `cma`, `DataCma` messages are read out of the peer's memory;
/// without it they are a protocol error.
pub async fn reader(
    peer: u32,
    mut r: OwnedReadHalf,
    session: SessionId,
    budget: ByteBudget,
    ev: UnboundedSender<Event>,
    mut recycled: UnboundedReceiver<Vec<u8>>,
    cma: Option<CmaRecv>,
) {
    let closed = |reason: String, graceful: bool| Event::Closed {
        peer,
        reason,
        graceful,
    };
    // The cross-memory message in progress, between its pieces.
    let mut cma_msg: Option<CmaMsg> = None;
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
        let protocol = |error| {
            tracing::warn!("hccl: dropping connection to rank {peer}: {error}");
            Event::Protocol { peer, error }
        };
        if cma_msg.is_some() && !matches!(h.kind, FrameKind::CmaMore | FrameKind::CmaAck) {
            let _ = ev.send(protocol(WireError::Malformed(
                "frame inside a cross-memory message",
            )));
            return;
        }
        match h.kind {
            FrameKind::CmaProbe | FrameKind::CmaReply => {
                let _ = ev.send(protocol(WireError::Malformed(
                    "cross-memory probe after the connection was set up",
                )));
                return;
            }
            FrameKind::CmaAck => {
                let mut b = [0u8; PIECE_DESC_LEN];
                if let Err(e) = r.read_exact(&mut b).await {
                    let _ = ev.send(closed(e.to_string(), false));
                    return;
                }
                match PieceDesc::decode(&b, MAX_CMA_PIECE, MAX_CMA_PIECE) {
                    Ok(desc) => {
                        let _ = ev.send(Event::CmaAck { peer, desc });
                    }
                    Err(error) => {
                        let _ = ev.send(protocol(error));
                        return;
                    }
                }
            }
            FrameKind::DataCma | FrameKind::CmaMore => {
                let Some(cma) = cma.as_ref() else {
                    let _ = ev.send(protocol(WireError::Malformed(
                        "cross-memory message from a peer this rank did not verify for it",
                    )));
                    return;
                };
                if h.kind == FrameKind::DataCma {
                    if h.len == 0 {
                        let _ =
                            ev.send(protocol(WireError::Malformed("empty cross-memory message")));
                        return;
                    }
                    if ev.send(Event::Header { peer, h }).is_err() {
                        return;
                    }
                    cma_msg = Some(CmaMsg {
                        seq: h.seq,
                        tag: h.tag,
                        len: h.len,
                        left: h.len,
                    });
                }
                let Some(m) = cma_msg
                    .as_mut()
                    .filter(|m| m.seq == h.seq && m.tag == h.tag)
                else {
                    let _ = ev.send(protocol(WireError::Malformed(
                        "cross-memory piece outside its message",
                    )));
                    return;
                };
                let mut b = [0u8; PIECE_DESC_LEN];
                if let Err(e) = r.read_exact(&mut b).await {
                    let _ = ev.send(closed(
                        format!(
                            "{e} after {} of {} bytes of a message",
                            m.len - m.left,
                            m.len
                        ),
                        false,
                    ));
                    return;
                }
                let max = MAX_CMA_PIECE.min(budget.capacity());
                let desc = match PieceDesc::decode(&b, m.left, max) {
                    Ok(d) => d,
                    Err(error) => {
                        let _ = ev.send(protocol(error));
                        return;
                    }
                };
                let Ok(permit) = budget.acquire(desc.len).await else {
                    return;
                };
                let mut data = recycled.try_recv().unwrap_or_default();
                // Shrinking a recycled chunk zeroes nothing.
                data.resize(desc.len as usize, 0);
                if let Err(e) = cma::read_remote(cma.pid, desc.addr, &mut data) {
                    let _ = ev.send(closed(
                        format!(
                            "cross-memory read of {} bytes at {:#x} from pid {} failed after {} bytes: {}; {} of {} bytes of the message were read",
                            desc.len,
                            desc.addr,
                            cma.pid,
                            e.got,
                            e.reason,
                            m.len - m.left,
                            m.len
                        ),
                        false,
                    ));
                    return;
                }
                let ack = FrameHeader {
                    kind: FrameKind::CmaAck,
                    session,
                    comm: cma.comm,
                    seq: h.seq,
                    tag: h.tag,
                    len: PIECE_DESC_LEN as u64,
                    sig: [0; SIG_LEN],
                };
                let mut bytes = ack.encode().to_vec();
                bytes.extend_from_slice(&desc.encode());
                let _ = cma.acks.send(Outgoing::Ack(bytes));
                m.left -= desc.len;
                if m.left == 0 {
                    cma_msg = None;
                }
                if ev.send(Event::Chunk { peer, data, permit }).is_err() {
                    return;
                }
            }
            FrameKind::OpStart => {
                let _ = ev.send(Event::OpStart { peer, h });
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
                    if ev.send(Event::Chunk { peer, data, permit }).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
