//! Top-K sparsification with error feedback, exchanged really sparse.
//!
//! Per bucket and step (DGC: Lin et al., "Deep Gradient Compression",
//! ICLR 2018; GRACE: Xu et al., "GRACE: A Compressed Communication
//! Framework for Distributed Machine Learning", ICDCS 2021):
//! 1. `acc = grad + residual` (error feedback: what was not sent before
//!    is added back); with momentum correction (DGC section 3.2)
//!    `u = m·u + grad`, `acc = residual + u`;
//! 2. the k largest magnitudes of `acc` are sent ([`crate::select`]), the
//!    rest is the new residual (and `u` is zeroed where sent);
//! 3. the ranks' (u32 index, f32 value) pairs travel by one AllGather, and
//!    every rank adds them into a zeroed bucket in rank order, rank 0
//!    first, so every rank holds the same bits.
//!
//! k is `ceil(ratio · len)`: the same on every rank for the same ratio and
//! bucket, never derived from the rank, so the AllGather has one size.
//! The byte-cost rule ([`sparse_wins`]) may choose a dense AllReduce
//! instead; it then carries the whole `acc` (a dense exchange costs the
//! same bytes whatever it holds) and the residual becomes zero.

use hccl::comm::ReduceOp;
use hccl::Comm;

use crate::agree::check_bucket;
use crate::select::{top_k, Selection};
use crate::{CompressError, Exchange, Path};

/// Bytes of one (u32 index, f32 value) pair on the wire.
pub const PAIR_BYTES: u64 = 8;

/// Top-K with error feedback: the configuration (the state is the
/// caller's [`ErrorFeedback`], one per bucket).
#[derive(Debug, Clone, PartialEq)]
pub struct TopK {
    ratio: f64,
    selection: Selection,
    momentum: Option<f32>,
}

/// One rank's error-feedback state for one bucket: the residual (what
/// was not sent yet) and, with momentum correction, the momentum. Empty
/// until the first step (zeros of any length).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorFeedback {
    pub(crate) residual: Vec<f32>,
    pub(crate) momentum: Vec<f32>,
}

impl ErrorFeedback {
    /// No residual yet.
    pub fn new() -> ErrorFeedback {
        ErrorFeedback::default()
    }

    /// A state with the given residual and momentum (each empty, or one
    /// element per bucket element): to carry a residual over when the
    /// buckets change, as a DDP hook does when DDP rebuilds its buckets.
    /// Their lengths are checked against the bucket at the next exchange
    /// ([`CompressError::Length`]).
    pub fn from_parts(residual: Vec<f32>, momentum: Vec<f32>) -> ErrorFeedback {
        ErrorFeedback { residual, momentum }
    }

    /// The residual: one element per bucket element, or empty before the
    /// first step.
    pub fn residual(&self) -> &[f32] {
        &self.residual
    }

    /// The momentum (Top-K with momentum correction only; else empty).
    pub fn momentum(&self) -> &[f32] {
        &self.momentum
    }

    /// Checks that the state fits a bucket of `len` elements.
    pub(crate) fn check(&self, len: usize) -> Result<(), CompressError> {
        for (what, v) in [("residual", &self.residual), ("momentum", &self.momentum)] {
            if !v.is_empty() && v.len() != len {
                return Err(CompressError::Length {
                    what: format!(
                        "the error feedback's {what} (from another bucket?) for a bucket of {len}"
                    ),
                    expected: len,
                    got: v.len(),
                });
            }
        }
        Ok(())
    }
}

/// What one rank sends for one bucket: k indices (ascending) and their
/// values.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseGrad {
    /// Element indices in the bucket, ascending.
    pub indices: Vec<u32>,
    /// `values[j]` belongs at `indices[j]`.
    pub values: Vec<f32>,
}

