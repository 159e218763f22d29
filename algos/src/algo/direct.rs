//! Point-to-point based algorithms: pairwise AllToAll(V), Send/Recv batches
//! and the dissemination Barrier.

use std::sync::Arc;

use crate::collective::{CountMatrix, P2p};
use crate::schedule::{BufKind, Op, Rank, StepId};

use super::gen::{rounds, Ctx, Emit, Gen, Loc};

/// Block sizes and places of an AllToAll(V).
#[derive(Clone, Debug)]
pub(crate) enum A2a {
    /// `each` elements between every pair.
    Uniform(u64),
    /// Per-pair counts.
    Matrix(Arc<CountMatrix>),
}

impl A2a {
    /// Elements member `i` sends to member `j`.
    pub(crate) fn len(&self, i: u32, j: u32) -> u64 {
        match self {
            A2a::Uniform(n) => *n,
            A2a::Matrix(m) => m.get(i as usize, j as usize),
        }
    }

    /// Element offset in `i`'s input of its block for `j`.
    pub(crate) fn send_off(&self, i: u32, j: u32) -> u64 {
        match self {
            A2a::Uniform(n) => j as u64 * n,
            A2a::Matrix(m) => m.send_displ(i as usize, j as usize),
        }
    }

    /// Element offset in `j`'s output of the block from `i`.
    pub(crate) fn recv_off(&self, j: u32, i: u32) -> u64 {
        match self {
            A2a::Uniform(n) => i as u64 * n,
            A2a::Matrix(m) => m.recv_displ(j as usize, i as usize),
        }
    }

    /// Elements member `i` sends in total.
    pub(crate) fn send_total(&self, i: u32, k: u32) -> u64 {
        self.send_off(i, k)
    }
}

/// Pairwise exchange (HCCL's `pairwise`): in round `t` member `me` sends to
/// `me + t` and receives from `me - t`, so each member talks to one peer per
/// direction at a time (no incast). With `stage` (in-place AllToAll) the
/// input is first copied to scratch and sent from there. Returns (scratch
/// bytes, generator).
///
/// With `sync`, round `t` starts only after round `t - 1` finished (HCCL's
/// pairwise: one peer at a time); without it every message is in flight at
/// once (full mesh).
pub(crate) fn pairwise(
    c: Ctx,
    a: A2a,
    src: Loc,
    dst: Loc,
    stage: bool,
    sync: bool,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let me = c.me;
    let esz = src.esz;
    let total_in = a.send_total(me, k);
    let from = if stage {
        Loc::new(BufKind::Scratch, 0, esz)
    } else {
        src
    };
    let scratch = if stage { total_in * esz } else { 0 };
    let mut copy: Option<StepId> = None;
    let mut prev: Vec<StepId> = Vec::new();
    let gen = rounds(k, move |t, e: &mut Emit| {
        if t == 0 {
            if stage {
                copy = Some(e.push(
                    Op::Copy {
                        src: src.at(0, total_in),
                        dst: from.at(0, total_in),
                    },
                    &[],
                ));
            } else {
                let n = a.len(me, me);
                e.push(
                    Op::Copy {
                        src: src.at(a.send_off(me, me), n),
                        dst: dst.at(a.recv_off(me, me), n),
                    },
                    &[],
                );
            }
            return;
        }
        let to = c.idx(t as i64);
        let fr = c.idx(-(t as i64));
        let mut deps: Vec<StepId> = copy.into_iter().collect();
        if sync {
            deps.extend(&prev);
        }
        let s = e.push(
            Op::Send {
                peer: c.g.rank(to),
                tag: c.tag0 + t,
                src: from.at(a.send_off(me, to), a.len(me, to)),
            },
            &deps,
        );
        let r = e.push(
            Op::Recv {
                peer: c.g.rank(fr),
                tag: c.tag0 + t,
                dst: dst.at(a.recv_off(me, fr), a.len(fr, me)),
            },
            &deps,
        );
        prev = vec![s, r];
    });
    (scratch, gen)
}

/// A batch of transfers in the global order of `pairs`: transfer `i` is
/// tagged `i`. Each rank's sends are packed in its input and its receives
/// in its output, in list order. Ordering both sides by the global index
/// makes the batch deadlock-free under any window (the lowest unfinished
/// transfer is always at the front of both its ranks' windows).
pub(crate) fn batch(me: Rank, pairs: Arc<[P2p]>, esz: u64) -> Box<dyn Gen> {
    let (mut in_off, mut out_off) = (0u64, 0u64);
    let input = Loc::new(BufKind::Input, 0, esz);
    let output = Loc::new(BufKind::Output, 0, esz);
    let n = pairs.len() as u32;
    rounds(n, move |i, e: &mut Emit| {
        let t = pairs[i as usize];
        if t.src == me && t.dst == me {
            e.push(
                Op::Copy {
                    src: input.at(in_off, t.count),
                    dst: output.at(out_off, t.count),
                },
                &[],
            );
        } else if t.src == me {
            e.push(
                Op::Send {
                    peer: t.dst,
                    tag: i,
                    src: input.at(in_off, t.count),
                },
                &[],
            );
        } else if t.dst == me {
            e.push(
                Op::Recv {
                    peer: t.src,
                    tag: i,
                    dst: output.at(out_off, t.count),
                },
                &[],
            );
        }
        if t.src == me {
            in_off += t.count;
        }
        if t.dst == me {
            out_off += t.count;
        }
    })
}

/// Dissemination barrier (Hensgen, Finkel & Manber 1988): in round `j`
/// member `me` sends an empty message to `me + 2^j` and receives from
/// `me - 2^j`; after ⌈log2 k⌉ rounds every member has heard, directly or
/// transitively, from every other.
pub(crate) fn barrier(c: Ctx) -> Box<dyn Gen> {
    let k = c.g.size;
    let n = if k <= 1 {
        0
    } else {
        32 - (k - 1).leading_zeros()
    };
    let empty = crate::schedule::Region::new(BufKind::Scratch, 0, 0);
    // Send j waits for receive j-1 and (through send j-1) every earlier
    // receive: what a rank passes on must include all it has heard.
    let mut prev: Vec<StepId> = Vec::new();
    rounds(n, move |j, e: &mut Emit| {
        let d = 1i64 << j;
        let to = c.peer(d);
        let from = c.peer(-d);
        let s = e.push(
            Op::Send {
                peer: to,
                tag: c.tag0 + j,
                src: empty,
            },
            &prev,
        );
        let r = e.push(
            Op::Recv {
                peer: from,
                tag: c.tag0 + j,
                dst: empty,
            },
            &[],
        );
        prev = vec![s, r];
    })
}
