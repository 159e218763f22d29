//! Recursive halving-doubling (HCCL's `H-D_R`, "RHD") for any member count.
//!
//! AllReduce is Rabenseifner's algorithm (Thakur, Rabenseifner & Gropp 2005,
//! §4.4): recursive-halving ReduceScatter then recursive-doubling AllGather,
//! 2⌈log2 k'⌉ rounds. When `k` is not a power of two, with `k' = 2^⌊log2 k⌋`
//! and `r = k - k'`, the first `2r` members fold in pairs before the
//! power-of-two part (the even member of each pair hands its vector to the
//! odd one) and unfold after it — two extra rounds, the extra traffic HCCL's
//! docs mention for non-power-of-two sizes.
//!
//! Active members get new indices `n`: member `2n+1` for `n < r`, member
//! `n + r` otherwise. New index `n` is responsible for the member blocks
//! `[2n, 2n+2)` (`n < r`) or `[n+r, n+r+1)`, so every range of new indices
//! covers a contiguous range of the vector.

use crate::dtype::ReduceOp;
use crate::schedule::{Op, Rank, Region, StepId};

use super::gen::{rounds, Blocks, Ctx, Emit, Gen, Loc};

/// Shape of the folded power-of-two part.
#[derive(Clone, Debug)]
struct Fold {
    /// Power-of-two size k'.
    pow: u32,
    /// log2 k'.
    levels: u32,
    /// Members folded in pairs: the first 2r.
    r: u32,
    blocks: Blocks,
}

impl Fold {
    fn new(k: u32, blocks: Blocks) -> Fold {
        let levels = 31 - k.leading_zeros();
        let pow = 1 << levels;
        Fold {
            pow,
            levels,
            r: k - pow,
            blocks,
        }
    }

    /// First member block of new index `n` (`n == pow` gives `k`).
    fn member_of(&self, n: u32) -> u32 {
        if n <= self.r {
            2 * n
        } else {
            n + self.r
        }
    }

    /// Element range of new indices `[a, b)`.
    fn span(&self, a: u32, b: u32) -> (u64, u64) {
        let (x, y) = (
            self.blocks.off(self.member_of(a)),
            self.blocks.off(self.member_of(b)),
        );
        (x, y - x)
    }

    /// The rank of new index `n`'s partner across bit `bit` of the
    /// power-of-two part, as a function of the bit.
    fn peers(&self, c: Ctx, n: u32) -> impl Fn(u32) -> Rank + Copy {
        let r = self.r;
        move |bit: u32| {
            let m = n ^ (1 << bit);
            c.g.rank(if m < r { 2 * m + 1 } else { m + r })
        }
    }

    /// Halving across bit `bit`: of the new indices `[lo, hi)`, the half
    /// that holds `n` (kept) and the other half (given to the partner).
    fn halves(n: u32, bit: u32, (lo, hi): (u32, u32)) -> ((u32, u32), (u32, u32)) {
        let mid = lo + (hi - lo) / 2;
        if n & (1 << bit) == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        }
    }

    /// One halving step with `peer`: sends the `give` half of `cur` and
    /// reduces the `keep` half (`cur`'s and the peer's) into `acc`, both
    /// after `deps`. Returns the (send, receive) ids.
    #[allow(clippy::too_many_arguments)]
    fn exchange_halves(
        &self,
        e: &mut Emit,
        op: ReduceOp,
        peer: Rank,
        tag: u32,
        cur: Loc,
        acc: Loc,
        (keep, give): ((u32, u32), (u32, u32)),
        deps: &[StepId],
    ) -> (StepId, StepId) {
        let g = self.span(give.0, give.1);
        let send = e.push(
            Op::Send {
                peer,
                tag,
                src: cur.at(g.0, g.1),
            },
            deps,
        );
        let k = self.span(keep.0, keep.1);
        let recv = e.push(
            Op::RecvReduce {
                peer,
                tag,
                local: cur.at(k.0, k.1),
                dst: acc.at(k.0, k.1),
                op,
            },
            deps,
        );
        (send, recv)
    }

    /// Doubling across bit `u`: the partner's range of new indices, as long
    /// as `n`'s own `[lo, hi)` and beside it.
    fn partner_range(n: u32, u: u32, (lo, hi): (u32, u32)) -> (u32, u32) {
        let size = hi - lo;
        if n & (1 << u) == 0 {
            (hi, hi + size)
        } else {
            (lo - size, lo)
        }
    }

    /// New index of member `m`, or None if it folds out (even, below 2r).
    fn new_index(&self, m: u32) -> Option<u32> {
        if m < 2 * self.r {
            (m % 2 == 1).then_some(m / 2)
        } else {
            Some(m - self.r)
        }
    }
}

