//! Failure and abort handling: whether the communicator is still usable,
//! what a failed op tells the peers, how a peer's abort or a lost
//! connection fails the running op, withdrawn loans and their grace, and
//! the words of a timeout and of a lost peer.
//!
//! Any error fails the op, is sent to every live peer as an abort, and
//! leaves the communicator broken (every later op fails), as with HCCL and
//! NCCL after an error. [`Health`] keeps that state and answers with what
//! to tell the peers ([`Tell`]); the driver sends it. Time comes in as
//! `now`.

use std::time::Instant;

use crate::tcp::error::{told_reason, AbortKind, TcpError};
use crate::tcp::rank::is_p2p_seq;

/// An abort frame to send every live peer: for op `seq`, with `reason`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Tell {
    /// The failed op's seq.
    pub(crate) seq: u64,
    /// The words the peers' errors quote.
    pub(crate) reason: String,
    /// The failure's kind, which the peers report too.
    pub(crate) kind: AbortKind,
}

/// What a lost connection means for the running op.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Nothing: a goodbye with nothing owed, or a graceful end between ops.
    Fine,
    /// The op was waiting on the peer: it fails, the peer lost.
    Lost,
    /// Lost between ops: worth a warning; the next op that needs the peer
    /// fails.
    BetweenOps,
}

/// What a connection's end means: `graceful` (a goodbye), `waiting` (the
/// running op sends to or receives from the peer), `running` (an op runs).
pub(crate) fn on_closed(graceful: bool, waiting: bool, running: bool) -> Closed {
    match (graceful, waiting, running) {
        (_, true, true) => Closed::Lost,
        (true, _, _) => Closed::Fine,
        _ => Closed::BetweenOps,
    }
}

/// The state of a rank's communicator as far as failures go.
#[derive(Debug)]
pub(crate) struct Health {
    /// This rank.
    rank: u32,
    /// The error that broke the communicator.
    broken: Option<TcpError>,
    /// The reason of a local `abort_with` that failed the running op, for
    /// the failure to tell the peers.
    abort_reason: Option<String>,
    /// A failed op left telling the peers to the caller's `abort_with` (a
    /// p2p length mismatch, which the caller words in elements).
    deferred: bool,
    /// Destroyed or aborted: no op may run.
    closed: bool,
    /// Per peer: it withdrew a loan this rank was reading (its op failed):
    /// the error to fail with if its abort frame has not come by the
    /// instant.
    withdrawn: Vec<Option<(TcpError, Instant)>>,
}

impl Health {
    /// A healthy communicator of `nranks`, seen by `rank`.
    pub(crate) fn new(rank: u32, nranks: u32) -> Self {
        Health {
            rank,
            broken: None,
            abort_reason: None,
            deferred: false,
            closed: false,
            withdrawn: vec![None; nranks as usize],
        }
    }

    /// The error that broke the communicator, if any.
    pub(crate) fn broken(&self) -> Option<&TcpError> {
        self.broken.as_ref()
    }

    /// True if destroyed or aborted.
    pub(crate) fn closed(&self) -> bool {
        self.closed
    }

    /// Neither broken nor closed.
    pub(crate) fn usable(&self) -> bool {
        self.broken.is_none() && !self.closed
    }

    /// Breaks the communicator with `e` unless it is broken already.
    pub(crate) fn break_with(&mut self, e: TcpError) {
        self.broken.get_or_insert(e);
    }

    /// Whether op `seq` (named `name`) may start.
    ///
    /// # Errors
    /// [`TcpError::Broken`] after a destroy or an earlier failure; the
    /// peer's [`TcpError::Aborted`] if it aborted this very op while this
    /// rank finished the last one.
    pub(crate) fn may_begin(&self, seq: u64, name: &str) -> Result<(), TcpError> {
        if self.closed {
            return Err(TcpError::Broken(
                "the communicator was destroyed or aborted".into(),
            ));
        }
        match &self.broken {
            Some(TcpError::Aborted {
                seq: s,
                by,
                reason,
                kind,
                ..
            }) if *s == seq => Err(TcpError::Aborted {
                op: name.to_string(),
                seq,
                by: *by,
                reason: reason.clone(),
                kind: *kind,
            }),
            Some(e) => Err(TcpError::Broken(e.to_string())),
            None => Ok(()),
        }
    }

