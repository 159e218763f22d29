//! Full-mesh algorithms (HCCL's intra-server `mesh`): every member talks to
//! every other member directly, all messages of a phase in flight at once.
//!
//! Step structure and costs follow HCCL's algorithm guide
//! (`docs/en/user_guide/coll_algo_intro/Mesh.md` in `hicann/hccl`), with
//! `p` members and an `n`-byte vector:
//!
//! | collective | steps | guide's time |
//! |---|---|---|
//! | ReduceScatter | one concurrent exchange, then local reductions | `α + nβ/p + (p-1)/p·nγ` |
//! | AllGather | one concurrent exchange | `α + nβ/p` |
//! | AllReduce | ReduceScatter + AllGather | `2α + 2nβ/p + (p-1)/p·nγ` |
//! | Scatter / Gather | the root exchanges block `j` with member `j` | `α + nβ/p` |
//! | Broadcast | Scatter + AllGather | `2α + 2nβ/p` |
//! | Reduce | ReduceScatter + Gather | `2α + 2nβ/p + (p-1)/p·nγ` |
//!
//! **ReduceScatter.** Member `me` receives block `me` of every peer's
//! vector into its own scratch slot (scratch = `(p-1)` × largest block), so
//! all `p-1` receives proceed at once, then reduces the `p` contributions
//! locally in **rank order** (`((x0 ⊕ x1) ⊕ x2) ⊕ …`, each step a
//! `LocalReduce` waiting for the previous one and for its operand's
//! receive). The order never depends on arrival times, so results are
//! deterministic (HCCL_DETERMINISTIC); an AllReduce block is reduced on one
//! member only and then copied, so all ranks get the same bits. Reductions
//! are commutative bit for bit, so `dst = x (op) run` equals `run (op) x`;
//! that lets the chain keep its running value in a writable place without
//! copies: the accumulator holds the own block (in place) or receives the
//! first peer block directly.
//!
//! **Rendezvous safety.** Each member's exchange is the pairs
//! `Send → me+t, Recv ← me−t` for `t = 1, 2, …, p−1`, in that order, on
//! every member. Send `t` of member `a` meets receive `t` of member `a+t`,
//! at the same position of identical plans; every later phase repeats the
//! pattern with a new tag. So the oldest unfinished pair of every member
//! can always complete, whatever the executor window (≥ 2): with a window
//! smaller than the `2(p-1)` messages, fewer run at once, never none.

use crate::schedule::{BufKind, Op, Region, StepId};

use super::gen::{rounds, Blocks, Ctx, Emit, Gen, Loc};

/// The concurrent ReduceScatter core: member `me` reduces block `me` of
/// everyone's `src` (vector layout) into `acc` (`blocks.len(me)` elements),
/// using `p-1` slots of `blocks.max_len()` elements at `slots`.
/// `same`: `acc` already holds the own block (the call is in place).
/// Emits `2p` rounds (see [`Rs::round`]); step ids are fixed by the round
/// structure, so the state is O(1).
#[derive(Clone, Debug)]
struct Rs {
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    acc: Loc,
    slots: Loc,
    same: bool,
    divide: Option<u32>,
    /// Id of the first step (the send of round 1).
    s0: StepId,
    /// Running value of the rank-order fold: its region and last writer.
    run: Option<(Region, Option<StepId>)>,
    /// Last step writing the finished block (None: nothing was emitted).
    fin: Option<StepId>,
}

impl Rs {
    #[allow(clippy::too_many_arguments)]
    fn new(
        c: Ctx,
        blocks: Blocks,
        src: Loc,
        acc: Loc,
        slots: Loc,
        same: bool,
        divide: Option<u32>,
    ) -> Rs {
        Rs {
            c,
            blocks,
            src,
            acc,
            slots,
            same,
            divide,
            s0: 0,
            run: None,
            fin: None,
        }
    }

    /// Rounds the core emits.
    fn rounds(&self) -> u32 {
        2 * self.c.g.size
    }

