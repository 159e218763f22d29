//! What one row runs: hccl_test's collectives, sizes turned into HCCL
//! counts, and the algorithms to try.

use std::fmt;

use clap::ValueEnum;
use hccl_algos::algo::{self, AlgoSpec, Algorithm, Levels};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind, P2p};
use hccl_algos::layout::GroupLayout;
use hccl_algos::{DataType, ReduceOp};

/// The collectives `hccl test` runs, named as hccl_test's binaries
/// (`all_reduce_test` → `all_reduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum TestCollective {
    /// AllReduce.
    AllReduce,
    /// AllGather.
    AllGather,
    /// AllGatherV (uneven per-rank counts).
    #[value(name = "all_gatherv", alias = "all_gather_v")]
    AllGatherv,
    /// ReduceScatter.
    ReduceScatter,
    /// ReduceScatterV (uneven per-rank counts).
    #[value(name = "reduce_scatterv", alias = "reduce_scatter_v")]
    ReduceScatterv,
    /// Broadcast from `-r`.
    Broadcast,
    /// Reduce to `-r`.
    Reduce,
    /// Scatter from `-r`.
    Scatter,
    /// Gather to `-r`.
    Gather,
    /// AllToAll.
    #[value(name = "alltoall", alias = "all_to_all")]
    Alltoall,
    /// AllToAllV (uneven per-pair counts).
    #[value(name = "alltoallv", alias = "all_to_all_v")]
    Alltoallv,
    /// Every rank sends to the next (`r -> r+1 mod n`), as nccl-tests' sendrecv.
    SendRecv,
    /// Barrier (no data; one row of size 0).
    Barrier,
}

impl TestCollective {
    /// The library's collective kind. `send_recv` runs all ranks' transfers
    /// at once, as one BatchSendRecv.
    pub(crate) fn kind(self) -> CollectiveKind {
        use CollectiveKind as K;
        match self {
            TestCollective::AllReduce => K::AllReduce,
            TestCollective::AllGather => K::AllGather,
            TestCollective::AllGatherv => K::AllGatherV,
            TestCollective::ReduceScatter => K::ReduceScatter,
            TestCollective::ReduceScatterv => K::ReduceScatterV,
            TestCollective::Broadcast => K::Broadcast,
            TestCollective::Reduce => K::Reduce,
            TestCollective::Scatter => K::Scatter,
            TestCollective::Gather => K::Gather,
            TestCollective::Alltoall => K::AllToAll,
            TestCollective::Alltoallv => K::AllToAllV,
            TestCollective::SendRecv => K::BatchSendRecv,
            TestCollective::Barrier => K::Barrier,
        }
    }

    /// The name on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TestCollective::AllReduce => "all_reduce",
            TestCollective::AllGather => "all_gather",
            TestCollective::AllGatherv => "all_gatherv",
            TestCollective::ReduceScatter => "reduce_scatter",
            TestCollective::ReduceScatterv => "reduce_scatterv",
            TestCollective::Broadcast => "broadcast",
            TestCollective::Reduce => "reduce",
            TestCollective::Scatter => "scatter",
            TestCollective::Gather => "gather",
            TestCollective::Alltoall => "alltoall",
            TestCollective::Alltoallv => "alltoallv",
            TestCollective::SendRecv => "send_recv",
            TestCollective::Barrier => "barrier",
        }
    }

    /// True if `-o` matters.
    pub(crate) fn uses_op(self) -> bool {
        self.kind().is_reduction()
    }

    /// True if `-r` matters.
    pub(crate) fn uses_root(self) -> bool {
        self.kind().is_rooted()
    }
}

impl fmt::Display for TestCollective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Uneven weights 1, 2, 3, 1, 2, 3, ... (mean 2) for the V variants, so
/// their blocks differ in size as the V forms exist for.
fn weight(i: u64) -> u64 {
    1 + i % 3
}

/// `total` elements split over `n` ranks in proportion to [`weight`]; the
/// remainder of the integer split goes to the last rank.
fn uneven_split(total: u64, n: u32) -> Vec<u64> {
    let n = u64::from(n.max(1));
    let w: u64 = (0..n).map(weight).sum();
    let mut v: Vec<u64> = (0..n)
        .map(|i| (u128::from(total) * u128::from(weight(i)) / u128::from(w)) as u64)
        .collect();
    let given: u64 = v.iter().sum();
    if let Some(last) = v.last_mut() {
        *last += total - given;
    }
    v
}

