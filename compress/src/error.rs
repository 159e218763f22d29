//! The crate's error type.

use hccl::CommError;

/// Everything compression, an exchange or the [`crate::Reducer`] can fail with.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// The communicator failed (its error names the op and the ranks).
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A configuration value is out of range.
    #[error("{field} = {value}: {reason}")]
    Config {
        /// The field (`ratio`, `block`, `first_bucket_bytes`, ...).
        field: &'static str,
        /// Its value.
        value: String,
        /// What is accepted.
        reason: String,
    },
    /// The ranks disagree on a bucket's exchange (its length or its
    /// scheme), found before any bucket data is gathered: on every rank,
    /// naming rank 0's bucket and the first rank whose bucket differs.
    #[error("compressed exchange: ranks disagree on the bucket: rank 0 has {first}, rank {rank} has {other}; every rank must exchange the same bucket (same length, same scheme)")]
    BucketMismatch {
        /// Rank 0's bucket (`1000 elements, Top-K k=10`).
        first: String,
        /// The first rank whose bucket differs from rank 0's.
        rank: u32,
        /// That rank's bucket.
        other: String,
    },
    /// The ranks' bucket plans differ (checked when a [`crate::Reducer`]
    /// is built and when it rebuilds its buckets): on every rank, naming the
    /// first differing bucket.
    #[error("reducer bucket plan differs between ranks: {detail}; the ranks would pair different gradients (check that every rank builds the same parameters in the same order)")]
    PlanMismatch {
        /// The first differing bucket, with rank 0's and the other rank's view.
        detail: String,
    },
    /// A buffer or state has the wrong length.
    #[error("{what} has {got} elements, {expected} expected")]
    Length {
        /// Which buffer (`residual`, `grad of parameter 3`, ...).
        what: String,
        /// Elements expected.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// A call out of the order the [`crate::Reducer`] needs (a parameter
    /// marked ready twice in one step, a gradient asked for while its
    /// bucket is being reduced, ...).
    #[error("reducer: {0}")]
    Usage(String),
}
