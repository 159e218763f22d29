//! The send side of one peer connection: posted sends cut into pieces,
//! how far they may run ahead, pieces lent to a same-host peer and their
//! acks, and when a send step completes.
//!
//! A message goes as pieces of at most [`SEND_PIECE`] bytes, at most
//! [`PIECES_AHEAD`] handed to the writer and not yet written, so copying
//! overlaps sending. To a same-host peer that reads this process's memory
//! (see [`crate::tcp::cma`]), a message over the connection's inline bound
//! ([`MAX_INLINE_ON_CMA`](crate::tcp::wire::MAX_INLINE_ON_CMA), or [`MAX_INLINE_ON_RINGS`](crate::tcp::wire::MAX_INLINE_ON_RINGS)
//! on an oversubscribed host's rings) is lent instead: each piece is a descriptor of the op's own bytes, at most
//! [`LEND_AHEAD`] not yet acked, and the send step completes when the last
//! piece is acked (lent messages complete out of posting order). The
//! driver turns each [`Piece`] into bytes or a descriptor.

use std::collections::VecDeque;

use hccl_algos::schedule::{Region, StepId};

use crate::tcp::cma::LentPieces;
use crate::tcp::rank::{LEND_AHEAD, PIECES_AHEAD, SEND_PIECE};
use crate::tcp::wire::{FrameHeader, PieceDesc};

/// A posted send, cut into pieces lazily. Reading its region late is
/// sound: a step that writes it depends on the send, which completes only
/// after its last piece is written (or, lent, all its pieces are acked).
#[derive(Debug)]
struct OutMsg {
    seq: u64,
    step: StepId,
    src: Region,
    header: FrameHeader,
    /// Payload bytes already cut.
    next: u64,
    started: bool,
    /// Lent as descriptors (decided when its first piece goes).
    lend: bool,
}

/// The next piece of a message to hand to the writer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The message's op seq.
    pub(crate) seq: u64,
    /// Its send step.
    pub(crate) step: StepId,
    /// The piece's bytes in the op's buffers.
    pub(crate) src: Region,
    /// The message's header.
    pub(crate) header: FrameHeader,
    /// The first piece: the header goes before it.
    pub(crate) first: bool,
    /// The last piece: its write (or, lent, the message's last ack)
    /// completes the step.
    pub(crate) last: bool,
    /// Lent (a descriptor) rather than copied.
    pub(crate) lend: bool,
}

/// One peer's sends.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    /// Messages with pieces still to cut, in posting order.
    outq: VecDeque<OutMsg>,
    /// Pieces handed to the writer and not yet written (or, lent, not yet
    /// acked).
    in_flight: u32,
    /// The messages posted and not yet complete, as (op seq, step, bytes),
    /// in posting order.
    unsent: VecDeque<(u64, StepId, u64)>,
    /// Pieces lent and not yet acked.
    lent: LentPieces,
}

impl SendQueue {
    /// Posts send `step` of op `seq`: the bytes of `src`, after `header`.
    pub(crate) fn push(&mut self, seq: u64, step: StepId, src: Region, header: FrameHeader) {
        self.outq.push_back(OutMsg {
            seq,
            step,
            src,
            header,
            next: 0,
            started: false,
            lend: false,
        });
        self.unsent.push_back((seq, step, src.len));
    }

    /// The next piece to hand to the writer, if the window has room:
    /// `lend_over` is `Some(bound)` if the peer reads this process's
    /// memory (messages longer than `bound` bytes are lent), `None` if
    /// every message goes as bytes. Counts it in flight.
    pub(crate) fn next_piece(&mut self, lend_over: Option<u64>) -> Option<Piece> {
        let m = self.outq.front_mut()?;
        let lend = if m.started {
            m.lend
        } else {
            lend_over.is_some_and(|b| m.src.len > b)
        };
        let ahead = if lend { LEND_AHEAD } else { PIECES_AHEAD };
        if self.in_flight >= ahead {
            return None;
        }
        let n = (m.src.len - m.next).min(SEND_PIECE as u64);
        let first = !m.started;
        m.started = true;
        m.lend = lend;
        let src = Region::new(m.src.buf, m.src.offset + m.next, n);
        m.next += n;
        let last = m.next == m.src.len;
        let piece = Piece {
            seq: m.seq,
            step: m.step,
            src,
            header: m.header,
            first,
            last,
            lend,
        };
        if last {
            self.outq.pop_front();
        }
        self.in_flight += 1;
        Some(piece)
    }

