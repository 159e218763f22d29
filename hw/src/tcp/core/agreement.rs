//! The consistency check around all ranks: every rank sends every peer
//! its op signature when an op starts (an op-start frame), and an op
//! writes the user's buffers only once every peer's signature has come and
//! equals this rank's (see [`crate::tcp::rank`]'s docs, "Consistency" and
//! "One outcome").
//!
//! [`Starts`] keeps what peers said, across ops (a peer may be ops ahead);
//! [`OpCheck`] is one op's side: agreed yet, steps held back until then,
//! and the "late" word at half the timeout. Time comes in as `now`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use hccl_algos::schedule::{BufKind, Op, StepId};

use crate::tcp::rank::{is_p2p_seq, AGREED_TAG, LATE_TAG, MAX_EARLY_MESSAGES};
use crate::tcp::wire::Signature;

/// Why an op-start frame or the check failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StartError {
    /// More than [`MAX_EARLY_MESSAGES`] op starts are pending.
    TooMany,
    /// `peer`'s signature `sig` for the op differs from this rank's.
    Mismatch {
        /// The peer.
        peer: u32,
        /// Its signature.
        sig: Signature,
    },
}

/// What the peers said about their ops: signatures (tag 0), "late"
/// ([`LATE_TAG`]) and "agreed" ([`AGREED_TAG`]) words, by (peer, op seq).
#[derive(Debug, Default)]
pub(crate) struct Starts {
    sigs: HashMap<(u32, u64), Signature>,
    agreed: HashSet<(u32, u64)>,
    late: HashSet<(u32, u64)>,
}

impl Starts {
    /// An op-start frame from `peer` for op `seq` with `tag` and `sig`.
    /// `op`: the running op's seq and signature, checked at once.
    ///
    /// # Errors
    /// [`StartError::TooMany`]; [`StartError::Mismatch`] for the running
    /// op (the frame is kept: a timeout report names who arrived).
    pub(crate) fn on_frame(
        &mut self,
        peer: u32,
        seq: u64,
        tag: u32,
        sig: &Signature,
        op: Option<(u64, &Signature)>,
    ) -> Result<(), StartError> {
        if self.sigs.len() + self.agreed.len() + self.late.len() >= MAX_EARLY_MESSAGES {
            return Err(StartError::TooMany);
        }
        match tag {
            AGREED_TAG => {
                self.agreed.insert((peer, seq));
            }
            LATE_TAG => {
                self.late.insert((peer, seq));
            }
            _ => {
                self.sigs.insert((peer, seq), *sig);
                if let Some((_, mine)) = op.filter(|(s, _)| *s == seq) {
                    if sig != mine {
                        return Err(StartError::Mismatch { peer, sig: *sig });
                    }
                }
            }
        }
        Ok(())
    }

    /// True if `peer`'s signature for op `seq` has come.
    pub(crate) fn has(&self, peer: u32, seq: u64) -> bool {
        self.sigs.contains_key(&(peer, seq))
    }

    /// The peers of `nranks` (other than `me`) whose signature for op
    /// `seq` has not come, ascending.
    pub(crate) fn missing(&self, me: u32, nranks: u32, seq: u64) -> Vec<u32> {
        (0..nranks)
            .filter(|&p| p != me && !self.has(p, seq))
            .collect()
    }

    /// Compares the signatures for op `seq` that came with `mine`: true
    /// once every peer's (of `nranks`, other than `me`) has and agrees.
    ///
    /// # Errors
    /// [`StartError::Mismatch`] naming the lowest peer that differs.
    pub(crate) fn check(
        &self,
        me: u32,
        nranks: u32,
        seq: u64,
        mine: &Signature,
    ) -> Result<bool, StartError> {
        let mut all = true;
        for p in (0..nranks).filter(|&p| p != me) {
            match self.sigs.get(&(p, seq)) {
                Some(sig) if sig != mine => {
                    return Err(StartError::Mismatch { peer: p, sig: *sig })
                }
                Some(_) => {}
                None => all = false,
            }
        }
        Ok(all)
    }