    /// Scratch bytes of the slots.
    fn scratch_bytes(&self) -> u64 {
        (self.c.g.size as u64 - 1) * self.blocks.max_len() * self.slots.esz
    }

    fn own(&self) -> Region {
        self.acc.at(0, self.blocks.len(self.c.me))
    }

    /// Distance `t` with `me − t = r` (mod p).
    fn dist_from(&self, r: u32) -> u32 {
        let k = self.c.g.size;
        (self.c.me + k - r) % k
    }

    /// The step receiving from member `r` (round `t` emits send then receive).
    fn recv_id(&self, r: u32) -> StepId {
        self.s0 + 2 * (self.dist_from(r) - 1) + 1
    }

    /// The step sending block `j` to member `j`.
    pub(crate) fn send_id(&self, j: u32) -> StepId {
        let k = self.c.g.size;
        self.s0 + 2 * ((j + k - self.c.me) % k - 1)
    }

    /// Sends the finished block to member `to` (tag0 + 1).
    fn send_reduced(&self, e: &mut Emit, to: u32) {
        e.push(
            Op::Send {
                peer: self.c.g.rank(to),
                tag: self.c.tag0 + 1,
                src: self.own(),
            },
            self.fin.as_slice(),
        );
    }

    /// Receives member `from`'s finished block into `dst` (tag0 + 1); in
    /// place, after the core's send of that block to `from` read it.
    fn recv_reduced(&self, e: &mut Emit, from: u32, dst: Region) {
        let wait: Vec<StepId> = self.same.then(|| self.send_id(from)).into_iter().collect();
        e.push(
            Op::Recv {
                peer: self.c.g.rank(from),
                tag: self.c.tag0 + 1,
                dst,
            },
            &wait,
        );
    }

    /// Where member `r`'s contribution lands: its slot, or, when not in
    /// place, `acc` for the first peer in rank order (0, or 1 on member 0).
    fn land(&self, r: u32) -> Region {
        let first = if self.c.me == 0 { 1 } else { 0 };
        if !self.same && r == first {
            return self.own();
        }
        let slot = (self.dist_from(r) - 1) as u64 * self.blocks.max_len();
        self.slots.at(slot, self.blocks.len(self.c.me))
    }

    /// Contribution `r` of the fold: region and the step that wrote it.
    fn operand(&self, r: u32) -> (Region, Option<StepId>) {
        if r == self.c.me {
            let own = if self.same {
                self.own()
            } else {
                self.src.block(&self.blocks, r)
            };
            (own, None)
        } else {
            (self.land(r), Some(self.recv_id(r)))
        }
    }

    /// Round 0 notes the first id; rounds `1..p` exchange with the members
    /// at distance `t`; rounds `p..2p-1` fold contribution `t − p + 1`;
    /// round `2p − 1` copies (p = 1, not in place) and divides (avg).
    fn round(&mut self, t: u32, e: &mut Emit) {
        let k = self.c.g.size;
        let c = self.c;
        if t == 0 {
            self.s0 = e.next_id();
        } else if t < k {
            let to = c.idx(t as i64);
            let from = c.idx(-(t as i64));
            e.push(
                Op::Send {
                    peer: c.g.rank(to),
                    tag: c.tag0,
                    src: self.src.block(&self.blocks, to),
                },
                &[],
            );
            e.push(
                Op::Recv {
                    peer: c.g.rank(from),
                    tag: c.tag0,
                    dst: self.land(from),
                },
                &[],
            );
        } else if t < 2 * k - 1 {
            let r = t - k + 1;
            let (run, run_w) = match self.run {
                Some(x) => x,
                None => self.operand(0),
            };
            let (x, x_w) = self.operand(r);
            let own = self.own();
            // The result goes to the accumulator as soon as it is an
            // operand; before that to the running slot (the own input
            // block, when not in place, is read-only).
            let run_writable = run.buf == BufKind::Scratch || run == own;
            let (dst, src) = if x == own || !run_writable {
                (x, run)
            } else {
                (run, x)
            };
            let mut deps: Vec<StepId> = [run_w, x_w].into_iter().flatten().collect();
            if dst == own && self.same && matches!(self.blocks, Blocks::Whole { .. }) {
                // One-shot in place: every send reads the own vector.
                deps.extend((1..k).map(|j| self.send_id(c.idx(j as i64))));
            }
            let id = e.push(Op::LocalReduce { src, dst, op: c.op }, &deps);
            self.run = Some((dst, Some(id)));
            self.fin = Some(id);
        } else {
            if k == 1 && !self.same {
                self.fin = Some(e.push(
                    Op::Copy {
                        src: self.src.block(&self.blocks, c.me),
                        dst: self.own(),
                    },
                    &[],
                ));
            }
            self.fin = e
                .divide(self.divide, self.own(), self.fin.as_slice())
                .or(self.fin);
        }
    }
}