/// The whole plan of a member that folds out (even, below 2r): it hands
/// `give` to its odd neighbour (tag0) and takes `back` from it (tag0 +
/// `back_tag`). Returns the receive's id.
fn hand_over(e: &mut Emit, c: &Ctx, give: Region, back: Region, back_tag: u32) -> StepId {
    let peer = c.g.rank(c.me + 1);
    let s = e.push(
        Op::Send {
            peer,
            tag: c.tag0,
            src: give,
        },
        &[],
    );
    e.push(
        Op::Recv {
            peer,
            tag: c.tag0 + back_tag,
            dst: back,
        },
        &[s],
    )
}

/// Recursive halving-doubling AllReduce of `count` elements from `src` into
/// `dst` (both laid out like the vector). `same` = in place.
pub(crate) fn allreduce(
    c: Ctx,
    count: u64,
    src: Loc,
    dst: Loc,
    same: bool,
    divide: Option<u32>,
) -> Box<dyn Gen> {
    let k = c.g.size;
    let f = Fold::new(
        k,
        Blocks::Even {
            total: count,
            parts: k,
        },
    );
    let me = c.me;
    let all = (0u64, count);
    let l = f.levels;
    if k == 1 {
        return rounds(1, move |_, e: &mut Emit| {
            e.copy_then_divide(same, src.at(all.0, all.1), dst.at(all.0, all.1), divide);
        });
    }
    let tag = move |x: u32| c.tag0 + x;
    let Some(n) = f.new_index(me) else {
        // Folded out: hand the vector to the odd neighbour, get the result back.
        return rounds(1, move |_, e: &mut Emit| {
            hand_over(e, &c, src.at(all.0, all.1), dst.at(all.0, all.1), 1 + 2 * l);
        });
    };
    let folded = me < 2 * f.r;
    let peer_of = f.peers(c, n);
    // Ids of the halving steps' sends and receives, by step.
    let mut rs_send = [0 as StepId; 32];
    let mut rs_recv = [0 as StepId; 32];
    let mut ag_send: Option<StepId> = None;
    let mut ag_recv: Option<StepId> = None;
    let mut first: Option<StepId> = None;
    // The owned range of new indices.
    let (mut lo, mut hi) = (0u32, f.pow);
    rounds(2 * l + 2, move |t, e: &mut Emit| {
        if t == 0 {
            if folded {
                first = Some(e.push(
                    Op::RecvReduce {
                        peer: c.g.rank(me - 1),
                        tag: tag(0),
                        local: src.at(all.0, all.1),
                        dst: dst.at(all.0, all.1),
                        op: c.op,
                    },
                    &[],
                ));
            }
            return;
        }
        if t <= l {
            // Halving step s: keep the half that contains n, send the other.
            let s = t - 1;
            let bit = l - 1 - s;
            let (keep, give) = Fold::halves(n, bit, (lo, hi));
            let cur = if s == 0 && !folded { src } else { dst };
            let deps: Vec<StepId> = if s == 0 {
                first.into_iter().collect()
            } else {
                vec![rs_recv[s as usize - 1]]
            };
            (rs_send[s as usize], rs_recv[s as usize]) = f.exchange_halves(
                e,
                c.op,
                peer_of(bit),
                tag(1 + s),
                cur,
                dst,
                (keep, give),
                &deps,
            );
            (lo, hi) = keep;
            if t == l {
                let recv = rs_recv[s as usize];
                let (o, len) = f.span(lo, hi);
                first = Some(e.divide(divide, dst.at(o, len), &[recv]).unwrap_or(recv));
            }
            return;
        }
        if t <= 2 * l {
            // Doubling step u: exchange owned ranges with the partner at bit u.
            let u = t - l - 1;
            let (plo, phi) = Fold::partner_range(n, u, (lo, hi));
            let mine = f.span(lo, hi);
            let theirs = f.span(plo, phi);
            let mut deps: Vec<StepId> = ag_recv.into_iter().chain(ag_send).collect();
            if u == 0 {
                deps = first.into_iter().collect();
            }
            ag_send = Some(e.push(
                Op::Send {
                    peer: peer_of(u),
                    tag: tag(1 + l + u),
                    src: dst.at(mine.0, mine.1),
                },
                &deps,
            ));
            // The halving step that sent this range read it: wait for that send.
            let rs = rs_send[(l - 1 - u) as usize];
            ag_recv = Some(e.push(
                Op::Recv {
                    peer: peer_of(u),
                    tag: tag(1 + l + u),
                    dst: dst.at(theirs.0, theirs.1),
                },
                &[rs],
            ));
            (lo, hi) = (lo.min(plo), hi.max(phi));
            return;
        }
        // Unfold: give the result to the folded-out neighbour.
        if folded {
            let deps: Vec<StepId> = if l == 0 {
                first.into_iter().collect()
            } else {
                ag_recv.into_iter().chain(ag_send).collect()
            };
            e.push(
                Op::Send {
                    peer: c.g.rank(me - 1),
                    tag: tag(1 + 2 * l),
                    src: dst.at(all.0, all.1),
                },
                &deps,
            );
        }
    })
}

