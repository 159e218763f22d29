//! Filing one event from the I/O tasks: feeds the protocol core
//! ([`crate::tcp::core`]) and applies what it answers to the op's buffers.

use std::time::Instant;

use hccl_algos::kernels::copy::{aliased, copy};
use hccl_algos::schedule::{Region, StepId};
use hccl_algos::transport::{Completion, OpContext};

use super::tuning::{MAX_EARLY_MESSAGES, SEND_POOL, WITHDRAWN_GRACE};
use super::{is_p2p_seq, OpInfo, TcpRank};
use crate::tcp::buffers::OpBuffers;
use crate::tcp::chunk::Chunk;
use crate::tcp::cma::{self, LentReadError};
use crate::tcp::core::agreement::StartError;
use crate::tcp::core::failure::{on_closed, Closed};
use crate::tcp::core::matcher::{ChunkAction, HeaderAction, Key, MatchError, RecvKind};
use crate::tcp::error::TcpError;
use crate::tcp::io::Event;
use crate::tcp::wire::PieceDesc;

impl TcpRank {
    /// Files one event. `op` is the running op, if any (with its buffers).
    pub(super) fn handle(
        &mut self,
        ev: Event,
        mut op: Option<(&OpContext, &OpInfo<'_>, &mut OpBuffers<'_>)>,
    ) -> Result<(), TcpError> {
        let cur_seq = op.as_ref().map(|(c, _, _)| c.seq);
        let name = op.as_ref().map_or("op", |(_, i, _)| i.name).to_string();
        match ev {
            Event::Header { peer, h } => {
                if h.comm != self.comm {
                    return Err(self.protocol(
                        peer,
                        format!("frame for comm {:#x} on comm {:#x}", h.comm, self.comm),
                    ));
                }
                let key = Key {
                    peer,
                    seq: h.seq,
                    tag: h.tag,
                };
                if !is_p2p_seq(h.seq) && self.last_done.is_some_and(|d| h.seq <= d) {
                    return Err(self.protocol(
                        peer,
                        format!(
                            "message for op #{} which already finished here (tag {})",
                            h.seq, h.tag
                        ),
                    ));
                }
                let running = op.as_ref().map(|(c, i, _)| (c.seq, &i.sig));
                match self.matcher.on_header(key, h.len, &h.sig, running) {
                    Ok(HeaderAction::Complete(step)) => {
                        self.completions.push_back(Completion { seq: h.seq, step });
                        Ok(())
                    }
                    Ok(HeaderAction::Stream | HeaderAction::Kept) => Ok(()),
                    Err(e) => {
                        let info = op.as_ref().map(|(_, i, _)| *i);
                        Err(self.match_error(e, &name, peer, h.seq, info))
                    }
                }
            }
            Event::Chunk { peer, data, permit } => {
                let n = data.len() as u64;
                match self.matcher.on_chunk(peer, (data, permit), n, op.is_some()) {
                    Ok(ChunkAction::Place {
                        chunk: (data, permit),
                        kind,
                        offset,
                        step,
                        done,
                    }) => {
                        let Some((ctx, _, bufs)) = op.as_mut() else {
                            return Ok(());
                        };
                        apply(bufs, ctx.dtype, kind, offset, &data)?;
                        drop(permit);
                        self.recycle(peer, data.into_buf());
                        if done {
                            let seq = ctx.seq;
                            self.completions.push_back(Completion { seq, step });
                        }
                        Ok(())
                    }
                    Ok(ChunkAction::Kept | ChunkAction::Unused(_)) => Ok(()),
                    Err(e) => Err(self.match_error(e, &name, peer, cur_seq.unwrap_or(0), None)),
                }
            }
            Event::Piece {
                peer,
                desc,
                permit,
                seq,
                tag,
                msg_len,
                before,
            } => {
                if self.health.is_withdrawn(peer) {
                    return Ok(()); // its op failed: wait for its abort
                }
                let Some(pid) = self.peers[peer as usize].cma_pid else {
                    return Err(self.protocol(peer, "cross-memory piece without a probe".into()));
                };
                if !self.matcher.receiving(peer) {
                    return Ok(());
                }
                // A plain receive that is posted: straight into its region.
                let direct = match self.matcher.direct(peer, desc.len, op.is_some()) {
                    Ok(d) => d,
                    Err(e) => return Err(self.match_error(e, &name, peer, seq, None)),
                };
                if let (Some(region), Some((ctx, _, bufs))) = (direct, op.as_mut()) {
                    let into = bufs.get_mut(region)?;
                    // An aliased kernel copy is 4-6x slower than two good
                    // ones: then through a chunk, below.
                    if !aliased(into.as_ptr() as usize, desc.addr as usize, into.len()) {
                        // On an error the bytes that landed are not
                        // counted: the op fails.
                        if let Err(e) = cma::read_lent(pid, &desc, into) {
                            let at = (before, msg_len);
                            return self.piece_failed(&name, cur_seq, peer, desc, e, at);
                        }
                        drop(permit);
                        self.cma_stats.bytes_read += desc.len;
                        self.cma_stats.bytes_read_direct += desc.len;
                        let seq = ctx.seq;
                        self.send_ack(peer, desc, seq, tag);
                        if let Some(step) = self.matcher.advance(peer, desc.len) {
                            self.completions.push_back(Completion { seq, step });
                        }
                        return Ok(());
                    }
                }
                // Otherwise into a chunk at the piece's page offset (never
                // aliased), then as over TCP.
                let mut data =
                    Chunk::for_copy_from(self.chunk_pool.take(), desc.addr, desc.len as usize);
                if let Err(e) = cma::read_lent(pid, &desc, data.bytes_mut()) {
                    self.chunk_pool.give(data.into_buf());
                    let at = (before, msg_len);
                    return self.piece_failed(&name, cur_seq, peer, desc, e, at);
                }
                self.cma_stats.bytes_read += desc.len;
                self.send_ack(peer, desc, seq, tag);
                self.handle(Event::Chunk { peer, data, permit }, op)
            }
            Event::OpStart { peer, h } => {
                if h.comm != self.comm {
                    return Err(self.protocol(
                        peer,
                        format!("op start for comm {:#x} on comm {:#x}", h.comm, self.comm),
                    ));
                }
                let running = op.as_ref().map(|(c, i, _)| (c.seq, &i.sig));
                match self.starts.on_frame(peer, h.seq, h.tag, &h.sig, running) {
                    Ok(()) => Ok(()),
                    Err(StartError::TooMany) => Err(self.protocol(
                        peer,
                        format!("more than {MAX_EARLY_MESSAGES} op starts pending"),
                    )),
                    Err(StartError::Mismatch { peer, sig }) => {
                        let describe = op.as_ref().map(|(_, i, _)| i.describe);
                        Err(TcpError::Mismatch {
                            op: name,
                            seq: h.seq,
                            detail: describe.map_or_else(String::new, |d| d(&sig, peer)),
                        })
                    }
                }
            }
            Event::Abort {
                peer,
                seq,
                reason,
                kind,
            } => {
                self.peers[peer as usize]
                    .dead
                    .get_or_insert_with(|| "it aborted".into());
                self.health
                    .on_peer_abort(peer, seq, reason, kind, cur_seq, &name)
            }
            Event::CmaAck { peer, desc } => {
                let p = &mut self.peers[peer as usize];
                let done = match p.sends.on_ack(desc) {
                    Ok(done) => done,
                    Err(what) => return Err(self.protocol(peer, what)),
                };
                if let Some((_, _, bufs)) = op.as_ref() {
                    self.fill_sends(peer, bufs)?;
                }
                // The message's last ack: the peer has read all of it, so
                // the send step completes (the region may be written now).
                if let Some((seq, step)) = done {
                    self.send_complete(peer, seq, step, cur_seq);
                }
                Ok(())
            }
            Event::SendDone {
                peer,
                seq,
                step,
                buf,
            } => {
                if self.send_pool.len() < SEND_POOL && buf.capacity() >= 64 << 10 {
                    self.send_pool.push(buf);
                }
                let p = &mut self.peers[peer as usize];
                p.sends.on_written();
                if let Some((_, _, bufs)) = op.as_ref() {
                    self.fill_sends(peer, bufs)?;
                }
                if let Some(step) = step {
                    self.send_complete(peer, seq, step, cur_seq);
                }
                Ok(())
            }
            Event::Closed {
                peer,
                reason,
                graceful,
            } => {
                let p = &mut self.peers[peer as usize];
                p.dead = Some(reason.clone());
                p.tx = None;
                let waiting = p.sends.in_progress() > 0
                    || self.matcher.receiving(peer)
                    || self.matcher.posted_from(peer);
                match on_closed(graceful, waiting, cur_seq.is_some()) {
                    Closed::Fine => Ok(()),
                    Closed::Lost => Err(self.lost(&name, cur_seq.unwrap_or(0), peer)),
                    Closed::BetweenOps => {
                        tracing::warn!(
                            "hccl rank {}: lost rank {peer} between ops: {reason}",
                            self.rank
                        );
                        if self.lost_between_ops.is_none() {
                            let seq = self.last_done.unwrap_or(0);
                            self.lost_between_ops = Some(self.lost("between ops", seq, peer));
                        }
                        Ok(())
                    }
                }
            }
            Event::SendFailed { peer, reason } => {
                let p = &mut self.peers[peer as usize];
                p.tx = None;
                tracing::debug!("hccl rank {}: writing to rank {peer}: {reason}", self.rank);
                Ok(())
            }
            Event::LocalAbort(reason) => Err(self.health.on_local_abort(reason)),
            Event::Protocol { peer, error } => {
                self.peers[peer as usize].dead = Some(format!("protocol error: {error}"));
                Err(TcpError::Protocol {
                    from: format!("rank {peer}"),
                    error,
                })
            }
        }
    }

