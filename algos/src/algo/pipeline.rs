//! HCCL's hierarchical **pipeline** algorithm (`HCCL_ALGO=level1:pipeline`),
//! for AllGather, ReduceScatter and AllReduce on a regular layout of `S`
//! servers × `k` ranks.
//!
//! Source: HCCL's algorithm guide, `docs/zh/user_guide/coll_algo_intro/Pipeline.md`
//! in `hicann/hccl`. A plain hierarchical AllGather runs the level-1
//! (inter-server) phase, then the level-0 (intra-server) phase, so the
//! intra-server links idle while data crosses servers. The pipeline
//! interleaves them: level 1 is a **ring** over the `S` ranks with the same
//! local index, level 0 a **full mesh**; in each ring step a rank forwards
//! the block it got in the previous step both to the next server and to all
//! `k − 1` ranks of its own server, so slice `t` crosses servers while slice
//! `t − 1` spreads inside the server. After the `S − 1` ring steps one last
//! mesh step spreads the last block (the own block's mesh step hides inside
//! ring step 0). The guide's time (`s` = total bytes, `p = S·k`):
//! `(S − 1)·max(s/p·β_inter + α_inter, s/p·β_intra + α_intra) + s/p·β_intra + α_intra`
//! for AllGather and ReduceScatter, twice that for AllReduce.
//!
//! - **AllGather**: as above. Ring step `u` on rank (server `i`, local `j`)
//!   carries the block of rank (`i − u`, `j`).
//! - **ReduceScatter**: the time reverse. Intra round `v` sums, inside the
//!   server, everyone's input block for rank (`i − 1 − v`, `j`) (all `k − 1`
//!   messages in flight at once into scratch slots, then reduced in a fixed
//!   order); ring step `v − 1` (in the same round) moves the partial sum of
//!   the previous round's block to the next server and receives one for
//!   this round's block, which a last local reduction adds. Round `S − 1`
//!   ends with the rank's own block summed over every rank.
//! - **AllReduce**: that ReduceScatter over `p` blocks of the vector, then
//!   (after a fence, as the guide's 2× formula has no overlap between the
//!   halves) that AllGather.
//!
//! Degenerate shapes follow the guide's formula: with one server
//! (`S = 1`, including a flat layout) there is no level-1 transfer to
//! overlap and the plan is one full-mesh step, i.e. the `mesh` algorithm;
//! with one rank per server (`k = 1`) it is the plain ring.
//!
//! Reductions are in a fixed order (own input, then the intra-server peers
//! at distance 1, 2, …, then the partial from the previous server), so the
//! result does not depend on arrival order, and each AllReduce block is
//! reduced on one rank only, so every rank gets the same bytes.
//!
//! Rendezvous safety: every round has the same shape on every rank and a
//! send at position `x` of a round is matched by a receive at position
//! `x + 1` of the same round on its peer, receives wait only on earlier
//! steps, so the earliest unfinished step of the whole system can always
//! make progress with any executor window ≥ 2 (the tests verify windows 2,
//! 8 and the default 64).

use crate::collective::{CollectiveArgs, CollectiveKind};
use crate::layout::GroupLayout;
use crate::schedule::{Op, Rank, Region, StepId};

use super::gen::{rounds, seq, Blocks, Ctx, Emit, Gen, Group, Loc};
use super::phase::{phase_tag, Setup};
use super::{AlgoError, Algorithm};

/// A rank's place in the server grid: `S` servers of `k` ranks, rank
/// `s·k + l` is local `l` of server `s` (a regular layout, pods flattened).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grid {
    /// Servers (`S`).
    pub servers: u32,
    /// Ranks per server (`k`).
    pub per: u32,
    /// This rank's server.
    pub i: u32,
    /// This rank's local index.
    pub j: u32,
}

impl Grid {
    fn rank(&self, s: u32, l: u32) -> Rank {
        (s % self.servers) * self.per + l % self.per
    }

    /// Server `i + d` (mod S).
    fn server(&self, d: i64) -> u32 {
        (self.i as i64 + d).rem_euclid(self.servers as i64) as u32
    }

    /// Local `j + d` (mod k).
    fn local(&self, d: i64) -> u32 {
        (self.j as i64 + d).rem_euclid(self.per as i64) as u32
    }

    fn me(&self) -> Rank {
        self.rank(self.i, self.j)
    }
}

