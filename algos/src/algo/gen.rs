//! Lazy step generation: the machinery every algorithm uses to emit a
//! [`RankPlan`] in O(1)..O(log p) memory.
//!
//! An algorithm is a [`Gen`]: each call to [`Gen::fill`] pushes the steps of
//! one round into an [`Emit`], which numbers them and queues them for the
//! iterator. Phases of a composed algorithm run in sequence ([`Seq`]): a
//! zero-length join step fences the previous phase, and every step of the
//! next phase without its own dependencies waits for the join.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::collective::VCounts;
use crate::schedule::{BufKind, Deps, Op, Rank, RankPlan, Region, Step, StepId};

/// Steps of a round kept inline in the plan's own allocation (one cache
/// line fewer per pulled step than a separate buffer); more spill to a
/// deque. A ring round emits 2 ([`Seq`] queues a phase join on its own);
/// the third step of a round with an `Avg` divide spills, and the deque is
/// freed once drained (the simulator holds one plan per rank: a third
/// inline step was 80 bytes per rank for one round per op).
const INLINE_STEPS: usize = 2;

const NO_STEP: Step = Step {
    op: Op::Copy {
        src: Region::new(BufKind::Scratch, 0, 0),
        dst: Region::new(BufKind::Scratch, 0, 0),
    },
    deps: Deps::NONE,
};

/// FIFO of emitted steps: a small inline ring (a ring round emits 2-3
/// steps, 3 with a phase join), then an overflow deque
/// (used only while the ring is full, so the order is plain FIFO; freed
/// when it empties).
#[derive(Debug)]
struct StepQueue {
    ring: [Step; INLINE_STEPS],
    head: u8,
    len: u8,
    /// Boxed: 8 bytes in the plan instead of a deque's 24 (the simulator
    /// holds one plan per rank; most plans never spill).
    #[allow(clippy::box_collection)]
    spill: Option<Box<VecDeque<Step>>>,
}

impl Default for StepQueue {
    fn default() -> Self {
        StepQueue {
            ring: [NO_STEP; INLINE_STEPS],
            head: 0,
            len: 0,
            spill: None,
        }
    }
}

impl StepQueue {
    fn push_back(&mut self, s: Step) {
        if (self.len as usize) < INLINE_STEPS && self.spill.is_none() {
            self.ring[(self.head as usize + self.len as usize) % INLINE_STEPS] = s;
            self.len += 1;
        } else {
            self.spill_back(s);
        }
    }

    /// The overflow path of [`Self::push_back`], out of line: a ring
    /// round never takes it, and inlined it kept `Emit::push` from being
    /// inlined into the generators (+2% instructions on ring-512).
    #[cold]
    #[inline(never)]
    fn spill_back(&mut self, s: Step) {
        self.spill.get_or_insert_with(Box::default).push_back(s);
    }

    /// The next step. Inline for a queue that has not spilled (every
    /// pull of a ring plan): the call and its 80-byte copy through the
    /// stack were ~50 instructions a step.
    #[inline]
    fn pop_front(&mut self) -> Option<Step> {
        if self.spill.is_some() {
            return self.pop_front_spilled();
        }
        if self.len == 0 {
            return None;
        }
        let s = self.ring[self.head as usize];
        self.head = ((self.head as usize + 1) % INLINE_STEPS) as u8;
        self.len -= 1;
        if self.len == 0 {
            self.head = 0;
        }
        Some(s)
    }

    /// [`Self::pop_front`] of a queue that has spilled.
    #[inline(never)]
    fn pop_front_spilled(&mut self) -> Option<Step> {
        if self.len > 0 {
            let s = self.ring[self.head as usize];
            self.head = ((self.head as usize + 1) % INLINE_STEPS) as u8;
            self.len -= 1;
            if self.len == 0 {
                self.head = 0;
                // Refill the ring from the overflow, keeping the order.
                if let Some(spill) = self.spill.as_mut() {
                    while (self.len as usize) < INLINE_STEPS {
                        let Some(x) = spill.pop_front() else {
                            break;
                        };
                        self.ring[self.len as usize] = x;
                        self.len += 1;
                    }
                    if spill.is_empty() {
                        self.spill = None;
                    }
                }
            }
            Some(s)
        } else {
            let spill = self.spill.as_mut()?;
            let s = spill.pop_front();
            if spill.is_empty() {
                self.spill = None;
            }
            s
        }
    }
}

