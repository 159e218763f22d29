//! DDP's bucketed gradient reduction, with a plan check DDP lacks.
//!
//! The model's gradients (f32, one slice per parameter) live in buckets;
//! [`Reducer::grad_mut`] hands out the parameter's slice of its bucket,
//! so backward writes the gradient in place (no copy). Buckets are filled
//! in reverse parameter order (backward produces the last layers' first);
//! the first closes at `first_bucket_bytes` (1 MiB) so communication
//! starts early, the others at `bucket_cap_bytes` (25 MiB), DDP's
//! defaults (`torch.nn.parallel.DistributedDataParallel`,
//! `bucket_cap_mb=25`, `dist._DEFAULT_FIRST_BUCKET_BYTES`). After the
//! first step the buckets are rebuilt once in the order the gradients
//! became ready, rank 0's order adopted by all (one Broadcast), as DDP's
//! `rebuild_buckets`.
//!
//! When a bucket's last gradient is marked ready, the bucket is launched
//! (its [`Compression`] exchange, on the reducer's thread), in bucket
//! order: a bucket ready early waits for the buckets before it, so every
//! rank runs the same collectives in the same order. [`Reducer::finish`]
//! launches what is left and waits.
//!
//! What DDP lacks: the plan (every bucket's parameters, their sizes, the
//! dtype and the compression) is hashed and compared across ranks when
//! the reducer is built and at the rebuild. Ranks that would pair
//! different gradients fail at once, every one of them, with
//! [`CompressError::PlanMismatch`] naming the first differing bucket,
//! instead of hanging or silently mixing gradients.

mod plan;
mod worker;

pub use overlap::{OverlappedGradientSync, Reduced};

mod overlap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hccl::Comm;

use crate::{CompressError, Compression, Path};
use plan::Plan;
use worker::{Done, Job, Worker};

/// How a [`Reducer`] buckets and reduces.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducerConfig {
    /// The first bucket closes once it holds this many bytes (DDP: 1 MiB).
    pub first_bucket_bytes: usize,
    /// The other buckets close at this many bytes (DDP: 25 MiB).
    pub bucket_cap_bytes: usize,
    /// What each bucket goes through.
    pub compression: Compression,
    /// Divide the sum by the number of ranks (DDP averages).
    pub average: bool,
    /// Rebuild the buckets once after the first step from the observed
    /// ready order (DDP does).
    pub rebuild: bool,
}

impl Default for ReducerConfig {
    fn default() -> ReducerConfig {
        ReducerConfig {
            first_bucket_bytes: 1 << 20,
            bucket_cap_bytes: 25 << 20,
            compression: Compression::None,
            average: true,
            rebuild: true,
        }
    }
}

