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

use std::collections::VecDeque;

use crate::schedule::{RankPlan, Step, StepId};

/// Default number of steps a rank may have pulled but not completed.
/// Schedules are verified deadlock-free under this window.
pub const DEFAULT_WINDOW: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Waiting,
    Posted,
    Done,
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
pub struct Executor {
    plan: RankPlan,
    window: VecDeque<(Step, State)>,
    /// Index of `window[0]`; every step below it has completed.
    base: StepId,
    capacity: usize,
    exhausted: bool,
    /// Window slots before this one are all posted or done (scan start).
    scan_from: usize,
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
        let capacity = window.max(1);
        Executor {
            plan,
            window: VecDeque::with_capacity(capacity.min(1024)),
            base: 0,
            capacity,
            exhausted: false,
            scan_from: 0,
        }
    }

    fn refill(&mut self) {
        while !self.exhausted && self.window.len() < self.capacity {
            match self.plan.next() {
                Some(step) => self.window.push_back((step, State::Waiting)),
                None => self.exhausted = true,
            }
        }
    }

    fn is_complete(&self, id: StepId) -> bool {
        id < self.base
            || self
                .window
                .get((id - self.base) as usize)
                .is_some_and(|(_, s)| *s == State::Done)
    }

    fn ready(&self, slot: usize) -> bool {
        let (step, _) = &self.window[slot];
        if step.deps.all_before {
            return self
                .window
                .iter()
                .take(slot)
                .all(|(_, s)| *s == State::Done);
        }
        step.deps.ids().iter().all(|&d| self.is_complete(d))
    }

    /// The next step to post, with its index, or `None` when nothing is ready
    /// now (wait for a completion) or the plan is finished ([`Self::is_done`]).
    /// The step is marked posted: the caller must post it.
    pub fn poll_action(&mut self) -> Option<(StepId, Step)> {
        self.refill();
        let mut all_before_posted = true;
        for slot in self.scan_from..self.window.len() {
            if self.window[slot].1 != State::Waiting {
                if all_before_posted {
                    self.scan_from = slot + 1;
                }
                continue;
            }
            if self.ready(slot) {
                self.window[slot].1 = State::Posted;
                if all_before_posted {
                    self.scan_from = slot + 1;
                }
                return Some((self.base + slot as StepId, self.window[slot].0));
            }
            all_before_posted = false;
        }
        None
    }

    /// Records that step `id` finished.
    ///
    /// # Errors
    /// [`ExecError::NotInFlight`] if `id` was not posted or already completed.
    pub fn handle_completion(&mut self, id: StepId) -> Result<(), ExecError> {
        let end = self.base + self.window.len() as StepId;
        let slot = id
            .checked_sub(self.base)
            .map(|s| s as usize)
            .filter(|&s| s < self.window.len() && self.window[s].1 == State::Posted)
            .ok_or(ExecError::NotInFlight {
                step: id,
                base: self.base,
                end,
            })?;
        self.window[slot].1 = State::Done;
        while self.window.front().is_some_and(|(_, s)| *s == State::Done) {
            self.window.pop_front();
            self.base += 1;
            self.scan_from = self.scan_from.saturating_sub(1);
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

    /// Steps posted but not completed: what this rank is waiting on (for hang reports).
    pub fn in_flight(&self) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.window
            .iter()
            .enumerate()
            .filter(|(_, (_, s))| *s == State::Posted)
            .map(|(i, (step, _))| (self.base + i as StepId, step))
    }

    /// Steps pulled but not yet posted because a dependency is unfinished.
    pub fn blocked(&self) -> impl Iterator<Item = (StepId, &Step)> + '_ {
        self.window
            .iter()
            .enumerate()
            .filter(|(_, (_, s))| *s == State::Waiting)
            .map(|(i, (step, _))| (self.base + i as StepId, step))
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
