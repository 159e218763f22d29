//! The executor: a sans-IO state machine that runs one rank's plan.
//!
//! It never touches bytes, sockets or clocks. [`Executor::poll_action`] says
//! which step to post next; the caller posts it on a transport and, when the
//! transport reports it finished, calls [`Executor::handle_completion`].
//! Real transports wrap this in [`crate::transport::drive`]; the simulator
//! steps thousands of executors inside its own event loop.
//!
//! The executor pulls steps from the lazy [`RankPlan`] into a bounded window
//! (default [`DEFAULT_WINDOW`] steps), so its memory is O(window) whatever the
//! plan's length. A step is posted once every step it depends on has
//! completed; steps complete in any order.

use crate::schedule::{BufKind, Deps, Op, RankPlan, Region, Step, StepId, MAX_DEPS};

/// Default number of steps a rank may have pulled but not completed.
/// Schedules are verified deadlock-free under this window.
pub const DEFAULT_WINDOW: usize = 64;

/// Largest window honoured: links between slots keep 30 bits of a step index.
const MAX_WINDOW: usize = 1 << 29;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A dependency is not complete.
    Waiting,
    /// Every dependency is complete; not yet handed out.
    Ready,
    Posted,
    Done,
}

/// End of an intrusive dependents list.
const NIL: u32 = u32::MAX;

/// Low bits of a step index kept in a link.
const LINK_ID_MASK: u32 = (1 << 30) - 1;

/// One pulled step. Its dependents (later steps waiting for it) form an
/// intrusive list: `head` names the first as `(step mod 2^30) << 2 | dep_index`
/// (the window is narrower than 2^30, so the low bits name it), and that
/// step's `next[dep_index]` the one after. No allocation per step.
#[derive(Clone, Copy)]
struct Slot {
    step: Step,
    state: State,
    /// Dependencies not yet complete (for a fence: earlier steps not done).
    pending: u32,
    head: u32,
    next: [u32; MAX_DEPS],
}

const EMPTY_SLOT: Slot = Slot {
    step: Step {
        op: Op::Copy {
            src: Region::new(BufKind::Scratch, 0, 0),
            dst: Region::new(BufKind::Scratch, 0, 0),
        },
        deps: Deps::NONE,
    },
    state: State::Done,
    pending: 0,
    head: NIL,
    next: [NIL; MAX_DEPS],
};

/// A set of ring positions: the first 64 inline (no allocation for the
/// usual small windows), the rest in `hi` (a boxed `Vec`: one pointer,
/// 8 bytes in the executor, which the simulator keeps one of per rank;
/// the double indirection is paid only by windows over 64 steps).
#[derive(Debug, Default)]
struct Bits {
    lo: u64,
    #[allow(clippy::box_collection)] // 8 bytes in the executor instead of 16
    hi: Option<Box<Vec<u64>>>,
}

impl Bits {
    fn hi(&self) -> &[u64] {
        self.hi.as_deref().map_or(&[], Vec::as_slice)
    }

    fn word(&self, w: usize) -> u64 {
        if w == 0 {
            self.lo
        } else {
            self.hi()[w - 1]
        }
    }

    fn word_mut(&mut self, w: usize) -> &mut u64 {
        if w == 0 {
            &mut self.lo
        } else {
            let hi = self.hi.as_deref_mut().expect("a word past 64 exists");
            &mut hi[w - 1]
        }
    }

    fn set(&mut self, pos: usize) {
        *self.word_mut(pos / 64) |= 1 << (pos % 64);
    }

    fn clear(&mut self, pos: usize) {
        *self.word_mut(pos / 64) &= !(1 << (pos % 64));
    }

    fn is_empty(&self) -> bool {
        self.lo == 0 && self.hi.as_ref().is_none_or(|hi| hi.iter().all(|&w| w == 0))
    }

    fn reset(&mut self, positions: usize) {
        self.lo = 0;
        let words = positions.div_ceil(64).saturating_sub(1);
        self.hi = (words > 0).then(|| Box::new(vec![0; words]));
    }