    /// The peers that said they were late for op `seq` and have not yet
    /// said that every signature agreed, ascending.
    pub(crate) fn unconfirmed(&self, nranks: u32, seq: u64) -> impl Iterator<Item = u32> + '_ {
        (0..nranks)
            .filter(move |&p| self.late.contains(&(p, seq)) && !self.agreed.contains(&(p, seq)))
    }

    /// The collectives peers started after `last_done`: (peer, seq,
    /// signature), by seq then peer.
    pub(crate) fn ahead(&self, last_done: Option<u64>) -> Vec<(u32, u64, Signature)> {
        let mut v: Vec<(u32, u64, Signature)> = (self.sigs.iter())
            .filter(|((_, s), _)| !is_p2p_seq(*s) && last_done.is_none_or(|d| *s > d))
            .map(|(&(p, s), sig)| (p, s, *sig))
            .collect();
        v.sort_unstable_by_key(|&(p, s, _)| (s, p));
        v
    }

    /// Forgets everything about ops up to `seq` (it finished here).
    pub(crate) fn retire(&mut self, seq: u64) {
        self.sigs.retain(|(_, s), _| *s > seq);
        self.agreed.retain(|(_, s)| *s > seq);
        self.late.retain(|(_, s)| *s > seq);
    }
}

/// One op's side of the check.
#[derive(Debug)]
pub(crate) struct OpCheck {
    /// Every peer's signature has arrived and equals this rank's (always
    /// true for p2p ops and a one-rank communicator).
    agreed: bool,
    /// Steps that write the user's buffers, posted before `agreed`.
    deferred: Vec<(StepId, Op)>,
    /// When this rank says it is late if not agreed by then.
    late_at: Option<Instant>,
    /// It said so, and owes its peers an [`AGREED_TAG`].
    warned: bool,
}

impl OpCheck {
    /// The check of an op started at `now`: `ring` if it has op-start
    /// frames (a collective on more than one rank); `timeout` is
    /// `HCCL_EXEC_TIMEOUT`.
    pub(crate) fn new(ring: bool, now: Instant, timeout: Option<Duration>) -> Self {
        OpCheck {
            agreed: !ring,
            deferred: Vec::new(),
            late_at: timeout.filter(|_| ring).map(|t| now + t / 2),
            warned: false,
        }
    }

    /// Every peer's signature came and agrees.
    pub(crate) fn agreed(&self) -> bool {
        self.agreed
    }

    /// Holds `op` back if it writes the user's buffers before the op is
    /// agreed; false: run it now.
    pub(crate) fn hold(&mut self, step: StepId, op: &Op) -> bool {
        if self.agreed || !writes_user(op) {
            return false;
        }
        self.deferred.push((step, *op));
        true
    }

    /// True (once) when, at `now`, this rank must tell its peers it is
    /// late ([`LATE_TAG`]).
    pub(crate) fn late_due(&mut self, now: Instant) -> bool {
        if self.agreed || self.warned || self.late_at.is_none_or(|l| now < l) {
            return false;
        }
        self.warned = true;
        true
    }

    /// When [`OpCheck::late_due`] turns true, if it still may.
    pub(crate) fn late_at(&self) -> Option<Instant> {
        self.late_at.filter(|_| !self.agreed && !self.warned)
    }

    /// The op is agreed: returns whether to tell the peers so
    /// ([`AGREED_TAG`], owed after a "late") and the steps held back, to
    /// run now in posting order.
    pub(crate) fn agree(&mut self) -> (bool, Vec<(StepId, Op)>) {
        self.agreed = true;
        (self.warned, std::mem::take(&mut self.deferred))
    }
}

