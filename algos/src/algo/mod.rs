//! Collective algorithms as lazy schedules.
//!
//! [`plan`] gives one rank's buffer sizes and its lazy [`RankPlan`];
//! [`schedule`] materializes every rank's plan for the verifier and printing.
//! Algorithms are named as HCCL names them in `HCCL_ALGO` (`ring`, `H-D_R`,
//! `NHR`, `NB`, `pipeline`, `pairwise`) plus `mesh` (HCCL's intra-server
//! full mesh) and `tree` (binomial tree). [`AlgoSpec`] is either one flat
//! algorithm or one per topology level (HCCL's `level0`/`level1`/`level2`).
//!
//! Every plan is a generator: its memory is O(1)..O(log p) words whatever
//! the number of steps, so a simulator can hold thousands of ranks' plans.

mod direct;
mod gen;
mod ring;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use crate::collective::{ArgsError, CollectiveArgs, CollectiveKind};
use crate::dtype::ReduceOp;
use crate::layout::{GroupLayout, LayoutError};
use crate::schedule::{BufKind, BufferSizes, Rank, RankPlan, RankSchedule};

use gen::{Blocks, Ctx, Gen, Group, Loc};

/// A collective algorithm. [`fmt::Display`] and [`FromStr`] use HCCL's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Ring (`ring`): k-1 + k-1 steps, bandwidth-optimal, linear latency.
    Ring,
    /// Full mesh (`mesh`, also `fullmesh`): every pair exchanges directly in one step.
    Mesh,
    /// Recursive halving-doubling (`H-D_R`, HCCL's RHD), any rank count.
    HalvingDoubling,
    /// Nonuniform hierarchical ring (`NHR`), ⌈log2 p⌉ steps.
    Nhr,
    /// Nonuniform Bruck (`NB`), ⌈log2 p⌉ steps.
    Nb,
    /// Pairwise exchange (`pairwise`), AllToAll(V) only.
    Pairwise,
    /// Binomial tree (`tree`), Broadcast / Reduce / Scatter / Gather.
    Tree,
    /// Chunked pipeline (`pipeline`): chunks of consecutive steps overlap.
    Pipeline,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 8] = [
        Algorithm::Ring,
        Algorithm::Mesh,
        Algorithm::HalvingDoubling,
        Algorithm::Nhr,
        Algorithm::Nb,
        Algorithm::Pairwise,
        Algorithm::Tree,
        Algorithm::Pipeline,
    ];

    /// HCCL's name.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Mesh => "mesh",
            Algorithm::HalvingDoubling => "H-D_R",
            Algorithm::Nhr => "NHR",
            Algorithm::Nb => "NB",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Tree => "tree",
            Algorithm::Pipeline => "pipeline",
        }
    }

    /// True if [`plan`] implements `kind` with this algorithm (flat).
    /// SendRecv, BatchSendRecv and Barrier have one algorithm each and
    /// accept any name.
    pub fn supports(self, kind: CollectiveKind) -> bool {
        use CollectiveKind as K;
        if matches!(kind, K::SendRecv | K::BatchSendRecv | K::Barrier) {
            return true;
        }
        match self {
            Algorithm::Ring => !matches!(kind, K::AllToAll | K::AllToAllV),
            Algorithm::Pairwise => matches!(kind, K::AllToAll | K::AllToAllV),
            _ => false,
        }
    }

    /// The algorithms that implement `kind`.
    pub fn supported_for(kind: CollectiveKind) -> Vec<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .filter(|a| a.supports(kind))
            .collect()
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of parsing an algorithm name or an algorithm spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; accepted: {accepted}")]
pub struct ParseAlgoError {
    /// What was parsed ("algorithm", "level", ...).
    pub what: &'static str,
    /// The rejected text.
    pub value: String,
    /// The accepted values.
    pub accepted: String,
}

impl FromStr for Algorithm {
    type Err = ParseAlgoError;

    /// HCCL's names, case-insensitively; also `fullmesh`, `RHD`, `HD`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace(['-', '_'], "");
        let a = match key.as_str() {
            "ring" => Algorithm::Ring,
            "mesh" | "fullmesh" => Algorithm::Mesh,
            "hdr" | "rhd" | "hd" => Algorithm::HalvingDoubling,
            "nhr" => Algorithm::Nhr,
            "nb" => Algorithm::Nb,
            "pairwise" => Algorithm::Pairwise,
            "tree" => Algorithm::Tree,
            "pipeline" => Algorithm::Pipeline,
            _ => {
                return Err(ParseAlgoError {
                    what: "algorithm",
                    value: s.to_string(),
                    accepted: Algorithm::ALL.map(|a| a.name()).join(", "),
                })
            }
        };
        Ok(a)
    }
}

/// Algorithms per topology level; `None` = let the library choose (HCCL's `NA`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Levels {
    /// Inside a server.
    pub level0: Option<Algorithm>,
    /// Between servers.
    pub level1: Option<Algorithm>,
    /// Between super pods.
    pub level2: Option<Algorithm>,
}

/// Which algorithm(s) to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgoSpec {
    /// One algorithm over the whole communicator.
    Flat(Algorithm),
    /// One algorithm per level of the [`GroupLayout`] (HCCL's hierarchical
    /// composition, e.g. AllReduce = level0 ReduceScatter → level1 AllReduce
    /// → level0 AllGather).
    Hierarchical(Levels),
}