/// Mesh ReduceScatter (+ optional AllGather = AllReduce). Member `me`
/// reduces block `me` of everyone's `src` into `acc` (a region of
/// `blocks.len(me)` elements) through `p-1` slots at `scratch`; with
/// `then_gather`, `dst` is laid out like the vector and `acc` must be
/// `dst` at block `me`. Returns (scratch bytes from `scratch`, generator).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce_scatter(
    c: Ctx,
    blocks: Blocks,
    src: Loc,
    acc: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
    then_gather: bool,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let mut rs = Rs::new(c, blocks.clone(), src, acc, scratch, same, divide);
    let bytes = rs.scratch_bytes();
    let n = rs.rounds() + if then_gather { k - 1 } else { 0 };
    let gen = rounds(n, move |t, e: &mut Emit| {
        if t < rs.rounds() {
            return rs.round(t, e);
        }
        // AllGather of the reduced blocks, tag0 + 1.
        let u = t - rs.rounds() + 1;
        let to = c.idx(u as i64);
        let from = c.idx(-(u as i64));
        rs.send_reduced(e, to);
        rs.recv_reduced(e, from, dst.block(&blocks, from));
    });
    (bytes, gen)
}

/// One-shot AllReduce (HCCL's `AllReduceMeshOneshot` executor, which HCCL
/// runs for small AllReduces inside a 910B server): every member sends its
/// whole vector to every other member in one concurrent exchange and folds
/// the `p` vectors locally in rank order, so all members compute the same
/// bits. One step instead of mesh's two, for `p − 1` times the bytes:
/// `α + nβ + (p−1)·nγ` on a full mesh. Scratch: `p − 1` vectors. It is the
/// mesh ReduceScatter core with every member's block being the whole vector.
pub(crate) fn allreduce_oneshot(
    c: Ctx,
    count: u64,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let blocks = Blocks::Whole {
        total: count,
        parts: c.g.size,
    };
    reduce_scatter(c, blocks, src, dst, dst, scratch, same, divide, false)
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

/// Mesh Broadcast = Scatter + AllGather (guide): the root sends block `j`
/// of the `p` blocks to member `j` (tag0), then every member sends its
/// block to every member but the root, and the root sends its own block to
/// everyone (tag0 + 1). Non-roots receive into `dst`; the root copies
/// `src` to `dst` unless `same`.
pub(crate) fn broadcast(
    c: Ctx,
    count: u64,
    root: u32,
    src: Loc,
    dst: Loc,
    same: bool,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let blocks = Blocks::Even {
        total: count,
        parts: k,
    };
    let mut got: Option<StepId> = None;
    rounds(2 * k - 1, move |t, e: &mut Emit| {
        let me = c.me;
        if me == root {
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
                // Rounds 1..k scatter, k..2k-1 the root's AllGather sends.
                let (j, blk, tag) = if t < k {
                    let j = (root + t) % k;
                    (j, j, c.tag0)
                } else {
                    ((root + t - k + 1) % k, root, c.tag0 + 1)
                };
                e.push(
                    Op::Send {
                        peer: c.g.rank(j),
                        tag,
                        src: src.block(&blocks, blk),
                    },
                    &[],
                );
            }
            return;
        }
        if t == 0 {
            got = Some(e.push(
                Op::Recv {
                    peer: c.g.rank(root),
                    tag: c.tag0,
                    dst: dst.block(&blocks, me),
                },
                &[],
            ));
            return;
        }
        if t >= k {
            return;
        }
        let to = c.idx(t as i64);
        let from = c.idx(-(t as i64));
        if to != root {
            let deps: Vec<StepId> = got.into_iter().collect();
            e.push(
                Op::Send {
                    peer: c.g.rank(to),
                    tag: c.tag0 + 1,
                    src: dst.block(&blocks, me),
                },
                &deps,
            );
        }
        e.push(
            Op::Recv {
                peer: c.g.rank(from),
                tag: c.tag0 + 1,
                dst: dst.block(&blocks, from),
            },
            &[],
        );
    })
}

