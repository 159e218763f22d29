//! Ring algorithms (Patarasuk & Yuan 2009 for AllReduce; the chain
//! broadcast/reduce/scatter/gather are the ring's linear pipelines).
//!
//! Members pass blocks to their right neighbour (`me + 1`) and receive from
//! their left (`me - 1`). Round `t` of the reduce-scatter sends block
//! `me - t - 1` and reduces block `me - t - 2`, so after `k - 1` rounds member
//! `me` holds the full reduction of block `me`; the all-gather then passes
//! finished blocks around in `k - 1` more rounds. Every message is one block
//! (possibly empty when the count is below the group size, so both sides
//! always agree on the message sequence).

use crate::schedule::{Op, Rank, Region, StepId};

use super::gen::{rounds, Blocks, Ctx, Emit, Gen, Loc};

/// Ring AllReduce of `blocks` (one per member) from `src` into `dst`, both
/// laid out like the full vector. `same` = src and dst are the same memory
/// (no initial copy). `divide` = divisor for `Avg`, applied once to the
/// member's own block between the two halves.
pub(crate) fn allreduce(
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    dst: Loc,
    same: bool,
    divide: Option<u32>,
) -> Box<dyn Gen> {
    let k = c.g.size;
    if k == 1 {
        return rounds(1, move |_, e| {
            let all = blocks.total();
            e.copy_then_divide(same, src.at(0, all), dst.at(0, all), divide);
        });
    }
    let (next, prev) = (c.peer(1), c.peer(-1));
    let mut s0 = 0;
    let mut a0 = 0;
    rounds(2 * (k - 1), move |t, e: &mut Emit| {
        if t == 0 {
            s0 = e.next_id();
        }
        if t < k - 1 {
            let sb = c.idx(-(t as i64) - 1);
            let rb = c.idx(-(t as i64) - 2);
            let (from, deps) = if t == 0 {
                (src.block(&blocks, sb), None)
            } else {
                (dst.block(&blocks, sb), Some(s0 + 2 * (t - 1) + 1))
            };
            e.push(
                Op::Send {
                    peer: next,
                    tag: c.tag0 + t,
                    src: from,
                },
                deps.as_slice(),
            );
            e.push(
                Op::RecvReduce {
                    peer: prev,
                    tag: c.tag0 + t,
                    local: src.block(&blocks, rb),
                    dst: dst.block(&blocks, rb),
                    op: c.op,
                },
                &[],
            );
            if t == k - 2 {
                let last = e.next_id() - 1;
                e.divide(divide, dst.block(&blocks, c.me), &[last]);
                a0 = e.next_id();
            }
        } else {
            let u = t - (k - 1);
            let sb = c.idx(-(u as i64));
            let rb = c.idx(-(u as i64) - 1);
            let send_dep = if u == 0 { a0 - 1 } else { a0 + 2 * (u - 1) + 1 };
            e.push(
                Op::Send {
                    peer: next,
                    tag: c.tag0 + t,
                    src: dst.block(&blocks, sb),
                },
                &[send_dep],
            );
            // The reduce-scatter's send of round u read this block: wait for it.
            e.push(
                Op::Recv {
                    peer: prev,
                    tag: c.tag0 + t,
                    dst: dst.block(&blocks, rb),
                },
                &[s0 + 2 * u],
            );
        }
    })
}

