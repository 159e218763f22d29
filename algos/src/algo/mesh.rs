//! Full-mesh algorithms (HCCL's intra-server `mesh`): every member talks to
//! every other member directly, all messages of a phase in flight at once.
//! One step of latency per phase; each member sends `(k-1)/k` of the data.
//! Peers are visited in rotated order (`me+1, me+2, ...`) to spread load.

use crate::schedule::{Op, StepId};

use super::gen::{rounds, Blocks, Ctx, Emit, Gen, Loc};

/// Mesh ReduceScatter (+ optional AllGather = AllReduce). Member `me`
/// reduces block `me` of everyone's `src` into `acc_block` (a region of
/// `blocks.len(me)` elements); with `then_gather`, `dst` is laid out like
/// the vector and `acc` must be `dst` at block `me`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    acc: Loc,
    dst: Loc,
    same: bool,
    divide: Option<u32>,
    then_gather: bool,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let me = c.me;
    let own_len = blocks.len(me);
    let own = move || acc.at(0, own_len);
    let mut last: Option<StepId> = None;
    let mut s0 = 0;
    let mut fin = 0;
    // Rounds: 1..k reduce-scatter, k finish (divide/copy), k+1..2k gather.
    let n = if then_gather { 2 * k } else { k + 1 };
    rounds(n, move |t, e: &mut Emit| {
        if t == 0 {
            s0 = e.next_id();
            return;
        }
        if t < k {
            let to = c.idx(t as i64);
            let from = c.idx(-(t as i64));
            e.push(
                Op::Send {
                    peer: c.g.rank(to),
                    tag: c.tag0,
                    src: src.block(&blocks, to),
                },
                &[],
            );
            let local = if last.is_none() {
                src.block(&blocks, me)
            } else {
                own()
            };
            let deps: Vec<StepId> = last.into_iter().collect();
            last = Some(e.push(
                Op::RecvReduce {
                    peer: c.g.rank(from),
                    tag: c.tag0,
                    local,
                    dst: own(),
                    op: c.op,
                },
                &deps,
            ));
            return;
        }
        if t == k {
            if last.is_none() && !same {
                last = Some(e.push(
                    Op::Copy {
                        src: src.block(&blocks, me),
                        dst: own(),
                    },
                    &[],
                ));
            }
            if let Some(d) = divide {
                let deps: Vec<StepId> = last.into_iter().collect();
                last = Some(e.push(
                    Op::Divide {
                        dst: own(),
                        divisor: d,
                    },
                    &deps,
                ));
            }
            fin = e.next_id();
            return;
        }
        let u = t - k;
        let to = c.idx(u as i64);
        let from = c.idx(-(u as i64));
        let deps: Vec<StepId> = last.into_iter().collect();
        e.push(
            Op::Send {
                peer: c.g.rank(to),
                tag: c.tag0 + 1,
                src: own(),
            },
            &deps,
        );
        // The reduce-scatter's send to `from` read this block (in place: the same memory).
        e.push(
            Op::Recv {
                peer: c.g.rank(from),
                tag: c.tag0 + 1,
                dst: dst.block(&blocks, from),
            },
            &[s0 + 2 * (k - u - 1)],
        );
        let _ = fin;
    })
}

/// Mesh AllGather: send the own block to every member, receive every other
/// block into `dst` (laid out like the vector).
pub(crate) fn allgather(c: Ctx, blocks: Blocks, src: Option<Loc>, dst: Loc) -> Box<dyn Gen> {
    let k = c.g.size;
    let me = c.me;
    rounds(k, move |t, e: &mut Emit| {
        let from_loc = |b: &Blocks| match src {
            Some(s) => s.at(0, b.len(me)),
            None => dst.block(b, me),
        };
        if t == 0 {
            if src.is_some() {
                e.push(
                    Op::Copy {
                        src: from_loc(&blocks),
                        dst: dst.block(&blocks, me),
                    },
                    &[],
                );
            }
            return;
        }
        let to = c.idx(t as i64);
        let from = c.idx(-(t as i64));
        e.push(
            Op::Send {
                peer: c.g.rank(to),
                tag: c.tag0,
                src: from_loc(&blocks),
            },
            &[],
        );
        e.push(
            Op::Recv {
                peer: c.g.rank(from),
                tag: c.tag0,
                dst: dst.block(&blocks, from),
            },
            &[],
        );
    })
}