/// Recursive-doubling AllGather of `blocks` (one per member) into `dst`
/// (laid out like the vector), with the same folding as [`allreduce`].
pub(crate) fn allgather(c: Ctx, blocks: Blocks, src: Option<Loc>, dst: Loc) -> Box<dyn Gen> {
    let k = c.g.size;
    let f = Fold::new(k, blocks.clone());
    let me = c.me;
    let l = f.levels;
    let tag = move |x: u32| c.tag0 + x;
    let own = move |b: &Blocks| match src {
        Some(s) => s.at(0, b.len(me)),
        None => dst.block(b, me),
    };
    let total = blocks.total();
    let Some(n) = f.new_index(me) else {
        return rounds(1, move |_, e: &mut Emit| {
            hand_over(e, &c, own(&blocks), dst.at(0, total), 1 + l);
        });
    };
    let folded = me < 2 * f.r;
    let peer_of = f.peers(c, n);
    let mut start: Vec<StepId> = Vec::new();
    let mut last: Vec<StepId> = Vec::new();
    let (mut lo, mut hi) = (n, n + 1);
    rounds(l + 2, move |t, e: &mut Emit| {
        if t == 0 {
            if let Some(s) = src {
                start.push(e.push(
                    Op::Copy {
                        src: s.at(0, blocks.len(me)),
                        dst: dst.block(&blocks, me),
                    },
                    &[],
                ));
            }
            if folded {
                start.push(e.push(
                    Op::Recv {
                        peer: c.g.rank(me - 1),
                        tag: tag(0),
                        dst: dst.block(&blocks, me - 1),
                    },
                    &[],
                ));
            }
            last.clone_from(&start);
            return;
        }
        if t <= l {
            let u = t - 1;
            let (plo, phi) = Fold::partner_range(n, u, (lo, hi));
            let mine = f.span(lo, hi);
            let theirs = f.span(plo, phi);
            let s = e.push(
                Op::Send {
                    peer: peer_of(u),
                    tag: tag(1 + u),
                    src: dst.at(mine.0, mine.1),
                },
                &last,
            );
            let r = e.push(
                Op::Recv {
                    peer: peer_of(u),
                    tag: tag(1 + u),
                    dst: dst.at(theirs.0, theirs.1),
                },
                &[],
            );
            last = vec![s, r];
            (lo, hi) = (lo.min(plo), hi.max(phi));
            return;
        }
        if folded {
            e.push(
                Op::Send {
                    peer: c.g.rank(me - 1),
                    tag: tag(1 + l),
                    src: dst.at(0, total),
                },
                &last,
            );
        }
    })
}

