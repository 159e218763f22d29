//! The double-buffered overlap of one step's gradient reduction with the
//! next step's compute, on a [`super::Reducer`]'s buckets.
//!
//! Two bucket sets take turns: step t writes set t mod 2 and launches its
//! buckets as they fill; [`OverlappedGradientSync::end_step`] then waits
//! for the other set (step t-1, reduced during step t's compute) and
//! hands it to the optimizer. The gradients applied are one step old (the
//! price of the overlap), no gradient is copied, and no lock is held while
//! the exchanges run (each set is owned by the caller or by the reducer's
//! thread, never both).

use std::sync::Arc;

use hccl::Comm;

use super::{Engine, ReducerConfig, StepStats};
use crate::CompressError;

/// Double-buffered gradient sync: step t's reduction overlaps step t+1.
pub struct OverlappedGradientSync {
    engine: Engine,
    /// The set this step writes.
    cur: usize,
}

/// The reduced gradients of an earlier step, until the next write.
pub struct Reduced<'a> {
    engine: &'a Engine,
    set: usize,
    /// That step's stats.
    pub stats: StepStats,
}

impl Reduced<'_> {
    /// Parameter `p`'s reduced gradient.
    ///
    /// # Errors
    /// [`CompressError::Usage`] for no such parameter.
    pub fn grad(&self, p: usize) -> Result<&[f32], CompressError> {
        self.engine.grad(self.set, p)
    }
}

impl OverlappedGradientSync {
    /// As [`super::Reducer::new`], with two bucket sets.
    ///
    /// # Errors
    /// As [`super::Reducer::new`].
    pub fn new(
        comm: Arc<Comm>,
        param_sizes: &[usize],
        config: ReducerConfig,
    ) -> Result<OverlappedGradientSync, CompressError> {
        Ok(OverlappedGradientSync {
            engine: Engine::new(comm, param_sizes, config, 2)?,
            cur: 0,
        })
    }

    /// This step's gradient slice of parameter `p`, to write.
    ///
    /// # Errors
    /// As [`super::Reducer::grad_mut`].
    pub fn grad_mut(&mut self, p: usize) -> Result<&mut [f32], CompressError> {
        self.engine.grad_mut(self.cur, p)
    }

    /// As [`super::Reducer::mark_ready`], for this step.
    ///
    /// # Errors
    /// As [`super::Reducer::mark_ready`].
    pub fn mark_ready(&mut self, p: usize) -> Result<(), CompressError> {
        self.engine.mark_ready(self.cur, p)
    }

    /// Launches the rest of this step's buckets, waits for the previous
    /// step's and returns them (`None` after the first step), then makes
    /// that set the next step's to write.
    ///
    /// # Errors
    /// The previous step's first failed exchange; the rebuild's errors.
    pub fn end_step(&mut self) -> Result<Option<Reduced<'_>>, CompressError> {
        let first = self.engine.steps == 0;
        self.engine.end_step(self.cur)?;
        self.cur = 1 - self.cur;
        if first {
            return Ok(None);
        }
        let stats = self.engine.collect(self.cur)?;
        Ok(Some(Reduced {
            engine: &self.engine,
            set: self.cur,
            stats,
        }))
    }

    /// Waits for the last step's reduction and returns it (at the end of
    /// training); the next step writes the other set.
    ///
    /// # Errors
    /// That step's first failed exchange.
    pub fn flush(&mut self) -> Result<Reduced<'_>, CompressError> {
        let last = 1 - self.cur;
        let stats = self.engine.collect(last)?;
        Ok(Reduced {
            engine: &self.engine,
            set: last,
            stats,
        })
    }
}
