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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::schedule::{RankPlan, Step, StepId, MAX_DEPS};

/// Default number of steps a rank may have pulled but not completed.
/// Schedules are verified deadlock-free under this window.
pub const DEFAULT_WINDOW: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Posted,
    Done,
}

/// End of an intrusive dependents list.
const NIL: u64 = u64::MAX;

/// One pulled step. Its dependents (later steps waiting for it) form an
/// intrusive list: `head` names the first as `(step << 2) | dep_index`, and
/// that step's `next[dep_index]` the one after. No allocation per step.
struct Slot {
    step: Step,
    state: State,
    /// Dependencies not yet complete (for a fence: earlier steps not done).
    pending: u32,
    head: u64,
    next: [u64; MAX_DEPS],
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
/// step cost O(its dependents + log(ready)), whatever the window size.
pub struct Executor {
    plan: RankPlan,
    window: VecDeque<Slot>,
    /// Index of `window[0]`; every step below it has completed.
    base: StepId,
    capacity: usize,
    exhausted: bool,
    /// Steps whose dependencies are complete, lowest index first.
    ready: BinaryHeap<Reverse<StepId>>,
    /// Fence steps in the window not yet ready, in index order.
    fences: VecDeque<StepId>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("base", &self.base)
            .field("window_len", &self.window.len())
            .field("exhausted", &self.exhausted)
            .finish()
    }
}

impl Executor {
    /// An executor over `plan` with the [`DEFAULT_WINDOW`].
    pub fn new(plan: RankPlan) -> Executor {
        Executor::with_window(plan, DEFAULT_WINDOW)
    }

    /// An executor over `plan` holding at most `window` (>= 1) uncompleted steps.
    pub fn with_window(plan: RankPlan, window: usize) -> Executor {
        Executor {
            plan,
            window: VecDeque::new(),
            base: 0,
            capacity: window.max(1),
            exhausted: false,
            ready: BinaryHeap::new(),
            fences: VecDeque::new(),
        }
    }

    fn slot_mut(&mut self, id: StepId) -> Option<&mut Slot> {
        let i = id.checked_sub(self.base)? as usize;
        self.window.get_mut(i)
    }

    fn refill(&mut self) {
        while !self.exhausted && self.window.len() < self.capacity {
            match self.plan.next() {
                Some(step) => self.push(step),
                None => self.exhausted = true,
            }
        }
    }

    /// Appends a pulled step and links it to the steps it waits for.
    fn push(&mut self, step: Step) {
        let id = self.base + self.window.len() as StepId;
        let mut pending = 0;
        if step.deps.all_before {
            pending = self
                .window
                .iter()
                .filter(|s| s.state != State::Done)
                .count() as u32;
            if pending > 0 {
                self.fences.push_back(id);
            }
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
                match self.slot_mut(d) {
                    Some(dep) if dep.state == State::Done => {}
                    Some(dep) => {
                        slot.next[k] = dep.head;
                        dep.head = (u64::from(id) << 2) | k as u64;
                        slot.pending += 1;
                    }
                    // A dependency on itself or a later step can never be
                    // met: the step stays blocked and shows in hang reports.
                    None => slot.pending += 1,
                }
            }
        }
        if slot.pending == 0 {
            self.ready.push(Reverse(id));
        }
        self.window.push_back(slot);
    }

    /// The next step to post, with its index, or `None` when nothing is ready
    /// now (wait for a completion) or the plan is finished ([`Self::is_done`]).
    /// The step is marked posted: the caller must post it.
    pub fn poll_action(&mut self) -> Option<(StepId, Step)> {
        self.refill();
        let Reverse(id) = self.ready.pop()?;
        let slot = self.slot_mut(id)?;
        slot.state = State::Posted;
        Some((id, slot.step))
    }

    /// Records that step `id` finished.
    ///
    /// # Errors
    /// [`ExecError::NotInFlight`] if `id` was not posted or already completed.
    pub fn handle_completion(&mut self, id: StepId) -> Result<(), ExecError> {
        let (base, end) = (self.base, self.base + self.window.len() as StepId);
        let slot = match self.slot_mut(id) {
            Some(s) if s.state == State::Posted => s,
            _ => {
                return Err(ExecError::NotInFlight {
                    step: id,
                    base,
                    end,
                })
            }
        };
        slot.state = State::Done;
        let mut link = std::mem::replace(&mut slot.head, NIL);
        while link != NIL {
            let (dependent, k) = ((link >> 2) as StepId, (link & 3) as usize);
            let Some(d) = self.slot_mut(dependent) else {
                break;
            };
            link = d.next[k];
            d.pending -= 1;
            if d.pending == 0 {
                self.ready.push(Reverse(dependent));
            }
        }
        for &f in self.fences.iter().filter(|&&f| f > id) {
            let i = (f - self.base) as usize;
            self.window[i].pending -= 1;
            if self.window[i].pending == 0 {
                self.ready.push(Reverse(f));
            }
        }
        while self
            .fences
            .front()
            .is_some_and(|&f| self.window[(f - self.base) as usize].pending == 0)
        {
            self.fences.pop_front();
        }
        while self.window.front().is_some_and(|s| s.state == State::Done) {
            self.window.pop_front();
            self.base += 1;
        }
        Ok(())
    }

    /// True once every step of the plan has completed.
    pub fn is_done(&mut self) -> bool {
        self.refill();
        self.exhausted && self.window.is_empty()
    }

    /// Number of steps completed so far (every step below this index is done).
    pub fn completed_prefix(&self) -> StepId {
        self.base
    }

    fn with_state(&self, state: State) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.window
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.state == state)
            .map(|(i, s)| (self.base + i as StepId, &s.step))
    }

    /// Steps posted but not completed: what this rank is waiting on (for hang reports).
    pub fn in_flight(&self) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.with_state(State::Posted)
    }

    /// Steps pulled but not yet posted (a dependency is unfinished, or the
    /// caller has not polled them yet).
    pub fn blocked(&self) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.with_state(State::Waiting)
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
