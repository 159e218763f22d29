//! Collective algorithms as lazy schedules.
//!
//! [`plan`] gives one rank's buffer sizes and its lazy [`RankPlan`];
//! [`schedule`] materializes every rank's plan for the verifier and printing.
//! Algorithms are named as HCCL names them in `HCCL_ALGO` (`ring`, `H-D_R`,
//! `NHR`, `NB`, `pipeline`, `pairwise`) plus `mesh` (HCCL's intra-server
//! full mesh), `tree` (binomial tree), and, for AllReduce only, `oneshot`
//! and `doubling` (HCCL's `AllReduceMeshOneshot` and `AllReduceDoubling`). [`AlgoSpec`] is either one flat
//! algorithm or one per topology level (HCCL's `level0`/`level1`/`level2`).
//!
//! Every plan is a generator: its memory is O(1)..O(log p) words whatever
//! the number of steps, so a simulator can hold thousands of ranks' plans.

mod compose;
mod direct;
mod flat;
mod gen;
mod hd;
mod hier;
mod mesh;
mod nb;
mod nhr;
mod phase;
mod pipeline;
mod ring;
pub mod slice;
mod spec;
#[cfg(test)]
mod tests;
mod tree;

use crate::collective::{ArgsError, CollectiveArgs, CollectiveKind};
use crate::layout::{GroupLayout, LayoutError};
use crate::schedule::{BufferSizes, Rank, RankPlan, RankSchedule};

pub use hier::resolved;
pub use spec::{AlgoSpec, Algorithm, Levels, ParseAlgoError};

use flat::build_flat;
use hier::build_hier;
use phase::Planned;

/// Error of planning a collective.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AlgoError {
    /// The arguments are invalid.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// The algorithm does not implement the collective.
    #[error("algorithm {algo} does not implement {kind}; use one of: {supported}")]
    Unsupported {
        /// The algorithm (or spec) asked for.
        algo: String,
        /// The collective.
        kind: CollectiveKind,
        /// Algorithms that do implement it.
        supported: String,
    },
    /// The layout describes a different number of ranks.
    #[error("layout has {layout} ranks but the collective has world_size {world}")]
    LayoutSize {
        /// Ranks in the layout.
        layout: u32,
        /// World size of the arguments.
        world: u32,
    },
    /// The rank is outside the communicator.
    #[error("rank {rank} is outside the communicator (world_size {world})")]
    RankOutOfRange {
        /// The rank.
        rank: Rank,
        /// World size.
        world: u32,
    },
    /// The layout cannot be used by a hierarchical algorithm.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// Whether the op moves no data at all (an empty plan on every rank).
fn is_empty(args: &CollectiveArgs) -> bool {
    use CollectiveKind as K;
    match args.kind {
        K::Barrier | K::SendRecv | K::BatchSendRecv => false,
        K::AllGatherV | K::ReduceScatterV => args.counts.as_ref().is_none_or(|v| v.total() == 0),
        K::AllToAllV => args
            .send_matrix
            .as_ref()
            .is_none_or(|m| (0..m.n()).all(|i| m.send_total(i) == 0)),
        _ => args.count == 0,
    }
}

/// The per-rank part of planning: scratch bytes and the generator.
fn build(args: &CollectiveArgs, algo: &AlgoSpec, layout: &GroupLayout, rank: Rank) -> Planned {
    if is_empty(args) {
        return Ok((0, gen::empty()));
    }
    match algo {
        AlgoSpec::Flat(Algorithm::Pipeline)
            if matches!(
                args.kind,
                CollectiveKind::AllReduce
                    | CollectiveKind::AllGather
                    | CollectiveKind::ReduceScatter
            ) =>
        {
            pipeline::build(args, layout, rank)
        }
        AlgoSpec::Hierarchical(l) if l.level1 == Some(Algorithm::Pipeline) => {
            // HCCL's `level0:NA;level1:pipeline`: level 0 is the full mesh
            // the pipeline interleaves with; a third level is not pipelined.
            if matches!(l.level0, None | Some(Algorithm::Mesh)) && l.level2.is_none() {
                pipeline::build(args, layout, rank)
            } else {
                Err(AlgoError::Unsupported {
                    algo: algo.to_string(),
                    kind: args.kind,
                    supported: "level0:NA (or mesh);level1:pipeline without level2".into(),
                })
            }
        }
        AlgoSpec::Flat(a) => build_flat(args, *a, rank),
        AlgoSpec::Hierarchical(l) => build_hier(args, l, layout, rank),
    }
}

/// Plans one rank's part of a collective.
///
/// Returns the buffer sizes the rank must provide (input and output per
/// [`CollectiveArgs::io_bytes`], scratch as the algorithm needs) and the
/// lazy plan. A collective that moves no data (count 0) gives an empty plan:
/// immediate success.
///
/// # Errors
/// [`AlgoError`]: invalid arguments, a rank or layout that does not match
/// the world size, an algorithm that does not implement the collective.
pub fn plan(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    rank: Rank,
) -> Result<(BufferSizes, RankPlan), AlgoError> {
    args.validate()?;
    let world = args.world_size;
    if layout.world_size() != world {
        return Err(AlgoError::LayoutSize {
            layout: layout.world_size(),
            world,
        });
    }
    if rank >= world {
        return Err(AlgoError::RankOutOfRange { rank, world });
    }
    let (input, output) = args.io_bytes(rank);
    let (scratch, g) = build(args, algo, layout, rank)?;
    Ok((
        BufferSizes {
            input,
            output,
            scratch,
        },
        gen::into_plan(g),
    ))
}

/// Every rank's plan, materialized (for the verifier, printing and tests).
///
/// # Errors
/// As [`plan`].
pub fn schedule(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
) -> Result<Vec<RankSchedule>, AlgoError> {
    (0..args.world_size)
        .map(|rank| {
            let (buffers, steps) = plan(args, algo, layout, rank)?;
            Ok(RankSchedule {
                rank,
                buffers,
                steps: steps.collect(),
            })
        })
        .collect()
}