    /// The user aborted the running op (`reason`, if given, goes to the
    /// peers when the op fails): the error it fails with.
    pub(crate) fn on_local_abort(&mut self, reason: Option<String>) -> TcpError {
        match reason {
            None => TcpError::Broken(format!("rank {} was aborted by the user", self.rank)),
            Some(reason) => {
                self.abort_reason = Some(reason.clone());
                TcpError::Broken(reason)
            }
        }
    }

    /// `peer` aborted op `seq` with `reason` (a failure of `kind`) while
    /// op `running` (named
    /// `name`) runs here, if any.
    ///
    /// # Errors
    /// [`TcpError::Aborted`] for the running op, unless the abort is of a
    /// later collective: the peer finished this one (its messages for it
    /// came first, in order on the connection), so it may still complete
    /// and the next op fails.
    pub(crate) fn on_peer_abort(
        &mut self,
        peer: u32,
        seq: u64,
        reason: String,
        kind: AbortKind,
        running: Option<u64>,
        name: &str,
    ) -> Result<(), TcpError> {
        let later = |c: u64| !is_p2p_seq(c) && !is_p2p_seq(seq) && seq > c;
        if running.is_some_and(later) {
            self.break_with(TcpError::Aborted {
                op: "op".into(),
                seq,
                by: peer,
                reason,
                kind,
            });
            return Ok(());
        }
        Err(TcpError::Aborted {
            op: name.to_string(),
            seq: running.unwrap_or(seq),
            by: peer,
            reason,
            kind,
        })
    }

    /// Op `seq` failed with `e`: breaks the communicator and says what to
    /// tell the peers. Nothing if the error came from a peer's abort or a
    /// broken communicator (they know), or if the caller tells them (a p2p
    /// length mismatch, reworded in elements by the caller's
    /// `abort_with`; if it does not, [`Health::take_deferred`] does).
    pub(crate) fn on_op_failed(&mut self, e: &TcpError, seq: u64) -> Option<Tell> {
        let tell = if let Some(reason) = self.abort_reason.take() {
            Some(Tell {
                seq,
                reason,
                kind: AbortKind::Failed,
            })
        } else if matches!(e, TcpError::LengthMismatch { .. }) && is_p2p_seq(seq) {
            self.deferred = true;
            None
        } else if !matches!(e, TcpError::Aborted { .. } | TcpError::Broken(_)) {
            Some(Tell {
                seq,
                reason: self.own_words(e),
                kind: AbortKind::of(e),
            })
        } else {
            None
        };
        self.break_with(e.clone());
        tell
    }

    /// The abort left to the caller, if the caller went on without it
    /// (next op or close): the transport's own words, for the op after
    /// `last_done`.
    pub(crate) fn take_deferred(&mut self, last_done: Option<u64>) -> Option<Tell> {
        if !std::mem::take(&mut self.deferred) {
            return None;
        }
        let e = self.broken.as_ref()?;
        Some(Tell {
            seq: next_seq(last_done),
            reason: self.own_words(e),
            kind: AbortKind::of(e),
        })
    }

    /// The caller aborts the communicator with `reason`, a failure of
    /// `kind` (after the op after `last_done`, if any, failed): what to
    /// tell the peers. Nothing if closed, or if a failed op has told them
    /// already (the deferred abort is this one). Closes the communicator.
    pub(crate) fn abort_with(
        &mut self,
        reason: &str,
        kind: AbortKind,
        last_done: Option<u64>,
    ) -> Option<Tell> {
        if self.closed {
            return None;
        }
        let tell = (self.broken.is_none() || self.deferred).then(|| Tell {
            seq: next_seq(last_done),
            reason: reason.to_string(),
            kind,
        });
        self.deferred = false;
        self.break_with(TcpError::Broken(reason.to_string()));
        tell
    }

    /// Closes the communicator (destroy or abort); true if it was open.
    pub(crate) fn close(&mut self) -> bool {
        !std::mem::replace(&mut self.closed, true)
    }

    /// `peer` withdrew a loan, or its piece could not be read: fail with
    /// `e` at `until` unless its abort frame comes first (the first such
    /// error of the peer stays).
    pub(crate) fn withdraw(&mut self, peer: u32, e: TcpError, until: Instant) {
        self.withdrawn[peer as usize].get_or_insert((e, until));
    }

