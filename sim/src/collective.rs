//! Collectives from `hccl_algos` as a [`PlanSource`].

use hccl_algos::algo::{self, AlgoSpec};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind};
use hccl_algos::layout::GroupLayout;
use hccl_algos::schedule::{BufferSizes, Rank, RankPlan};
use hccl_algos::DataType;

use crate::scenario::PlanSource;

/// A collective call: its arguments, the algorithm, and where the
/// communicator's ranks sit (for hierarchical algorithms).
#[derive(Debug, Clone)]
pub struct Collective {
    /// The arguments (their `world_size` is the communicator's size).
    pub args: CollectiveArgs,
    /// The algorithm, flat or per level.
    pub algo: AlgoSpec,
    /// Server and super pod of each communicator rank.
    pub layout: GroupLayout,
}

/// nccl-tests' bus-bandwidth factor of `kind` on `n` ranks (DESIGN.md,
/// "Names and units"; nccl-tests `doc/PERFORMANCE.md`): AllReduce
/// `2(n-1)/n`; AllGather, ReduceScatter, AllToAll and their V forms,
/// Scatter and Gather `(n-1)/n`; Broadcast, Reduce, Send/Recv `1`.
pub fn busbw_factor(kind: CollectiveKind, n: u32) -> f64 {
    use CollectiveKind as K;
    let n = f64::from(n.max(1));
    match kind {
        K::AllReduce => 2.0 * (n - 1.0) / n,
        K::AllGather
        | K::ReduceScatter
        | K::AllToAll
        | K::AllToAllV
        | K::AllGatherV
        | K::ReduceScatterV
        | K::Scatter
        | K::Gather => (n - 1.0) / n,
        K::Broadcast | K::Reduce | K::SendRecv | K::BatchSendRecv | K::Barrier => 1.0,
    }
}

/// `1536` -> `1.5 KiB`, for labels.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.3} {}", UNITS[u]).replace(".000 ", " ")
    }
}

impl PlanSource for Collective {
    fn label(&self) -> String {
        format!(
            "{} {} {}",
            self.args.kind.name(),
            self.algo,
            human_bytes(self.args.message_bytes())
        )
    }

    fn dtype(&self) -> DataType {
        self.args.dtype
    }

    fn plan(&self, rank: Rank, size: u32) -> Result<(BufferSizes, RankPlan), String> {
        if size != self.args.world_size {
            return Err(format!(
                "the arguments are for {} ranks but the communicator has {size}; set world_size to the communicator size",
                self.args.world_size
            ));
        }
        algo::plan(&self.args, &self.algo, &self.layout, rank).map_err(|e| e.to_string())
    }

    fn bandwidth_basis(&self, size: u32) -> (u64, f64) {
        (
            self.args.message_bytes(),
            busbw_factor(self.args.kind, size),
        )
    }

    fn alias(&self, rank: Rank) -> Option<(u64, u64)> {
        self.args.alias(rank).map(|a| (a.input_at, a.output_at))
    }

    fn collective(&self) -> Option<&Collective> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_follow_nccl_tests() {
        assert_eq!(busbw_factor(CollectiveKind::AllReduce, 8), 1.75);
        assert_eq!(busbw_factor(CollectiveKind::AllGather, 4), 0.75);
        assert_eq!(busbw_factor(CollectiveKind::Broadcast, 4), 1.0);
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(1536), "1.500 KiB");
    }
}
