//! One op in progress: the [`Transport`] the executor drives over a
//! [`TcpRank`].

use std::time::{Duration, Instant};

use hccl_algos::schedule::{Op, Rank, StepId};
use hccl_algos::transport::{Completion, OpContext, Transport};

use super::events::apply;
use super::{is_p2p_seq, OpInfo, TcpRank, AGREED_TAG, LATE_TAG, LOOK_HERE_MAX, SIGNATURE_TAG};
use crate::tcp::buffers::OpBuffers;
use crate::tcp::core::agreement::{OpCheck, StartError};
use crate::tcp::core::failure::{self, Stall};
use crate::tcp::core::matcher::{Key, PostAction, RecvKind};
use crate::tcp::error::TcpError;
use crate::tcp::io::Event;
use crate::tcp::wire::{FrameHeader, FrameKind};

/// One op in progress on a [`TcpRank`]: the [`Transport`] the executor
/// drives. Owns (borrows) the op's buffers for its lifetime.
pub struct TcpOp<'r, 'a> {
    rank: &'r mut TcpRank,
    ctx: OpContext,
    info: &'a OpInfo<'a>,
    bufs: OpBuffers<'a>,
    deadline: Option<Instant>,
    /// The consistency check: agreed yet, the steps it holds back.
    check: OpCheck,
}

impl std::fmt::Debug for TcpOp<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpOp").field("ctx", &self.ctx).finish()
    }
}

impl<'r, 'a> TcpOp<'r, 'a> {
    /// Starts op `ctx` on `rank` over `bufs`: see [`TcpRank::begin`].
    pub(super) fn start(
        rank: &'r mut TcpRank,
        ctx: &OpContext,
        info: &'a OpInfo<'a>,
        bufs: OpBuffers<'a>,
    ) -> Result<Self, TcpError> {
        if !rank.health.closed() {
            rank.send_deferred_abort();
        }
        rank.health.may_begin(ctx.seq, info.name)?;
        if ctx.comm != rank.comm || ctx.rank != rank.rank {
            return Err(TcpError::InvalidArgument(format!(
                "op context is for comm {:#x} rank {}, this is comm {:#x} rank {}",
                ctx.comm, ctx.rank, rank.comm, rank.rank
            )));
        }
        if !is_p2p_seq(ctx.seq) && rank.last_done.is_some_and(|d| ctx.seq <= d) {
            return Err(TcpError::InvalidArgument(format!(
                "op seq {} is not after the last op ({:?})",
                ctx.seq, rank.last_done
            )));
        }
        let timeout = rank.cfg.exec_timeout;
        // A fresh lend number: no descriptor of an earlier op validates
        // against it. (An earlier op left nothing lent: it succeeded, so
        // every piece was acked, or it failed and broke the communicator.)
        rank.lend_id += 1;
        rank.lend_word.open(rank.lend_id);
        rank.look_here = bufs.data_len() <= LOOK_HERE_MAX;
        let ring = rank.nranks > 1 && !is_p2p_seq(ctx.seq);
        let mut op = TcpOp {
            rank,
            ctx: *ctx,
            info,
            bufs,
            deadline: timeout.map(|t| Instant::now() + t),
            check: OpCheck::new(ring, Instant::now(), timeout),
        };
        if ring {
            op.tell_peers(SIGNATURE_TAG);
        }
        // Check what arrived early for this op (signatures, aborts); a
        // peer's piece waits until this op's own sends are out.
        op.pump_until_piece().map_err(|e| op.fail(e))?;
        op.check_starts().map_err(|e| op.fail(e))?;
        Ok(op)
    }
}

impl TcpOp<'_, '_> {
    fn header(&self, kind: FrameKind, tag: u32, len: u64) -> FrameHeader {
        FrameHeader {
            kind,
            session: self.rank.session,
            comm: self.rank.comm,
            seq: self.ctx.seq,
            tag,
            len,
            sig: self.info.sig,
        }
    }