/// True if `op` writes the user's buffers (anything but scratch).
fn writes_user(op: &Op) -> bool {
    match *op {
        Op::Send { .. } => false,
        Op::Recv { dst, .. }
        | Op::RecvReduce { dst, .. }
        | Op::Copy { dst, .. }
        | Op::LocalReduce { dst, .. }
        | Op::Divide { dst, .. } => dst.buf != BufKind::Scratch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algos::schedule::Region;

    const A: Signature = [1; 32];
    const B: Signature = [2; 32];

    #[test]
    fn the_op_agrees_once_every_peer_signature_has_come_in_any_order() {
        let mut s = Starts::default();
        assert_eq!(s.check(1, 4, 5, &A), Ok(false));
        s.on_frame(3, 5, 0, &A, Some((5, &A))).unwrap();
        // A peer's start of a later op is kept and not compared yet.
        s.on_frame(0, 6, 0, &B, Some((5, &A))).unwrap();
        assert_eq!(s.missing(1, 4, 5), vec![0, 2]);
        s.on_frame(0, 5, 0, &A, None).unwrap();
        assert_eq!(s.check(1, 4, 5, &A), Ok(false));
        s.on_frame(2, 5, 0, &A, None).unwrap();
        assert_eq!(s.check(1, 4, 5, &A), Ok(true));
        assert_eq!(
            s.ahead(Some(4)),
            vec![(0, 5, A), (2, 5, A), (3, 5, A), (0, 6, B)]
        );
        s.retire(5);
        assert_eq!(s.ahead(None), vec![(0, 6, B)]);
    }

    #[test]
    fn a_different_signature_is_named_by_its_peer() {
        let mut s = Starts::default();
        assert_eq!(
            s.on_frame(2, 5, 0, &B, Some((5, &A))),
            Err(StartError::Mismatch { peer: 2, sig: B })
        );
        s.on_frame(0, 5, 0, &B, None).unwrap();
        // The lowest peer that differs, even with others still missing.
        assert_eq!(
            s.check(1, 4, 5, &A),
            Err(StartError::Mismatch { peer: 0, sig: B })
        );
    }

    #[test]
    fn a_late_peer_is_unconfirmed_until_it_says_it_agreed() {
        let mut s = Starts::default();
        s.on_frame(2, 5, LATE_TAG, &[0; 32], None).unwrap();
        s.on_frame(3, 6, LATE_TAG, &[0; 32], None).unwrap();
        assert_eq!(s.unconfirmed(4, 5).collect::<Vec<_>>(), vec![2]);
        s.on_frame(2, 5, AGREED_TAG, &[0; 32], None).unwrap();
        assert_eq!(s.unconfirmed(4, 5).count(), 0);
        assert!(!s.has(2, 5), "late and agreed words are no signature");
    }

    #[test]
    fn op_starts_are_bounded() {
        let mut s = Starts::default();
        for seq in 0..MAX_EARLY_MESSAGES as u64 {
            s.on_frame(1, seq, 0, &A, None).unwrap();
        }
        assert_eq!(
            s.on_frame(1, u64::MAX, 0, &A, None),
            Err(StartError::TooMany)
        );
    }

    #[test]
    fn an_op_says_it_is_late_once_at_half_its_timeout() {
        let t0 = Instant::now();
        let mut c = OpCheck::new(true, t0, Some(Duration::from_secs(10)));
        assert_eq!(c.late_at(), Some(t0 + Duration::from_secs(5)));
        assert!(!c.late_due(t0 + Duration::from_secs(4)));
        assert!(c.late_due(t0 + Duration::from_secs(5)));
        assert!(!c.late_due(t0 + Duration::from_secs(6)), "once");
        assert_eq!(c.late_at(), None);
        // It said "late", so it owes its peers "agreed".
        assert_eq!(c.agree(), (true, vec![]));
        // Without a timeout, or agreed in time, it never does.
        let mut c = OpCheck::new(true, t0, None);
        assert!(!c.late_due(t0 + Duration::from_secs(1000)));
        assert_eq!(c.agree(), (false, vec![]));
    }

    #[test]
    fn steps_that_write_user_buffers_wait_for_agreement() {
        let out = Region::new(BufKind::Output, 0, 8);
        let scratch = Region::new(BufKind::Scratch, 0, 8);
        let recv_out = Op::Recv {
            peer: 1,
            tag: 0,
            dst: out,
        };
        let recv_scratch = Op::Recv {
            peer: 1,
            tag: 1,
            dst: scratch,
        };
        let send = Op::Send {
            peer: 1,
            tag: 2,
            src: out,
        };
        let mut c = OpCheck::new(true, Instant::now(), None);
        assert!(c.hold(0, &recv_out));
        assert!(!c.hold(1, &recv_scratch));
        assert!(!c.hold(2, &send));
        assert_eq!(c.agree(), (false, vec![(0, recv_out)]));
        assert!(!c.hold(3, &recv_out), "agreed: runs at once");
        // A p2p op (no ring) holds nothing.
        let mut c = OpCheck::new(false, Instant::now(), Some(Duration::from_secs(1)));
        assert!(c.agreed() && !c.hold(0, &recv_out) && c.late_at().is_none());
    }

    /// Three ranks exchange their op starts in memory (quinn-proto's
    /// `Pair`, for a ring): each agrees once the other two have come,
    /// whatever the order.
    #[test]
    fn three_ranks_in_memory_agree() {
        let mut ranks: Vec<Starts> = (0..3).map(|_| Starts::default()).collect();
        let frames = [(2, 0), (0, 1), (1, 2), (2, 1), (0, 2), (1, 0)];
        for (i, &(from, to)) in frames.iter().enumerate() {
            ranks[to as usize]
                .on_frame(from, 0, 0, &A, Some((0, &A)))
                .unwrap();
            let agreed: Vec<bool> = (0..3)
                .map(|r| ranks[r].check(r as u32, 3, 0, &A).unwrap())
                .collect();
            // Rank r has heard from both others once both frames to it went.
            for r in 0..3u32 {
                let heard = frames[..=i].iter().filter(|f| f.1 == r).count();
                assert_eq!(agreed[r as usize], heard == 2);
            }
        }
    }
}