    /// The first set position in cyclic order from `start`, over a ring of
    /// `size` positions.
    #[inline]
    fn first_from(&self, start: usize, size: usize) -> Option<usize> {
        if size <= 64 {
            // One word (every window up to 64 slots): rotated right by
            // `start`, the positions from `start` on come first, then
            // those before it, each in order.
            let w = self.lo;
            if w == 0 {
                return None;
            }
            let d = w.rotate_right(start as u32).trailing_zeros() as usize;
            return Some((start + d) % 64);
        }
        let words = size.div_ceil(64);
        let (sw, sb) = (start / 64, start % 64);
        let head = self.word(sw) & (!0u64 << sb);
        if head != 0 {
            return Some(sw * 64 + head.trailing_zeros() as usize);
        }
        for w in (sw + 1..words).chain(0..sw) {
            let x = self.word(w);
            if x != 0 {
                return Some(w * 64 + x.trailing_zeros() as usize);
            }
        }
        let tail = self.word(sw) & !(!0u64 << sb);
        (tail != 0).then(|| sw * 64 + tail.trailing_zeros() as usize)
    }
}

/// Error of feeding the executor a completion it did not expect: a transport bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The completed step was never posted, or already completed.
    #[error("completion for step {step}, which is not in flight (steps {base}..{end} are in the window)")]
    NotInFlight {
        /// The step the transport reported.
        step: StepId,
        /// First step of the window.
        base: StepId,
        /// One past the last step of the window.
        end: StepId,
    },
}

/// Runs one rank's plan. See the module docs.
///
/// Readiness is tracked, not rescanned: each completion decrements the
/// pending count of the steps waiting on it, so posting and completing a
/// step cost O(its dependents + window / 64), whatever the window size.
/// The window is a ring of slots indexed by step index modulo its
/// power-of-two size (grown on demand up to the window), and the ready
/// steps and waiting fences are bit sets over it: one allocation per
/// executor besides the plan.
pub struct Executor {
    plan: RankPlan,
    /// The ring (a boxed slice: its length is its capacity).
    slots: Box<[Slot]>,
    /// Index of the oldest step in the window; every step below it has completed.
    base: StepId,
    /// Steps in the window (`base..base + len`).
    len: u32,
    capacity: u32,
    exhausted: bool,
    /// Ring positions of `Ready` steps.
    ready: Bits,
    /// Ring positions of fence steps not yet ready.
    fences: Bits,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("base", &self.base)
            .field("window_len", &self.len)
            .field("exhausted", &self.exhausted)
            .finish()
    }
}

impl Executor {
    /// An executor over `plan` with the [`DEFAULT_WINDOW`].
    pub fn new(plan: RankPlan) -> Executor {
        Executor::with_window(plan, DEFAULT_WINDOW)
    }

    /// An executor over `plan` holding at most `window` (>= 1; at most
    /// 2^29) uncompleted steps.
    pub fn with_window(plan: RankPlan, window: usize) -> Executor {
        Executor {
            plan,
            slots: Box::default(),
            base: 0,
            len: 0,
            capacity: window.clamp(1, MAX_WINDOW) as u32,
            exhausted: false,
            ready: Bits::default(),
            fences: Bits::default(),
        }
    }

    fn pos(&self, id: StepId) -> usize {
        id as usize & (self.slots.len() - 1)
    }

    /// Ring position of `id` if it is in the window.
    fn find(&self, id: StepId) -> Option<usize> {
        (id.wrapping_sub(self.base) < self.len).then(|| self.pos(id))
    }

    /// The step in the window whose index has low bits `low`.
    fn id_of_link(&self, low: u32) -> StepId {
        self.base
            .wrapping_add(low.wrapping_sub(self.base) & LINK_ID_MASK)
    }