/// Whether the sparse exchange of `k` pairs per rank moves fewer bytes
/// than a dense AllReduce of `len` f32 elements on `world` ranks: each
/// rank receives `world · k · 8` bytes by AllGather against about
/// `2 · len · 4` for a bandwidth-optimal AllReduce (ring: 2(P-1)/P of the
/// buffer each way), i.e. density `k/len < 8 / (world · 8)`, 12.5% at 8
/// ranks. Integer arithmetic, so every rank decides alike.
pub fn sparse_wins(world: u32, len: usize, k: usize) -> bool {
    u128::from(world) * k as u128 * u128::from(PAIR_BYTES) < 2 * len as u128 * 4
}

impl TopK {
    /// Top-K keeping `ratio` of each bucket (`0 < ratio <= 1`; DGC and
    /// GRACE use 0.1%–1%), selected exactly.
    ///
    /// # Errors
    /// [`CompressError::Config`] for a ratio outside `(0, 1]`.
    pub fn new(ratio: f64) -> Result<TopK, CompressError> {
        if !(ratio > 0.0 && ratio <= 1.0) {
            return Err(CompressError::Config {
                field: "ratio",
                value: ratio.to_string(),
                reason: "the fraction of a bucket kept must be in (0, 1], e.g. 0.01 for 1%".into(),
            });
        }
        Ok(TopK {
            ratio,
            selection: Selection::Exact,
            momentum: None,
        })
    }

    /// The same with another selection method.
    ///
    /// # Errors
    /// [`CompressError::Config`] for a sample ratio outside `(0, 1]`.
    pub fn with_selection(mut self, selection: Selection) -> Result<TopK, CompressError> {
        if let Selection::Sampled { sample_ratio } = selection {
            if !(sample_ratio > 0.0 && sample_ratio <= 1.0) {
                return Err(CompressError::Config {
                    field: "sample_ratio",
                    value: sample_ratio.to_string(),
                    reason: "the sampled fraction must be in (0, 1]; DGC samples 0.001-0.01".into(),
                });
            }
        }
        self.selection = selection;
        Ok(self)
    }

    /// The same with DGC's momentum correction, factor `m` in `[0, 1)`.
    ///
    /// # Errors
    /// [`CompressError::Config`] for `m` outside `[0, 1)`.
    pub fn with_momentum(mut self, m: f32) -> Result<TopK, CompressError> {
        if !(0.0..1.0).contains(&m) {
            return Err(CompressError::Config {
                field: "momentum",
                value: m.to_string(),
                reason: "the momentum factor must be in [0, 1), e.g. 0.9".into(),
            });
        }
        self.momentum = Some(m);
        Ok(self)
    }

    /// The fraction kept.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The momentum-correction factor, if any.
    pub fn momentum(&self) -> Option<f32> {
        self.momentum
    }

    /// The selection method.
    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// Elements kept of a bucket of `len`: `ceil(ratio · len)`, at most `len`.
    pub fn k(&self, len: usize) -> usize {
        ((self.ratio * len as f64).ceil() as usize).min(len)
    }

    /// Step 1 and 2 on one rank: what to send for `grad` and the error
    /// feedback after sending it (the given `fb` is not changed, so a
    /// failed exchange can keep it).
    ///
    /// # Errors
    /// [`CompressError::Length`] if `fb` belongs to a bucket of another length.
    pub fn encode(
        &self,
        grad: &[f32],
        fb: &ErrorFeedback,
    ) -> Result<(SparseGrad, ErrorFeedback), CompressError> {
        fb.check(grad.len())?;
        let (acc, momentum) = self.accumulate(grad, fb);
        let indices = top_k(&acc, self.k(grad.len()), self.selection);
        Ok(self.split(acc, momentum, indices))
    }

    /// `acc` and the new momentum before selection.
    fn accumulate(&self, grad: &[f32], fb: &ErrorFeedback) -> (Vec<f32>, Vec<f32>) {
        let at = |v: &[f32], i: usize| v.get(i).copied().unwrap_or(0.0);
        match self.momentum {
            None => {
                let acc = (0..grad.len())
                    .map(|i| grad[i] + at(&fb.residual, i))
                    .collect();
                (acc, Vec::new())
            }
            Some(m) => {
                let u: Vec<f32> = (0..grad.len())
                    .map(|i| m * at(&fb.momentum, i) + grad[i])
                    .collect();
                let acc = (0..grad.len())
                    .map(|i| at(&fb.residual, i) + u[i])
                    .collect();
                (acc, u)
            }
        }
    }