/// The arguments of one row: `bytes` as hccl_test's data size (-b/-e).
///
/// As nccl-tests (`AllGatherGetCollByteCount` and friends: `count = size /
/// wordSize`, then `count / nranks`) and hccl_test: the element count is
/// `floor(bytes / size)`; for the collectives whose size is the whole
/// vector of all ranks (AllGather, ReduceScatter, Scatter, Gather,
/// AllToAll and their V forms) each rank's block is `floor(count / n)`
/// elements, so the size actually moved is rounded down to a multiple of
/// `n` elements, never above `-e` (the row shows the size actually used).
/// AllReduce, Reduce and Broadcast move `count` elements per rank;
/// send_recv moves `count` elements from every rank to the next; barrier
/// moves nothing.
pub(crate) fn args_for(
    coll: TestCollective,
    bytes: u64,
    dtype: DataType,
    op: ReduceOp,
    root: u32,
    n: u32,
) -> Result<CollectiveArgs, hccl_algos::collective::ArgsError> {
    use CollectiveKind as K;
    let esz = dtype.size();
    let count = bytes / esz;
    let per_rank = count / u64::from(n.max(1));
    let kind = coll.kind();
    let args = match kind {
        K::AllReduce | K::Reduce | K::Broadcast => CollectiveArgs::new(kind, count, dtype, n),
        K::AllGather | K::ReduceScatter | K::Scatter | K::Gather | K::AllToAll => {
            CollectiveArgs::new(kind, per_rank, dtype, n)
        }
        K::AllGatherV | K::ReduceScatterV => {
            CollectiveArgs::v_counts(kind == K::ReduceScatterV, uneven_split(count, n), dtype)?
        }
        K::AllToAllV => {
            // Row i: rank i's `per_rank * n` elements split unevenly, the
            // weights rotated by i so receivers get uneven totals too.
            let rows = (0..u64::from(n))
                .map(|i| {
                    (0..u64::from(n))
                        .map(|j| per_rank * weight(i + j) / 2)
                        .collect()
                })
                .collect();
            CollectiveArgs::all_to_all_v(rows, dtype)?
        }
        K::BatchSendRecv | K::SendRecv => {
            let pairs = (0..n)
                .map(|r| P2p {
                    src: r,
                    dst: (r + 1) % n,
                    count,
                })
                .collect();
            CollectiveArgs::p2p(true, pairs, dtype, n)
        }
        K::Barrier => CollectiveArgs::new(kind, 0, dtype, n),
    };
    let args = args.with_op(op).with_root(root);
    args.validate()?;
    Ok(args)
}

/// A `# note:` line when some rows move other bytes than the size asked for
/// (`-b/-e/-f/-i`): counts are whole elements, split over the ranks for
/// the collectives that split their buffer, and the V variants' uneven
/// counts move around the size; a size that rounds to nothing, or to the
/// bytes of the row before, makes no row. `asked` pairs each size asked
/// for with the bytes its row moves (`None`: no row). At most four sizes
/// are named. None for Barrier, which moves nothing.
pub(crate) fn size_note(
    asked: &[(u64, Option<u64>)],
    dtype: DataType,
    kind: CollectiveKind,
) -> Option<String> {
    if kind == CollectiveKind::Barrier {
        return None;
    }
    let odd: Vec<String> = asked
        .iter()
        .filter(|(want, got)| *got != Some(*want))
        .map(|(want, got)| match got {
            Some(b) => format!("{want} B runs as {b} B"),
            None => format!("{want} B makes no row"),
        })
        .collect();
    if odd.is_empty() {
        return None;
    }
    let more = match odd.len() {
        n if n > 4 => format!(", and {} more", n - 4),
        _ => String::new(),
    };
    Some(format!(
        "# note: a row moves whole {dtype} elements ({} B) split over the ranks (the V variants: uneven counts around the size), so {}{more}; the size column shows what each row moved",
        dtype.size(),
        odd[..odd.len().min(4)].join(", ")
    ))
}