/// Recursive-halving ReduceScatter (HCCL's H-D_R ReduceScatter: fold,
/// halving over the power-of-two part, then a last send to the folded-out
/// member; guide `RHD.md`, steps 1–3). Member `me` ends with the reduction
/// of its block at `out`; partial sums live in scratch (vector layout).
/// Returns (scratch bytes, generator).
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
    if k == 1 {
        return super::ring::reduce_scatter(c, blocks, src, out, scratch, same, divide);
    }
    let f = Fold::new(k, blocks.clone());
    let me = c.me;
    let l = f.levels;
    let own = blocks.len(me);
    let total = blocks.total();
    let tag = move |x: u32| c.tag0 + x;
    let scratch_bytes = total * scratch.esz;
    let Some(n) = f.new_index(me) else {
        // Folded out: hand the vector to the odd neighbour, get the own block back.
        let gen = rounds(1, move |_, e: &mut Emit| {
            let r = hand_over(e, &c, src.at(0, total), out.at(0, own), 1 + l);
            e.divide(divide, out.at(0, own), &[r]);
        });
        return (0, gen);
    };
    let folded = me < 2 * f.r;
    let peer_of = f.peers(c, n);
    let mut prev: Vec<StepId> = Vec::new();
    let (mut lo, mut hi) = (0u32, f.pow);
    let gen = rounds(l + 2, move |t, e: &mut Emit| {
        if t == 0 {
            if folded {
                prev = vec![e.push(
                    Op::RecvReduce {
                        peer: c.g.rank(me - 1),
                        tag: tag(0),
                        local: src.at(0, total),
                        dst: scratch.at(0, total),
                        op: c.op,
                    },
                    &[],
                )];
            }
            return;
        }
        if t <= l {
            // Halving step s: keep the half of new indices containing n.
            let s = t - 1;
            let bit = l - 1 - s;
            let (keep, give) = Fold::halves(n, bit, (lo, hi));
            let cur = if s == 0 && !folded { src } else { scratch };
            let (_, recv) = f.exchange_halves(
                e,
                c.op,
                peer_of(bit),
                tag(1 + s),
                cur,
                scratch,
                (keep, give),
                &prev,
            );
            prev = vec![recv];
            (lo, hi) = keep;
            return;
        }
        // The own block to the output; the folded-out neighbour's block to
        // it. An Avg divides in scratch first, where the transport keeps an
        // fp16/bf16 sum's f32 values (a copy moves only the rounded bytes).
        if let Some(div) = e.divide(divide, scratch.block(&blocks, me), &prev) {
            prev = vec![div];
        }
        e.push(
            Op::Copy {
                src: scratch.block(&blocks, me),
                dst: out.at(0, own),
            },
            &prev,
        );
        if folded {
            e.push(
                Op::Send {
                    peer: c.g.rank(me - 1),
                    tag: tag(1 + l),
                    src: scratch.block(&blocks, me - 1),
                },
                &prev,
            );
        }
    });
    (scratch_bytes, gen)
}

/// Which buffer holds a value in [`allreduce_doubling`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The input (read only; the output itself when in place).
    Src,
    Dst,
    Scratch,
}

