//! INT8 quantisation with per-block scales and error feedback.
//!
//! Per bucket and step: `acc = grad + residual`; each block of `block`
//! elements gets the scale `s = max|acc| / 127` and sends
//! `q = round(acc / s)` (in -127..=127) as one signed byte per element,
//! with its f32 scale; the new residual is `acc - q·s` (error feedback,
//! as for Top-K: Seide et al.'s 1-bit SGD and GRACE's quantisers carry the
//! quantisation error forward the same way). The payloads travel by one
//! AllGather; every rank then sums `q·s` in f32 in rank order, rank 0
//! first, so every rank holds the same bits. What is rounded: `q` (the
//! quantisation, kept in the residual), each product `q·s` (one f32
//! rounding; exact when it fits 24 bits, e.g. `s` a power of two) and
//! each of the P-1 additions.
//!
//! A block whose largest magnitude is not finite (NaN or infinity) sends
//! the scale NaN: the whole block is NaN on every rank, as a NaN would
//! spread through a dense AllReduce, and its residual is reset to zero so
//! it does not poison later steps.

use hccl::Comm;

use crate::agree::check_bucket;
use crate::topk::ErrorFeedback;
use crate::{CompressError, Exchange, Path};

/// INT8 per-block quantisation: the configuration (the state is the
/// caller's [`ErrorFeedback`], one per bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int8 {
    block: usize,
}

impl Default for Int8 {
    /// Blocks of 256 elements: 4 bytes of scale per 256 payload bytes
    /// (1.6%).
    fn default() -> Int8 {
        Int8 { block: 256 }
    }
}

impl Int8 {
    /// Blocks of `block` elements (at least 1).
    ///
    /// # Errors
    /// [`CompressError::Config`] for 0.
    pub fn new(block: usize) -> Result<Int8, CompressError> {
        if block == 0 {
            return Err(CompressError::Config {
                field: "block",
                value: "0".into(),
                reason: "a quantisation block holds at least 1 element (default 256)".into(),
            });
        }
        Ok(Int8 { block })
    }

    /// Elements per scale.
    pub fn block(&self) -> usize {
        self.block
    }

    /// Payload bytes of a bucket of `len`: one f32 scale per block, then
    /// one byte per element.
    pub fn payload_bytes(&self, len: usize) -> usize {
        4 * len.div_ceil(self.block) + len
    }

    /// One rank's payload for `grad` and the error feedback after sending
    /// it (`fb` itself is not changed).
    ///
    /// # Errors
    /// [`CompressError::Length`] if `fb` belongs to a bucket of another length.
    pub fn encode(
        &self,
        grad: &[f32],
        fb: &ErrorFeedback,
    ) -> Result<(Vec<u8>, ErrorFeedback), CompressError> {
        fb.check(grad.len())?;
        let len = grad.len();
        let nb = len.div_ceil(self.block);
        let mut acc: Vec<f32> = (0..len)
            .map(|i| grad[i] + fb.residual.get(i).copied().unwrap_or(0.0))
            .collect();
        let mut out = vec![0u8; self.payload_bytes(len)];
        let (scales, q) = out.split_at_mut(4 * nb);
        for (b, chunk) in acc.chunks_mut(self.block).enumerate() {
            let max = chunk.iter().fold(0f32, |m, x| m.max(x.abs()));
            let has_nan = chunk.iter().any(|x| x.is_nan());
            let s = if has_nan || !max.is_finite() {
                f32::NAN
            } else {
                max / 127.0
            };
            scales[4 * b..4 * b + 4].copy_from_slice(&s.to_le_bytes());
            let qb = &mut q[b * self.block..b * self.block + chunk.len()];
            for (x, qx) in chunk.iter_mut().zip(qb) {
                let v = if s.is_nan() || s == 0.0 {
                    0
                } else {
                    (*x / s).round().clamp(-127.0, 127.0) as i8
                };
                *qx = v as u8;
                // The residual is what the receivers will not see.
                *x = if s.is_nan() {
                    0.0
                } else {
                    *x - f32::from(v) * s
                };
            }
        }
        let fb = ErrorFeedback {
            residual: acc,
            momentum: Vec::new(),
        };
        Ok((out, fb))
    }

    /// Adds one rank's payload for a bucket of `len` into `out`.
    fn add(&self, payload: &[u8], out: &mut [f32]) {
        let nb = out.len().div_ceil(self.block);
        let (scales, q) = payload.split_at(4 * nb);
        for (b, chunk) in out.chunks_mut(self.block).enumerate() {
            let s = f32::from_le_bytes([
                scales[4 * b],
                scales[4 * b + 1],
                scales[4 * b + 2],
                scales[4 * b + 3],
            ]);
            let qb = &q[b * self.block..b * self.block + chunk.len()];
            for (o, &qx) in chunk.iter_mut().zip(qb) {
                *o += f32::from(qx as i8) * s;
            }
        }
    }

    /// Sums `grad` over the ranks of `comm` through INT8 quantisation with
    /// error feedback: on return `grad` holds the sum of every rank's
    /// dequantised payload (the same bits on every rank) and `fb` the new
    /// residual. One AllGather of [`Int8::payload_bytes`] per rank, after
    /// the 24-byte bucket check; logged as Top-K's exchange is.
    ///
    /// # Errors
    /// As [`crate::TopK::all_reduce`]; on any error `grad` and `fb` are
    /// unchanged.
    pub fn all_reduce(
        &self,
        comm: &Comm,
        grad: &mut [f32],
        fb: &mut ErrorFeedback,
    ) -> Result<Exchange, CompressError> {
        let len = grad.len();
        check_bucket(comm, fb, 2, len, self.block as u64)?;
        tracing::debug!(
            target: "hccl_compress",
            comm = comm.name(),
            rank = comm.rank(),
            len,
            block = self.block,
            world = comm.size(),
            path = "int8",
            "INT8 exchange"
        );
        let (payload, next) = self.encode(grad, fb)?;
        let mut all = vec![0u8; payload.len() * comm.size() as usize];
        comm.all_gather(&payload, &mut all)?;
        let mut out = vec![0f32; len];
        for p in all.chunks_exact(payload.len().max(1)) {
            self.add(p, &mut out);
        }
        grad.copy_from_slice(&out);
        *fb = next;
        Ok(Exchange {
            path: Path::Int8,
            payload_bytes: payload.len() as u64,
        })
    }
}