    /// Takes the selected elements out of `acc` (and the momentum).
    fn split(
        &self,
        mut acc: Vec<f32>,
        mut momentum: Vec<f32>,
        indices: Vec<u32>,
    ) -> (SparseGrad, ErrorFeedback) {
        let values = indices
            .iter()
            .map(|&i| std::mem::replace(&mut acc[i as usize], 0.0))
            .collect();
        for &i in &indices {
            if let Some(u) = momentum.get_mut(i as usize) {
                *u = 0.0;
            }
        }
        let fb = ErrorFeedback {
            residual: acc,
            momentum,
        };
        (SparseGrad { indices, values }, fb)
    }

    /// Sums `grad` over the ranks of `comm` through Top-K with error
    /// feedback: on return `grad` holds the sum of every rank's sent
    /// elements (the same bits on every rank) and `fb` the new residual.
    /// Every rank calls it with the same configuration and bucket length.
    ///
    /// Sparse (one AllGather of `k` pairs per rank) or dense (one
    /// AllReduce of the whole accumulated bucket) as [`sparse_wins`]
    /// decides; the choice is logged (`tracing` debug, target
    /// `hccl_compress`) and shows in the communicator's profiling records
    /// as an AllGather or an AllReduce. Before any bucket data moves, a
    /// 24-byte AllGather checks that every rank has the same bucket.
    ///
    /// # Errors
    /// [`CompressError::BucketMismatch`] if the ranks' buckets differ
    /// (every rank); [`CompressError::Length`] if `fb` is another bucket's
    /// (this rank; the others get `BucketMismatch`); the communicator's
    /// errors. On any error `grad` and `fb` are unchanged.
    pub fn all_reduce(
        &self,
        comm: &Comm,
        grad: &mut [f32],
        fb: &mut ErrorFeedback,
    ) -> Result<Exchange, CompressError> {
        let len = grad.len();
        let k = self.k(len);
        check_bucket(comm, fb, 1, len, k as u64)?;
        let sparse = sparse_wins(comm.size(), len, k);
        tracing::debug!(
            target: "hccl_compress",
            comm = comm.name(),
            rank = comm.rank(),
            len,
            k,
            world = comm.size(),
            path = if sparse { "sparse" } else { "dense" },
            "Top-K exchange"
        );
        if !sparse {
            let (acc, _) = self.accumulate(grad, fb);
            comm.all_reduce(&acc, grad, ReduceOp::Sum)?;
            *fb = ErrorFeedback::default();
            return Ok(Exchange {
                path: Path::Dense,
                payload_bytes: len as u64 * 4,
            });
        }
        let (sent, next) = self.encode(grad, fb)?;
        let out = exchange_sparse(comm, &sent, len)?;
        grad.copy_from_slice(&out);
        *fb = next;
        Ok(Exchange {
            path: Path::Sparse { k },
            payload_bytes: k as u64 * PAIR_BYTES,
        })
    }
}

/// The AllGather of every rank's pairs and their sum in rank order.
fn exchange_sparse(comm: &Comm, sent: &SparseGrad, len: usize) -> Result<Vec<f32>, CompressError> {
    let k = sent.indices.len();
    let send: Vec<u32> = sent
        .indices
        .iter()
        .zip(&sent.values)
        .flat_map(|(&i, v)| [i, v.to_bits()])
        .collect();
    let mut all = vec![0u32; send.len() * comm.size() as usize];
    comm.all_gather(&send, &mut all)?;
    let mut out = vec![0f32; len];
    for (rank, pairs) in all.chunks_exact(2 * k.max(1)).enumerate() {
        for p in pairs.chunks_exact(2) {
            let slot = out
                .get_mut(p[0] as usize)
                .ok_or_else(|| CompressError::Length {
                    what: format!("the bucket (rank {rank} sent index {})", p[0]),
                    expected: len,
                    got: p[0] as usize + 1,
                })?;
            *slot += f32::from_bits(p[1]);
        }
    }
    Ok(out)
}
