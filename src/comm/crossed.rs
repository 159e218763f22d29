//! What a missing rank is blocked in, for a TCP timeout (issue 13 item 4).
//! Two communicators called in different orders on different ranks wait
//! for each other until `HCCL_EXEC_TIMEOUT`: rank 0 in `A` for rank 1,
//! rank 1 in `B` for rank 0. Rank 1's op start for `B` has reached rank
//! 0's connections of `B` (idle in this process), so rank 0's timeout on
//! `A` can say where rank 1 waits. Communicators are matched by world rank
//! ([`super::Shared::global_rank`]).

use std::sync::{Arc, Mutex, Weak};

use hccl_hw::tcp::{TcpError, TcpRank};

use super::{lock, Shared};

/// What a timeout that found ranks blocked in another communicator adds,
/// on TCP and on the simulator backend.
pub(super) const DIFFERENT_ORDERS: &str = ": the ranks call these communicators' ops in different orders, which blocks both (call them in the same order on every rank)";

/// Every communicator of this process (for [`explain`]).
static COMMS: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Records `shared` (and forgets dropped communicators).
pub(super) fn register(shared: &Arc<Shared>) {
    let mut all = lock(&COMMS);
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(shared));
}

/// Every live communicator of this process (the flight recorder's
/// `SIGUSR1` dump).
pub(super) fn live() -> Vec<Arc<Shared>> {
    lock(&COMMS).iter().filter_map(Weak::upgrade).collect()
}

/// `m` locked, if it comes free within 200 ms.
fn lock_briefly<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    let end = std::time::Instant::now() + std::time::Duration::from_millis(200);
    loop {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// `e` (from op `seq` of `shared`, whose transport is `t`), with a timeout
/// that names where each rank that never called the op is blocked: an
/// idle communicator of this process on which it started an op this rank
/// has not called.
pub(super) fn explain(shared: &Shared, t: &TcpRank, seq: u64, e: TcpError) -> TcpError {
    let TcpError::Timeout {
        op,
        seq: s,
        rank,
        secs,
        mut waiting,
        peers,
    } = e
    else {
        return e;
    };
    let arrived = t.arrived(seq);
    let missing: Vec<u32> = (0..shared.size)
        .filter(|&r| r != shared.rank && !arrived.contains(&r))
        .collect();
    let others: Vec<Arc<Shared>> = lock(&COMMS)
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|o| !std::ptr::eq(Arc::as_ptr(o), shared))
        .collect();
    let mut notes = Vec::new();
    for other in others {
        // A communicator running an op on another thread is not looked at;
        // one that another rank's timeout is looking at (for at most
        // `peers_ahead`'s 50 ms) is waited for: ranks of a cycle time out
        // together, and each must see the other's idle communicator.
        let Some(mut st) = lock_briefly(&other.state) else {
            continue;
        };
        let Some(o) = st.backend.as_mut() else {
            continue;
        };
        for (peer, oseq, kind) in o.ops_ahead() {
            let g = other.global_rank(peer);
            let Some(&m) = missing.iter().find(|&&m| shared.global_rank(m) == g) else {
                continue;
            };
            notes.push(format!(
                "rank {m} waits in comm '{}' {kind} #{oseq}, which this rank has not called",
                other.name
            ));
        }
    }
    if !notes.is_empty() {
        notes.sort();
        notes.dedup();
        waiting.push_str(&format!("; {}{DIFFERENT_ORDERS}", notes.join(", ")));
    }
    TcpError::Timeout {
        op,
        seq: s,
        rank,
        secs,
        waiting,
        peers,
    }
}
