//! Nonuniform Bruck (HCCL's `NB`): ⌈log2 k⌉ steps for any member count,
//! no folding and no extra traffic when `k` is not a power of two.
//!
//! HCCL's algorithm guide (`docs/*/user_guide/coll_algo_intro/NB.md` in
//! hicann/hccl) describes it as rings with strides `2^s` and gives its costs
//! (see [`crate::select`]). hccl-rs builds it as Bruck's concatenation
//! (Bruck et al. 1997, "Efficient algorithms for all-to-all communications
//! in multiport message-passing systems", IEEE TPDS 8(11)):
//!
//! * **AllGather**, step `s = 0, 1, ...`: member `v` sends the blocks it
//!   holds, relative blocks `[0, c)` with `c = min(2^s, k - 2^s)`, to
//!   `v - 2^s` and receives relative blocks `[2^s, 2^s + c)` from `v + 2^s`.
//!   The last step carries `k - 2^⌊log2 k⌋` blocks, as the guide says.
//! * **ReduceScatter** is its transpose: step `s = L-1, ..., 0` sends the
//!   partial sums of relative blocks `[2^s, 2^s + c)` to `v + 2^s` and
//!   reduces relative blocks `[0, c)` from `v - 2^s`.
//!
//! "Relative block `i`" of member `v` is block `(v + i) mod k`. Partials live
//! in scratch in that rotated order, so every message is one contiguous
//! region; a local copy rotates the vector in (ReduceScatter) or out
//! (AllGather). AllReduce = ReduceScatter + AllGather and Broadcast =
//! binomial Scatter + AllGather, as in the guide.

use crate::schedule::{Op, Region, StepId};

use super::compose::{reduce_scatter_allgather, scatter_allgather};
use super::gen::{rounds, Blocks, Ctx, Emit, Gen, Loc};

/// ⌈log2 k⌉ (0 for k ≤ 1): the number of steps of NB and NHR.
pub(crate) fn log2_ceil(k: u32) -> u32 {
    if k <= 1 {
        0
    } else {
        32 - (k - 1).leading_zeros()
    }
}

/// The rotated order of member `v`: relative block `i` is block `(v + i) mod k`.
#[derive(Clone, Debug)]
struct Rot {
    blocks: Blocks,
    v: u32,
    k: u32,
}

impl Rot {
    /// Element offset of relative block `i` (`i == k` gives the total).
    fn off(&self, i: u32) -> u64 {
        let base = self.blocks.off(self.v);
        let j = self.v + i;
        if j <= self.k {
            self.blocks.off(j) - base
        } else {
            self.blocks.total() - base + self.blocks.off(j - self.k)
        }
    }

    /// Relative blocks `[a, b)` in the rotated buffer `at`.
    fn region(&self, at: Loc, a: u32, b: u32) -> Region {
        let x = self.off(a);
        at.at(x, self.off(b) - x)
    }

    /// Relative blocks `[a, b)` as at most two (vector, rotated) region pairs.
    fn pieces(&self, vector: Loc, rotated: Loc, a: u32, b: u32) -> Vec<(Region, Region)> {
        let (v, k) = (self.v, self.k);
        let piece = |ra: u32, rb: u32| {
            let (x, y) = ((v + ra) % k, (v + rb - 1) % k + 1);
            let (o, len) = (self.blocks.off(x), self.blocks.off(y) - self.blocks.off(x));
            (vector.at(o, len), rotated.at(self.off(ra), len))
        };
        if a >= b {
            return vec![];
        }
        if v + a < k && v + b > k {
            vec![piece(a, k - v), piece(k - v, b)]
        } else {
            vec![piece(a, b)]
        }
    }
}

/// Global rank of virtual member `w` when virtual 0 is member `rot`.
fn member(c: &Ctx, rot: u32, w: i64) -> u32 {
    let k = c.g.size as i64;
    c.g.rank(((w + rot as i64).rem_euclid(k)) as u32)
}

/// NB ReduceScatter of `blocks` (one per member) from `src` (vector layout)
/// into `out` (the member's own block). Returns (scratch bytes, generator):
/// the whole vector, rotated.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    out: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let v = c.me;
    let own = blocks.len(v);
    if k == 1 {
        return (
            0,
            super::ring::reduce_scatter(c, blocks, src, out, scratch, same, divide).1,
        );
    }
    let l = log2_ceil(k);
    let rot = Rot {
        blocks: blocks.clone(),
        v,
        k,
    };
    let scratch_bytes = blocks.total() * scratch.esz;
    let mut prev: Vec<StepId> = Vec::new();
    let gen = rounds(l + 1, move |t, e: &mut Emit| {
        if t == 0 {
            // Rotate the input into scratch: relative block i = block v + i.
            prev = rot
                .pieces(src, scratch, 0, k)
                .into_iter()
                .map(|(from, to)| e.push(Op::Copy { src: from, dst: to }, &[]))
                .collect();
            return;
        }
        let s = l - t;
        let stride = 1u32 << s;
        let cnt = stride.min(k - stride);
        e.push(
            Op::Send {
                peer: member(&c, 0, v as i64 + stride as i64),
                tag: c.tag0 + s,
                src: rot.region(scratch, stride, stride + cnt),
            },
            &prev,
        );
        let kept = rot.region(scratch, 0, cnt);
        let to = if s == 0 { out.at(0, own) } else { kept };
        let r = e.push(
            Op::RecvReduce {
                peer: member(&c, 0, v as i64 - stride as i64),
                tag: c.tag0 + s,
                local: kept,
                dst: to,
                op: c.op,
            },
            &prev,
        );
        prev = vec![r];
        if s == 0 {
            e.divide(divide, to, &[r]);
        }
    });
    (scratch_bytes, gen)
}

