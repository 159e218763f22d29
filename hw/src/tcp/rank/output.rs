//! Frames out: the outbox and its direct writes, send pieces, acks,
//! op-start frames and aborts.

use std::sync::atomic::Ordering;

use tokio::sync::mpsc::unbounded_channel;

use super::tuning::ABORT_FLUSH;
use super::TcpRank;
use crate::tcp::buffers::OpBuffers;
use crate::tcp::error::{AbortKind, TcpError};
use crate::tcp::io::{Event, Outgoing};
use crate::tcp::wire::{
    FrameHeader, FrameKind, PieceDesc, FRAME_HEADER_LEN, MAX_ABORT_REASON, MAX_INLINE_ON_CMA,
    PIECE_DESC_LEN,
};

/// What [`write_now`] did with a frame.
pub(super) enum Written {
    /// The socket took all of it; for a data frame, its completion.
    All(Option<Event>),
    /// What is left for the writer task (all of it if the socket took
    /// nothing or failed: the writer retries and reports the failure).
    Rest(Outgoing),
}

/// Writes the whole frame `out` for `peer` to its non-blocking socket now,
/// as far as the socket takes it (see [`TcpRank::flush_outbox`]).
pub(super) fn write_now(sock: &super::Direct, peer: u32, out: Outgoing) -> Written {
    let bytes: &[u8] = match &out {
        Outgoing::Data { bytes, .. } | Outgoing::Control(bytes) | Outgoing::Ack(bytes) => bytes,
        Outgoing::Lent { frame } => frame,
        Outgoing::Flush(_) | Outgoing::End => return Written::Rest(out),
    };
    let n = sock.write(bytes);
    if n == bytes.len() {
        return Written::All(match out {
            Outgoing::Data { bytes, seq, step } => Some(Event::SendDone {
                peer,
                seq,
                step,
                buf: bytes,
            }),
            _ => None,
        });
    }
    if n == 0 {
        return Written::Rest(out);
    }
    // The frame's tail, as raw bytes the writer sends next and never holds.
    let rest = bytes[n..].to_vec();
    Written::Rest(match out {
        Outgoing::Data { seq, step, .. } => Outgoing::Data {
            bytes: rest,
            seq,
            step,
        },
        _ => Outgoing::Control(rest),
    })
}

impl TcpRank {
    /// Sends the held op-start frame (see [`Peer::op_start`](super::Peer::op_start)) to whichever
    /// peer still has one: before this rank waits, fails or finishes.
    pub(super) fn flush_op_start(&mut self) {
        for p in 0..self.nranks {
            if let Some(bytes) = self.peers[p as usize].op_start.take() {
                self.send_control(p, bytes);
            }
        }
    }

    pub(super) fn send_control(&mut self, peer: u32, bytes: Vec<u8>) {
        self.queue_frame(peer, Outgoing::Control(bytes));
    }

    /// Queues a whole frame that is not part of a message's pieces (a
    /// control frame or an ack): this thread may write it itself unless a
    /// byte-stream message to `peer` is half on the wire.
    pub(super) fn queue_frame(&mut self, peer: u32, out: Outgoing) {
        let whole = !self.peers[peer as usize].sends.mid_message();
        self.outbox.push((peer, out, whole));
    }