/// Mesh Reduce = ReduceScatter + Gather (guide): every member reduces its
/// block of the `p` blocks as in [`reduce_scatter`] (the root into `dst`,
/// the others into scratch after their slots), divides it for avg, and
/// sends it to the root (tag0 + 1). Returns (scratch bytes from
/// `scratch`, generator).
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
    let me = c.me;
    let blocks = Blocks::Even {
        total: count,
        parts: k,
    };
    let slots_elems = (k as u64 - 1) * blocks.max_len();
    let is_root = me == root;
    let acc = if is_root {
        dst.shift(blocks.off(me))
    } else {
        scratch.shift(slots_elems)
    };
    let same = same && is_root;
    let mut rs = Rs::new(c, blocks.clone(), src, acc, scratch, same, divide);
    let bytes = rs.scratch_bytes() + if is_root { 0 } else { blocks.len(me) * src.esz };
    let n = rs.rounds() + if is_root { k - 1 } else { 1 };
    let gen = rounds(n, move |t, e: &mut Emit| {
        if t < rs.rounds() {
            return rs.round(t, e);
        }
        if !is_root {
            return rs.send_reduced(e, root);
        }
        let j = (root + t - rs.rounds() + 1) % k;
        rs.recv_reduced(e, j, dst.block(&blocks, j));
    });
    (bytes, gen)
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

#[cfg(test)]
mod tests {
    use crate::algo::{schedule, AlgoSpec, Algorithm};
    use crate::collective::{CollectiveArgs, CollectiveKind as K};
    use crate::layout::GroupLayout;
    use crate::mem_transport::{run_collective_with, MemOptions, Order};
    use crate::reference::reference;
    use crate::schedule::{BufKind, Op};
    use crate::verify::{verify_with, VerifyOptions};
    use crate::{DataType, ReduceOp};

    const MESH: AlgoSpec = AlgoSpec::Flat(Algorithm::Mesh);
    const KINDS: [K; 4] = [K::ReduceScatter, K::AllReduce, K::Reduce, K::Broadcast];

