//! Flat planning: one algorithm over the whole communicator.

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::dtype::ReduceOp;
use crate::schedule::{BufKind, Rank};

use super::gen::{Blocks, Ctx, Group, Loc};
use super::phase::{phase_ag, phase_ar, phase_bcast, phase_reduce, phase_rs, Env, Planned};
use super::Algorithm;
use super::{direct, mesh, ring};

/// Flat algorithms over the whole communicator.
pub(super) fn build_flat(args: &CollectiveArgs, a: Algorithm, rank: Rank) -> Planned {
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