/// Tag of the inter-server message of ring step `u`.
fn tag_inter(c: &Ctx, u: u32) -> u32 {
    c.tag0 + 2 * u
}

/// Tag of the intra-server messages of round `u`.
fn tag_intra(c: &Ctx, u: u32) -> u32 {
    c.tag0 + 2 * u + 1
}

/// Pipeline AllGather of `blocks` (one per global rank) into `dst` (vector
/// layout). `src` = where the own block is if not already in place in `dst`.
pub(crate) fn allgather(
    c: Ctx,
    g: Grid,
    blocks: Blocks,
    src: Option<Loc>,
    dst: Loc,
) -> Box<dyn Gen> {
    let (s, k) = (g.servers, g.per);
    let me = g.me();
    let (next, prev) = (g.rank(g.server(1), g.j), g.rank(g.server(-1), g.j));
    // The inter receive of the latest ring step, and of the one before
    // (what the current step's sends read).
    let mut got: Option<StepId> = None;
    let mut deps: Option<StepId> = None;
    // Round 0: the copy; then ring step u in k sub-rounds (d = 0: the
    // inter-server pair, d >= 1: the intra-server pair at distance d), so
    // each call emits O(1) steps whatever k.
    rounds(1 + s * k, move |t, e: &mut Emit| {
        if t == 0 {
            if let Some(from) = src {
                e.push(
                    Op::Copy {
                        src: from.at(0, blocks.len(me)),
                        dst: dst.block(&blocks, me),
                    },
                    &[],
                );
            }
            return;
        }
        let (u, d) = ((t - 1) / k, (t - 1) % k);
        // The block this rank forwards in step u: that of rank (i - u, j).
        let fwd = g.rank(g.server(-(u as i64)), g.j);
        let from = match (u, src) {
            (0, Some(l)) => l.at(0, blocks.len(me)),
            _ => dst.block(&blocks, fwd),
        };
        if d == 0 {
            deps = got;
        }
        let deps: Vec<StepId> = deps.into_iter().collect();
        if d == 0 {
            if u + 1 < s {
                e.push(
                    Op::Send {
                        peer: next,
                        tag: tag_inter(&c, u),
                        src: from,
                    },
                    &deps,
                );
                let origin = g.rank(g.server(-(u as i64) - 1), g.j);
                got = Some(e.push(
                    Op::Recv {
                        peer: prev,
                        tag: tag_inter(&c, u),
                        dst: dst.block(&blocks, origin),
                    },
                    &[],
                ));
            }
            return;
        }
        let d = d as i64;
        e.push(
            Op::Send {
                peer: g.rank(g.i, g.local(d)),
                tag: tag_intra(&c, u),
                src: from,
            },
            &deps,
        );
        let origin = g.rank(g.server(-(u as i64)), g.local(-d));
        e.push(
            Op::Recv {
                peer: g.rank(g.i, g.local(-d)),
                tag: tag_intra(&c, u),
                dst: dst.block(&blocks, origin),
            },
            &[],
        );
    })
}

/// Where a pipeline ReduceScatter keeps its per-round partial sums.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Acc {
    /// In the output vector (AllReduce): the sum for block `b` lives at
    /// `dst`'s block `b`, which the AllGather half overwrites later.
    Vector(Loc),
    /// Three rotating scratch slots of `blocks.max_len()` elements at the
    /// start of the scratch buffer; the last round's sum goes to `out`.
    Slots,
}

/// Scratch layout of a pipeline ReduceScatter, in slots of `max_len` elements:
/// [3 accumulator slots (only for `Acc::Slots`)] [2 × (k − 1) intra receive
/// slots] [2 inter receive slots].
struct Scratch {
    base: Loc,
    slot: u64,
    acc_slots: u32,
    per: u32,
}

impl Scratch {
    fn at(&self, i: u32, elems: u64) -> Region {
        self.base.at(i as u64 * self.slot, elems)
    }

    fn acc(&self, v: u32, elems: u64) -> Region {
        self.at(v % 3, elems)
    }

    fn intra(&self, v: u32, d: u32, elems: u64) -> Region {
        self.at(self.acc_slots + (v % 2) * (self.per - 1) + (d - 1), elems)
    }

    fn inter(&self, v: u32, elems: u64) -> Region {
        self.at(self.acc_slots + 2 * (self.per - 1) + v % 2, elems)
    }