impl ReducerConfig {
    /// Both caps at least 1 byte.
    fn check_caps(&self) -> Result<(), CompressError> {
        for (field, v) in [
            ("first_bucket_bytes", self.first_bucket_bytes),
            ("bucket_cap_bytes", self.bucket_cap_bytes),
        ] {
            if v == 0 {
                return Err(CompressError::Config {
                    field,
                    value: "0".into(),
                    reason: "a bucket cap is at least 1 byte (DDP: 1 MiB first, 25 MiB after)"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// The buckets a [`Reducer`] with this configuration builds over
    /// parameters of `sizes` elements (f32) filled in `order` (parameter
    /// indices; a reducer's first plan uses reverse parameter order, its
    /// rebuild the observed ready order): per bucket, its parameters in
    /// layout order. The first bucket closes once it holds at least
    /// `first_bucket_bytes`, the others at `bucket_cap_bytes`; a parameter
    /// larger than the cap gets a bucket of its own (DDP's
    /// `compute_bucket_assignment_by_size`). For planning and simulation
    /// (`hccl workload`).
    ///
    /// # Errors
    /// [`CompressError::Config`] (field `order`) when `order` is not a
    /// permutation of `0..sizes.len()`, or a cap is 0.
    pub fn bucket_plan(
        &self,
        sizes: &[usize],
        order: &[usize],
    ) -> Result<Vec<Vec<usize>>, CompressError> {
        let mut seen = vec![false; sizes.len()];
        for &p in order {
            match seen.get_mut(p) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(CompressError::Config {
                        field: "order",
                        value: p.to_string(),
                        reason: format!(
                        "parameter {p} is out of range or listed twice; give each of 0..{} once",
                        sizes.len()
                    ),
                    })
                }
            }
        }
        self.check_caps()?;
        if order.len() != sizes.len() {
            return Err(CompressError::Config {
                field: "order",
                value: format!("{} of {} parameters", order.len(), sizes.len()),
                reason: "give every parameter once".into(),
            });
        }
        Ok(Plan::build(sizes, order, self.first_bucket_bytes, self.bucket_cap_bytes).buckets)
    }
}

/// What one step's reduction did on this rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepStats {
    /// The path of each bucket, in bucket order.
    pub paths: Vec<Path>,
    /// Bytes this rank handed to the data collectives (see
    /// [`crate::Exchange::payload_bytes`]).
    pub payload_bytes: u64,
    /// Wall time the caller spent waiting for communication in
    /// `finish` / `end_step` (the exposed communication).
    pub exposed: Duration,
    /// Wall time of the exchanges on the reducer's thread, summed.
    pub comm_time: Duration,
}

/// One set of bucket buffers and its step's bookkeeping.
struct Set {
    /// `None` while the bucket is being reduced.
    bufs: Vec<Option<Vec<f32>>>,
    /// Per bucket, parameters not yet ready this step.
    missing: Vec<usize>,
    ready: Vec<bool>,
    /// The next bucket to launch.
    next: usize,
    in_flight: usize,
    stats: StepStats,
    error: Option<CompressError>,
}

impl Set {
    fn new(plan: &Plan, params: usize) -> Set {
        Set {
            bufs: plan.lens.iter().map(|&l| Some(vec![0.0; l])).collect(),
            missing: plan.buckets.iter().map(Vec::len).collect(),
            ready: vec![false; params],
            next: 0,
            in_flight: 0,
            stats: StepStats::default(),
            error: None,
        }
    }
}

/// The bucket machinery shared by [`Reducer`] (one buffer set) and
/// [`OverlappedGradientSync`] (two).
struct Engine {
    comm: Arc<Comm>,
    sizes: Vec<usize>,
    config: ReducerConfig,
    plan: Arc<Plan>,
    sets: Vec<Set>,
    worker: Worker,
    /// Steps whose buckets were all launched.
    steps: u64,
    /// The ready order seen in the first step.
    observed: Vec<usize>,
}

impl Engine {
    fn new(
        comm: Arc<Comm>,
        sizes: &[usize],
        config: ReducerConfig,
        nsets: usize,
    ) -> Result<Engine, CompressError> {
        config.check_caps()?;
        let order: Vec<usize> = (0..sizes.len()).rev().collect();
        let plan = Plan::build(
            sizes,
            &order,
            config.first_bucket_bytes,
            config.bucket_cap_bytes,
        );
        plan.check(&comm, sizes, &config.compression, config.average)?;
        let worker = Worker::start(
            Arc::clone(&comm),
            config.compression.clone(),
            config.average,
        )?;
        Ok(Engine {
            sets: (0..nsets).map(|_| Set::new(&plan, sizes.len())).collect(),
            plan: Arc::new(plan),
            comm,
            sizes: sizes.to_vec(),
            config,
            worker,
            steps: 0,
            observed: Vec::new(),
        })
    }

    fn param(&self, p: usize) -> Result<plan::Slot, CompressError> {
        self.plan.slots.get(p).copied().ok_or_else(|| {
            CompressError::Usage(format!(
                "parameter {p} does not exist (the reducer has {} parameters)",
                self.sizes.len()
            ))
        })
    }

    fn grad(&self, set: usize, p: usize) -> Result<&[f32], CompressError> {
        let s = self.param(p)?;
        match &self.sets[set].bufs[s.bucket] {
            Some(b) => Ok(&b[s.offset..s.offset + s.len]),
            None => Err(in_flight(p, s.bucket)),
        }
    }

    fn grad_mut(&mut self, set: usize, p: usize) -> Result<&mut [f32], CompressError> {
        let s = self.param(p)?;
        match &mut self.sets[set].bufs[s.bucket] {
            Some(b) => Ok(&mut b[s.offset..s.offset + s.len]),
            None => Err(in_flight(p, s.bucket)),
        }
    }

    fn mark_ready(&mut self, set: usize, p: usize) -> Result<(), CompressError> {
        let s = self.param(p)?;
        let st = &mut self.sets[set];
        if st.ready[p] {
            return Err(CompressError::Usage(format!(
                "parameter {p} was marked ready twice in step {}",
                self.steps + 1
            )));
        }
        if st.bufs[s.bucket].is_none() {
            return Err(in_flight(p, s.bucket));
        }
        st.ready[p] = true;
        st.missing[s.bucket] -= 1;
        if self.steps == 0 {
            self.observed.push(p);
        }
        self.launch_ready(set, false)
    }

    /// Launches buckets in order from the next one while they are
    /// complete (`all`: complete or not).
    fn launch_ready(&mut self, set: usize, all: bool) -> Result<(), CompressError> {
        let st = &mut self.sets[set];
        while st.next < st.bufs.len() && (all || st.missing[st.next] == 0) {
            let b = st.next;
            let buf = st.bufs[b].take().ok_or_else(|| in_flight(0, b))?;
            self.worker.send(Job::Exchange {
                set,
                bucket: b,
                buf,
            })?;
            st.next += 1;
            st.in_flight += 1;
        }
        Ok(())
    }

    /// Puts a finished exchange back into its set.
    fn land(&mut self, d: Done) {
        let st = &mut self.sets[d.set];
        st.bufs[d.bucket] = Some(d.buf);
        st.in_flight -= 1;
        st.stats.comm_time += d.took;
        match d.result {
            Ok(ex) => {
                st.stats.paths.push(ex.path);
                st.stats.payload_bytes += ex.payload_bytes;
            }
            Err(e) => {
                st.error.get_or_insert(e);
            }
        }
    }

    /// Waits until set `set` has nothing in flight; returns the wait.
    fn wait(&mut self, set: usize) -> Result<Duration, CompressError> {
        let t = Instant::now();
        while self.sets[set].in_flight > 0 {
            let d = self
                .worker
                .rx
                .recv()
                .map_err(|_| CompressError::Usage("the reducer thread has stopped".into()))?;
            self.land(d);
        }
        Ok(t.elapsed())
    }

    /// Ends the step of set `set`: every bucket launched (a parameter never
    /// marked ready goes with what its slice holds, as DDP's unused
    /// parameters), the step's bookkeeping reset. Returns once launched;
    /// the first step then rebuilds the buckets (draining every set).
    fn end_step(&mut self, set: usize) -> Result<(), CompressError> {
        self.launch_ready(set, true)?;
        let st = &mut self.sets[set];
        st.next = 0;
        st.ready.iter_mut().for_each(|r| *r = false);
        st.missing = self.plan.buckets.iter().map(Vec::len).collect();
        self.steps += 1;
        if self.steps == 1 && self.config.rebuild {
            let mut exposed = Duration::ZERO;
            for s in 0..self.sets.len() {
                exposed += self.wait(s)?;
            }
            self.sets[set].stats.exposed += exposed;
            if let Some(e) = self.sets[set].error.take() {
                return Err(e);
            }
            self.rebuild()?;
        }
        Ok(())
    }

    /// Waits for set `set` and returns its step's stats (or its first error).
    fn collect(&mut self, set: usize) -> Result<StepStats, CompressError> {
        let waited = self.wait(set)?;
        let st = &mut self.sets[set];
        st.stats.exposed += waited;
        let stats = std::mem::take(&mut st.stats);
        match st.error.take() {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    }

    /// The one rebuild: rank 0's observed ready order, broadcast, checked
    /// on every rank, then the buckets and the residuals moved.
    fn rebuild(&mut self) -> Result<(), CompressError> {
        let n = self.sizes.len();
        let mut seen = vec![false; n];
        self.observed.iter().for_each(|&p| seen[p] = true);
        // Parameters never marked ready keep reverse order, last.
        let mut order: Vec<u32> = self.observed.iter().map(|&p| p as u32).collect();
        order.extend((0..n).rev().filter(|&p| !seen[p]).map(|p| p as u32));
        self.comm.broadcast(&mut order, 0)?;
        let order: Vec<usize> = order.iter().map(|&p| p as usize).collect();
        let mut check = vec![false; n];
        for &p in &order {
            if p >= n || std::mem::replace(&mut check[p], true) {
                return Err(CompressError::PlanMismatch {
                    detail: format!("rank 0's ready order names parameter {p} twice or out of range (this rank has {n} parameters)"),
                });
            }
        }
        let new = Plan::build(
            &self.sizes,
            &order,
            self.config.first_bucket_bytes,
            self.config.bucket_cap_bytes,
        );
        new.check(
            &self.comm,
            &self.sizes,
            &self.config.compression,
            self.config.average,
        )?;
        tracing::debug!(target: "hccl_compress", buckets = new.buckets.len(), "reducer: buckets rebuilt from rank 0's ready order");
        if new == *self.plan {
            return Ok(());
        }
        let new = Arc::new(new);
        for st in &mut self.sets {
            let mut bufs: Vec<Vec<f32>> = new.lens.iter().map(|&l| vec![0.0; l]).collect();
            for (o, s) in self.plan.slots.iter().zip(&new.slots) {
                if let Some(b) = &st.bufs[o.bucket] {
                    bufs[s.bucket][s.offset..s.offset + s.len]
                        .copy_from_slice(&b[o.offset..o.offset + o.len]);
                }
            }
            st.bufs = bufs.into_iter().map(Some).collect();
            st.missing = new.buckets.iter().map(Vec::len).collect();
        }
        self.worker.send(Job::Remap {
            old: Arc::clone(&self.plan),
            new: Arc::clone(&new),
        })?;
        self.plan = new;
        Ok(())
    }
}

fn in_flight(p: usize, bucket: usize) -> CompressError {
    CompressError::Usage(format!(
        "parameter {p}'s bucket {bucket} is being reduced; wait for it (finish / end_step) first"
    ))
}

/// Bucketed gradient reduction for one buffer set (see the module docs).
///
/// A step: write each parameter's gradient into [`Reducer::grad_mut`],
/// call [`Reducer::mark_ready`] when it is final (backward's order), then
/// [`Reducer::finish`]; read the reduced gradients with
/// [`Reducer::grad`].
pub struct Reducer {
    engine: Engine,
}

impl Reducer {
    /// A reducer over parameters of `param_sizes` elements (f32), in the
    /// model's parameter order, on `comm`. Every rank of `comm` builds it
    /// with the same sizes and configuration: the plan is checked (one
    /// AllGather).
    ///
    /// # Errors
    /// [`CompressError::Config`] for a zero cap; [`CompressError::PlanMismatch`]
    /// on every rank when the ranks' plans differ; the communicator's errors.
    pub fn new(
        comm: Arc<Comm>,
        param_sizes: &[usize],
        config: ReducerConfig,
    ) -> Result<Reducer, CompressError> {
        Ok(Reducer {
            engine: Engine::new(comm, param_sizes, config, 1)?,
        })
    }

    /// Parameter `p`'s gradient slice in its bucket, to write.
    ///
    /// # Errors
    /// [`CompressError::Usage`]: no such parameter, or its bucket is being reduced.
    pub fn grad_mut(&mut self, p: usize) -> Result<&mut [f32], CompressError> {
        self.engine.grad_mut(0, p)
    }

    /// Parameter `p`'s gradient slice: after [`Reducer::finish`], reduced.
    ///
    /// # Errors
    /// As [`Reducer::grad_mut`].
    pub fn grad(&self, p: usize) -> Result<&[f32], CompressError> {
        self.engine.grad(0, p)
    }

    /// Parameter `p`'s gradient is final for this step; launches its
    /// bucket (and any complete ones after it) once every bucket before is
    /// launched.
    ///
    /// # Errors
    /// [`CompressError::Usage`]: no such parameter, marked twice this step.
    pub fn mark_ready(&mut self, p: usize) -> Result<(), CompressError> {
        self.engine.mark_ready(0, p)
    }

    /// Launches the buckets not launched yet and waits for all; after the
    /// first step, rebuilds the buckets (rank 0's ready order).
    ///
    /// # Errors
    /// The first failed exchange's error (its bucket is unchanged);
    /// [`CompressError::PlanMismatch`] at the rebuild.
    pub fn finish(&mut self) -> Result<StepStats, CompressError> {
        self.engine.end_step(0)?;
        self.engine.collect(0)
    }

    /// The buckets' parameters, in bucket (launch) order.
    pub fn buckets(&self) -> &[Vec<usize>] {
        &self.engine.plan.buckets
    }

    /// The communicator.
    pub fn comm(&self) -> &Arc<Comm> {
        &self.engine.comm
    }
}