    /// Hands the frames queued in [`TcpRank::outbox`] to the writers, from
    /// inside the runtime: a writer woken there is only put on the
    /// runtime's run queue, where a wake from outside costs an `eventfd`
    /// write and an extra `epoll` event per frame.
    ///
    /// A whole frame for a peer whose writer has nothing queued is written
    /// here, straight to the socket (it is non-blocking): one `send` and no
    /// scheduler pass, where the writer task ran only after a few `epoll`
    /// polls. Whatever the socket does not take at once goes to the writer,
    /// and so does every later frame for that peer until the writer is
    /// idle again, so frames stay in order on the wire.
    pub(super) fn flush_outbox(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let items = std::mem::take(&mut self.outbox);
        let mut deferred = Vec::with_capacity(items.len());
        for (p, out, whole) in items {
            let peer = &mut self.peers[p as usize];
            let idle = peer.queued.load(Ordering::Acquire) == 0 && peer.tx.is_some();
            let out = match (whole && idle, peer.direct.as_ref()) {
                (true, Some(sock)) => match write_now(sock, p, out) {
                    Written::All(Some(ev)) => {
                        self.local_events.push_back(ev);
                        continue;
                    }
                    Written::All(None) => continue,
                    Written::Rest(rest) => rest,
                },
                _ => out,
            };
            peer.queued.fetch_add(1, Ordering::AcqRel);
            deferred.push((p, out));
        }
        if deferred.is_empty() {
            return;
        }
        let peers = &self.peers;
        let send = move || {
            for (p, out) in deferred {
                if let Some(tx) = &peers[p as usize].tx {
                    let _ = tx.send(out);
                }
            }
        };
        match &self.runtime {
            Some(rt) => rt.block_on(async move { send() }),
            None => send(),
        }
    }