    /// A message to `peer` is done (written, or lent and fully acked):
    /// completes its send step if it belongs to the running op `cur_seq`.
    pub(super) fn send_complete(
        &mut self,
        peer: u32,
        seq: u64,
        step: StepId,
        cur_seq: Option<u64>,
    ) {
        let p = &mut self.peers[peer as usize];
        p.sends.complete(seq, step);
        if cur_seq == Some(seq) {
            self.completions.push_back(Completion { seq, step });
        }
    }

    /// Gives a consumed chunk back: to the pool shared with the fast-path
    /// readers for a same-host peer, else to the peer's reader.
    pub(super) fn recycle(&mut self, peer: u32, data: Vec<u8>) {
        if self.peers[peer as usize].cma_pid.is_some() {
            self.chunk_pool.give(data);
        } else if let Some(tx) = &self.peers[peer as usize].recycle {
            let _ = tx.send(data);
        }
    }

    /// A piece `desc` of `peer`'s could not be used (`at`: the message's
    /// bytes before it and its length): after a failed read (the peer's
    /// process gone, or a bad address) or with a withdrawn loan (the peer's
    /// op failed) this rank discards the bytes, stops reading from the
    /// peer, and waits up to [`WITHDRAWN_GRACE`] for an abort frame that
    /// names the peer's error, else fails with the peer lost or
    /// [`TcpError::LenderFailed`] (see [`TcpOp`](super::TcpOp)'s waits).
    ///
    /// # Errors
    /// None today (the failure comes from the wait).
    pub(super) fn piece_failed(
        &mut self,
        name: &str,
        seq: Option<u64>,
        peer: u32,
        desc: PieceDesc,
        e: LentReadError,
        (before, msg_len): (u64, u64),
    ) -> Result<(), TcpError> {
        let pid = self.peers[peer as usize].cma_pid.unwrap_or(0);
        let found = match e {
            LentReadError::Read(e) => {
                // The peer's process may be gone because its op failed and
                // it exited at once: its abort frame, which names the
                // cause, is then still in the socket. Like a withdrawn
                // loan, wait for it (or the close) up to WITHDRAWN_GRACE
                // before reporting the peer lost.
                let why = cma_failure(desc, pid, &e, before, msg_len);
                tracing::warn!("hccl rank {}: rank {peer}: {why}", self.rank);
                let mut e = self.lost(name, seq.unwrap_or(0), peer);
                if let TcpError::PeerLost { reason, .. } = &mut e {
                    *reason = why;
                }
                self.peers[peer as usize].cma_pid = None;
                self.matcher.stop_receiving(peer);
                self.health
                    .withdraw(peer, e, Instant::now() + WITHDRAWN_GRACE);
                return Ok(());
            }
            LentReadError::Withdrawn { found } => found,
        };
        let e = TcpError::LenderFailed {
            op: name.to_string(),
            seq: seq.unwrap_or(0),
            rank: self.rank,
            peer,
            len: desc.len,
            word: desc.word,
            expected: desc.expected,
            found,
        };
        tracing::debug!("hccl rank {}: {e}", self.rank);
        (self.health).withdraw(peer, e, Instant::now() + WITHDRAWN_GRACE);
        Ok(())
    }