    fn bytes(&self) -> u64 {
        (self.acc_slots as u64 + 2 * self.per as u64) * self.slot * self.base.esz
    }
}

/// Pipeline ReduceScatter: `blocks` (one per global rank) of `src` (vector
/// layout) are summed over every rank; this rank's block ends at `out`
/// (`out.at(0, len)`), divided by `divide` if given. `same` = `src` and the
/// output alias (in place); the plan then reads the own input block before
/// overwriting it. Returns (scratch bytes, generator).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    c: Ctx,
    g: Grid,
    blocks: Blocks,
    src: Loc,
    out: Loc,
    acc: Acc,
    scratch: Loc,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let (s, k) = (g.servers, g.per);
    let me = g.me();
    let own_len = blocks.len(me);
    let sc = Scratch {
        base: scratch,
        slot: blocks.max_len(),
        acc_slots: if matches!(acc, Acc::Slots) { 3 } else { 0 },
        per: k,
    };
    let (next, prev) = (g.rank(g.server(1), g.j), g.rank(g.server(-1), g.j));
    // Block of round v: that of rank (i - 1 - v, j).
    let target = move |v: u32| g.rank(g.server(-1 - v as i64), g.j);
    let scratch_bytes = if s * k == 1 { 0 } else { sc.bytes() };
    // Per round: the step after which the round's sum is final (read by
    // the next round's inter send), and that inter send (the last reader
    // of the round's accumulator slot).
    let mut done = [0 as StepId; 3];
    let mut sent = [None::<StepId>; 3];
    // Within a round: the inter receive, and the running intra sum.
    let mut inter_recv: Option<StepId> = None;
    let mut last: Option<StepId> = None;
    // Round v in k + 1 sub-rounds (d = 0: the inter-server pair, d in
    // 1..k: the intra-server pair at distance d, d = k: the final
    // reductions), so each call emits O(1) steps whatever k.
    let gen = rounds(s * (k + 1), move |t, e: &mut Emit| {
        let (v, d) = (t / (k + 1), t % (k + 1));
        // Where round w accumulates its sum (the last round: the output).
        let acc_region = |w: u32| -> Region {
            let b = target(w);
            match acc {
                Acc::Vector(d) => d.block(&blocks, b),
                Acc::Slots if w + 1 == s => out.at(0, own_len),
                Acc::Slots => sc.acc(w, blocks.len(b)),
            }
        };
        let b = target(v);
        let len = blocks.len(b);
        let accr = acc_region(v);
        if s * k == 1 {
            if d == 0 {
                let copy = e.push(
                    Op::Copy {
                        src: src.block(&blocks, me),
                        dst: out.at(0, own_len),
                    },
                    &[],
                );
                e.divide(divide, out.at(0, own_len), &[copy]);
            }
            return;
        }
        // Slot reuse: accumulator slot v % 3 last held round v - 3's sum,
        // read by ring step v - 3's inter send (in round v - 2).
        let acc_free: Vec<StepId> = match acc {
            Acc::Slots if v >= 3 && v + 1 < s => sent[(v - 3) as usize % 3].into_iter().collect(),
            _ => vec![],
        };
        if d == 0 {
            inter_recv = None;
            last = None;
            if v == 0 {
                return;
            }
            // Ring step u = v - 1: pass on round u's sum (k = 1: the own
            // input block of round 0), receive the partial for round v's block.
            let u = v - 1;
            let (from, deps) = if k == 1 && v == 1 {
                (src.block(&blocks, target(0)), vec![])
            } else {
                (acc_region(u), vec![done[u as usize % 3]])
            };
            sent[u as usize % 3] = Some(e.push(
                Op::Send {
                    peer: next,
                    tag: tag_inter(&c, u),
                    src: from,
                },
                &deps,
            ));
            if k == 1 {
                // No intra-server sum: reduce the partial into the own input block.
                done[v as usize % 3] = e.push(
                    Op::RecvReduce {
                        peer: prev,
                        tag: tag_inter(&c, u),
                        local: src.block(&blocks, b),
                        dst: accr,
                        op: c.op,
                    },
                    &acc_free,
                );
            } else {
                // Inter slot v % 2 was last read by round v - 2's final reduction.
                let deps: Vec<StepId> = if v >= 3 {
                    vec![done[(v - 2) as usize % 3]]
                } else {
                    vec![]
                };
                inter_recv = Some(e.push(
                    Op::Recv {
                        peer: prev,
                        tag: tag_inter(&c, u),
                        dst: sc.inter(v, len),
                    },
                    &deps,
                ));
            }
            return;
        }
        if d < k {
            let to = g.local(d as i64);
            e.push(
                Op::Send {
                    peer: g.rank(g.i, to),
                    tag: tag_intra(&c, v),
                    src: src.block(&blocks, g.rank(g.server(-1 - v as i64), to)),
                },
                &[],
            );
            let peer = g.rank(g.i, g.local(-(d as i64)));
            if d == 1 {
                // own + the first peer's block, straight into the accumulator.
                last = Some(e.push(
                    Op::RecvReduce {
                        peer,
                        tag: tag_intra(&c, v),
                        local: src.block(&blocks, b),
                        dst: accr,
                        op: c.op,
                    },
                    &acc_free,
                ));
            } else {
                // Intra slots of parity v were last read by round v - 2's
                // reductions, all before its final step.
                let slot_free: Vec<StepId> = if v >= 2 {
                    vec![done[(v - 2) as usize % 3]]
                } else {
                    vec![]
                };
                let r = e.push(
                    Op::Recv {
                        peer,
                        tag: tag_intra(&c, v),
                        dst: sc.intra(v, d, len),
                    },
                    &slot_free,
                );
                let prev_sum = last.expect("d > 1 follows d = 1");
                last = Some(e.push(
                    Op::LocalReduce {
                        src: sc.intra(v, d, len),
                        dst: accr,
                        op: c.op,
                    },
                    &[prev_sum, r],
                ));
            }
            return;
        }
        // d == k: add the previous server's partial, divide at the end.
        if let Some(fin) = last {
            done[v as usize % 3] = match inter_recv {
                Some(r) => e.push(
                    Op::LocalReduce {
                        src: sc.inter(v, len),
                        dst: accr,
                        op: c.op,
                    },
                    &[fin, r],
                ),
                None => fin,
            };
        }
        if v + 1 == s {
            e.divide(divide, accr, &[done[v as usize % 3]]);
        }
    });
    (scratch_bytes, gen)
}