/// Mesh Broadcast: the root sends the whole vector to every member.
pub(crate) fn broadcast(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
) -> Box<dyn Gen> {
    let k = c.g.size;
    rounds(k, move |t, e: &mut Emit| {
        if c.me == root {
            if t == 0 {
                e.push_if(
                    !same,
                    Op::Copy {
                        src: src.at(0, count),
                        dst: dst.at(0, count),
                    },
                    &[],
                );
            } else {
                let to = c.g.rank((root + t) % k);
                e.push(
                    Op::Send {
                        peer: to,
                        tag: c.tag0,
                        src: src.at(0, count),
                    },
                    &[],
                );
            }
        } else if t == 0 {
            e.push(
                Op::Recv {
                    peer: c.g.rank(root),
                    tag: c.tag0,
                    dst: dst.at(0, count),
                },
                &[],
            );
        }
    })
}

/// Mesh Reduce: every member sends its input to the root, which reduces
/// them one after another into `dst`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
    divide: Option<u32>,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let mut last: Option<StepId> = None;
    rounds(k + 1, move |t, e: &mut Emit| {
        if c.me != root {
            if t == 0 {
                e.push(
                    Op::Send {
                        peer: c.g.rank(root),
                        tag: c.tag0,
                        src: src.at(0, count),
                    },
                    &[],
                );
            }
            return;
        }
        if t == 0 {
            return;
        }
        if t < k {
            let from = c.g.rank((root + t) % k);
            let local = if last.is_none() {
                src.at(0, count)
            } else {
                dst.at(0, count)
            };
            let deps: Vec<StepId> = last.into_iter().collect();
            last = Some(e.push(
                Op::RecvReduce {
                    peer: from,
                    tag: c.tag0,
                    local,
                    dst: dst.at(0, count),
                    op: c.op,
                },
                &deps,
            ));
            return;
        }
        if last.is_none() && !same {
            last = Some(e.push(
                Op::Copy {
                    src: src.at(0, count),
                    dst: dst.at(0, count),
                },
                &[],
            ));
        }
        if let Some(d) = divide {
            let deps: Vec<StepId> = last.into_iter().collect();
            e.push(
                Op::Divide {
                    dst: dst.at(0, count),
                    divisor: d,
                },
                &deps,
            );
        }
    })
}

/// Mesh Scatter (`gather == false`) or Gather: the root exchanges block
/// `j` with member `j` directly.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter_gather(
    c: Ctx,
    blocks: Blocks,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
    gather: bool,
) -> Box<dyn Gen> {
    let k = c.g.size;
    rounds(k, move |t, e: &mut Emit| {
        let me = c.me;
        if me != root {
            if t == 0 {
                let n = blocks.len(me);
                if gather {
                    e.push(
                        Op::Send {
                            peer: c.g.rank(root),
                            tag: c.tag0,
                            src: src.at(0, n),
                        },
                        &[],
                    );
                } else {
                    e.push(
                        Op::Recv {
                            peer: c.g.rank(root),
                            tag: c.tag0,
                            dst: dst.at(0, n),
                        },
                        &[],
                    );
                }
            }
            return;
        }
        let j = (root + t) % k;
        let n = blocks.len(j);
        if t == 0 {
            if !same {
                let (s, d) = if gather {
                    (src.at(0, n), dst.block(&blocks, j))
                } else {
                    (src.block(&blocks, j), dst.at(0, n))
                };
                e.push(Op::Copy { src: s, dst: d }, &[]);
            }
        } else if gather {
            e.push(
                Op::Recv {
                    peer: c.g.rank(j),
                    tag: c.tag0,
                    dst: dst.block(&blocks, j),
                },
                &[],
            );
        } else {
            e.push(
                Op::Send {
                    peer: c.g.rank(j),
                    tag: c.tag0,
                    src: src.block(&blocks, j),
                },
                &[],
            );
        }
    })
}