/// Recursive-doubling AllReduce (HCCL's `AllReduceDoubling` template; the
/// short-message AllReduce of Thakur, Rabenseifner & Gropp 2005, §4.4):
/// in round `u` every member exchanges its whole partial vector with the
/// member whose new index differs in bit `u` and reduces, so after
/// `log2 k'` rounds all hold the sum. A count that is not a power of two
/// folds and unfolds as [`allreduce`] does (two more rounds). Cost on a
/// power of two: `log2 p·(α + nβ + nγ)` — fewer messages than
/// [`allreduce`]'s `2 log2 p` for `log2 p / 2` times the bytes.
///
/// A round reads one buffer and writes the other of output and scratch
/// (the partial being sent must not change under the send), so a round
/// never waits for its own send; the last one lands in `dst` where it can
/// (else one local copy). Both partners of a round compute `x ⊕ y` of the
/// same two values, so every member ends with the same bits (the ops are
/// commutative) — NaN payloads aside: x86 keeps the first operand's, so
/// two NaNs with different payloads can end as either on different
/// members. Returns (scratch bytes, generator).
pub(crate) fn allreduce_doubling(
    c: Ctx,
    count: u64,
    src: Loc,
    dst: Loc,
    scratch: Loc,
    same: bool,
    divide: Option<u32>,
) -> (u64, Box<dyn Gen>) {
    let k = c.g.size;
    let f = Fold::new(
        k,
        Blocks::Even {
            total: count,
            parts: k,
        },
    );
    let me = c.me;
    let l = f.levels;
    let tag = move |x: u32| c.tag0 + x;
    let whole = move |loc: Loc| loc.at(0, count);
    if k == 1 {
        return (0, allreduce(c, count, src, dst, same, divide));
    }
    let Some(n) = f.new_index(me) else {
        // Folded out: hand the vector to the odd neighbour, get the result back.
        let gen = rounds(1, move |_, e: &mut Emit| {
            hand_over(e, &c, whole(src), whole(dst), 1 + l);
        });
        return (0, gen);
    };
    let folded = me < 2 * f.r;
    let peer_of = f.peers(c, n);
    let writes = l + u32::from(folded);
    // Alternate output and scratch so that the last write is the output;
    // in place the first write cannot be the output (it is being sent).
    let first = if same || writes.is_multiple_of(2) {
        Held::Scratch
    } else {
        Held::Dst
    };
    let uses_scratch = first == Held::Scratch || writes > 1;
    let loc = move |h: Held| match h {
        Held::Src if !same => src,
        Held::Src | Held::Dst => dst,
        Held::Scratch => scratch,
    };
    // Where the partial is, the step that wrote it, and the steps reading
    // the output and the scratch (a write waits for them).
    let mut cur = Held::Src;
    let mut made: Option<StepId> = None;
    let mut readers: [Vec<StepId>; 2] = [Vec::new(), Vec::new()];
    let slot = |h: Held| usize::from(h == Held::Scratch);
    // The input is never written unless it is the output.
    let writable = move |h: Held| h != Held::Src || same;
    let mut next = first;
    // Round 0 folds, rounds 1..=l double, round l+1 finishes.
    let gen = rounds(l + 2, move |t, e: &mut Emit| {
        let mut reduce_from = |e: &mut Emit, peer: Rank, tag: u32, send: bool| {
            let made_deps: Vec<StepId> = made.into_iter().collect();
            let sent = send.then(|| {
                e.push(
                    Op::Send {
                        peer,
                        tag,
                        src: whole(loc(cur)),
                    },
                    &made_deps,
                )
            });
            let target = next;
            let mut deps = made_deps;
            deps.extend(&readers[slot(target)]);
            deps.sort_unstable();
            deps.dedup();
            let step = e.push(
                Op::RecvReduce {
                    peer,
                    tag,
                    local: whole(loc(cur)),
                    dst: whole(loc(target)),
                    op: c.op,
                },
                &deps,
            );
            // The buffer just read: its readers are this round's steps.
            if writable(cur) {
                readers[slot(cur)] = sent.into_iter().chain([step]).collect();
            }
            (cur, made) = (target, Some(step));
            next = if target == Held::Dst {
                Held::Scratch
            } else {
                Held::Dst
            };
        };
        if t == 0 {
            if folded {
                reduce_from(e, c.g.rank(me - 1), tag(0), false);
            }
            return;
        }
        if t <= l {
            reduce_from(e, peer_of(t - 1), tag(t), true);
            return;
        }
        let mut last: Vec<StepId> = made.into_iter().collect();
        if cur != Held::Dst {
            // Divide where the sum is, then copy: the transport keeps an
            // fp16/bf16 sum's f32 values beside its bytes, and a copy moves
            // only the rounded bytes (fp16 40000 + 40000 averaged after the
            // copy was inf).
            if let Some(div) = e.divide(divide, whole(loc(cur)), &last) {
                last = vec![div];
            }
            let mut deps = last.clone();
            deps.extend(&readers[slot(Held::Dst)]);
            deps.sort_unstable();
            deps.dedup();
            last = vec![e.push(
                Op::Copy {
                    src: whole(loc(cur)),
                    dst: whole(dst),
                },
                &deps,
            )];
        } else if let Some(div) = e.divide(divide, whole(dst), &last) {
            last = vec![div];
        }
        if folded {
            e.push(
                Op::Send {
                    peer: c.g.rank(me - 1),
                    tag: tag(1 + l),
                    src: whole(dst),
                },
                &last,
            );
        }
    });
    let bytes = if uses_scratch { count * scratch.esz } else { 0 };
    (bytes, gen)
}