/// Receives the steps a [`Gen`] emits and numbers them.
#[derive(Debug, Default)]
pub(crate) struct Emit {
    next: StepId,
    queue: StepQueue,
    /// Added as the dependency of steps pushed with no dependency.
    entry: Option<StepId>,
}

impl Emit {
    /// Index the next pushed step gets.
    pub(crate) fn next_id(&self) -> StepId {
        self.next
    }

    /// Pushes a step waiting for `deps` (or for the phase entry if empty).
    pub(crate) fn push(&mut self, op: Op, deps: &[StepId]) -> StepId {
        let deps = match (deps.is_empty(), self.entry) {
            (true, Some(e)) => Deps::on(&[e]),
            _ => Deps::on(deps),
        };
        self.queue.push_back(Step { op, deps });
        self.next += 1;
        self.next - 1
    }

    /// Pushes `op` if `cond`, returning its id.
    pub(crate) fn push_if(&mut self, cond: bool, op: Op, deps: &[StepId]) -> Option<StepId> {
        cond.then(|| self.push(op, deps))
    }

    /// The `Avg` ending: `dst` divided by `divide` (the world size, when the
    /// op is `Avg`) after `deps`. Returns the Divide's id (`None`: no Divide).
    pub(crate) fn divide(
        &mut self,
        divide: Option<u32>,
        dst: Region,
        deps: &[StepId],
    ) -> Option<StepId> {
        divide.map(|divisor| self.push(Op::Divide { dst, divisor }, deps))
    }

    /// A one-member reduction: `src` copied to `dst` unless in place
    /// (`same`), then the `Avg` ending. Returns the last step pushed.
    pub(crate) fn copy_then_divide(
        &mut self,
        same: bool,
        src: Region,
        dst: Region,
        divide: Option<u32>,
    ) -> Option<StepId> {
        let copy = self.push_if(!same, Op::Copy { src, dst }, &[]);
        self.divide(divide, dst, copy.as_slice()).or(copy)
    }
}

/// A lazy algorithm: emits its steps round by round.
pub(crate) trait Gen: Send {
    /// Emits the next round's steps (possibly none); returns false once
    /// nothing more will be emitted.
    fn fill(&mut self, e: &mut Emit) -> bool;
}

/// A [`Gen`] from a closure called once per round `0..n`.
pub(crate) struct Rounds<F> {
    t: u32,
    n: u32,
    f: F,
}

impl<F: FnMut(u32, &mut Emit) + Send> Gen for Rounds<F> {
    fn fill(&mut self, e: &mut Emit) -> bool {
        if self.t >= self.n {
            return false;
        }
        (self.f)(self.t, e);
        self.t += 1;
        self.t < self.n
    }
}

/// `n` rounds of `f`, boxed.
pub(crate) fn rounds<F: FnMut(u32, &mut Emit) + Send + 'static>(n: u32, f: F) -> Box<dyn Gen> {
    Box::new(Rounds { t: 0, n, f })
}

/// A generator that emits nothing.
pub(crate) fn empty() -> Box<dyn Gen> {
    rounds(0, |_, _| {})
}

/// Phases run one after another, joined by a fence step.
#[allow(dead_code)] // used by the hierarchical composition
pub(crate) struct Seq {
    /// The running phase, inline (no buffer to chase per round).
    front: Option<Box<dyn Gen>>,
    /// `front` emitted its last round: the join and the next phase come
    /// on the next call.
    front_done: bool,
    rest: Rest,
}

/// The phases after the running one.
enum Rest {
    /// Built up front.
    Built(VecDeque<Box<dyn Gen>>),
    /// Built when they start: phase `next..count` by `build(i)` (a
    /// hierarchical plan's later phases; the simulator holds one plan per
    /// rank, and two phases not yet started were ~300 bytes of each
    /// rank's share at the start of a run).
    Lazy {
        next: u32,
        count: u32,
        build: PhaseBuilder,
    },
}

/// Builds phase `i` of a [`seq_lazy`] plan.
pub(crate) type PhaseBuilder = Box<dyn FnMut(u32) -> Box<dyn Gen> + Send>;