impl fmt::Display for AlgoSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlgoSpec::Flat(a) => write!(f, "{a}"),
            AlgoSpec::Hierarchical(l) => {
                let n = |a: Option<Algorithm>| a.map_or("NA", |a| a.name());
                write!(f, "level0:{};level1:{}", n(l.level0), n(l.level1))?;
                if let Some(a) = l.level2 {
                    write!(f, ";level2:{a}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for AlgoSpec {
    type Err = ParseAlgoError;

    /// An algorithm name (`ring`) or HCCL's level syntax
    /// (`level0:NA;level1:H-D_R;level2:ring`, `NA` = choose automatically).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if !s.contains(':') {
            return s.parse().map(AlgoSpec::Flat);
        }
        let mut l = Levels::default();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (level, name) = part.split_once(':').ok_or_else(|| ParseAlgoError {
                what: "level setting (expected levelN:<algo>)",
                value: part.to_string(),
                accepted: "level0:<algo>, level1:<algo>, level2:<algo>".into(),
            })?;
            let algo = if name.trim().eq_ignore_ascii_case("NA") {
                None
            } else {
                Some(name.parse::<Algorithm>()?)
            };
            match level.trim() {
                "level0" => l.level0 = algo,
                "level1" => l.level1 = algo,
                "level2" => l.level2 = algo,
                other => {
                    return Err(ParseAlgoError {
                        what: "level",
                        value: other.to_string(),
                        accepted: "level0, level1, level2".into(),
                    })
                }
            }
        }
        Ok(AlgoSpec::Hierarchical(l))
    }
}

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
        K::AllGatherV | K::ReduceScatterV => args.counts.as_ref().map_or(true, |v| v.total() == 0),
        K::AllToAllV => args
            .send_matrix
            .as_ref()
            .map_or(true, |m| (0..m.n()).all(|i| m.send_total(i) == 0)),
        _ => args.count == 0,
    }
}

/// Number of chunks a chain (pipelined) algorithm cuts `count` elements
/// into: about one per 512 KiB, at least 1, at most 64 and at most `count`.
pub(crate) fn chain_chunks(count: u64, esz: u64) -> u32 {
    let by_size = (count.saturating_mul(esz) / (512 * 1024)).clamp(1, 64);
    by_size.min(count.max(1)) as u32
}

/// The per-rank part of planning: scratch bytes and the generator.
fn build(
    args: &CollectiveArgs,
    algo: &AlgoSpec,
    layout: &GroupLayout,
    rank: Rank,
) -> Result<(u64, Box<dyn Gen>), AlgoError> {
    use CollectiveKind as K;
    let kind = args.kind;
    let p = args.world_size;
    let esz = args.dtype.size();
    let unsupported = || AlgoError::Unsupported {
        algo: algo.to_string(),
        kind,
        supported: Algorithm::supported_for(kind)
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", "),
    };
    if is_empty(args) {
        return Ok((0, gen::empty()));
    }
    let _ = layout;
    let a = match algo {
        AlgoSpec::Flat(a) => *a,
        AlgoSpec::Hierarchical(_) => return Err(unsupported()),
    };
    if !a.supports(kind) {
        return Err(unsupported());
    }
    let c = Ctx {
        g: Group::flat(p),
        me: rank,
        op: if args.op == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            args.op
        },
        tag0: 0,
    };
    let divide = (args.op == ReduceOp::Avg).then_some(p);
    let (input, output, scratch) = (
        Loc::new(BufKind::Input, 0, esz),
        Loc::new(BufKind::Output, 0, esz),
        Loc::new(BufKind::Scratch, 0, esz),
    );
    let same = args.in_place;
    let n = args.count;
    let root = args.root;
    let vblocks = || Blocks::Table(args.counts.clone().expect("validated"));
    Ok(match kind {
        K::SendRecv | K::BatchSendRecv => (
            0,
            direct::batch(rank, args.pairs.clone().expect("validated"), esz),
        ),
        K::Barrier => (0, direct::barrier(c)),
        K::AllToAll => direct::pairwise(c, direct::A2a::Uniform(n), input, output, same),
        K::AllToAllV => direct::pairwise(
            c,
            direct::A2a::Matrix(args.send_matrix.clone().expect("validated")),
            input,
            output,
            false,
        ),
        K::AllReduce => (
            0,
            ring::allreduce(
                c,
                Blocks::Even { total: n, parts: p },
                input,
                output,
                same,
                divide,
            ),
        ),
        K::ReduceScatter => ring::reduce_scatter(
            c,
            Blocks::uniform(n, p),
            input,
            output,
            scratch,
            same,
            divide,
        ),
        K::ReduceScatterV => {
            ring::reduce_scatter(c, vblocks(), input, output, scratch, same, divide)
        }
        K::AllGather => (
            0,
            ring::allgather(c, Blocks::uniform(n, p), (!same).then_some(input), output),
        ),
        K::AllGatherV => (
            0,
            ring::allgather(c, vblocks(), (!same).then_some(input), output),
        ),
        K::Broadcast => {
            let chunks = Blocks::Even {
                total: n,
                parts: chain_chunks(n, esz),
            };
            (0, ring::broadcast(c, chunks, root, input, output, same))
        }
        K::Reduce => {
            let chunks = Blocks::Even {
                total: n,
                parts: chain_chunks(n, esz),
            };
            ring::reduce(c, chunks, root, input, output, scratch, same, divide)
        }
        K::Scatter => ring::scatter(c, Blocks::uniform(n, p), root, input, output, scratch, same),
        K::Gather => ring::gather(c, Blocks::uniform(n, p), root, input, output, scratch, same),
    })
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
