//! Nonuniform hierarchical ring (HCCL's `NHR`): ⌈log2 k⌉ steps for any
//! member count, without folding.
//!
//! HCCL's algorithm guide (`docs/*/user_guide/coll_algo_intro/NHR.md` in
//! hicann/hccl) states the properties: ⌈log2 k⌉ steps whatever `k`, the
//! ReduceScatter's first step exchanges half of the vector and each later
//! step half as much (AllGather the reverse), traffic concentrated between
//! nearby ranks, and costs `⌈log2 p⌉α + (p-1)/p·nβ (+γ)` (see
//! [`crate::select`]). hccl-rs realizes them with a halving tree over
//! *contiguous* intervals of the ring:
//!
//! An interval `[lo, hi)` of `s` members splits into `A = [lo, lo + ⌈s/2⌉)`
//! and `B = [lo + ⌈s/2⌉, hi)`. Member `i` of A pairs with member `i` of B;
//! both exchange the blocks of the other half, so each message is one
//! contiguous range of blocks. When `s` is odd, A's last member has no
//! partner: it sends its B half to B's first member (its ring neighbour),
//! which reduces two messages that step, and receives nothing. The tree has
//! depth ⌈log2 k⌉. ReduceScatter walks it top-down, AllGather bottom-up.
//! AllReduce = ReduceScatter + AllGather; Broadcast = Scatter down the same
//! tree + AllGather, as in the guide.

use crate::schedule::{Op, StepId};

use super::compose::{reduce_scatter_allgather, scatter_allgather};
use super::gen::{rounds, Blocks, Ctx, Emit, Gen, Loc};

/// One split of the halving tree, seen from member `v`.
#[derive(Clone, Copy, Debug)]
struct Split {
    lo: u32,
    mid: u32,
    hi: u32,
}

impl Split {
    fn of(lo: u32, hi: u32) -> Split {
        Split {
            lo,
            mid: lo + (hi - lo).div_ceil(2),
            hi,
        }
    }

    /// Size of B (the smaller half).
    fn b(&self) -> u32 {
        self.hi - self.mid
    }

    /// A's unpaired last member when the interval is odd.
    fn extra(&self) -> Option<u32> {
        (self.mid - self.lo > self.b()).then_some(self.mid - 1)
    }

    /// The partner of `v` (for the extra member: B's first member).
    fn partner(&self, v: u32) -> u32 {
        if v >= self.mid {
            self.lo + (v - self.mid)
        } else if Some(v) == self.extra() {
            self.mid
        } else {
            self.mid + (v - self.lo)
        }
    }

    /// `v`'s half.
    fn mine(&self, v: u32) -> (u32, u32) {
        if v < self.mid {
            (self.lo, self.mid)
        } else {
            (self.mid, self.hi)
        }
    }

    /// The other half.
    fn theirs(&self, v: u32) -> (u32, u32) {
        if v < self.mid {
            (self.mid, self.hi)
        } else {
            (self.lo, self.mid)
        }
    }
}

/// The splits `v` takes part in, top-down (at most 32).
fn path(k: u32, v: u32) -> Vec<Split> {
    let (mut lo, mut hi) = (0, k);
    let mut out = Vec::new();
    while hi - lo > 1 {
        let s = Split::of(lo, hi);
        out.push(s);
        (lo, hi) = s.mine(v);
    }
    out
}

/// Global rank of virtual member `w` when virtual 0 is member `rot`.
fn member(c: &Ctx, rot: u32, w: u32) -> u32 {
    c.g.rank((w + rot) % c.g.size)
}

/// Element range of blocks `[a, b)`.
fn span(blocks: &Blocks, (a, b): (u32, u32)) -> (u64, u64) {
    let x = blocks.off(a);
    (x, blocks.off(b) - x)
}

/// NHR ReduceScatter: member `v` ends with the reduction of block `v` at
/// `out`. Partial sums live in `store` (vector layout: scratch, or the
/// output vector for AllReduce); the second message an odd split's B member
/// gets lands in `stage` (scratch, up to half the vector) so both messages
/// of the step travel at once. Returns (scratch bytes, generator).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    out: Loc,
    store: Loc,
    stage: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let v = c.me;
    if k == 1 {
        return (
            0,
            super::ring::reduce_scatter(c, blocks, src, out, store, same, divide).1,
        );
    }
    // Scratch bytes from the start of `store` (the stage follows it) or,
    // when the store is the output, of `stage`.
    let half = blocks.total();
    let scratch = if store.buf == crate::schedule::BufKind::Scratch {
        (blocks.total() + half) * store.esz
    } else {
        half * stage.esz
    };
    let own = blocks.len(v);
    let (mut lo, mut hi) = (0u32, k);
    let mut touched = false;
    let mut prev: Vec<StepId> = Vec::new();
    let steps = path(k, v).len() as u32;
    let gen = rounds(steps + 1, move |d, e: &mut Emit| {
        if d == steps {
            if let Some(&last) = prev.first() {
                e.divide(divide, out.at(0, own), &[last]);
            }
            return;
        }
        let sp = Split::of(lo, hi);
        let cur = if touched { store } else { src };
        let (go, gl) = span(&blocks, sp.theirs(v));
        e.push(
            Op::Send {
                peer: member(&c, 0, sp.partner(v)),
                tag: c.tag0 + d,
                src: cur.at(go, gl),
            },
            &prev,
        );
        let keep = sp.mine(v);
        let (ko, kl) = span(&blocks, keep);
        let to = if keep.1 - keep.0 == 1 {
            out.at(0, own)
        } else {
            store.at(ko, kl)
        };
        if Some(v) != sp.extra() {
            let before = std::mem::take(&mut prev);
            let r = e.push(
                Op::RecvReduce {
                    peer: member(&c, 0, sp.partner(v)),
                    tag: c.tag0 + d,
                    local: cur.at(ko, kl),
                    dst: to,
                    op: c.op,
                },
                &before,
            );
            prev = vec![r];
            if let Some(x) = sp.extra().filter(|_| v == sp.mid) {
                let staged = stage.at(0, kl);
                let r2 = e.push(
                    Op::Recv {
                        peer: member(&c, 0, x),
                        tag: c.tag0 + d,
                        dst: staged,
                    },
                    &before,
                );
                prev = vec![e.push(
                    Op::LocalReduce {
                        src: staged,
                        dst: to,
                        op: c.op,
                    },
                    &[r, r2],
                )];
            }
            touched = true;
        }
        (lo, hi) = keep;
    });
    (scratch, gen)
}