impl Rest {
    fn is_empty(&self) -> bool {
        match self {
            Rest::Built(q) => q.is_empty(),
            Rest::Lazy { next, count, .. } => *next >= *count,
        }
    }

    fn pop_front(&mut self) -> Option<Box<dyn Gen>> {
        match self {
            Rest::Built(q) => q.pop_front(),
            Rest::Lazy { next, count, build } => {
                if *next >= *count {
                    return None;
                }
                *next += 1;
                Some(build(*next - 1))
            }
        }
    }
}

/// Runs `phases` in sequence.
#[allow(dead_code)] // used by the hierarchical composition
pub(crate) fn seq(phases: Vec<Box<dyn Gen>>) -> Box<dyn Gen> {
    let mut rest: VecDeque<Box<dyn Gen>> = phases.into();
    Box::new(Seq {
        front: rest.pop_front(),
        front_done: false,
        rest: Rest::Built(rest),
    })
}

/// Runs `first`, then phases `1..count` built by `build` as each starts:
/// the same steps as [`seq`] of all of them.
pub(crate) fn seq_lazy(first: Box<dyn Gen>, count: u32, build: PhaseBuilder) -> Box<dyn Gen> {
    Box::new(Seq {
        front: Some(first),
        front_done: false,
        rest: Rest::Lazy {
            next: 1,
            count,
            build,
        },
    })
}

/// A zero-length local step that waits for every earlier step: the join
/// between two phases.
#[allow(dead_code)] // used by the hierarchical composition
pub(crate) fn join_op() -> Op {
    let r = Region::new(BufKind::Scratch, 0, 0);
    Op::Copy { src: r, dst: r }
}

impl Gen for Seq {
    fn fill(&mut self, e: &mut Emit) -> bool {
        let Some(front) = self.front.as_mut() else {
            return false;
        };
        if !self.front_done {
            if front.fill(e) {
                return true;
            }
            // The join waits for the next call, when the plan has handed
            // out this last round: a round's steps and the join are never
            // queued together, so a ring phase's two steps fit inline.
            // The steps and their numbers are the same either way.
            self.front_done = true;
            if !self.rest.is_empty() {
                return true;
            }
        }
        self.front_done = false;
        self.front = self.rest.pop_front();
        if self.front.is_none() {
            return false;
        }
        if e.next_id() > 0 {
            e.entry = None;
            let mut d = Deps::FENCE;
            d.all_before = true;
            e.queue.push_back(Step {
                op: join_op(),
                deps: d,
            });
            e.next += 1;
            e.entry = Some(e.next - 1);
        }
        true
    }
}

/// Turns a [`Gen`] into the iterator the executor pulls from.
pub(crate) fn into_plan(gen: Box<dyn Gen>) -> RankPlan {
    let mut gen = gen;
    let mut emit = Emit::default();
    let mut live = true;
    Box::new(std::iter::from_fn(move || loop {
        if let Some(s) = emit.queue.pop_front() {
            return Some(s);
        }
        if !live {
            return None;
        }
        live = gen.fill(&mut emit);
    }))
}

/// A sub-communicator: member `i` is global rank `base + i * stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    pub base: Rank,
    pub stride: Rank,
    pub size: u32,
}

impl Group {
    pub(crate) fn flat(size: u32) -> Group {
        Group {
            base: 0,
            stride: 1,
            size,
        }
    }

    /// Global rank of member `i` (taken modulo the size).
    pub(crate) fn rank(&self, i: u32) -> Rank {
        self.base + (i % self.size) * self.stride
    }
}

/// A place in a buffer: byte base plus element size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub buf: BufKind,
    pub base: u64,
    pub esz: u64,
}

impl Loc {
    pub(crate) fn new(buf: BufKind, base: u64, esz: u64) -> Loc {
        Loc { buf, base, esz }
    }

    /// `elems` elements from element offset `off`.
    pub(crate) fn at(&self, off: u64, elems: u64) -> Region {
        Region::new(self.buf, self.base + off * self.esz, elems * self.esz)
    }