/// Ring ReduceScatter: member `me` ends with the reduction of block `me` at
/// `out`. Partial blocks travel through two scratch slots of
/// `blocks.max_len()` elements at `scratch`. Returns the generator and the
/// scratch bytes it needs.
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
    let slot_elems = blocks.max_len();
    let slot = move |i: u32, elems: u64| scratch.at((i % 2) as u64 * slot_elems, elems);
    let own_len = blocks.len(c.me);
    if k == 1 {
        let gen = rounds(1, move |_, e| {
            e.copy_then_divide(same, src.block(&blocks, 0), out.at(0, own_len), divide);
        });
        return (0, gen);
    }
    let scratch_bytes = if k >= 3 {
        2 * slot_elems * scratch.esz
    } else {
        0
    };
    let (next, prev) = (c.peer(1), c.peer(-1));
    let mut s0 = 0;
    let gen = rounds(k - 1, move |t, e: &mut Emit| {
        if t == 0 {
            s0 = e.next_id();
        }
        let sb = c.idx(-(t as i64) - 1);
        let rb = c.idx(-(t as i64) - 2);
        let (from, deps) = if t == 0 {
            (src.block(&blocks, sb), None)
        } else {
            (slot(t - 1, blocks.len(sb)), Some(s0 + 2 * (t - 1) + 1))
        };
        e.push(
            Op::Send {
                peer: next,
                tag: c.tag0 + t,
                src: from,
            },
            deps.as_slice(),
        );
        let last = t == k - 2;
        let to = if last {
            out.at(0, own_len)
        } else {
            slot(t, blocks.len(rb))
        };
        // Slot t%2 was last read by the send of round t-1.
        let deps = if t >= 2 { Some(s0 + 2 * (t - 1)) } else { None };
        let r = e.push(
            Op::RecvReduce {
                peer: prev,
                tag: c.tag0 + t,
                local: src.block(&blocks, rb),
                dst: to,
                op: c.op,
            },
            deps.as_slice(),
        );
        if last {
            e.divide(divide, out.at(0, own_len), &[r]);
        }
    });
    (scratch_bytes, gen)
}

/// Ring AllGather: block `b` of member `b` ends in `dst` at its block
/// offset on every member. `src` = where the member's own block is if not
/// already in place in `dst`.
pub(crate) fn allgather(c: Ctx, blocks: Blocks, src: Option<Loc>, dst: Loc) -> Box<dyn Gen> {
    let k = c.g.size;
    let (next, prev) = (c.peer(1), c.peer(-1));
    let own = c.me;
    let mut r_prev: StepId = 0;
    rounds(k, move |t, e: &mut Emit| {
        if t == 0 {
            if let Some(s) = src {
                e.push(
                    Op::Copy {
                        src: s.at(0, blocks.len(own)),
                        dst: dst.block(&blocks, own),
                    },
                    &[],
                );
            }
            return;
        }
        let u = t - 1;
        let sb = c.idx(-(u as i64));
        let rb = c.idx(-(u as i64) - 1);
        let (from, deps) = match (u, src) {
            (0, Some(s)) => (s.at(0, blocks.len(own)), None),
            (0, None) => (dst.block(&blocks, sb), None),
            _ => (dst.block(&blocks, sb), Some(r_prev)),
        };
        e.push(
            Op::Send {
                peer: next,
                tag: c.tag0 + u,
                src: from,
            },
            deps.as_slice(),
        );
        r_prev = e.push(
            Op::Recv {
                peer: prev,
                tag: c.tag0 + u,
                dst: dst.block(&blocks, rb),
            },
            &[],
        );
    })
}

/// Chain Broadcast from member `root`, pipelined in `chunks`: each member
/// receives chunk `i` from its left and forwards it right. The root sends
/// from `src` and copies `src` to `dst` unless `same`.
pub(crate) fn broadcast(
    c: Ctx,
    chunks: Blocks,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let v = (c.me + k - root) % k;
    let (next, prev) = (c.peer(1), c.peer(-1));
    let n = chunks.parts();
    rounds(n + 1, move |t, e: &mut Emit| {
        if t == 0 {
            if v == 0 && !same {
                let all = chunks.total();
                e.push(
                    Op::Copy {
                        src: src.at(0, all),
                        dst: dst.at(0, all),
                    },
                    &[],
                );
            }
            return;
        }
        let i = t - 1;
        if k == 1 {
            return;
        }
        if v == 0 {
            e.push(
                Op::Send {
                    peer: next,
                    tag: c.tag0 + i,
                    src: src.block(&chunks, i),
                },
                &[],
            );
        } else {
            let r = e.push(
                Op::Recv {
                    peer: prev,
                    tag: c.tag0 + i,
                    dst: dst.block(&chunks, i),
                },
                &[],
            );
            if v < k - 1 {
                e.push(
                    Op::Send {
                        peer: next,
                        tag: c.tag0 + i,
                        src: dst.block(&chunks, i),
                    },
                    &[r],
                );
            }
        }
    })
}