/// NHR AllGather of `blocks` indexed by *virtual* member (virtual 0 is
/// member `rot`) into `dst` (vector layout); the own block is at `src` or
/// already in place.
pub(crate) fn allgather(
    c: Ctx,
    blocks: Blocks,
    src: Option<Loc>,
    dst: Loc,
    rot: u32,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let v = (c.me + k - rot) % k;
    let splits = path(k, v);
    let depth = splits.len() as u32;
    let mut own_copy: Vec<StepId> = Vec::new();
    let mut last: Option<StepId> = None;
    rounds(depth + 1, move |t, e: &mut Emit| {
        if t == 0 {
            if let Some(s) = src {
                own_copy = vec![e.push(
                    Op::Copy {
                        src: s.at(0, blocks.len(v)),
                        dst: dst.block(&blocks, v),
                    },
                    &[],
                )];
            }
            return;
        }
        // Bottom-up: the deepest split first.
        let d = depth - t;
        let sp = splits[d as usize];
        let (mo, ml) = span(&blocks, sp.mine(v));
        let (to, tl) = span(&blocks, sp.theirs(v));
        let deps: Vec<StepId> = last.iter().chain(&own_copy).copied().collect();
        let sends_to: [Option<u32>; 2] = if Some(v) == sp.extra() {
            [None, None]
        } else if v == sp.mid {
            [Some(sp.partner(v)), sp.extra()]
        } else {
            [Some(sp.partner(v)), None]
        };
        for p in sends_to.into_iter().flatten() {
            e.push(
                Op::Send {
                    peer: member(&c, rot, p),
                    tag: c.tag0 + d,
                    src: dst.at(mo, ml),
                },
                &deps,
            );
        }
        let deps: Vec<StepId> = last.into_iter().collect();
        last = Some(e.push(
            Op::Recv {
                peer: member(&c, rot, sp.partner(v)),
                tag: c.tag0 + d,
                dst: dst.at(to, tl),
            },
            &deps,
        ));
    })
}

/// NHR AllReduce: ReduceScatter with partials in `dst`, then AllGather.
/// Returns (scratch bytes, generator).
pub(crate) fn allreduce(
    c: Ctx,
    count: u64,
    src: Loc,
    dst: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let stage = Loc::new(crate::schedule::BufKind::Scratch, 0, dst.esz);
    reduce_scatter_allgather(
        c,
        count,
        dst,
        |c, blocks, out| reduce_scatter(c, blocks, src, out, dst, stage, same, divide),
        |c, blocks| (0, allgather(c, blocks, None, dst, 0)),
    )
}

/// Scatter down the halving tree from virtual 0 (member `root`, data at
/// `src`): the first member of each interval holds it and sends B's blocks
/// to B's first member. Each member ends with its own block in `dst`.
fn scatter(c: Ctx, blocks: Blocks, root: u32, src: Loc, dst: Loc) -> Box<dyn Gen> {
    let k = c.g.size;
    let v = (c.me + k - root) % k;
    let splits = path(k, v);
    let mut got: Vec<StepId> = Vec::new();
    rounds(splits.len() as u32, move |d, e: &mut Emit| {
        let sp = splits[d as usize];
        if v == sp.lo {
            let from = if v == 0 { src } else { dst };
            let (o, l) = span(&blocks, (sp.mid, sp.hi));
            e.push(
                Op::Send {
                    peer: member(&c, root, sp.mid),
                    tag: c.tag0 + d,
                    src: from.at(o, l),
                },
                &got,
            );
        } else if v == sp.mid {
            let (o, l) = span(&blocks, (sp.mid, sp.hi));
            got = vec![e.push(
                Op::Recv {
                    peer: member(&c, root, sp.lo),
                    tag: c.tag0 + d,
                    dst: dst.at(o, l),
                },
                &[],
            )];
        }
    })
}

/// NHR Broadcast from member `root`: Scatter of `k` chunks down the tree,
/// then NHR AllGather.
pub(crate) fn broadcast(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
) -> (u64, Box<dyn Gen>) {
    scatter_allgather(
        c,
        count,
        root,
        src,
        same,
        |c, chunks| scatter(c, chunks, root, src, dst),
        |c, chunks, own| (0, allgather(c, chunks, own, dst, root)),
    )
}