    #[test]
    fn verifies_under_small_and_default_windows() {
        for p in 1..=12u32 {
            for count in [0, 1, p as u64 - 1, 2 * p as u64 + 3] {
                for kind in KINDS {
                    for root in [0, p / 2, p - 1] {
                        for in_place in [false, true] {
                            for op in [ReduceOp::Sum, ReduceOp::Avg] {
                                let args = CollectiveArgs::new(kind, count, DataType::Fp32, p)
                                    .with_root(root)
                                    .with_in_place(in_place)
                                    .with_op(op);
                                let s = schedule(&args, &MESH, &GroupLayout::flat(p)).unwrap();
                                for window in [2, 8, 64] {
                                    let o = VerifyOptions {
                                        window,
                                        check_races: window == 64,
                                    };
                                    verify_with(&args, &s, &o).unwrap_or_else(|e| {
                                        panic!("{kind} p={p} n={count} root={root} in_place={in_place} {op} w={window}: {e}")
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn reduce_scatter_receives_concurrently_into_declared_slots() {
        // p = 5, 10 fp32 per block: 4 receives, none waiting for anything,
        // into 4 distinct 40-byte slots of a 160-byte scratch; then 4
        // local reductions, each waiting for the previous one.
        let p = 5;
        let args = CollectiveArgs::new(K::ReduceScatter, 10, DataType::Fp32, p);
        let s = schedule(&args, &MESH, &GroupLayout::flat(p)).unwrap();
        for r in &s {
            assert_eq!(r.buffers.scratch, 4 * 40, "rank {}", r.rank);
            let recvs: Vec<_> = r
                .steps
                .iter()
                .filter_map(|st| match st.op {
                    Op::Recv { dst, .. } => Some((dst, st.deps.ids().len())),
                    _ => None,
                })
                .collect();
            assert_eq!(recvs.len(), 4);
            assert!(recvs.iter().all(|&(_, d)| d == 0), "{recvs:?}");
            let mut dsts: Vec<_> = recvs.iter().map(|(d, _)| (d.buf, d.offset)).collect();
            dsts.sort();
            dsts.dedup();
            assert_eq!(dsts.len(), 4, "each receive has its own place");
            let reduces: Vec<_> = r
                .steps
                .iter()
                .enumerate()
                .filter(|(_, st)| matches!(st.op, Op::LocalReduce { .. }))
                .collect();
            assert_eq!(reduces.len(), 4);
            for w in reduces.windows(2) {
                assert!(w[1].1.deps.ids().contains(&(w[0].0 as u32)), "chained");
            }
            // Not in place, the last reduction writes the output.
            let Op::LocalReduce { dst, .. } = reduces[3].1.op else {
                unreachable!()
            };
            assert_eq!(dst.buf, BufKind::Output);
        }
    }

    /// Arbitrary (inexact) floats: sums depend on the order of reduction.
    fn messy_inputs(args: &CollectiveArgs, seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed;
        (0..args.world_size)
            .map(|r| {
                let n = args.io_bytes(r).0 / 4;
                (0..n)
                    .flat_map(|_| {
                        // splitmix64
                        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                        let mut z = x;
                        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                        z ^= z >> 31;
                        let mag = [1e-3f32, 1.0, 1e4][(z % 3) as usize];
                        let v = ((z >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * mag;
                        v.to_le_bytes()
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn reductions_fold_in_rank_order_bit_for_bit() {
        // The reference folds rank 0, 1, 2, ... with the same kernels, so
        // equality on inexact floats proves the mesh uses exactly that
        // order, whatever the arrival order (shuffled) and window.
        for p in [2u32, 3, 5, 8] {
            for kind in [K::ReduceScatter, K::AllReduce, K::Reduce] {
                for (i, window) in [2usize, 8, 64].into_iter().enumerate() {
                    for in_place in [false, true] {
                        let seed = 1000 * p as u64 + 10 * i as u64 + in_place as u64;
                        let args = CollectiveArgs::new(kind, 3 * p as u64 + 1, DataType::Fp32, p)
                            .with_root(p - 1)
                            .with_in_place(in_place)
                            .with_op(if i == 1 { ReduceOp::Avg } else { ReduceOp::Sum });
                        let inputs = messy_inputs(&args, seed);
                        let want = reference(&args, &inputs).unwrap();
                        let opts = MemOptions {
                            order: Order::Shuffled(seed),
                            window,
                            ..MemOptions::default()
                        };
                        let got =
                            run_collective_with(&args, &MESH, &GroupLayout::flat(p), inputs, opts)
                                .unwrap();
                        assert_eq!(
                            got, want,
                            "{kind} p={p} window={window} in_place={in_place}"
                        );
                    }
                }
            }
        }
    }
}
