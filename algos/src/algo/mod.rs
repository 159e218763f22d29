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

mod direct;
mod gen;
mod hd;
mod mesh;
mod nb;
mod nhr;
mod pipeline;
mod ring;
pub mod slice;
#[cfg(test)]
mod tests;
mod tree;

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
    /// HCCL's hierarchical pipeline (`pipeline`, `HCCL_ALGO=level1:pipeline`):
    /// inter-server ring steps overlap intra-server full-mesh steps
    /// (AllGather, ReduceScatter, AllReduce; see the `pipeline` module).
    /// Uses the [`GroupLayout`]'s servers; on one server it is the mesh.
    Pipeline,
    /// One-shot AllReduce (`oneshot`, HCCL's `AllReduceMeshOneshot`
    /// executor for small AllReduces in a server): one concurrent exchange
    /// of whole vectors, then a local rank-order fold (see `mesh`).
    Oneshot,
    /// Recursive-doubling AllReduce (`doubling`, HCCL's `AllReduceDoubling`
    /// template): ⌈log2 p⌉ exchanges of whole vectors, AllReduce only (see
    /// `hd`).
    Doubling,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 10] = [
        Algorithm::Ring,
        Algorithm::Mesh,
        Algorithm::HalvingDoubling,
        Algorithm::Nhr,
        Algorithm::Nb,
        Algorithm::Pairwise,
        Algorithm::Tree,
        Algorithm::Pipeline,
        Algorithm::Oneshot,
        Algorithm::Doubling,
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
            Algorithm::Oneshot => "oneshot",
            Algorithm::Doubling => "doubling",
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
            Algorithm::Mesh => true,
            Algorithm::HalvingDoubling => matches!(
                kind,
                K::AllReduce | K::AllGather | K::AllGatherV | K::ReduceScatter | K::ReduceScatterV
            ),
            Algorithm::Nhr | Algorithm::Nb => matches!(
                kind,
                K::AllReduce
                    | K::AllGather
                    | K::AllGatherV
                    | K::ReduceScatter
                    | K::ReduceScatterV
                    | K::Broadcast
            ),
            Algorithm::Tree => matches!(kind, K::Broadcast | K::Reduce),
            Algorithm::Pairwise => matches!(kind, K::AllToAll | K::AllToAllV),
            Algorithm::Pipeline => {
                matches!(kind, K::AllReduce | K::AllGather | K::ReduceScatter)
            }
            Algorithm::Oneshot | Algorithm::Doubling => kind == K::AllReduce,
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
            "oneshot" | "meshoneshot" => Algorithm::Oneshot,
            "doubling" | "rd" | "recursivedoubling" => Algorithm::Doubling,
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

type Planned = Result<(u64, Box<dyn Gen>), AlgoError>;

/// Everything a phase needs besides its group.
#[derive(Clone, Copy)]
struct Env {
    kind: CollectiveKind,
    esz: u64,
}

impl Env {
    /// This env for a phase of kind `kind` (a hierarchical AllReduce runs
    /// a ReduceScatter phase, ...): its errors name the phase's kind, the
    /// one the algorithm lacks.
    fn phase(self, kind: CollectiveKind) -> Env {
        Env { kind, ..self }
    }

    /// The scratch buffer from its start: phases that take no explicit
    /// scratch run alone (phases are fenced), so they may use it all.
    fn scratch(&self) -> Loc {
        Loc::new(BufKind::Scratch, 0, self.esz)
    }

    fn unsupported(&self, a: Algorithm) -> AlgoError {
        AlgoError::Unsupported {
            algo: a.to_string(),
            kind: self.kind,
            supported: Algorithm::supported_for(self.kind)
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// ReduceScatter of `blocks` from `src` (vector layout) into `out` (own block only).
#[allow(clippy::too_many_arguments)]
fn phase_rs(
    env: Env,
    a: Algorithm,
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    out: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> Planned {
    match a {
        Algorithm::Ring => Ok(ring::reduce_scatter(
            c, blocks, src, out, scratch, same, divide,
        )),
        Algorithm::Mesh => Ok(mesh::reduce_scatter(
            c, blocks, src, out, out, scratch, same, divide, false,
        )),
        Algorithm::HalvingDoubling => Ok(hd::reduce_scatter(
            c, blocks, src, out, scratch, same, divide,
        )),
        Algorithm::Nhr => {
            let stage = scratch.shift(blocks.total());
            Ok(nhr::reduce_scatter(
                c, blocks, src, out, scratch, stage, same, divide,
            ))
        }
        Algorithm::Nb => Ok(nb::reduce_scatter(
            c, blocks, src, out, scratch, same, divide,
        )),
        _ => Err(env.phase(CollectiveKind::ReduceScatter).unsupported(a)),
    }
}

/// In-place AllReduce of `count` elements at `loc`.
#[allow(clippy::too_many_arguments)]
fn phase_ar(
    env: Env,
    a: Algorithm,
    c: Ctx,
    count: u64,
    src: Loc,
    dst: Loc,
    same: bool,
    divide: Option<u32>,
) -> Planned {
    let blocks = Blocks::Even {
        total: count,
        parts: c.g.size,
    };
    match a {
        Algorithm::Ring => Ok((0, ring::allreduce(c, blocks, src, dst, same, divide))),
        Algorithm::Mesh => {
            let acc = dst.shift(blocks.off(c.me));
            Ok(mesh::reduce_scatter(
                c,
                blocks,
                src,
                acc,
                dst,
                env.scratch(),
                same,
                divide,
                true,
            ))
        }
        Algorithm::HalvingDoubling => Ok((0, hd::allreduce(c, count, src, dst, same, divide))),
        Algorithm::Oneshot => Ok(mesh::allreduce_oneshot(
            c,
            count,
            src,
            dst,
            env.scratch(),
            same,
            divide,
        )),
        Algorithm::Doubling => Ok(hd::allreduce_doubling(
            c,
            count,
            src,
            dst,
            env.scratch(),
            same,
            divide,
        )),
        Algorithm::Nhr => Ok(nhr::allreduce(c, count, src, dst, same, divide)),
        Algorithm::Nb => Ok(nb::allreduce(
            c,
            count,
            src,
            dst,
            env.scratch(),
            same,
            divide,
        )),
        _ => Err(env.phase(CollectiveKind::AllReduce).unsupported(a)),
    }
}

/// AllGather of `blocks` into `dst` (vector layout); own block at `src` or already in place.
fn phase_ag(env: Env, a: Algorithm, c: Ctx, blocks: Blocks, src: Option<Loc>, dst: Loc) -> Planned {
    match a {
        Algorithm::Ring => Ok((0, ring::allgather(c, blocks, src, dst))),
        Algorithm::Mesh => Ok((0, mesh::allgather(c, blocks, src, dst))),
        Algorithm::HalvingDoubling => Ok((0, hd::allgather(c, blocks, src, dst))),
        Algorithm::Nhr => Ok((0, nhr::allgather(c, blocks, src, dst, 0))),
        Algorithm::Nb => Ok(nb::allgather(c, blocks, src, dst, env.scratch(), 0)),
        _ => Err(env.phase(CollectiveKind::AllGather).unsupported(a)),
    }
}

#[allow(clippy::too_many_arguments)]
fn phase_bcast(
    env: Env,
    a: Algorithm,
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
) -> Planned {
    match a {
        Algorithm::Ring => {
            let chunks = Blocks::Even {
                total: count,
                parts: chain_chunks(count, env.esz),
            };
            Ok((0, ring::broadcast(c, chunks, root, src, dst, same)))
        }
        Algorithm::Mesh => Ok((0, mesh::broadcast(c, count, root, src, dst, same))),
        Algorithm::Tree => Ok((0, tree::broadcast(c, count, root, src, dst, same))),
        Algorithm::Nhr => Ok((0, nhr::broadcast(c, count, root, src, dst, same))),
        Algorithm::Nb => Ok(nb::broadcast(c, count, root, src, dst, env.scratch(), same)),
        _ => Err(env.phase(CollectiveKind::Broadcast).unsupported(a)),
    }
}

#[allow(clippy::too_many_arguments)]
fn phase_reduce(
    env: Env,
    a: Algorithm,
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> Planned {
    match a {
        Algorithm::Ring => {
            let chunks = Blocks::Even {
                total: count,
                parts: chain_chunks(count, env.esz),
            };
            Ok(ring::reduce(
                c, chunks, root, src, dst, scratch, same, divide,
            ))
        }
        Algorithm::Mesh => Ok(mesh::reduce(
            c, count, root, src, dst, scratch, same, divide,
        )),
        Algorithm::Tree => Ok(tree::reduce(
            c, count, root, src, dst, scratch, same, divide,
        )),
        _ => Err(env.phase(CollectiveKind::Reduce).unsupported(a)),
    }
}

/// Flat algorithms over the whole communicator.
fn build_flat(args: &CollectiveArgs, a: Algorithm, rank: Rank) -> Planned {
    use CollectiveKind as K;
    let kind = args.kind;
    let p = args.world_size;
    let esz = args.dtype.size();
    let env = Env { kind, esz };
    if !a.supports(kind) {
        return Err(env.unsupported(a));
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
    let src_of = |same: bool| (!same).then_some(input);
    match kind {
        K::SendRecv | K::BatchSendRecv => Ok((
            0,
            direct::batch(rank, args.pairs.clone().expect("validated"), esz),
        )),
        K::Barrier => Ok((0, direct::barrier(c))),
        K::AllToAll | K::AllToAllV => {
            let a2a = match &args.send_matrix {
                Some(m) if kind == K::AllToAllV => direct::A2a::Matrix(m.clone()),
                _ => direct::A2a::Uniform(n),
            };
            Ok(direct::pairwise(
                c,
                a2a,
                input,
                output,
                same,
                a == Algorithm::Pairwise,
            ))
        }
        K::AllReduce => phase_ar(env, a, c, n, input, output, same, divide),
        K::ReduceScatter => phase_rs(
            env,
            a,
            c,
            Blocks::uniform(n, p),
            input,
            output,
            scratch,
            same,
            divide,
        ),
        K::ReduceScatterV => phase_rs(env, a, c, vblocks(), input, output, scratch, same, divide),
        K::AllGather => phase_ag(env, a, c, Blocks::uniform(n, p), src_of(same), output),
        K::AllGatherV => phase_ag(env, a, c, vblocks(), src_of(same), output),
        K::Broadcast => phase_bcast(env, a, c, n, root, input, output, same),
        K::Reduce => phase_reduce(env, a, c, n, root, input, output, scratch, same, divide),
        K::Scatter => match a {
            Algorithm::Mesh => Ok((
                0,
                mesh::scatter_gather(c, Blocks::uniform(n, p), root, input, output, same, false),
            )),
            _ => Ok(ring::scatter(
                c,
                Blocks::uniform(n, p),
                root,
                input,
                output,
                scratch,
                same,
            )),
        },
        K::Gather => match a {
            Algorithm::Mesh => Ok((
                0,
                mesh::scatter_gather(c, Blocks::uniform(n, p), root, input, output, same, true),
            )),
            _ => Ok(ring::gather(
                c,
                Blocks::uniform(n, p),
                root,
                input,
                output,
                scratch,
                same,
            )),
        },
    }
}

/// Tag space of phase `i` of a hierarchical plan: phases never share tags.
fn phase_tag(i: u32) -> u32 {
    i << 24
}

/// Default algorithm of a level when the spec says `NA`.
fn level_default(level: usize, size: u32) -> Algorithm {
    match level {
        0 if size <= 8 => Algorithm::Mesh,
        0 => Algorithm::Ring,
        _ if size.is_power_of_two() => Algorithm::HalvingDoubling,
        _ => Algorithm::Ring,
    }
}

/// What `spec` runs on `layout`, to label it: a hierarchical spec with each
/// `NA` level replaced by its default and without the levels that have a
/// single member (level 1 on one server); left with one level, that
/// level's flat algorithm (its group is the whole communicator, so the
/// schedule is the flat one). `spec` itself for a flat spec, an irregular
/// layout, or a single rank.
pub fn resolved(spec: &AlgoSpec, layout: &GroupLayout) -> AlgoSpec {
    let AlgoSpec::Hierarchical(l) = spec else {
        return *spec;
    };
    let Ok(shape) = layout.regular() else {
        return *spec;
    };
    // The group sizes of `build_hier`.
    let sizes = if l.level2.is_some() {
        [shape.ranks_per_server, shape.servers_per_pod, shape.pods]
    } else {
        [
            shape.ranks_per_server,
            shape.servers_per_pod * shape.pods,
            1,
        ]
    };
    let set = [l.level0, l.level1, l.level2];
    let ran: Vec<Option<Algorithm>> = (0..3)
        .map(|i| (sizes[i] > 1).then(|| set[i].unwrap_or_else(|| level_default(i, sizes[i]))))
        .collect();
    match ran.iter().flatten().collect::<Vec<_>>().as_slice() {
        [] => *spec,
        [only] => AlgoSpec::Flat(**only),
        _ => AlgoSpec::Hierarchical(Levels {
            level0: ran[0].or(l.level0),
            level1: ran[1].or(l.level1),
            level2: ran[2].or(l.level2),
        }),
    }
}

/// Hierarchical composition over a regular layout (see [`GroupLayout::regular`]).
fn build_hier(args: &CollectiveArgs, levels: &Levels, layout: &GroupLayout, rank: Rank) -> Planned {
    use CollectiveKind as K;
    let kind = args.kind;
    let esz = args.dtype.size();
    let env = Env { kind, esz };
    let unsupported = || {
        AlgoError::Unsupported {
        algo: AlgoSpec::Hierarchical(*levels).to_string(),
        kind,
        supported: "flat algorithms (hierarchical composition covers all_reduce, all_gather, reduce_scatter, broadcast, reduce)"
            .into(),
    }
    };
    let shape = layout.regular()?;
    let k0 = shape.ranks_per_server;
    // Without a level-2 algorithm, super pods are flattened into level 1.
    let (k1, k2) = if levels.level2.is_some() {
        (shape.servers_per_pod, shape.pods)
    } else {
        (shape.servers_per_pod * shape.pods, 1)
    };
    let p = args.world_size;
    let local = rank % k0;
    let server_base = rank - local;
    let pod_size = k0 * k1;
    let in_pod = rank % pod_size;
    let pod_base = rank - in_pod;
    let groups = [
        (
            Group {
                base: server_base,
                stride: 1,
                size: k0,
            },
            local,
        ),
        (
            Group {
                base: pod_base + local,
                stride: k0,
                size: k1,
            },
            in_pod / k0,
        ),
        (
            Group {
                base: in_pod,
                stride: pod_size,
                size: k2,
            },
            rank / pod_size,
        ),
    ];
    let algos = [levels.level0, levels.level1, levels.level2];
    let algo_of = |l: usize| algos[l].unwrap_or_else(|| level_default(l, groups[l].0.size));
    let op = if args.op == ReduceOp::Avg {
        ReduceOp::Sum
    } else {
        args.op
    };
    let ctx = |l: usize, phase: u32| Ctx {
        g: groups[l].0,
        me: groups[l].1,
        op,
        tag0: phase_tag(phase),
    };
    let divide = (args.op == ReduceOp::Avg).then_some(p);
    let (input, output, scratch) = (
        Loc::new(BufKind::Input, 0, esz),
        Loc::new(BufKind::Output, 0, esz),
        Loc::new(BufKind::Scratch, 0, esz),
    );
    let same = args.in_place;
    let n = args.count;
    // Levels with more than one member, innermost first.
    let used: Vec<usize> = (0..3).filter(|&l| groups[l].0.size > 1).collect();
    let mut phases: Vec<Box<dyn Gen>> = Vec::new();
    let mut scratch_need = 0u64;
    let mut push = |r: (u64, Box<dyn Gen>), phases: &mut Vec<Box<dyn Gen>>| {
        scratch_need = scratch_need.max(r.0);
        phases.push(r.1);
    };
    match kind {
        K::AllReduce => {
            if used.is_empty() {
                push(
                    phase_ar(
                        env,
                        Algorithm::Ring,
                        ctx(0, 0),
                        n,
                        input,
                        output,
                        same,
                        divide,
                    )?,
                    &mut phases,
                );
            }
            // Reduce-scatter down the levels, all-reduce at the top, all-gather back.
            let (mut off, mut len) = (0u64, n);
            let mut src = input;
            let mut src_same = same;
            let mut stack = Vec::new();
            for (i, &l) in used.iter().enumerate() {
                let c = ctx(l, i as u32);
                if i + 1 == used.len() {
                    let here = output.shift(off);
                    push(
                        phase_ar(
                            env,
                            algo_of(l),
                            c,
                            len,
                            src.shift(off),
                            here,
                            src_same,
                            divide,
                        )?,
                        &mut phases,
                    );
                } else {
                    let blocks = Blocks::Even {
                        total: len,
                        parts: c.g.size,
                    };
                    let mine = output.shift(off + blocks.off(c.me));
                    push(
                        phase_rs(
                            env,
                            algo_of(l),
                            c,
                            blocks.clone(),
                            src.shift(off),
                            mine,
                            scratch,
                            src_same,
                            None,
                        )?,
                        &mut phases,
                    );
                    stack.push((l, blocks.clone(), off));
                    (off, len) = (off + blocks.off(c.me), blocks.len(c.me));
                    src = output;
                    src_same = true;
                }
            }
            for (j, (l, blocks, off)) in stack.into_iter().rev().enumerate() {
                let c = ctx(l, (used.len() + j) as u32);
                push(
                    phase_ag(env, algo_of(l), c, blocks, None, output.shift(off))?,
                    &mut phases,
                );
            }
        }
        K::AllGather => {
            // Gather inside the server, then whole servers, then whole pods:
            // at level l a member's block is everything below it.
            let mut own_src = (!same).then_some(input);
            let mut each = n;
            for (l, &(g, _)) in groups.iter().enumerate() {
                if g.size > 1 || (l == 2 && phases.is_empty()) {
                    // Element offset of this group's region in the output.
                    let region = [server_base as u64 * n, pod_base as u64 * n, 0][l];
                    let a = if g.size > 1 {
                        algo_of(l)
                    } else {
                        Algorithm::Ring
                    };
                    push(
                        phase_ag(
                            env,
                            a,
                            ctx(l, l as u32),
                            Blocks::uniform(each, g.size),
                            own_src,
                            output.shift(region),
                        )?,
                        &mut phases,
                    );
                    own_src = None;
                }
                each *= g.size as u64;
            }
        }
        K::ReduceScatter if k2 == 1 && k1 > 1 => {
            // Between servers first (each server gets its ranks' blocks,
            // summed over same-local-index ranks), then inside the server.
            let chunk = n * k0 as u64;
            let staged = Loc::new(BufKind::Scratch, 0, esz);
            let rest = staged.shift(chunk);
            let r1 = phase_rs(
                env,
                algo_of(1),
                ctx(1, 0),
                Blocks::uniform(chunk, k1),
                input,
                staged,
                rest,
                false,
                None,
            )?;
            let r0 = phase_rs(
                env,
                algo_of(0),
                ctx(0, 1),
                Blocks::uniform(n, k0),
                staged,
                output,
                rest,
                false,
                divide,
            )?;
            scratch_need = chunk * esz + r1.0.max(r0.0);
            phases.push(r1.1);
            phases.push(r0.1);
        }
        K::ReduceScatter if k2 == 1 => {
            push(
                phase_rs(
                    env,
                    algo_of(0),
                    ctx(0, 0),
                    Blocks::uniform(n, k0),
                    input,
                    output,
                    scratch,
                    same,
                    divide,
                )?,
                &mut phases,
            );
        }
        K::Broadcast => {
            let root_local = args.root % k0;
            let root_server = args.root / k0;
            if local == root_local && p > k0 {
                let c = Ctx {
                    g: Group {
                        base: root_local,
                        stride: k0,
                        size: p / k0,
                    },
                    me: rank / k0,
                    op,
                    tag0: phase_tag(0),
                };
                push(
                    phase_bcast(env, algo_of(1), c, n, root_server, input, output, same)?,
                    &mut phases,
                );
            }
            let from = if rank == args.root && p <= k0 {
                input
            } else {
                output
            };
            let same0 = if rank == args.root && p <= k0 {
                same
            } else {
                true
            };
            push(
                phase_bcast(
                    env,
                    algo_of(0),
                    ctx(0, 1),
                    n,
                    root_local,
                    from,
                    output,
                    same0,
                )?,
                &mut phases,
            );
        }
        K::Reduce => {
            let root_local = args.root % k0;
            let root_server = args.root / k0;
            let is_root = rank == args.root;
            // Partial result of the server at its local root: the output on
            // the global root, scratch elsewhere.
            let acc = if is_root {
                output
            } else {
                Loc::new(BufKind::Scratch, 0, esz)
            };
            let spare = Loc::new(BufKind::Scratch, 0, esz).shift(n);
            let single = p <= k0;
            let r0 = phase_reduce(
                env,
                algo_of(0),
                ctx(0, 0),
                n,
                root_local,
                input,
                acc,
                spare,
                same && is_root,
                if single { divide } else { None },
            )?;
            push(r0, &mut phases);
            if local == root_local && !single {
                let c = Ctx {
                    g: Group {
                        base: root_local,
                        stride: k0,
                        size: p / k0,
                    },
                    me: rank / k0,
                    op,
                    tag0: phase_tag(1),
                };
                push(
                    phase_reduce(
                        env,
                        algo_of(1),
                        c,
                        n,
                        root_server,
                        acc,
                        output,
                        spare,
                        is_root,
                        divide,
                    )?,
                    &mut phases,
                );
            }
            // The accumulator sits below the phases' own scratch.
            scratch_need += n * esz;
        }
        _ => return Err(unsupported()),
    }
    Ok((scratch_need, gen::seq(phases)))
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
