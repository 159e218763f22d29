//! Two-phase algorithms, as HCCL's guide builds them (NB.md, NHR.md):
//! AllReduce = ReduceScatter + AllGather and Broadcast = Scatter +
//! AllGather, the second phase in tags of its own.

use super::gen::{seq, Blocks, Ctx, Gen, Loc};

/// Tag offset between the two phases of one plan (an NB or NHR phase takes
/// fewer than 32 steps).
pub(crate) const PHASE_TAGS: u32 = 32;

/// `c` for the second phase: its tags start [`PHASE_TAGS`] after `c`'s.
fn second_phase(c: Ctx) -> Ctx {
    Ctx {
        tag0: c.tag0 + PHASE_TAGS,
        ..c
    }
}

/// AllReduce = ReduceScatter + AllGather of `count` elements, one block per
/// member: `reduce_scatter(c, blocks, out)` reduces this member's block into
/// `out`, its place in `dst`, then `allgather(c, blocks)` gathers every block
/// into `dst`. Returns (scratch bytes, the larger phase's; generator).
pub(crate) fn reduce_scatter_allgather(
    c: Ctx,
    count: u64,
    dst: Loc,
    reduce_scatter: impl FnOnce(Ctx, Blocks, Loc) -> (u64, Box<dyn Gen>),
    allgather: impl FnOnce(Ctx, Blocks) -> (u64, Box<dyn Gen>),
) -> (u64, Box<dyn Gen>) {
    let blocks = Blocks::Even {
        total: count,
        parts: c.g.size,
    };
    let out = dst.shift(blocks.off(c.me));
    let (s1, rs) = reduce_scatter(c, blocks.clone(), out);
    let (s2, ag) = allgather(second_phase(c), blocks);
    (s1.max(s2), seq(vec![rs, ag]))
}

/// Broadcast = Scatter + AllGather of `count` elements from member `root`,
/// one chunk per member: `scatter(c, chunks)` leaves chunk `j` in member
/// `j`'s output, then `allgather(c, chunks, own)` fills in the rest; `own` is
/// where the root reads its own chunk (`src`, `None` when in place, `same`).
/// Returns (scratch bytes, the AllGather's; generator).
pub(crate) fn scatter_allgather(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    same: bool,
    scatter: impl FnOnce(Ctx, Blocks) -> Box<dyn Gen>,
    allgather: impl FnOnce(Ctx, Blocks, Option<Loc>) -> (u64, Box<dyn Gen>),
) -> (u64, Box<dyn Gen>) {
    let chunks = Blocks::Even {
        total: count,
        parts: c.g.size,
    };
    let sc = scatter(c, chunks.clone());
    let own = (c.me == root && !same).then_some(src);
    let (s, ag) = allgather(second_phase(c), chunks, own);
    (s, seq(vec![sc, ag]))
}
