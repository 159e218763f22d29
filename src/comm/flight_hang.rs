//! A simulated hang ([`CommError::Hang`], one report for every rank of
//! the tree) as one rank's flight record states it, in the terms a TCP
//! rank's record uses, so that `hccl doctor` reads the simulator backend's
//! dumps as it reads TCP's: a peer that crashed is `lost` (the op fails as
//! `peer_lost`), a peer that never called the op `never_called`, a message
//! that did not move `data` (a timeout), the rank's part in a mismatch
//! `mismatch`; a rank that was not in the hung op learned of it (`remote`).

use hccl_sim::hang::{HangReport, RootCause};

use super::{CommError, Shared};
use crate::flight::{ErrorKind, WaitKind, WaitOn};

/// The hang report `e` carries, if it is one.
pub(crate) fn hang_of(e: &CommError) -> Option<&HangReport> {
    match e {
        CommError::Hang { report: h, .. } => Some(h),
        CommError::SubComm { source, .. } => hang_of(source),
        _ => None,
    }
}

/// The failure's kind and the peers (communicator ranks) it waited on,
/// for rank `sh` failing op `seq` (`None`: point-to-point) of its
/// communicator with hang report `h`.
pub(crate) fn view(sh: &Shared, seq: Option<u64>, h: &HangReport) -> (ErrorKind, Vec<WaitOn>) {
    let me = sh.global_rank(sh.rank);
    let comm_rank = |g: u32| (0..sh.size).find(|&r| sh.global_rank(r) == g);
    let mismatch = h.root_causes.iter().any(|c| {
        matches!(c, RootCause::MismatchedArguments { comm, seq: s, failed, .. }
            if *comm == sh.name && seq.is_none_or(|q| q == *s) && failed.contains(&me))
    });
    if mismatch {
        return (ErrorKind::Mismatch, Vec::new());
    }
    // A rank not in the op that hung (idle, or in another op of the
    // tree) learned of the hang.
    let in_op = h.ranks.iter().any(|r| {
        r.rank == me && r.comm.as_deref() == Some(&sh.name) && (seq.is_none() || r.seq == seq)
    });
    if !in_op {
        return (ErrorKind::Remote, Vec::new());
    }
    let mut waits: Vec<WaitOn> = Vec::new();
    let mut add = |peer: Option<u32>, why: WaitKind| {
        let Some(peer) = peer else { return };
        match waits.iter_mut().find(|w| w.peer == peer) {
            // Say the most specific: lost over data over never called.
            Some(w) if rank_of(why) > rank_of(w.why) => w.why = why,
            Some(_) => {}
            None => waits.push(WaitOn { peer, why }),
        }
    };
    for e in h.wait_for.iter().filter(|e| e.from == me) {
        let why = match e.state.as_str() {
            "peer_crashed" | "peer_crashed_before_posting" => WaitKind::Lost,
            "peer_not_posted" => WaitKind::NeverCalled,
            _ => WaitKind::Data,
        };
        add(comm_rank(e.to), why);
    }
    for c in &h.root_causes {
        if let RootCause::CrashedRank {
            rank, waited_on_by, ..
        } = c
        {
            if waited_on_by.contains(&me) {
                add(comm_rank(*rank), WaitKind::Lost);
            }
        }
    }
    waits.sort_by_key(|w| w.peer);
    let kind = if waits.iter().any(|w| w.why == WaitKind::Lost) {
        ErrorKind::PeerLost
    } else {
        ErrorKind::Timeout
    };
    (kind, waits)
}

fn rank_of(w: WaitKind) -> u8 {
    match w {
        WaitKind::NeverCalled => 0,
        WaitKind::Data => 1,
        WaitKind::FailedBy => 2,
        WaitKind::Lost => 3,
    }
}