    /// True if `peer` withdrew a loan (its later pieces are dropped).
    pub(crate) fn is_withdrawn(&self, peer: u32) -> bool {
        self.withdrawn[peer as usize].is_some()
    }

    /// The earliest withdrawn loan's grace: its error and instant.
    pub(crate) fn grace(&self) -> Option<&(TcpError, Instant)> {
        self.withdrawn.iter().flatten().min_by_key(|w| w.1)
    }

    /// The error of a withdrawn loan whose grace is over at `now`.
    pub(crate) fn grace_over(&self, now: Instant) -> Option<TcpError> {
        self.grace().filter(|w| now >= w.1).map(|w| w.0.clone())
    }

    /// `e`'s words for the peers ([`told_reason`]: "rank R failed: ..."
    /// without the op prefix, which theirs has).
    fn own_words(&self, e: &TcpError) -> String {
        told_reason(self.rank, &e.to_string())
    }
}

/// The collective after `last_done`.
fn next_seq(last_done: Option<u64>) -> u64 {
    last_done.map_or(0, |d| d + 1)
}

/// What this rank waited for when op `seq` timed out, for the timeout's
/// words.
#[derive(Debug, Default)]
pub(crate) struct Stall {
    /// A peer whose early-message budget is full: (peer, bytes held,
    /// bound).
    pub(crate) full: Option<(u32, u64, u64)>,
    /// Posted receives: (peer, tag, bytes received, length).
    pub(crate) posted: Vec<(u32, u32, u64, u64)>,
    /// Peers whose signature has not come (the op not agreed yet).
    pub(crate) missing: Vec<u32>,
    /// Peers that said they were late and not yet that they agreed.
    pub(crate) unconfirmed: Vec<u32>,
    /// Per peer: messages sent and not yet taken, (peer, count).
    pub(crate) sends: Vec<(u32, u32)>,
}

/// The timeout error of op `name` `seq` on `rank` of `nranks` after `secs`
/// seconds, waiting for `stall`.
pub(crate) fn timeout_error(
    name: &str,
    seq: u64,
    rank: u32,
    nranks: u32,
    secs: f64,
    mut stall: Stall,
) -> TcpError {
    if let Some((peer, held, bound)) = stall.full {
        return TcpError::BufferFull {
            op: name.to_string(),
            seq,
            rank,
            peer,
            held,
            bound,
        };
    }
    // Posted receives by peer, in tag order; a sliced op can have dozens
    // in flight per peer, so more than three are summed up.
    // A rank that never called the op is named once, as the cause: its
    // posted receives say nothing more.
    stall.posted.retain(|p| !stall.missing.contains(&p.0));
    stall.posted.sort_unstable();
    let mut waits: Vec<String> = Vec::new();
    for msgs in stall.posted.chunk_by(|a, b| a.0 == b.0) {
        let peer = msgs[0].0;
        if msgs.len() <= 3 {
            waits.extend(msgs.iter().map(|(_, tag, got, len)| {
                format!("rank {peer} (tag {tag}: received {got} of {len} bytes)")
            }));
        } else {
            let (got, len) = msgs.iter().fold((0, 0), |(g, l), m| (g + m.2, l + m.3));
            let (first, last) = (msgs[0].1, msgs[msgs.len() - 1].1);
            waits.push(format!(
                "rank {peer} ({} messages, tags {first}..={last}: received {got} of {len} bytes)",
                msgs.len()
            ));
        }
    }
    if !stall.missing.is_empty() {
        // The cause comes first: the rest waits on it.
        let arrived: Vec<u32> = (0..nranks).filter(|p| !stall.missing.contains(p)).collect();
        waits.insert(
            0,
            format!(
                "{}, which never called the op (arrived: {})",
                rank_list(&stall.missing),
                rank_list(&arrived)
            ),
        );
    } else if !stall.unconfirmed.is_empty() {
        waits.push(format!(
            "{} to confirm that every rank called the op alike (still waiting for another rank's signature)",
            rank_list(&stall.unconfirmed)
        ));
    }
    let mut peers: Vec<u32> = stall.missing.clone();
    peers.extend(stall.posted.iter().map(|p| p.0));
    peers.extend(&stall.unconfirmed);
    peers.extend(stall.sends.iter().map(|s| s.0));
    peers.sort_unstable();
    peers.dedup();
    for (p, n) in stall.sends {
        waits.push(format!("rank {p} to take {n} sent message(s)"));
    }
    TcpError::Timeout {
        peers,
        op: name.to_string(),
        seq,
        rank,
        secs,
        waiting: if waits.is_empty() {
            "nothing (internal)".into()
        } else {
            waits.join(", ")
        },
    }
}