    /// Doubles the ring (up to the window), re-placing every slot.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2)
            .max(8)
            .min((self.capacity as usize).next_power_of_two());
        let mut slots = vec![EMPTY_SLOT; size];
        self.ready.reset(size);
        self.fences.reset(size);
        for id in self.base..self.base + self.len {
            let s = self.slots[self.pos(id)];
            let p = id as usize & (size - 1);
            slots[p] = s;
            if s.state == State::Ready {
                self.ready.set(p);
            } else if s.state == State::Waiting && s.step.deps.all_before {
                self.fences.set(p);
            }
        }
        self.slots = slots.into_boxed_slice();
    }

    /// Pulls steps while the window has room. The check is inline: most
    /// calls find the window full, and the call of the loop (its prologue
    /// saves six registers and 264 bytes of stack for a step) cost ~20
    /// instructions each time.
    #[inline]
    fn refill(&mut self) {
        if !self.exhausted && self.len < self.capacity {
            self.refill_room();
        }
    }

    #[inline(never)]
    fn refill_room(&mut self) {
        while !self.exhausted && self.len < self.capacity {
            match self.plan.next() {
                Some(step) => self.push(step),
                None => self.exhausted = true,
            }
        }
    }

    /// Appends a pulled step and links it to the steps it waits for.
    fn push(&mut self, step: Step) {
        if self.len as usize == self.slots.len() {
            self.grow();
        }
        let id = self.base + self.len;
        let mut pending = 0;
        if step.deps.all_before {
            pending = (self.base..id)
                .filter(|&i| self.slots[self.pos(i)].state != State::Done)
                .count() as u32;
        }
        let mut slot = Slot {
            step,
            state: State::Waiting,
            pending,
            head: NIL,
            next: [NIL; MAX_DEPS],
        };
        if !step.deps.all_before {
            for (k, &d) in step.deps.ids().iter().enumerate() {
                if d < self.base {
                    continue;
                }
                match self.find(d) {
                    Some(p) if self.slots[p].state == State::Done => {}
                    Some(p) => {
                        let dep = &mut self.slots[p];
                        slot.next[k] = dep.head;
                        dep.head = ((id & LINK_ID_MASK) << 2) | k as u32;
                        slot.pending += 1;
                    }
                    // A dependency on itself or a later step can never be
                    // met: the step stays blocked and shows in hang reports.
                    None => slot.pending += 1,
                }
            }
        }
        let p = self.pos(id);
        if slot.pending == 0 {
            slot.state = State::Ready;
            self.ready.set(p);
        } else if step.deps.all_before {
            self.fences.set(p);
        }
        self.slots[p] = slot;
        self.len += 1;
    }

    /// The next step to post, with its index, or `None` when nothing is ready
    /// now (wait for a completion) or the plan is finished ([`Self::is_done`]).
    /// The step is marked posted: the caller must post it.
    pub fn poll_action(&mut self) -> Option<(StepId, Step)> {
        self.poll_step().map(|(id, s)| (id, *s))
    }

    /// [`Self::poll_action`] lending the step instead of copying it (the
    /// simulator posts thousands of steps per rank this way).
    pub fn poll_step(&mut self) -> Option<(StepId, &Step)> {
        self.refill();
        if self.len == 0 {
            return None;
        }
        let size = self.slots.len();
        let start = self.pos(self.base);
        let p = self.ready.first_from(start, size)?;
        self.ready.clear(p);
        let id = self
            .base
            .wrapping_add((p.wrapping_sub(start) & (size - 1)) as StepId);
        let slot = &mut self.slots[p];
        slot.state = State::Posted;
        Some((id, &slot.step))
    }

    /// Records that step `id` finished.
    ///
    /// # Errors
    /// [`ExecError::NotInFlight`] if `id` was not posted or already completed.
    pub fn handle_completion(&mut self, id: StepId) -> Result<(), ExecError> {
        let p = match self.find(id) {
            Some(p) if self.slots[p].state == State::Posted => p,
            _ => {
                return Err(ExecError::NotInFlight {
                    step: id,
                    base: self.base,
                    end: self.base + self.len,
                })
            }
        };
        let slot = &mut self.slots[p];
        slot.state = State::Done;
        let mut link = std::mem::replace(&mut slot.head, NIL);
        while link != NIL {
            let (dependent, k) = (self.id_of_link(link >> 2), (link & 3) as usize);
            let q = self.pos(dependent);
            let d = &mut self.slots[q];
            link = d.next[k];
            d.pending -= 1;
            if d.pending == 0 {
                d.state = State::Ready;
                self.ready.set(q);
            }
        }
        if !self.fences.is_empty() {
            self.release_fences(id);
        }
        while self.len > 0 && self.slots[self.pos(self.base)].state == State::Done {
            self.base += 1;
            self.len -= 1;
        }
        Ok(())
    }

    /// Step `id` completed: every waiting fence after it has one step fewer to wait for.
    fn release_fences(&mut self, id: StepId) {
        let size = self.slots.len();
        for w in 0..size.div_ceil(64) {
            let mut bits = self.fences.word(w);
            while bits != 0 {
                let q = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let f = self
                    .base
                    .wrapping_add((q.wrapping_sub(self.pos(self.base)) & (size - 1)) as StepId);
                if f <= id {
                    continue;
                }
                let s = &mut self.slots[q];
                s.pending -= 1;
                if s.pending == 0 {
                    s.state = State::Ready;
                    self.fences.clear(q);
                    self.ready.set(q);
                }
            }
        }
    }

    /// True once every step of the plan has completed.
    pub fn is_done(&mut self) -> bool {
        self.refill();
        self.exhausted && self.len == 0
    }

    /// Step `id` if it is in the window (pulled and not yet retired).
    pub fn step(&self, id: StepId) -> Option<&Step> {
        self.find(id).map(|p| &self.slots[p].step)
    }

    /// Number of steps completed so far (every step below this index is done).
    pub fn completed_prefix(&self) -> StepId {
        self.base
    }

    fn with_state(&self, states: &'static [State]) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        (self.base..self.base + self.len)
            .map(|id| (id, &self.slots[self.pos(id)]))
            .filter(move |(_, s)| states.contains(&s.state))
            .map(|(id, s)| (id, &s.step))
    }

    /// Steps posted but not completed: what this rank is waiting on (for hang reports).
    pub fn in_flight(&self) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.with_state(&[State::Posted])
    }

    /// Steps pulled but not yet posted (a dependency is unfinished, or the
    /// caller has not polled them yet).
    pub fn blocked(&self) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.with_state(&[State::Waiting, State::Ready])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{BufKind, Deps, Op, Region};

    fn copy_step(deps: Deps) -> Step {
        let r = Region::new(BufKind::Output, 0, 4);
        Step {
            op: Op::Copy { src: r, dst: r },
            deps,
        }
    }

    #[test]
    fn posts_in_dependency_order_and_finishes() {
        // 0 and 1 are independent; 2 waits for 0; 3 is a fence.
        let steps = vec![
            copy_step(Deps::NONE),
            copy_step(Deps::NONE),
            copy_step(Deps::on(&[0])),
            copy_step(Deps::FENCE),
        ];
        let mut ex = Executor::new(Box::new(steps.into_iter()));
        assert_eq!(ex.poll_action().map(|a| a.0), Some(0));
        assert_eq!(ex.poll_action().map(|a| a.0), Some(1));
        assert_eq!(ex.poll_action(), None, "2 waits for 0, 3 for all");
        ex.handle_completion(1).unwrap();
        assert_eq!(ex.poll_action(), None);
        ex.handle_completion(0).unwrap();
        assert_eq!(ex.poll_action().map(|a| a.0), Some(2));
        assert_eq!(ex.poll_action(), None, "fence waits for 2");
        ex.handle_completion(2).unwrap();
        assert_eq!(ex.poll_action().map(|a| a.0), Some(3));
        assert!(!ex.is_done());
        ex.handle_completion(3).unwrap();
        assert!(ex.is_done());
    }

    #[test]
    fn rejects_unposted_or_repeated_completions() {
        let steps = vec![copy_step(Deps::NONE), copy_step(Deps::on(&[0]))];
        let mut ex = Executor::new(Box::new(steps.into_iter()));
        assert!(ex.handle_completion(0).is_err(), "not posted yet");
        ex.poll_action();
        ex.handle_completion(0).unwrap();
        assert!(ex.handle_completion(0).is_err(), "already done");
        assert!(ex.handle_completion(7).is_err(), "never existed");
    }

    /// The executor against a naive model that rescans its window (what the
    /// executor did before readiness tracking): same posting order for a
    /// plan mixing chains, fan-in and fences, windows below and above 64
    /// slots (inline and spilled bit sets), and a ring that wraps and grows.
    #[test]
    fn matches_a_rescanning_model() {
        let steps: Vec<Step> = (0..300u32)
            .map(|i| match i % 7 {
                _ if i % 50 == 49 => copy_step(Deps::FENCE),
                0 | 3 if i >= 2 => copy_step(Deps::on(&[i - 1, i - 2])),
                5 if i >= 9 => copy_step(Deps::on(&[i - 9, i - 3, i - 1])),
                _ => copy_step(Deps::NONE),
            })
            .collect();
        for window in [1, 3, 8, 64, 100, 1000] {
            let mut ex = Executor::with_window(Box::new(steps.clone().into_iter()), window);
            // Model: done flags; ready = pulled, not posted, deps done.
            let mut done = vec![false; steps.len()];
            let mut posted = vec![false; steps.len()];
            let (mut base, mut pulled) = (0usize, 0usize);
            let mut in_flight = Vec::new();
            let mut rounds = 0;
            loop {
                pulled = (base + window).min(steps.len()).max(pulled);
                let expect: Vec<StepId> = (base..pulled)
                    .filter(|&i| {
                        !posted[i]
                            && if steps[i].deps.all_before {
                                (0..i).all(|j| done[j])
                            } else {
                                steps[i].deps.ids().iter().all(|&d| done[d as usize])
                            }
                    })
                    .map(|i| i as StepId)
                    .collect();
                // The executor hands out one ready step at a time, lowest first;
                // completions only come after a whole batch here, so the batch
                // is exactly the model's ready set.
                let got: Vec<StepId> =
                    std::iter::from_fn(|| ex.poll_action().map(|a| a.0)).collect();
                assert_eq!(got, expect, "window {window}, round {rounds}");
                for &g in &got {
                    posted[g as usize] = true;
                    in_flight.push(g);
                }
                if in_flight.is_empty() {
                    break;
                }
                // Complete alternately the newest and the oldest in flight.
                let c = if rounds % 2 == 0 {
                    in_flight.pop().unwrap()
                } else {
                    in_flight.remove(0)
                };
                ex.handle_completion(c).unwrap();
                done[c as usize] = true;
                while base < steps.len() && done[base] {
                    base += 1;
                }
                rounds += 1;
            }
            assert!(done.iter().all(|&d| d), "window {window}");
            assert!(ex.is_done());
        }
    }

    #[test]
    fn window_bounds_pulled_steps() {
        let steps = (0..10).map(|_| copy_step(Deps::NONE)).collect::<Vec<_>>();
        let mut ex = Executor::with_window(Box::new(steps.into_iter()), 3);
        let posted: Vec<_> = std::iter::from_fn(|| ex.poll_action().map(|a| a.0)).collect();
        assert_eq!(posted, vec![0, 1, 2]);
        ex.handle_completion(1).unwrap();
        assert_eq!(
            ex.poll_action(),
            None,
            "front step 0 still holds the window"
        );
        ex.handle_completion(0).unwrap();
        let posted: Vec<_> = std::iter::from_fn(|| ex.poll_action().map(|a| a.0)).collect();
        assert_eq!(posted, vec![3, 4]);
    }
}