    pub(super) fn broadcast_abort(&mut self, seq: u64, reason: &str, kind: AbortKind) {
        let mut text = reason.as_bytes().to_vec();
        text.truncate(MAX_ABORT_REASON as usize);
        let h = FrameHeader {
            kind: FrameKind::Abort,
            session: self.session,
            comm: self.comm,
            seq,
            tag: kind.tag(),
            len: text.len() as u64,
            sig: [0; 32],
        };
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&text);
        let (ack_tx, mut ack_rx) = unbounded_channel();
        let mut waiting = 0;
        for p in 0..self.nranks {
            if p != self.rank && self.peers[p as usize].dead.is_none() {
                self.send_control(p, bytes.clone());
            }
        }
        self.flush_outbox();
        for p in 0..self.nranks {
            if p != self.rank && self.peers[p as usize].dead.is_none() {
                if let Some(tx) = &self.peers[p as usize].tx {
                    self.peers[p as usize].queued.fetch_add(1, Ordering::AcqRel);
                    waiting += u32::from(tx.send(Outgoing::Flush(ack_tx.clone())).is_ok());
                }
            }
        }
        // The abort must reach the peers before this process may exit: run
        // the writers (bounded) until they have handed it to the kernel.
        self.set_shm_polling(false);
        if let Some(rt) = &self.runtime {
            rt.block_on(async {
                let _ = tokio::time::timeout(ABORT_FLUSH, async {
                    for _ in 0..waiting {
                        if ack_rx.recv().await.is_none() {
                            break;
                        }
                    }
                })
                .await;
            });
        }
    }

    /// Queues pieces of `peer`'s pending sends, up to [`PIECES_AHEAD`](super::PIECES_AHEAD) in
    /// flight ([`LEND_AHEAD`](super::LEND_AHEAD) for lent ones): copies into send pieces, or,
    /// for a same-host peer and a message over the peer's inline bound
    /// ([`Peer::inline_max`](super::Peer::inline_max)), descriptors of the region's own bytes in `bufs` (no copy: the
    /// peer reads them while the send step waits for its acks).
    pub(super) fn fill_sends(&mut self, peer: u32, bufs: &OpBuffers<'_>) -> Result<(), TcpError> {
        let p = &mut self.peers[peer as usize];
        // An in-place op rewrites what it lends right after the peer read
        // it, and lending short messages then costs more than the copies
        // (session 16, 2 processes, in place: 16 KiB 12.9 µs as bytes
        // against 17.5 lent, 32 KiB 20.1 against 23.7).
        let inline_max = if bufs.is_in_place() {
            p.inline_max.max(MAX_INLINE_ON_CMA)
        } else {
            p.inline_max
        };
        while let Some(piece) = p.sends.next_piece(p.cma_send.then_some(inline_max)) {
            let open = p.dead.is_none() && p.tx.as_ref().is_some_and(|tx| !tx.is_closed());
            // The held op start leaves with the first piece of a message.
            let op_start = if piece.first { p.op_start.take() } else { None };
            let payload = bufs.get(piece.src)?;
            let n = piece.src.len;
            let out = if piece.lend {
                // The op's own memory, lent: the send step completes only
                // when every piece is acked, and a failure withdraws it
                // through the lend word before the buffers go back.
                let desc = PieceDesc {
                    addr: payload.as_ptr() as u64,
                    len: n,
                    word: self.lend_word.addr(),
                    expected: self.lend_id,
                };
                self.cma_stats.pieces_lent += 1;
                self.cma_stats.bytes_lent += n;
                let h = if piece.first {
                    FrameHeader {
                        kind: FrameKind::DataCma,
                        ..piece.header
                    }
                } else {
                    FrameHeader {
                        kind: FrameKind::CmaMore,
                        len: PIECE_DESC_LEN as u64,
                        ..piece.header
                    }
                };
                if let Some(start) = op_start {
                    self.outbox.push((peer, Outgoing::Control(start), true));
                }
                let mut frame = [0u8; FRAME_HEADER_LEN + PIECE_DESC_LEN];
                frame[..FRAME_HEADER_LEN].copy_from_slice(&h.encode());
                frame[FRAME_HEADER_LEN..].copy_from_slice(&desc.encode());
                p.sends.lend(desc, &piece);
                Outgoing::Lent { frame }
            } else {
                // A whole message for a ring whose writer is idle, with
                // nothing queued ahead of it: written here from the op's
                // buffer, without the copy into a send piece (session 17:
                // that copy was 0.35-0.45 µs of an 8 KiB op's ~8).
                let alone = open
                    && piece.first
                    && piece.last
                    && p.queued.load(Ordering::Acquire) == 0
                    && !self.outbox.iter().any(|(q, ..)| *q == peer);
                if let Some(direct) = p.direct.as_ref().filter(|_| alone) {
                    let header = piece.header.encode();
                    let start = op_start.as_deref().unwrap_or_default();
                    if direct.write_whole(&[start, &header, payload]) {
                        self.cma_stats.messages_written_direct += 1;
                        self.local_events.push_back(Event::SendDone {
                            peer,
                            seq: piece.seq,
                            step: Some(piece.step),
                            buf: Vec::new(),
                        });
                        continue;
                    }
                }
                let mut bytes = self.send_pool.pop().unwrap_or_default();
                bytes.clear();
                if let Some(start) = op_start {
                    bytes.extend_from_slice(&start);
                }
                if piece.first {
                    bytes.extend_from_slice(&piece.header.encode());
                }
                hccl_algos::kernels::copy::extend(&mut bytes, payload);
                let step = piece.last.then_some(piece.step);
                Outgoing::Data {
                    bytes,
                    seq: piece.seq,
                    step,
                }
            };
            if !open {
                // Never sent: out of the window again.
                p.sends.on_written();
                return Ok(()); // The reader reports the peer's end.
            }
            // A byte-stream message in one piece is a whole frame; lent
            // pieces are whole frames each.
            let whole = piece.lend || (piece.first && piece.last);
            self.outbox.push((peer, out, whole));
        }
        Ok(())
    }

    /// Tells `peer` that its piece `desc` has been copied out.
    pub(super) fn send_ack(&mut self, peer: u32, desc: PieceDesc, seq: u64, tag: u32) {
        let h = FrameHeader {
            kind: FrameKind::CmaAck,
            session: self.session,
            comm: self.comm,
            seq,
            tag,
            len: PIECE_DESC_LEN as u64,
            sig: [0; 32],
        };
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(&desc.encode());
        self.queue_frame(peer, Outgoing::Ack(bytes));
    }
}