/// "rank 3" or "ranks [1, 3]".
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    match ranks {
        [r] => format!("rank {r}"),
        _ => format!("ranks {ranks:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::P2P_SEQ_BIT;
    use std::time::Duration;

    fn mismatch(seq: u64) -> TcpError {
        TcpError::LengthMismatch {
            op: "Recv".into(),
            seq,
            rank: 1,
            peer: 0,
            tag: 0,
            expected: 4,
            received: 5,
        }
    }

    #[test]
    fn a_failed_op_tells_the_peers_once_and_breaks_the_communicator() {
        let mut h = Health::new(1, 2);
        assert!(h.may_begin(0, "AllReduce").is_ok());
        let e = TcpError::InvalidArgument("bad".into());
        let tell = h.on_op_failed(&e, 0).unwrap();
        assert_eq!(tell.seq, 0);
        assert!(
            tell.reason.starts_with("rank 1 failed: "),
            "{}",
            tell.reason
        );
        assert_eq!(tell.kind, AbortKind::Failed);
        assert!(matches!(
            h.may_begin(1, "AllReduce"),
            Err(TcpError::Broken(_))
        ));
        // An error that came from a peer is not sent back.
        let mut h = Health::new(1, 2);
        let aborted = TcpError::Aborted {
            op: "AllReduce".into(),
            seq: 0,
            by: 0,
            reason: "x".into(),
            kind: AbortKind::Timeout,
        };
        assert_eq!(h.on_op_failed(&aborted, 0), None);
        assert!(!h.usable());
    }

    #[test]
    fn a_local_abort_reason_goes_to_the_peers() {
        let mut h = Health::new(1, 2);
        let e = h.on_local_abort(Some("caller's buffer too small".into()));
        assert!(matches!(&e, TcpError::Broken(r) if r == "caller's buffer too small"));
        let tell = h.on_op_failed(&e, 4).unwrap();
        assert_eq!(
            (tell.seq, tell.reason.as_str()),
            (4, "caller's buffer too small")
        );
        let plain = Health::new(1, 2).on_local_abort(None);
        assert!(plain.to_string().contains("rank 1 was aborted by the user"));
    }

    #[test]
    fn a_p2p_length_mismatch_is_told_by_the_caller_or_else_by_the_next_op() {
        let seq = P2P_SEQ_BIT | 2;
        let mut h = Health::new(1, 2);
        assert_eq!(
            h.on_op_failed(&mismatch(seq), seq),
            None,
            "left to the caller"
        );
        // The caller words it and aborts: sent once, in its words.
        let tell = h
            .abort_with("count: rank 0 sends 5", AbortKind::Mismatch, Some(6))
            .unwrap();
        assert_eq!(
            (tell.seq, tell.reason.as_str()),
            (7, "count: rank 0 sends 5")
        );
        assert_eq!(h.take_deferred(Some(6)), None);
        // The caller goes on instead: the transport's words at the next op.
        let mut h = Health::new(1, 2);
        h.on_op_failed(&mismatch(seq), seq);
        let tell = h.take_deferred(None).unwrap();
        assert_eq!(tell.seq, 0);
        assert!(
            tell.reason.starts_with("rank 1 failed: "),
            "{}",
            tell.reason
        );
        assert_eq!(tell.kind, AbortKind::Mismatch);
        assert_eq!(h.take_deferred(None), None, "once");
        // A communicator broken by an op that told its peers only closes.
        let mut h = Health::new(1, 2);
        h.on_op_failed(&TcpError::InvalidArgument("x".into()), 0);
        assert_eq!(h.abort_with("later", AbortKind::Failed, Some(0)), None);
    }

    #[test]
    fn a_peer_abort_of_a_later_op_fails_the_next_op_not_this_one() {
        let mut h = Health::new(1, 3);
        assert!(h
            .on_peer_abort(2, 6, "r".into(), AbortKind::Timeout, Some(5), "AllReduce")
            .is_ok());
        // The next op, the aborted one, fails with the peer's abort.
        let e = h.may_begin(6, "Broadcast").unwrap_err();
        assert!(matches!(e, TcpError::Aborted { seq: 6, by: 2, ref op, .. } if op == "Broadcast"));
        // It keeps its kind: this rank reports the peer's timeout as one.
        assert_eq!(AbortKind::of(&e), AbortKind::Timeout);
        // An abort of this op (or of a p2p op) fails it at once.
        let mut h = Health::new(1, 3);
        let e = h.on_peer_abort(2, 5, "r".into(), AbortKind::Failed, Some(5), "AllReduce");
        assert!(matches!(e, Err(TcpError::Aborted { seq: 5, by: 2, .. })));
        let p2p = P2P_SEQ_BIT | 9;
        assert!(h
            .on_peer_abort(2, p2p, "r".into(), AbortKind::Failed, Some(5), "x")
            .is_err());
    }

    #[test]
    fn abort_and_destroy_close_once() {
        let mut h = Health::new(0, 2);
        assert!(h
            .abort_with("rank 0 aborted the communicator", AbortKind::Failed, None)
            .is_some());
        assert!(h.close());
        assert!(!h.close());
        assert_eq!(h.abort_with("again", AbortKind::Failed, None), None);
        let e = h.may_begin(0, "AllReduce").unwrap_err();
        assert!(e.to_string().contains("destroyed or aborted"));
    }

    #[test]
    fn a_withdrawn_loan_fails_the_op_when_its_grace_is_over() {
        let t0 = Instant::now();
        let mut h = Health::new(0, 3);
        let e1 = TcpError::InvalidArgument("one".into());
        let e2 = TcpError::InvalidArgument("two".into());
        h.withdraw(2, e2.clone(), t0 + Duration::from_secs(2));
        h.withdraw(1, e1.clone(), t0 + Duration::from_secs(1));
        h.withdraw(1, e2, t0 + Duration::from_secs(3));
        assert!(h.is_withdrawn(1) && h.is_withdrawn(2) && !h.is_withdrawn(0));
        assert_eq!(h.grace().map(|g| g.1), Some(t0 + Duration::from_secs(1)));
        assert!(h.grace_over(t0).is_none());
        let over = h.grace_over(t0 + Duration::from_secs(1));
        assert_eq!(over.map(|e| e.to_string()), Some(e1.to_string()));
    }

    #[test]
    fn a_lost_connection_fails_the_op_only_if_it_waits_on_the_peer() {
        assert_eq!(on_closed(true, false, true), Closed::Fine);
        assert_eq!(on_closed(true, true, true), Closed::Lost);
        assert_eq!(on_closed(false, true, true), Closed::Lost);
        assert_eq!(on_closed(false, false, true), Closed::BetweenOps);
        assert_eq!(on_closed(false, true, false), Closed::BetweenOps);
        assert_eq!(on_closed(true, true, false), Closed::Fine);
    }

    #[test]
    fn a_timeout_names_the_missing_ranks_first_and_sums_up_long_lists() {
        let stall = Stall {
            posted: vec![
                (2, 1, 0, 8),
                (1, 9, 4, 8),
                (2, 0, 0, 8),
                (2, 3, 0, 8),
                (2, 2, 1, 8),
                (3, 5, 0, 8),
            ],
            missing: vec![3],
            sends: vec![(1, 2)],
            ..Stall::default()
        };
        let e = timeout_error("AllReduce", 4, 0, 4, 1.5, stall);
        let TcpError::Timeout { waiting, peers, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(peers, [1, 2, 3]);
        assert_eq!(
            waiting,
            "rank 3, which never called the op (arrived: ranks [0, 1, 2]), \
             rank 1 (tag 9: received 4 of 8 bytes), \
             rank 2 (4 messages, tags 0..=3: received 1 of 32 bytes), \
             rank 1 to take 2 sent message(s)"
        );
        let full = Stall {
            full: Some((2, 100, 100)),
            ..Stall::default()
        };
        assert!(matches!(
            timeout_error("x", 0, 0, 3, 1.0, full),
            TcpError::BufferFull { peer: 2, .. }
        ));
        let idle = timeout_error("x", 0, 0, 3, 1.0, Stall::default());
        assert!(idle.to_string().contains("nothing (internal)"));
    }
}