/// NB AllGather of `blocks` indexed by *virtual* member (virtual 0 is
/// member `rot`) into `dst` (vector layout). The own block is at `src` or
/// already in place. Returns (scratch bytes, generator).
pub(crate) fn allgather(
    c: Ctx,
    blocks: Blocks,
    src: Option<Loc>,
    dst: Loc,
    scratch: Loc,
    rot: u32,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let v = (c.me + k - rot) % k;
    if k == 1 {
        return (0, super::ring::allgather(c, blocks, src, dst));
    }
    let l = log2_ceil(k);
    let r = Rot {
        blocks: blocks.clone(),
        v,
        k,
    };
    let own = move |b: &Blocks| match src {
        Some(s) => s.at(0, b.len(v)),
        None => dst.block(b, v),
    };
    let scratch_bytes = blocks.total() * scratch.esz;
    let mut own_copy: StepId = 0;
    let mut last: Option<StepId> = None;
    let gen = rounds(l + 2, move |t, e: &mut Emit| {
        if t == 0 {
            if let Some(s) = src {
                e.push(
                    Op::Copy {
                        src: s.at(0, blocks.len(v)),
                        dst: dst.block(&blocks, v),
                    },
                    &[],
                );
            }
            own_copy = e.push(
                Op::Copy {
                    src: own(&blocks),
                    dst: r.region(scratch, 0, 1),
                },
                &[],
            );
            return;
        }
        if t <= l {
            let s = t - 1;
            let stride = 1u32 << s;
            let cnt = stride.min(k - stride);
            let deps: Vec<StepId> = last.into_iter().chain([own_copy]).collect();
            e.push(
                Op::Send {
                    peer: member(&c, rot, v as i64 - stride as i64),
                    tag: c.tag0 + s,
                    src: r.region(scratch, 0, cnt),
                },
                &deps,
            );
            // Receives are chained so a send waits for one id, not all.
            let deps: Vec<StepId> = last.into_iter().collect();
            last = Some(e.push(
                Op::Recv {
                    peer: member(&c, rot, v as i64 + stride as i64),
                    tag: c.tag0 + s,
                    dst: r.region(scratch, stride, stride + cnt),
                },
                &deps,
            ));
            return;
        }
        // Rotate everything but the own block out into the vector.
        let deps: Vec<StepId> = last.into_iter().collect();
        for (to, from) in r.pieces(dst, scratch, 1, k) {
            e.push(Op::Copy { src: from, dst: to }, &deps);
        }
    });
    (scratch_bytes, gen)
}

/// NB AllReduce: ReduceScatter into the own block of `dst`, then AllGather.
pub(crate) fn allreduce(
    c: Ctx,
    count: u64,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    reduce_scatter_allgather(
        c,
        count,
        dst,
        |c, blocks, out| reduce_scatter(c, blocks, src, out, scratch, same, divide),
        |c, blocks| allgather(c, blocks, None, dst, scratch, 0),
    )
}

/// Binomial Scatter over virtual members (virtual 0 = member `root` holds
/// the vector at `src`): at step `s = L-1, ..., 0` a holder `v` (a multiple
/// of `2^(s+1)`) sends blocks `[v + 2^s, v + 2^(s+1))` to `v + 2^s`. Each
/// member ends with at least its own block in `dst` at its block offset.
pub(crate) fn scatter_binomial(
    c: Ctx,
    blocks: Blocks,
    root: u32,
    src: Loc,
    dst: Loc,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let v = (c.me + k - root) % k;
    let l = log2_ceil(k);
    let mut got: Option<StepId> = None;
    rounds(l, move |t, e: &mut Emit| {
        let s = l - 1 - t;
        let stride = 1u32 << s;
        if v.is_multiple_of(2 * stride) && v + stride < k {
            let (a, b) = (v + stride, (v + 2 * stride).min(k));
            let from = if v == 0 { src } else { dst };
            let x = blocks.off(a);
            e.push(
                Op::Send {
                    peer: member(&c, root, (v + stride) as i64),
                    tag: c.tag0 + s,
                    src: from.at(x, blocks.off(b) - x),
                },
                &got.into_iter().collect::<Vec<_>>(),
            );
        } else if v % (2 * stride) == stride {
            let b = (v + stride).min(k);
            let x = blocks.off(v);
            got = Some(e.push(
                Op::Recv {
                    peer: member(&c, root, (v - stride) as i64),
                    tag: c.tag0 + s,
                    dst: dst.at(x, blocks.off(b) - x),
                },
                &[],
            ));
        }
    })
}

/// NB Broadcast from member `root`: binomial Scatter of `k` chunks, then NB
/// AllGather (HCCL's guide: Broadcast = Scatter + AllGather).
pub(crate) fn broadcast(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
) -> (u64, Box<dyn Gen>) {
    scatter_allgather(
        c,
        count,
        root,
        src,
        same,
        |c, chunks| scatter_binomial(c, chunks, root, src, dst),
        |c, chunks, own| allgather(c, chunks, own, dst, scratch, root),
    )
}