/// Chain Reduce toward member `root`, pipelined in `chunks`: the member
/// farthest from the root sends, each member reduces its input into what it
/// receives (into `scratch`, same layout as the vector) and passes it on;
/// the root reduces into `dst`. Returns (scratch bytes, generator).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    c: Ctx,
    chunks: Blocks,
    root: u32,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let v = (c.me + k - root) % k;
    let (next, prev) = (c.peer(1), c.peer(-1));
    let n = chunks.parts();
    let scratch_bytes = if v > 0 && v < k - 1 {
        chunks.total() * scratch.esz
    } else {
        0
    };
    let gen = rounds(n.max(1), move |i, e: &mut Emit| {
        if k == 1 {
            if i > 0 {
                return;
            }
            let all = chunks.total();
            e.copy_then_divide(same, src.at(0, all), dst.at(0, all), divide);
            return;
        }
        if i >= n {
            return;
        }
        let tag = c.tag0 + i;
        if v == k - 1 {
            e.push(
                Op::Send {
                    peer: prev,
                    tag,
                    src: src.block(&chunks, i),
                },
                &[],
            );
        } else if v > 0 {
            let r = e.push(
                Op::RecvReduce {
                    peer: next,
                    tag,
                    local: src.block(&chunks, i),
                    dst: scratch.block(&chunks, i),
                    op: c.op,
                },
                &[],
            );
            e.push(
                Op::Send {
                    peer: prev,
                    tag,
                    src: scratch.block(&chunks, i),
                },
                &[r],
            );
        } else {
            let r = e.push(
                Op::RecvReduce {
                    peer: next,
                    tag,
                    local: src.block(&chunks, i),
                    dst: dst.block(&chunks, i),
                    op: c.op,
                },
                &[],
            );
            e.divide(divide, dst.block(&chunks, i), &[r]);
        }
    });
    (scratch_bytes, gen)
}

/// The chain of a rooted Scatter or Gather: member `root` is virtual 0,
/// the others follow in ring order; the blocks of members beyond a member
/// pass through its two scratch slots (the chain's two ends need none).
#[derive(Clone, Copy)]
struct Chain {
    k: u32,
    root: u32,
    /// This member's virtual index.
    v: u32,
    slot_elems: u64,
    scratch: Loc,
}

impl Chain {
    fn new(c: &Ctx, blocks: &Blocks, root: u32, scratch: Loc) -> Chain {
        let k = c.g.size;
        Chain {
            k,
            root,
            v: (c.me + k - root) % k,
            slot_elems: blocks.max_len(),
            scratch,
        }
    }

    /// The member at virtual index `w`.
    fn member(&self, w: u32) -> u32 {
        (self.root + w) % self.k
    }

    /// Rounds of this member: one per block it sends, receives or forwards.
    fn rounds(&self) -> u32 {
        if self.v == 0 {
            self.k
        } else {
            self.k - self.v
        }
    }

    /// Scratch slot of round `j` (two alternate), `elems` long.
    fn slot(&self, j: u32, elems: u64) -> Region {
        self.scratch.at((j % 2) as u64 * self.slot_elems, elems)
    }

    fn scratch_bytes(&self) -> u64 {
        if self.v >= 1 && self.v + 1 < self.k {
            2 * self.slot_elems * self.scratch.esz
        } else {
            0
        }
    }
}