    /// Records that piece `desc` of `piece`'s message was lent.
    pub(crate) fn lend(&mut self, desc: PieceDesc, piece: &Piece) {
        self.lent.lend(desc, piece.seq, piece.step, piece.last);
    }

    /// A piece was written (the writer's report).
    pub(crate) fn on_written(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// The peer acked lent piece `desc`: the send step (op seq, step) it
    /// completes, if it was the message's last unacked piece.
    ///
    /// # Errors
    /// A description if `desc` is not lent (acked twice, or never lent).
    pub(crate) fn on_ack(&mut self, desc: PieceDesc) -> Result<Option<(u64, StepId)>, String> {
        let done = self.lent.ack(desc)?;
        self.in_flight = self.in_flight.saturating_sub(1);
        Ok(done)
    }

    /// Send step `step` of op `seq` is complete (written, or lent and
    /// acked).
    pub(crate) fn complete(&mut self, seq: u64, step: StepId) {
        if let Some(i) = self.unsent.iter().position(|u| (u.0, u.1) == (seq, step)) {
            self.unsent.remove(i);
        }
    }

    /// A byte-stream message has pieces on the wire (or queued) and
    /// pieces still to come: no other frame may go between them.
    pub(crate) fn mid_message(&self) -> bool {
        self.outq.front().is_some_and(|m| m.started && !m.lend)
    }

    /// The op failed: drops every message not started, and every lent one
    /// (its pieces are whole frames; no more of its buffer is lent). A
    /// byte-stream message half on the wire stays, with no window, to be
    /// finished (else the abort frame would land in its payload): true if
    /// there is one.
    pub(crate) fn cut(&mut self) -> bool {
        if !self.mid_message() {
            self.outq.clear();
            return false;
        }
        self.outq.truncate(1);
        self.in_flight = 0;
        true
    }

    /// Drops every message with pieces still to cut.
    pub(crate) fn drop_pending(&mut self) {
        self.outq.clear();
    }

    /// After [`SendQueue::cut`]: the pieces of the message being finished
    /// go regardless of the window.
    pub(crate) fn open_window(&mut self) {
        self.in_flight = 0;
    }

    /// True if a message has pieces still to cut.
    pub(crate) fn has_pieces(&self) -> bool {
        !self.outq.is_empty()
    }

    /// Sends posted and not complete.
    pub(crate) fn in_progress(&self) -> u32 {
        self.unsent.len() as u32
    }

    /// The bytes of the oldest send not complete.
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.unsent.front().map(|u| u.2)
    }

    /// Pieces lent and not acked.
    pub(crate) fn lent(&self) -> usize {
        self.lent.len()
    }

    /// An ack during shutdown: the peer is done with the piece.
    pub(crate) fn ack_quietly(&mut self, desc: PieceDesc) {
        let _ = self.lent.ack(desc);
    }

    /// Gives up on every lent piece (the lend word withdrew them); returns
    /// the bytes they named.
    pub(crate) fn forget_lent(&mut self) -> u64 {
        self.lent.forget_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::wire::{FrameKind, MAX_INLINE_ON_CMA, MAX_INLINE_ON_RINGS};
    use hccl_algos::schedule::BufKind;

    const MIB: u64 = SEND_PIECE as u64;

    fn header(tag: u32, len: u64) -> FrameHeader {
        FrameHeader {
            kind: FrameKind::Data,
            session: 5,
            comm: 1,
            seq: 0,
            tag,
            len,
            sig: [0; 32],
        }
    }

    fn push(q: &mut SendQueue, step: StepId, offset: u64, len: u64) {
        let src = Region::new(BufKind::Input, offset, len);
        q.push(0, step, src, header(step, len));
    }

    fn desc(p: &Piece) -> PieceDesc {
        PieceDesc {
            addr: 0x1000 + p.src.offset,
            len: p.src.len,
            word: 8,
            expected: 1,
        }
    }

    #[test]
    fn a_message_goes_in_pieces_within_the_window() {
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, 5 * MIB + 10);
        push(&mut q, 2, 0, 3);
        let pieces: Vec<Piece> = std::iter::from_fn(|| q.next_piece(None)).collect();
        assert_eq!(pieces.len(), PIECES_AHEAD as usize, "the window is full");
        assert!(pieces[0].first && !pieces[1].first);
        assert!(pieces
            .iter()
            .all(|p| p.src.len == MIB && !p.last && !p.lend));
        assert_eq!(pieces[3].src.offset, 3 * MIB);
        assert!(q.mid_message());
        q.on_written();
        q.on_written();
        let rest: Vec<Piece> = std::iter::from_fn(|| q.next_piece(None)).collect();
        assert_eq!(rest.len(), 2);
        assert_eq!((rest[0].src.len, rest[0].last), (MIB, false));
        assert_eq!((rest[1].src.len, rest[1].last), (10, true));
        assert_eq!(q.next_piece(None), None, "the window is full again");
        q.on_written();
        let small = q.next_piece(None).unwrap();
        assert!(small.first && small.last && small.step == 2);
        assert!(!q.mid_message() && !q.has_pieces());
        // Complete out of order: the oldest is the first still posted.
        assert_eq!((q.in_progress(), q.oldest()), (2, Some(5 * MIB + 10)));
        q.complete(0, 2);
        assert_eq!(q.oldest(), Some(5 * MIB + 10));
        q.complete(0, 1);
        assert_eq!((q.in_progress(), q.oldest()), (0, None));
    }

