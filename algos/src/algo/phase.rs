//! One phase of a plan: a collective on one group with one algorithm, the
//! building block of both flat and hierarchical planning.

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::dtype::ReduceOp;
use crate::schedule::BufKind;

use super::gen::{Blocks, Ctx, Gen, Loc};
use super::{hd, mesh, nb, nhr, ring, tree};
use super::{AlgoError, Algorithm};

/// One rank's plan: the scratch bytes it needs and its generator.
pub(super) type Planned = Result<(u64, Box<dyn Gen>), AlgoError>;

/// What every plan of a call starts from.
pub(super) struct Setup {
    /// The reduce op the steps apply: `Sum` for `Avg` (divided once, at the end).
    pub(super) op: ReduceOp,
    /// The `Avg` divisor: the world size (`None` for other ops).
    pub(super) divide: Option<u32>,
    /// The three buffers, from their starts.
    pub(super) input: Loc,
    pub(super) output: Loc,
    pub(super) scratch: Loc,
}

impl Setup {
    pub(super) fn of(args: &CollectiveArgs) -> Setup {
        let esz = args.dtype.size();
        let avg = args.op == ReduceOp::Avg;
        Setup {
            op: if avg { ReduceOp::Sum } else { args.op },
            divide: avg.then_some(args.world_size),
            input: Loc::new(BufKind::Input, 0, esz),
            output: Loc::new(BufKind::Output, 0, esz),
            scratch: Loc::new(BufKind::Scratch, 0, esz),
        }
    }
}

/// Tag space of phase `i` of a multi-phase plan: phases never share tags.
pub(super) fn phase_tag(i: u32) -> u32 {
    i << 24
}

/// `count` elements cut for a chain (pipelined) algorithm: about one chunk
/// per 512 KiB, at least 1, at most 64 and at most `count`.
fn chain_blocks(count: u64, esz: u64) -> Blocks {
    let by_size = (count.saturating_mul(esz) / (512 * 1024)).clamp(1, 64);
    Blocks::Even {
        total: count,
        parts: by_size.min(count.max(1)) as u32,
    }
}

/// Everything a phase needs besides its group.
#[derive(Clone, Copy)]
pub(super) struct Env {
    pub(super) kind: CollectiveKind,
    pub(super) esz: u64,
}

impl Env {
    /// This env for a phase of kind `kind` (a hierarchical AllReduce runs
    /// a ReduceScatter phase, ...): its errors name the phase's kind, the
    /// one the algorithm lacks.
    pub(super) fn phase(self, kind: CollectiveKind) -> Env {
        Env { kind, ..self }
    }

    /// The scratch buffer from its start: phases that take no explicit
    /// scratch run alone (phases are fenced), so they may use it all.
    pub(super) fn scratch(&self) -> Loc {
        Loc::new(BufKind::Scratch, 0, self.esz)
    }

    pub(super) fn unsupported(&self, a: Algorithm) -> AlgoError {
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
pub(super) fn phase_rs(
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
pub(super) fn phase_ar(
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
pub(super) fn phase_ag(
    env: Env,
    a: Algorithm,
    c: Ctx,
    blocks: Blocks,
    src: Option<Loc>,
    dst: Loc,
) -> Planned {
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
pub(super) fn phase_bcast(
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
            let chunks = chain_blocks(count, env.esz);
            Ok((0, ring::broadcast(c, chunks, root, src, dst, same)))
        }
        Algorithm::Mesh => Ok((0, mesh::broadcast(c, count, root, src, dst, same))),
        Algorithm::Tree => Ok((0, tree::broadcast(c, count, root, src, dst, same))),
        Algorithm::Nhr => Ok(nhr::broadcast(c, count, root, src, dst, same)),
        Algorithm::Nb => Ok(nb::broadcast(c, count, root, src, dst, env.scratch(), same)),
        _ => Err(env.phase(CollectiveKind::Broadcast).unsupported(a)),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn phase_reduce(
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
            let chunks = chain_blocks(count, env.esz);
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