    fn handle(&mut self, ev: Event) -> Result<(), TcpError> {
        let start = matches!(ev, Event::OpStart { .. });
        self.rank
            .handle(ev, Some((&self.ctx, self.info, &mut self.bufs)))?;
        if start && !self.check.agreed() {
            self.check_starts()?;
        }
        Ok(())
    }

    /// Compares the peers' signatures that have arrived for this op with
    /// this rank's; once all have and agree, tells every peer so, restarts
    /// the deadline and runs the steps held back (see the module docs).
    ///
    /// # Errors
    /// [`TcpError::Mismatch`] naming the first peer that differs.
    fn check_starts(&mut self) -> Result<(), TcpError> {
        if self.check.agreed() {
            return Ok(());
        }
        let (me, n, seq) = (self.rank.rank, self.rank.nranks, self.ctx.seq);
        match self.rank.starts.check(me, n, seq, &self.info.sig) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(StartError::Mismatch { peer, sig }) => {
                return Err(TcpError::Mismatch {
                    op: self.info.name.to_string(),
                    seq,
                    detail: (self.info.describe)(&sig, peer),
                })
            }
            Err(StartError::TooMany) => return Ok(()),
        }
        let (say_agreed, deferred) = self.check.agree();
        if say_agreed {
            self.tell_peers(AGREED_TAG);
        }
        if let Some(t) = self.rank.cfg.exec_timeout {
            self.deadline = Some(Instant::now() + t);
        }
        for (step, op) in deferred {
            self.run_step(step, &op)?;
        }
        Ok(())
    }

    /// Queues an op-start frame with `tag` for every peer (held back to
    /// leave with the next message, see [`Peer::op_start`](super::Peer::op_start)).
    fn tell_peers(&mut self, tag: u32) {
        let h = self.header(FrameKind::OpStart, tag, 0).encode();
        let me = self.rank.rank;
        for p in (0..self.rank.nranks).filter(|&p| p != me) {
            let held = self.rank.peers[p as usize]
                .op_start
                .get_or_insert_with(Vec::new);
            held.extend_from_slice(&h);
        }
    }

    /// The ranks whose signature for this op has not arrived here.
    fn not_started(&self) -> Vec<u32> {
        let r = &*self.rank;
        r.starts.missing(r.rank, r.nranks, self.ctx.seq)
    }

    fn pump_nonblocking(&mut self) -> Result<(), TcpError> {
        while let Some(ev) = self.rank.next_event(Some(Duration::ZERO)) {
            self.handle(ev)?;
        }
        Ok(())
    }

    /// [`TcpOp::pump_nonblocking`], stopping before a peer's cross-memory
    /// piece (put back, first in line for the next wait). Reading a piece
    /// is a copy of up to [`MAX_CMA_PIECE`](crate::tcp::wire::MAX_CMA_PIECE)
    /// bytes: done at an op's start, before its own sends are posted, or
    /// at its end, before it returns, it holds the peer's next op up for
    /// as long as the copy takes, and two ranks then take turns instead
    /// of copying at the same time (in-place AllReduce ran at half speed
    /// at 64-256 KiB that way).
    fn pump_until_piece(&mut self) -> Result<(), TcpError> {
        while let Some(ev) = self.rank.next_event(Some(Duration::ZERO)) {
            if matches!(ev, Event::Piece { .. }) {
                self.rank.local_events.push_front(ev);
                return Ok(());
            }
            self.handle(ev)?;
        }
        Ok(())
    }

    /// Runs the I/O until one event arrives or the op's deadline passes.
    fn pump_one(&mut self) -> Result<(), TcpError> {
        // A peer gone before its signature came never will send it (a
        // peer that finished the op sent it and its agreement first).
        if !self.check.agreed() {
            let gone = self
                .not_started()
                .into_iter()
                .find(|&p| self.rank.peers[p as usize].dead.is_some());
            if let Some(p) = gone {
                return Err(self.rank.lost(self.info.name, self.ctx.seq, p));
            }
        }
        if self.check.late_due(Instant::now()) {
            self.tell_peers(LATE_TAG);
        }
        // A peer whose loan was withdrawn and whose abort has not come.
        if let Some(e) = self.rank.health.grace_over(Instant::now()) {
            return Err(e);
        }
        let grace = self.rank.health.grace().map(|w| w.1);
        let late = self.check.late_at();
        let until = [self.deadline, grace, late].into_iter().flatten().min();
        let wait = until.map(|d| d.saturating_duration_since(Instant::now()));
        match self.rank.next_event(wait) {
            Some(ev) => self.handle(ev),
            None if self.deadline.is_some_and(|d| Instant::now() >= d) => Err(self.timeout_error()),
            None if until.is_some() => Ok(()),
            None => Err(self.all_gone()),
        }
    }

    /// Every connection ended and nothing more can arrive.
    fn all_gone(&self) -> TcpError {
        match self.rank.matcher.posted().next() {
            Some((peer, ..)) => self.rank.lost(self.info.name, self.ctx.seq, peer),
            None => TcpError::io(
                format!(
                    "{} {}",
                    self.info.name,
                    crate::tcp::error::OpSeq(self.ctx.seq)
                ),
                "every peer connection is closed",
            ),
        }
    }

    fn timeout_error(&self) -> TcpError {
        let r = &*self.rank;
        let seq = self.ctx.seq;
        let full = (0..r.nranks).find_map(|p| {
            let b = r.peers[p as usize].budget.as_ref()?;
            (b.held() >= b.capacity()).then(|| (p, b.held(), b.capacity()))
        });
        let agreed = self.check.agreed();
        let stall = Stall {
            full,
            posted: r.matcher.posted().collect(),
            missing: if agreed {
                Vec::new()
            } else {
                self.not_started()
            },
            unconfirmed: if is_p2p_seq(seq) {
                Vec::new()
            } else {
                r.starts.unconfirmed(r.nranks, seq).collect()
            },
            sends: (r.peers.iter().enumerate())
                .filter(|(_, p)| p.sends.in_progress() > 0)
                .map(|(p, peer)| (p as u32, peer.sends.in_progress()))
                .collect(),
        };
        let secs = r.cfg.exec_timeout.map_or(0.0, |t| t.as_secs_f64());
        failure::timeout_error(self.info.name, seq, r.rank, r.nranks, secs, stall)
    }

    fn check_peer(&self, peer: Rank) -> Result<(), TcpError> {
        if peer >= self.rank.nranks || peer == self.rank.rank {
            return Err(TcpError::InvalidArgument(format!(
                "step names peer {peer} (this is rank {} of {})",
                self.rank.rank, self.rank.nranks
            )));
        }
        Ok(())
    }

    fn post_recv(
        &mut self,
        step: StepId,
        peer: Rank,
        tag: u32,
        kind: RecvKind,
        len: u64,
    ) -> Result<(), TcpError> {
        self.check_peer(peer)?;
        let key = Key {
            peer,
            seq: self.ctx.seq,
            tag,
        };
        let sig = &self.info.sig;
        match self.rank.matcher.post(key, step, kind, len, sig) {
            Err(e) => {
                let seq = self.ctx.seq;
                return Err(self
                    .rank
                    .match_error(e, self.info.name, peer, seq, Some(self.info)));
            }
            Ok(PostAction::Early { chunks, complete }) => {
                let mut offset = 0;
                for (data, permit) in chunks {
                    apply(&mut self.bufs, self.ctx.dtype, kind, offset, &data)?;
                    offset += data.len() as u64;
                    drop(permit);
                    self.rank.recycle(peer, data.into_buf());
                }
                if complete {
                    self.rank.completions.push_back(Completion {
                        seq: self.ctx.seq,
                        step,
                    });
                    return Ok(());
                }
            }
            Ok(PostAction::Wait) => {}
        }
        if self.rank.peers[peer as usize].dead.is_some() {
            return Err(self.rank.lost(self.info.name, self.ctx.seq, peer));
        }
        Ok(())
    }

    /// Completes the op on this rank: waits for every peer's signature and
    /// for every peer's word that all signatures agree (the consistency
    /// check, see the module docs), then retires the op. A p2p op
    /// ([`P2P_SEQ_BIT`](super::P2P_SEQ_BIT)) has no op-start frames and retires at once.
    ///
    /// # Errors
    /// [`TcpError::Mismatch`], timeouts, peer failures.
    pub fn finish(&mut self) -> Result<(), TcpError> {
        let seq = self.ctx.seq;
        if is_p2p_seq(seq) {
            // Only two ranks take part: no op-start ring, and the
            // communicator-wide seq is not consumed.
            self.pump_nonblocking()?;
            return self.wait_lent();
        }
        self.rank.flush_op_start();
        let me = self.rank.rank;
        // Every peer's signature (the consistency check).
        while !self.check.agreed() {
            match self.not_started().first() {
                None => self.check_starts()?,
                Some(&p) if self.rank.peers[p as usize].dead.is_some() => {
                    return Err(self.rank.lost(self.info.name, seq, p))
                }
                Some(_) => self.pump_one()?,
            }
        }
        // This rank's agreement may still be held back: send it.
        self.rank.flush_op_start();
        // A mismatched frame, or a peer's word that it is late, may still
        // be queued: look once more.
        self.pump_until_piece()?;
        // The agreement of every peer that said it was late.
        loop {
            let unconfirmed = (self.rank.starts)
                .unconfirmed(self.rank.nranks, seq)
                .find(|&p| p != me);
            let Some(p) = unconfirmed else { break };
            if self.rank.peers[p as usize].dead.is_some() {
                return Err(self.rank.lost(self.info.name, seq, p));
            }
            self.pump_one()?;
        }
        self.wait_lent()?;
        self.rank.starts.retire(seq);
        self.rank.last_done = Some(seq);
        Ok(())
    }

    /// Waits until no piece of this op's buffers is lent: an op may not
    /// succeed while a peer could still read them. Every send step of a
    /// finished plan completed with its acks, so this only waits for a
    /// caller that finishes early.
    ///
    /// # Errors
    /// Timeouts and peer failures, as any wait.
    fn wait_lent(&mut self) -> Result<(), TcpError> {
        while self.rank.peers.iter().any(|p| p.sends.lent() > 0) {
            self.pump_one()?;
        }
        Ok(())
    }

    /// Fails the op: tells every live peer (unless the error came from a
    /// peer's abort), withdraws every piece of its buffers lent to a peer
    /// (poisons the lend word, then a fence: see [`crate::tcp::cma`]), records
    /// the error, and returns it.
    pub fn fail(&mut self, e: TcpError) -> TcpError {
        self.rank.flush_op_start();
        // A byte-stream message already started on a connection must be
        // finished, or the abort frame would land inside its payload; the
        // rest are dropped. A cross-memory message is simply cut (its
        // pieces are whole frames; the peer's reader takes an abort
        // between them), so no more of its buffer is lent.
        for p in 0..self.rank.nranks {
            if self.rank.peers[p as usize].sends.cut() {
                while self.rank.peers[p as usize].sends.has_pieces() {
                    if self.rank.fill_sends(p, &self.bufs).is_err() {
                        break;
                    }
                    self.rank.peers[p as usize].sends.open_window();
                }
            }
            self.rank.peers[p as usize].sends.drop_pending();
        }
        if let Some(t) = self.rank.health.on_op_failed(&e, self.ctx.seq) {
            self.rank.broadcast_abort(t.seq, &t.reason, t.kind);
        }
        // The caller may rewrite its buffers as soon as this returns, and
        // a peer may still hold descriptors of them: withdraw them now.
        // After the aborts, so that a peer that finds the word poisoned
        // has this rank's reason on its way (see WITHDRAWN_GRACE).
        self.rank.lend_word.poison();
        self.rank.matcher.clear_posted();
        e
    }
}