    /// Block `b` of `blocks`. Inline: a call per region was ~10
    /// instructions of every step a ring plan emits.
    #[inline]
    pub(crate) fn block(&self, blocks: &Blocks, b: u32) -> Region {
        self.at(blocks.off(b), blocks.len(b))
    }

    /// Moves the base by `elems` elements.
    #[allow(dead_code)] // used by the hierarchical composition
    pub(crate) fn shift(&self, elems: u64) -> Loc {
        Loc {
            base: self.base + elems * self.esz,
            ..*self
        }
    }
}

/// How a vector of elements is cut into blocks, one per group member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Blocks {
    /// `total` elements in `parts` nearly equal blocks (the first
    /// `total % parts` blocks get one more element).
    Even { total: u64, parts: u32 },
    /// Blocks of the given counts, packed.
    Table(Arc<VCounts>),
    /// Every one of the `parts` blocks is the whole vector of `total`
    /// elements (one-shot algorithms: each member's share is everything).
    Whole { total: u64, parts: u32 },
}

impl Blocks {
    /// `each` elements per block, `parts` blocks.
    pub(crate) fn uniform(each: u64, parts: u32) -> Blocks {
        Blocks::Even {
            total: each * parts as u64,
            parts,
        }
    }

    pub(crate) fn parts(&self) -> u32 {
        match self {
            Blocks::Even { parts, .. } => *parts,
            Blocks::Table(v) => v.len() as u32,
            Blocks::Whole { parts, .. } => *parts,
        }
    }

    /// Element offset of block `b` (`b == parts` gives the total).
    pub(crate) fn off(&self, b: u32) -> u64 {
        match self {
            Blocks::Even { total, parts } => {
                let (q, r) = (total / *parts as u64, total % *parts as u64);
                b as u64 * q + (b as u64).min(r)
            }
            Blocks::Table(v) => v.displ(b as usize),
            Blocks::Whole { total, parts } => {
                if b < *parts {
                    0
                } else {
                    *total
                }
            }
        }
    }

    /// Elements of block `b`.
    pub(crate) fn len(&self, b: u32) -> u64 {
        match self {
            // `off(b + 1) - off(b)` with one division instead of two.
            Blocks::Even { total, parts } => {
                let (q, r) = (total / *parts as u64, total % *parts as u64);
                q + u64::from((b as u64) < r)
            }
            Blocks::Table(_) => self.off(b + 1) - self.off(b),
            Blocks::Whole { total, .. } => *total,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.off(self.parts())
    }

    /// Largest block, in elements.
    pub(crate) fn max_len(&self) -> u64 {
        match self {
            Blocks::Even { total, parts } => total.div_ceil(*parts as u64),
            Blocks::Table(v) => v.counts().iter().copied().max().unwrap_or(0),
            Blocks::Whole { total, .. } => *total,
        }
    }
}

/// What every algorithm of one group needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    pub g: Group,
    /// This rank's member index in `g`.
    pub me: u32,
    /// Reduce op of reductions (`Sum` for `Avg`).
    pub op: crate::dtype::ReduceOp,
    /// First tag this phase may use.
    pub tag0: u32,
}

impl Ctx {
    /// Member `me + d` (mod size), as a global rank.
    pub(crate) fn peer(&self, d: i64) -> Rank {
        let k = self.g.size as i64;
        self.g.rank(((self.me as i64 + d).rem_euclid(k)) as u32)
    }

