//! Binomial trees for Broadcast and Reduce (as in MPICH; Thakur, Rabenseifner
//! & Gropp 2005, §3): ⌈log2 k⌉ rounds, the whole message per round.
//!
//! Virtual rank `v = me - root (mod k)`. The parent of `v > 0` is `v` with
//! its lowest set bit cleared; the children of `v` are `v + 2^j` for every
//! `2^j` below `v`'s lowest set bit (below `k` for the root).

use crate::schedule::{Op, StepId};

use super::gen::{rounds, Ctx, Emit, Gen, Loc};

fn levels(k: u32) -> u32 {
    if k <= 1 {
        0
    } else {
        32 - (k - 1).leading_zeros()
    }
}

/// Lowest set bit of `v`, or `2^levels` for the root.
fn low_bit(v: u32, k: u32) -> u32 {
    if v == 0 {
        1 << levels(k)
    } else {
        v & v.wrapping_neg()
    }
}

/// Binomial Broadcast from member `root`: receive from the parent, then send
/// to the children, largest subtree first.
pub(crate) fn broadcast(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let v = (c.me + k - root) % k;
    let lb = low_bit(v, k);
    let member = move |w: u32| c.g.rank((w + root) % k);
    let mut recv: Option<StepId> = None;
    let n = levels(k) + 1;
    rounds(n, move |t, e: &mut Emit| {
        if t == 0 {
            if v == 0 {
                e.push_if(
                    !same,
                    Op::Copy {
                        src: src.at(0, count),
                        dst: dst.at(0, count),
                    },
                    &[],
                );
            } else {
                recv = Some(e.push(
                    Op::Recv {
                        peer: member(v - lb),
                        tag: c.tag0,
                        dst: dst.at(0, count),
                    },
                    &[],
                ));
            }
            return;
        }
        // Children in decreasing distance: 2^j for j = levels-1 down to 0.
        let j = n - 1 - t;
        let d = 1u32 << j;
        if d < lb && v + d < k {
            let from = if v == 0 {
                src.at(0, count)
            } else {
                dst.at(0, count)
            };
            let deps: Vec<StepId> = recv.into_iter().collect();
            e.push(
                Op::Send {
                    peer: member(v + d),
                    tag: c.tag0,
                    src: from,
                },
                &deps,
            );
        }
    })
}

/// Binomial Reduce to member `root`: reduce the children's partial results
/// (smallest subtree first) into an accumulator (`dst` on the root,
/// `scratch` elsewhere), then send it to the parent. Returns (scratch bytes, generator).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let v = (c.me + k - root) % k;
    let lb = low_bit(v, k);
    let member = move |w: u32| c.g.rank((w + root) % k);
    let acc = if v == 0 { dst } else { scratch };
    let has_children = (0..levels(k)).any(|j| (1 << j) < lb && v + (1 << j) < k);
    let scratch_bytes = if v != 0 && has_children {
        count * scratch.esz
    } else {
        0
    };
    let mut last: Option<StepId> = None;
    let n = levels(k) + 1;
    let gen = rounds(n, move |t, e: &mut Emit| {
        if t < n - 1 {
            let d = 1u32 << t;
            if d < lb && v + d < k {
                let local = if last.is_none() {
                    src.at(0, count)
                } else {
                    acc.at(0, count)
                };
                let deps: Vec<StepId> = last.into_iter().collect();
                last = Some(e.push(
                    Op::RecvReduce {
                        peer: member(v + d),
                        tag: c.tag0,
                        local,
                        dst: acc.at(0, count),
                        op: c.op,
                    },
                    &deps,
                ));
            }
            return;
        }
        if v == 0 {
            if last.is_none() && !same {
                last = Some(e.push(
                    Op::Copy {
                        src: src.at(0, count),
                        dst: dst.at(0, count),
                    },
                    &[],
                ));
            }
            e.divide(divide, dst.at(0, count), last.as_slice());
        } else {
            let from = if last.is_none() {
                src.at(0, count)
            } else {
                acc.at(0, count)
            };
            let deps: Vec<StepId> = last.into_iter().collect();
            e.push(
                Op::Send {
                    peer: member(v - lb),
                    tag: c.tag0,
                    src: from,
                },
                &deps,
            );
        }
    });
    (scratch_bytes, gen)
}
