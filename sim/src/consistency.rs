//! Cross-rank argument consistency (HCCL's EI0005 "parameters differ
//! between ranks"), checked on every op rather than only the first.
//!
//! Each rank entering an op records its [`OpSignature`]. A rank whose
//! signature differs from any other member's that has entered fails, and so
//! does every member still in the op: each error names the first differing
//! field, the local and remote values and the peer (the first member, in
//! communicator-rank order, that disagrees with it), as
//! [`OpSignature::check_consistent`] words it.

use hccl_algos::collective::{MismatchError, OpSignature};

/// One member's entry into an op.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub comm_rank: u32,
    pub rank: u32,
    pub sig: OpSignature,
}

/// The signatures seen so far for one op.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpCheck {
    /// Entries sorted by communicator rank.
    pub entries: Vec<Entry>,
    /// Set once two members disagreed: every later entrant fails too.
    pub failed: bool,
}

impl OpCheck {
    /// Records `e`; returns true if the op has (now or before) a mismatch.
    pub(crate) fn enter(&mut self, e: Entry) -> bool {
        let at = self.entries.partition_point(|x| x.comm_rank < e.comm_rank);
        self.entries.insert(at, e);
        if !self.failed {
            self.failed = self.entries.iter().any(|x| x.sig != e.sig)
                && self.mismatch_of(e.comm_rank).is_some();
        }
        self.failed
    }

    /// The error of member `comm_rank`: its signature checked against the
    /// first member that disagrees with it, with that member's fabric rank.
    pub(crate) fn mismatch_of(&self, comm_rank: u32) -> Option<(MismatchError, u32)> {
        let me = self.entries.iter().find(|x| x.comm_rank == comm_rank)?;
        self.entries.iter().find_map(|x| {
            OpSignature::check_consistent(&me.sig, &x.sig, x.comm_rank)
                .err()
                .map(|e| (e, x.rank))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algos::collective::CollectiveKind;
    use hccl_algos::{DataType, ReduceOp};

    fn sig(count: u64, root: u32) -> OpSignature {
        OpSignature {
            kind: CollectiveKind::AllReduce,
            count,
            dtype: DataType::Fp32,
            op: ReduceOp::Sum,
            root,
            counts: 0,
        }
    }

    #[test]
    fn every_member_names_the_peer_that_disagrees() {
        let mut c = OpCheck::default();
        assert!(!c.enter(Entry {
            comm_rank: 0,
            rank: 10,
            sig: sig(8, 0)
        }));
        assert!(!c.enter(Entry {
            comm_rank: 2,
            rank: 12,
            sig: sig(8, 0)
        }));
        assert!(c.enter(Entry {
            comm_rank: 1,
            rank: 11,
            sig: sig(4, 0)
        }));
        let (e, peer) = c.mismatch_of(0).unwrap();
        assert_eq!(
            (e.field, e.local.as_str(), e.remote.as_str(), e.peer, peer),
            ("count", "8", "4", 1, 11)
        );
        let (e, peer) = c.mismatch_of(1).unwrap();
        assert_eq!(
            (e.local.as_str(), e.remote.as_str(), e.peer, peer),
            ("4", "8", 0, 10)
        );
    }

    #[test]
    fn fields_the_kind_ignores_do_not_fail() {
        // AllReduce has no root: a different root is not a mismatch.
        let mut c = OpCheck::default();
        c.enter(Entry {
            comm_rank: 0,
            rank: 0,
            sig: sig(8, 0),
        });
        assert!(!c.enter(Entry {
            comm_rank: 1,
            rank: 1,
            sig: sig(8, 1)
        }));
    }
}