    #[test]
    fn a_large_message_to_a_same_host_peer_is_lent_and_completes_with_its_last_ack() {
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, MAX_INLINE_ON_CMA); // small enough to go as bytes
        push(&mut q, 2, 0, 20 * MIB);
        let small = q.next_piece(Some(MAX_INLINE_ON_CMA)).unwrap();
        assert!(!small.lend && small.last);
        q.on_written();
        let mut lent = Vec::new();
        while let Some(p) = q.next_piece(Some(MAX_INLINE_ON_CMA)) {
            assert!(p.lend);
            q.lend(desc(&p), &p);
            lent.push(p);
        }
        assert_eq!(lent.len(), LEND_AHEAD as usize, "lent ahead of the acks");
        assert!(!q.mid_message(), "lent pieces are whole frames");
        assert_eq!(q.lent(), LEND_AHEAD as usize);
        assert!(q
            .on_ack(PieceDesc {
                len: 1,
                ..desc(&lent[0])
            })
            .is_err());
        for p in &lent[1..] {
            assert_eq!(q.on_ack(desc(p)), Ok(None));
        }
        while let Some(p) = q.next_piece(Some(MAX_INLINE_ON_CMA)) {
            q.lend(desc(&p), &p);
            lent.push(p);
        }
        assert_eq!(lent.len(), 20);
        for p in &lent[LEND_AHEAD as usize..] {
            assert_eq!(q.on_ack(desc(p)), Ok(None), "piece 0 is still out");
        }
        assert_eq!(q.on_ack(desc(&lent[0])), Ok(Some((0, 2))));
        assert!(q.on_ack(desc(&lent[0])).is_err(), "twice");
        assert_eq!(q.lent(), 0);
    }

    #[test]
    fn the_inline_bound_decides_which_messages_are_lent() {
        // A bound above the cross-memory one (the rings' may be larger).
        let rings = 2 * MAX_INLINE_ON_CMA;
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, MAX_INLINE_ON_CMA + 4);
        push(&mut q, 2, 0, rings);
        push(&mut q, 3, 0, rings + 4);
        let got: Vec<(u32, bool)> = std::iter::from_fn(|| q.next_piece(Some(rings)))
            .map(|p| (p.step, p.lend))
            .collect();
        // Over the cross-memory bound but within the larger one: bytes.
        assert_eq!(got, [(1, false), (2, false), (3, true)]);
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, MAX_INLINE_ON_RINGS + 4);
        assert!(q.next_piece(Some(MAX_INLINE_ON_RINGS)).unwrap().lend);
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, MAX_INLINE_ON_CMA + 4);
        assert!(q.next_piece(Some(MAX_INLINE_ON_CMA)).unwrap().lend);
    }

    #[test]
    fn a_failure_keeps_only_a_byte_stream_message_half_on_the_wire() {
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, 6 * MIB);
        push(&mut q, 2, 0, 8);
        while q.next_piece(None).is_some() {}
        assert!(q.cut(), "message 1 is half written");
        let mut n = 0;
        while q.has_pieces() {
            q.open_window();
            let p = q.next_piece(None).unwrap();
            assert_eq!(p.step, 1, "message 2 was dropped");
            n += 1;
        }
        assert_eq!(n, 2);
        // Nothing started, or a lent message: all dropped.
        let mut q = SendQueue::default();
        push(&mut q, 1, 0, 4 * MIB);
        let p = q.next_piece(Some(MAX_INLINE_ON_CMA)).unwrap();
        q.lend(desc(&p), &p);
        assert!(!q.cut() && !q.has_pieces());
        assert_eq!(q.forget_lent(), MIB);
    }
}
