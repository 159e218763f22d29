//! Flat planning: one algorithm over the whole communicator.

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::schedule::Rank;

use super::gen::{Blocks, Ctx, Group};
use super::phase::{phase_ag, phase_ar, phase_bcast, phase_reduce, phase_rs, Env, Planned, Setup};
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
    let Setup {
        op,
        divide,
        input,
        output,
        scratch,
    } = Setup::of(args);
    let c = Ctx {
        g: Group::flat(p),
        me: rank,
        op,
        tag0: 0,
    };
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
        K::Scatter | K::Gather => {
            let (blocks, gather) = (Blocks::uniform(n, p), kind == K::Gather);
            match a {
                Algorithm::Mesh => Ok((
                    0,
                    mesh::scatter_gather(c, blocks, root, input, output, same, gather),
                )),
                _ if gather => Ok(ring::gather(c, blocks, root, input, output, scratch, same)),
                _ => Ok(ring::scatter(c, blocks, root, input, output, scratch, same)),
            }
        }
    }
}