impl Drop for TcpOp<'_, '_> {
    /// The op's buffers go back to the caller: withdraw anything still
    /// lent (a no-op after [`TcpOp::fail`], and after a successful
    /// [`TcpOp::finish`] nothing is lent). An op dropped with pieces lent
    /// (never finished nor failed) breaks the communicator: their acks and
    /// completions would land in a later op.
    fn drop(&mut self) {
        self.rank.lend_word.poison();
        let lent: usize = self.rank.peers.iter().map(|p| p.sends.lent()).sum();
        if lent > 0 && self.rank.health.broken().is_none() {
            self.rank.health.break_with(TcpError::Broken(format!(
                "{} {} was dropped with {lent} piece(s) of its buffers lent to peers",
                self.info.name,
                crate::tcp::error::OpSeq(self.ctx.seq)
            )));
        }
    }
}

impl TcpOp<'_, '_> {
    /// Runs (or, for a receive, posts) step `step` of this op.
    fn run_step(&mut self, step: StepId, op: &Op) -> Result<(), TcpError> {
        match *op {
            Op::Send { peer, tag, src } => {
                self.check_peer(peer)?;
                self.bufs.check(src)?;
                let header = self.header(FrameKind::Data, tag, src.len);
                let r = &mut *self.rank;
                let p = &mut r.peers[peer as usize];
                if p.dead.is_some() || p.tx.is_none() {
                    return Err(r.lost_sending(self.info.name, self.ctx.seq, peer, Some(src.len)));
                }
                p.sends.push(self.ctx.seq, step, src, header);
                r.fill_sends(peer, &self.bufs)?;
            }
            Op::Recv { peer, tag, dst } => {
                self.bufs.check_writable(dst)?;
                self.post_recv(step, peer, tag, RecvKind::Copy { dst }, dst.len)?;
            }
            Op::RecvReduce {
                peer,
                tag,
                local,
                dst,
                op,
            } => {
                self.bufs.check(local)?;
                self.bufs.check_writable(dst)?;
                if local.len != dst.len {
                    return Err(TcpError::InvalidArgument(format!(
                        "recv-reduce local {local:?} and dst {dst:?} differ in length"
                    )));
                }
                self.post_recv(
                    step,
                    peer,
                    tag,
                    RecvKind::Reduce { local, dst, op },
                    dst.len,
                )?;
            }
            Op::Copy { src, dst } => {
                self.bufs.copy(src, dst)?;
                self.rank.completions.push_back(Completion {
                    seq: self.ctx.seq,
                    step,
                });
            }
            Op::LocalReduce { src, dst, op } => {
                self.bufs.reduce(self.ctx.dtype, op, src, dst)?;
                self.rank.completions.push_back(Completion {
                    seq: self.ctx.seq,
                    step,
                });
            }
            Op::Divide { dst, divisor } => {
                self.bufs.divide(self.ctx.dtype, dst, divisor)?;
                self.rank.completions.push_back(Completion {
                    seq: self.ctx.seq,
                    step,
                });
            }
        }
        Ok(())
    }
}

impl Transport for TcpOp<'_, '_> {
    type Error = TcpError;

    fn post(&mut self, ctx: &OpContext, step: StepId, op: &Op) -> Result<(), TcpError> {
        if ctx.seq != self.ctx.seq {
            return Err(TcpError::InvalidArgument(format!(
                "step of op #{} posted to op #{}",
                ctx.seq, self.ctx.seq
            )));
        }
        if self.check.hold(step, op) {
            return Ok(());
        }
        self.run_step(step, op)
    }

    fn poll_completion(&mut self) -> Result<Option<Completion>, TcpError> {
        // Only what is already queued: running the I/O here (several
        // scheduler passes, each an epoll_wait) after every completion cost
        // more than the small messages it waited for; the next
        // wait_completion runs the I/O tasks anyway.
        Ok(self.rank.completions.pop_front())
    }

    fn wait_completion(&mut self) -> Result<Completion, TcpError> {
        loop {
            if let Some(c) = self.rank.completions.pop_front() {
                return Ok(c);
            }
            self.pump_one()?;
        }
    }

    fn now(&self) -> Duration {
        self.rank.start.elapsed()
    }
}