    /// The error for a message or receive the matcher refused, for op
    /// `name` `seq` (whose `info` describes a signature disagreement).
    pub(super) fn match_error(
        &mut self,
        e: MatchError,
        name: &str,
        peer: u32,
        seq: u64,
        info: Option<&OpInfo<'_>>,
    ) -> TcpError {
        match e {
            MatchError::Mismatch { peer, sig } => match info {
                Some(info) => TcpError::Mismatch {
                    op: name.to_string(),
                    seq,
                    detail: (info.describe)(&sig, peer),
                },
                None => self.protocol(peer, e.to_string()),
            },
            MatchError::Length {
                peer,
                tag,
                expected,
                received,
            } => TcpError::LengthMismatch {
                op: name.to_string(),
                seq,
                rank: self.rank,
                peer,
                tag,
                expected,
                received,
            },
            MatchError::TooManyEarly | MatchError::Duplicate { .. } => {
                self.protocol(peer, e.to_string())
            }
            MatchError::TwoReceives { .. } | MatchError::Overflow { .. } => {
                TcpError::InvalidArgument(e.to_string())
            }
        }
    }

    pub(super) fn protocol(&mut self, peer: u32, what: String) -> TcpError {
        tracing::warn!(
            "hccl rank {}: protocol error from rank {peer}: {what}",
            self.rank
        );
        self.peers[peer as usize].dead = Some(what.clone());
        TcpError::InvalidArgument(format!(
            "rank {peer} sent a frame this rank cannot place: {what}"
        ))
    }