    /// `(me + d) mod size`.
    pub(crate) fn idx(&self, d: i64) -> u32 {
        let k = self.g.size as i64;
        ((self.me as i64 + d).rem_euclid(k)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_blocks_cover_the_total_with_uneven_sizes() {
        let b = Blocks::Even {
            total: 10,
            parts: 4,
        };
        let lens: Vec<u64> = (0..4).map(|i| b.len(i)).collect();
        assert_eq!(lens, vec![3, 3, 2, 2]);
        assert_eq!(b.off(4), 10);
        let b = Blocks::Even { total: 2, parts: 5 };
        assert_eq!(
            (0..5).map(|i| b.len(i)).collect::<Vec<_>>(),
            vec![1, 1, 0, 0, 0]
        );
        assert_eq!(b.max_len(), 1);
        // len(b) is off(b + 1) - off(b) everywhere, past the last block too.
        for (total, parts) in [(10u64, 4u32), (2, 5), (7, 7), (0, 3), (1 << 40, 3)] {
            let b = Blocks::Even { total, parts };
            for i in 0..parts + 2 {
                assert_eq!(
                    b.len(i),
                    b.off(i + 1) - b.off(i),
                    "{total}/{parts} block {i}"
                );
            }
        }
    }

    /// The one-member ending: the Copy only when not in place, the Divide
    /// only for `Avg` and after the Copy; the last step's id comes back.
    #[test]
    fn copy_then_divide_pushes_what_the_call_needs() {
        let (src, dst) = (
            Region::new(BufKind::Input, 0, 8),
            Region::new(BufKind::Output, 0, 8),
        );
        let steps = |same: bool, divide: Option<u32>| {
            let mut e = Emit::default();
            let last = e.copy_then_divide(same, src, dst, divide);
            let mut v = Vec::new();
            while let Some(s) = e.queue.pop_front() {
                v.push(s);
            }
            (last, v)
        };
        let copy = Step {
            op: Op::Copy { src, dst },
            deps: Deps::NONE,
        };
        let div = |deps: &[StepId]| Step {
            op: Op::Divide { dst, divisor: 4 },
            deps: Deps::on(deps),
        };
        assert_eq!(steps(false, None), (Some(0), vec![copy]));
        assert_eq!(steps(false, Some(4)), (Some(1), vec![copy, div(&[0])]));
        assert_eq!(steps(true, Some(4)), (Some(0), vec![div(&[])]));
        assert_eq!(steps(true, None), (None, vec![]));
    }

    /// FIFO order across the inline ring and the overflow deque.
    #[test]
    fn step_queue_is_fifo_past_its_inline_ring() {
        let step = |i: u64| Step {
            op: Op::Copy {
                src: Region::new(BufKind::Input, i, 1),
                dst: Region::new(BufKind::Output, i, 1),
            },
            deps: Deps::NONE,
        };
        let mut q = StepQueue::default();
        let mut model = VecDeque::new();
        let mut n = 0;
        // Bursts of 0..=9 pushes (beyond the inline ring), then 0..=6 pops.
        for round in 0..40u64 {
            for _ in 0..(round * 7 % 10) {
                q.push_back(step(n));
                model.push_back(step(n));
                n += 1;
            }
            for _ in 0..(round * 5 % 7) {
                assert_eq!(q.pop_front(), model.pop_front(), "round {round}");
            }
        }
        while let Some(s) = model.pop_front() {
            assert_eq!(q.pop_front(), Some(s));
        }
        assert_eq!(q.pop_front(), None);
    }

    /// A phase's last round and the join are never queued together: two
    /// ring-like phases of 2-step rounds never overflow the inline ring,
    /// and the steps are those of the phases with one join between them.
    #[test]
    fn seq_queues_the_join_after_the_last_round() {
        let two = || {
            rounds(3, |_, e| {
                e.push(join_op(), &[]);
                e.push(join_op(), &[]);
            })
        };
        let mut gen = seq(vec![two(), two()]);
        let mut e = Emit::default();
        let mut steps = Vec::new();
        loop {
            let live = gen.fill(&mut e);
            assert!(e.queue.len <= 2 && e.queue.spill.is_none());
            while let Some(s) = e.queue.pop_front() {
                steps.push(s);
            }
            if !live {
                break;
            }
        }
        assert_eq!(steps.len(), 13);
        assert!(steps[6].deps.all_before, "the join follows phase one");
        assert!(steps.iter().filter(|s| s.deps.all_before).count() == 1);
        assert_eq!(steps[7].deps.ids(), &[6], "phase two waits for the join");
    }

    #[test]
    fn seq_joins_phases_with_a_fence() {
        let a = rounds(1, |_, e| {
            e.push(join_op(), &[]);
        });
        let b = rounds(1, |_, e| {
            e.push(join_op(), &[]);
        });
        let steps: Vec<Step> = into_plan(seq(vec![a, b])).collect();
        assert_eq!(steps.len(), 3);
        assert!(steps[1].deps.all_before, "join fences phase one");
        assert_eq!(steps[2].deps.ids(), &[1], "phase two waits for the join");
    }
}