/// Plans `args` with the pipeline on `layout` for `rank`: AllGather,
/// ReduceScatter or AllReduce over the layout's servers (super pods are
/// flattened into level 1). Returns (scratch bytes, generator).
///
/// # Errors
/// [`AlgoError::Unsupported`] for other collectives; [`AlgoError::Layout`]
/// if the layout is not regular (see [`GroupLayout::regular`]).
pub(crate) fn build(
    args: &CollectiveArgs,
    layout: &GroupLayout,
    rank: Rank,
) -> Result<(u64, Box<dyn Gen>), AlgoError> {
    use CollectiveKind as K;
    let shape = layout.regular()?;
    let per = shape.ranks_per_server;
    let p = args.world_size;
    let g = Grid {
        servers: p / per,
        per,
        i: rank / per,
        j: rank % per,
    };
    let Setup {
        op,
        divide,
        input,
        output,
        scratch,
    } = Setup::of(args);
    let ctx = |phase: u32| Ctx {
        g: Group::flat(p),
        me: rank,
        op,
        tag0: phase_tag(phase),
    };
    let n = args.count;
    match args.kind {
        K::AllGather => Ok((
            0,
            allgather(
                ctx(0),
                g,
                Blocks::uniform(n, p),
                (!args.in_place).then_some(input),
                output,
            ),
        )),
        K::ReduceScatter => Ok(reduce_scatter(
            ctx(0),
            g,
            Blocks::uniform(n, p),
            input,
            output,
            Acc::Slots,
            scratch,
            divide,
        )),
        K::AllReduce => {
            let blocks = Blocks::Even { total: n, parts: p };
            let (bytes, rs) = reduce_scatter(
                ctx(0),
                g,
                blocks.clone(),
                input,
                output.shift(blocks.off(rank)),
                Acc::Vector(output),
                scratch,
                divide,
            );
            let ag = allgather(ctx(1), g, blocks, None, output);
            Ok((bytes, seq(vec![rs, ag])))
        }
        kind => Err(AlgoError::Unsupported {
            algo: Algorithm::Pipeline.to_string(),
            kind,
            supported: Algorithm::supported_for(kind)
                .iter()
                .map(|a| a.name())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}