    /// The error for a lost `peer` during op `seq`, with the bytes this
    /// rank was waiting for from it.
    pub(super) fn lost(&self, name: &str, seq: u64, peer: u32) -> TcpError {
        let receiving = self.matcher.posted_from(peer);
        let sending = self.peers[peer as usize].sends.oldest();
        self.lost_sending(name, seq, peer, sending.filter(|_| !receiving))
    }

    /// [`TcpRank::lost`] for a send of `sending` bytes, if `Some`.
    pub(super) fn lost_sending(
        &self,
        name: &str,
        seq: u64,
        peer: u32,
        sending: Option<u64>,
    ) -> TcpError {
        // A posted receive, else the message arriving early when it broke.
        let (expected, received) = self.matcher.progress_from(peer).unwrap_or((0, 0));
        let (expected, received) = sending.map_or((expected, received), |n| (n, 0));
        TcpError::PeerLost {
            op: name.to_string(),
            seq,
            rank: self.rank,
            peer,
            expected,
            received,
            sending: sending.is_some(),
            reason: self.peers[peer as usize].dead.clone().unwrap_or_default(),
        }
    }
}

/// The words of a failed piece copy, for [`TcpError::PeerLost`].
pub(super) fn cma_failure(
    desc: PieceDesc,
    pid: u32,
    e: &cma::ReadError,
    before: u64,
    len: u64,
) -> String {
    format!(
        "cross-memory read of {} bytes at {:#x} from pid {pid} failed after {} bytes: {}; {before} of {len} bytes of the message were read",
        desc.len, desc.addr, e.got, e.reason
    )
}

/// Applies `data`, the bytes of a message from `offset` on, to the
/// receive's regions `kind`.
pub(super) fn apply(
    bufs: &mut OpBuffers<'_>,
    dtype: hccl_algos::DataType,
    kind: RecvKind,
    offset: u64,
    data: &[u8],
) -> Result<(), TcpError> {
    let n = data.len() as u64;
    let sub = |r: Region| Region::new(r.buf, r.offset + offset, n);
    match kind {
        RecvKind::Copy { dst } => copy(bufs.get_mut(sub(dst))?, data),
        RecvKind::Reduce { local, dst, op } => {
            bufs.reduce_pair_from(dtype, op, sub(local), sub(dst), data)?;
        }
    }
    Ok(())
}