/// Every algorithm spec worth running for `kind` on `layout` (`--algo
/// all`): each flat algorithm that implements it and, on a regular
/// multi-server layout, each level0 (mesh, ring) × level1 pair that plans.
/// Specs that fail to plan on rank 0 or on the root are left out: with a
/// non-zero root a hierarchical Broadcast/Reduce runs its level-1 algorithm
/// only in the root's column, which rank 0 may not be in.
pub(crate) fn all_specs(args: &CollectiveArgs, layout: &GroupLayout) -> Vec<AlgoSpec> {
    let mut specs: Vec<AlgoSpec> = Algorithm::supported_for(args.kind)
        .into_iter()
        .map(AlgoSpec::Flat)
        .collect();
    if matches!(
        args.kind,
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv | CollectiveKind::Barrier
    ) {
        // One algorithm each: running every name would repeat it.
        specs.truncate(1);
    }
    if layout.server_count() > 1 && layout.regular().is_ok() {
        // Inside a server HCCL uses mesh (full-mesh HCCS) or ring; between
        // servers every level-1 algorithm is worth comparing.
        for l0 in [Algorithm::Mesh, Algorithm::Ring] {
            for l1 in Algorithm::ALL {
                specs.push(AlgoSpec::Hierarchical(Levels {
                    level0: Some(l0),
                    level1: Some(l1),
                    level2: None,
                }));
            }
        }
    }
    specs
        .into_iter()
        .filter(|s| {
            let mut ranks = vec![0, args.root];
            ranks.dedup();
            ranks
                .into_iter()
                .filter(|&r| r < args.world_size)
                .all(|r| algo::plan(args, s, layout, r).is_ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_note_names_what_rows_moved_instead() {
        let ar = CollectiveKind::AllReduce;
        let fp32 = DataType::Fp32;
        assert_eq!(size_note(&[(8, Some(8)), (16, Some(16))], fp32, ar), None);
        let barrier = CollectiveKind::Barrier;
        assert_eq!(size_note(&[(8, None)], fp32, barrier), None);
        let note = size_note(
            &[
                (8, Some(8)),
                (10, None),
                (13, Some(12)),
                (1, None),
                (3, None),
                (5, None),
                (7, None),
            ],
            DataType::Fp32,
            ar,
        )
        .unwrap();
        assert!(
            note.starts_with("# note: a row moves whole fp32 elements (4 B)"),
            "{note}"
        );
        assert!(
            note.contains("so 10 B makes no row, 13 B runs as 12 B, 1 B makes no row, 3 B makes no row, and 2 more;"),
            "{note}"
        );
    }

    #[test]
    fn counts_follow_hccl_test() {
        let a = args_for(
            TestCollective::AllReduce,
            1000,
            DataType::Fp32,
            ReduceOp::Sum,
            0,
            8,
        )
        .unwrap();
        assert_eq!(a.count, 250);
        assert_eq!(a.message_bytes(), 1000);
        // AllGather: 1000 B = 250 floats over 8 ranks -> 31 per rank, 992 B
        // (rounded down, as nccl-tests' count / nranks).
        let a = args_for(
            TestCollective::AllGather,
            1000,
            DataType::Fp32,
            ReduceOp::Sum,
            0,
            8,
        )
        .unwrap();
        assert_eq!(a.count, 31);
        assert_eq!(a.message_bytes(), 992);
        // Odd byte counts round down to whole elements.
        let a = args_for(
            TestCollective::Broadcast,
            3,
            DataType::Fp16,
            ReduceOp::Sum,
            2,
            4,
        )
        .unwrap();
        assert_eq!((a.count, a.root), (1, 2));
    }

    #[test]
    fn v_counts_are_uneven_and_sum_to_the_size() {
        let v = uneven_split(100, 4);
        assert_eq!(v.iter().sum::<u64>(), 100);
        assert_eq!(v, vec![14, 28, 42, 16]);
        let a = args_for(
            TestCollective::AllGatherv,
            400,
            DataType::Fp32,
            ReduceOp::Sum,
            0,
            4,
        )
        .unwrap();
        assert_eq!(a.message_bytes(), 400);
    }

    #[test]
    fn root_outside_the_world_is_rejected() {
        let e = args_for(
            TestCollective::Reduce,
            64,
            DataType::Fp32,
            ReduceOp::Sum,
            8,
            8,
        )
        .unwrap_err();
        assert!(e.to_string().contains("root = 8"), "{e}");
    }
}