/// Receives a block from `from` into `slot` (after `deps`) and sends it on to `to`.
fn forward(e: &mut Emit, from: Rank, to: Rank, tag: u32, slot: Region, deps: &[StepId]) {
    let r = e.push(
        Op::Recv {
            peer: from,
            tag,
            dst: slot,
        },
        deps,
    );
    e.push(
        Op::Send {
            peer: to,
            tag,
            src: slot,
        },
        &[r],
    );
}

/// Chain Scatter from member `root`: the root sends the blocks of the
/// farthest members first; each member forwards the blocks of members
/// beyond it through two scratch slots and keeps its own. `blocks` indexes
/// the root's input by member index. Returns (scratch bytes, generator).
pub(crate) fn scatter(
    c: Ctx,
    blocks: Blocks,
    root: u32,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
) -> (u64, Box<dyn Gen>) {
    let ch = Chain::new(&c, &blocks, root, scratch);
    let (k, v) = (c.g.size, ch.v);
    let (next, prev) = (c.peer(1), c.peer(-1));
    let mut s0 = 0;
    let gen = rounds(ch.rounds(), move |j, e: &mut Emit| {
        if v == 0 {
            if j == 0 {
                if !same {
                    e.push(
                        Op::Copy {
                            src: src.block(&blocks, c.me),
                            dst: dst.at(0, blocks.len(c.me)),
                        },
                        &[],
                    );
                }
            } else {
                let w = k - j;
                e.push(
                    Op::Send {
                        peer: next,
                        tag: c.tag0 + w,
                        src: src.block(&blocks, ch.member(w)),
                    },
                    &[],
                );
            }
            return;
        }
        if j == 0 {
            s0 = e.next_id();
        }
        let w = k - 1 - j;
        let len = blocks.len(ch.member(w));
        if w == v {
            e.push(
                Op::Recv {
                    peer: prev,
                    tag: c.tag0 + w,
                    dst: dst.at(0, len),
                },
                &[],
            );
        } else {
            let deps = if j >= 2 {
                Some(s0 + 2 * (j - 2) + 1)
            } else {
                None
            };
            forward(e, prev, next, c.tag0 + w, ch.slot(j, len), deps.as_slice());
        }
    });
    (ch.scratch_bytes(), gen)
}

/// Chain Gather toward member `root`: each member sends its own block left,
/// then forwards the blocks of the members beyond it through two scratch
/// slots; the root receives them into `dst` at their block offsets.
/// Returns (scratch bytes, generator).
pub(crate) fn gather(
    c: Ctx,
    blocks: Blocks,
    root: u32,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
) -> (u64, Box<dyn Gen>) {
    let ch = Chain::new(&c, &blocks, root, scratch);
    let v = ch.v;
    let (next, prev) = (c.peer(1), c.peer(-1));
    let mut s0 = 0;
    let gen = rounds(ch.rounds(), move |j, e: &mut Emit| {
        if v == 0 {
            if j == 0 {
                if !same {
                    e.push(
                        Op::Copy {
                            src: src.at(0, blocks.len(c.me)),
                            dst: dst.block(&blocks, c.me),
                        },
                        &[],
                    );
                }
            } else {
                e.push(
                    Op::Recv {
                        peer: next,
                        tag: c.tag0 + j,
                        dst: dst.block(&blocks, ch.member(j)),
                    },
                    &[],
                );
            }
            return;
        }
        if j == 0 {
            s0 = e.next_id();
            e.push(
                Op::Send {
                    peer: prev,
                    tag: c.tag0 + v,
                    src: src.at(0, blocks.len(c.me)),
                },
                &[],
            );
            return;
        }
        // Forward the block of member v + j, received into slot j.
        let w = v + j;
        let len = blocks.len(ch.member(w));
        let deps = if j >= 3 { Some(s0 + 2 * (j - 2)) } else { None };
        forward(e, next, prev, c.tag0 + w, ch.slot(j, len), deps.as_slice());
    });
    (ch.scratch_bytes(), gen)
}
