//! Gradient compression and bucketed overlap for data-parallel training
//! over [`hccl::Comm`].
//!
//! | where | job |
//! | --- | --- |
//! | [`TopK`] | Top-K sparsification with error feedback (DGC, GRACE), exchanged as (index, value) pairs by AllGather, or dense when that moves fewer bytes ([`sparse_wins`]) |
//! | [`Int8`] | INT8 per-block quantisation with error feedback, exchanged by AllGather and summed in f32 |
//! | [`select`] | the Top-K selection methods: exact quickselect and DGC's sampled threshold |
//! | [`Compression`] | one of the above, or none (a plain AllReduce): what a bucket goes through |
//! | [`Reducer`] | DDP's buckets over a model's gradients: reverse parameter order, 1 MiB first bucket then 25 MiB, rebuilt once from the observed ready order (rank 0's), async launch in bucket order, the plan checked across ranks |
//! | [`OverlappedGradientSync`] | two bucket sets: step t's reduction overlaps step t+1's compute |
//!
//! Every exchange gives every rank the same bits (the gathered payloads
//! are added in rank order) and first checks, with one small AllGather,
//! that every rank exchanges the same bucket: ranks that disagree fail
//! together with [`CompressError::BucketMismatch`] naming both buckets,
//! never with a mismatched gather. Gradients are f32.
//!
//! ```
//! use hccl::{BackendKind, Comm};
//! use hccl_compress::{ErrorFeedback, TopK};
//!
//! let comms = Comm::init_all_on(BackendKind::Sim, 2)?;
//! let topk = TopK::new(0.25)?; // keep 1 of 4 elements
//! std::thread::scope(|s| {
//!     for c in &comms {
//!         let topk = &topk;
//!         s.spawn(move || {
//!             let r = c.rank() as f32;
//!             let mut grad = vec![1.0, -8.0 - r, 2.0, 3.0];
//!             let mut fb = ErrorFeedback::new();
//!             topk.all_reduce(c, &mut grad, &mut fb).unwrap();
//!             assert_eq!(grad, [0.0, -17.0, 0.0, 0.0]); // -8 + -9
//!             assert_eq!(fb.residual(), [1.0, 0.0, 2.0, 3.0]); // kept for the next step
//!         });
//!     }
//! });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod agree;
mod error;
mod int8;
mod reducer;
pub mod select;
mod topk;

pub use error::CompressError;
pub use int8::Int8;
pub use reducer::{OverlappedGradientSync, Reduced, Reducer, ReducerConfig, StepStats};
pub use select::Selection;
pub use topk::{sparse_wins, ErrorFeedback, SparseGrad, TopK, PAIR_BYTES};

use hccl::comm::{DataType, ReduceOp};
use hccl::Comm;

/// How one bucket's exchange went on this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exchange {
    /// The path taken (the same on every rank).
    pub path: Path,
    /// Bytes this rank handed to the data collective (its send buffer;
    /// the bucket check's 24 bytes not counted). Not the bytes on the
    /// wire, which depend on the algorithm.
    pub payload_bytes: u64,
}

/// Which exchange a bucket went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// One AllReduce of the whole bucket.
    Dense,
    /// One AllGather of `k` (index, value) pairs per rank.
    Sparse {
        /// Pairs per rank.
        k: usize,
    },
    /// One AllGather of INT8 payloads.
    Int8,
}

/// One collective of a bucket's exchange, as [`Compression::wire_ops`]
/// lists them: what a simulator replays to time the exchange without data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireOp {
    /// The collective.
    pub kind: WireKind,
    /// Elements per rank with HCCL's meaning: an AllReduce's whole
    /// buffer, an AllGather's send buffer (the receive buffer holds
    /// `count × world`).
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
}

/// The collectives the exchanges use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireKind {
    /// AllReduce (sum).
    AllReduce,
    /// AllGather.
    AllGather,
}

/// What a bucket goes through.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Compression {
    /// A plain AllReduce (sum); no error feedback.
    #[default]
    None,
    /// Top-K with error feedback.
    TopK(TopK),
    /// INT8 quantisation with error feedback.
    Int8(Int8),
}

impl Compression {
    /// Sums `grad` over the ranks of `comm` as configured (see
    /// [`TopK::all_reduce`], [`Int8::all_reduce`]; `None`: an in-place
    /// AllReduce, `fb` unused).
    ///
    /// # Errors
    /// As the scheme's `all_reduce`.
    pub fn all_reduce(
        &self,
        comm: &Comm,
        grad: &mut [f32],
        fb: &mut ErrorFeedback,
    ) -> Result<Exchange, CompressError> {
        match self {
            Compression::None => {
                comm.all_reduce_in_place(grad, ReduceOp::Sum)?;
                Ok(Exchange {
                    path: Path::Dense,
                    payload_bytes: grad.len() as u64 * 4,
                })
            }
            Compression::TopK(t) => t.all_reduce(comm, grad, fb),
            Compression::Int8(q) => q.all_reduce(comm, grad, fb),
        }
    }

    /// The collectives [`Compression::all_reduce`] makes, in order, for a
    /// bucket of `len` elements on `world` ranks: `None`, one AllReduce of
    /// `len` fp32; Top-K, the 24-byte bucket check (an AllGather of 3
    /// u64) then, as [`sparse_wins`] decides, an AllGather of `2k` u32
    /// (the (index, value) pairs, [`TopK::k`]) or an AllReduce of `len`
    /// fp32; INT8, the bucket check then an AllGather of
    /// [`Int8::payload_bytes`] bytes. The same on every rank.
    pub fn wire_ops(&self, len: usize, world: u32) -> Vec<WireOp> {
        let op = |kind, count: usize, dtype| WireOp {
            kind,
            count: count as u64,
            dtype,
        };
        let check = op(WireKind::AllGather, 3, DataType::Uint64);
        let dense = op(WireKind::AllReduce, len, DataType::Fp32);
        match self {
            Compression::None => vec![dense],
            Compression::TopK(t) => {
                let k = t.k(len);
                if sparse_wins(world, len, k) {
                    vec![check, op(WireKind::AllGather, 2 * k, DataType::Uint32)]
                } else {
                    vec![check, dense]
                }
            }
            Compression::Int8(q) => vec![
                check,
                op(WireKind::AllGather, q.payload_bytes(len), DataType::Uint8),
            ],
        }
    }

    /// A stable description for plan hashes and messages
    /// (`none`, `topk ratio=0.01 exact`, `topk ratio=0.01 sampled 0.01 momentum=0.9`, `int8 block=256`).
    pub fn describe(&self) -> String {
        match self {
            Compression::None => "none".into(),
            Compression::TopK(t) => {
                let sel = match t.selection() {
                    Selection::Exact => "exact".to_string(),
                    Selection::Sampled { sample_ratio } => format!("sampled {sample_ratio}"),
                };
                match t.momentum() {
                    Some(m) => format!("topk ratio={} {sel} momentum={m}", t.ratio()),
                    None => format!("topk ratio={} {sel}", t.ratio()),
                }
            }
            Compression::Int8(q) => format!("int8 block={}", q.block()),
        }
    }
}
