//! Before a compressed exchange gathers any bucket data, the ranks agree
//! on what they exchange: one small AllGather of (scheme, length, k or
//! block) from every rank. A gather sized from a length the ranks disagree
//! on would pair wrong elements or fail half-way; this fails first, on
//! every rank, naming both buckets.

use hccl::Comm;

use crate::{CompressError, ErrorFeedback};

/// What a rank is about to exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// 1: Top-K, 2: INT8.
    pub(crate) scheme: u64,
    /// Elements in the bucket.
    pub(crate) len: u64,
    /// Top-K's k, INT8's block size.
    pub(crate) param: u64,
}

impl Bucket {
    fn describe(&self) -> String {
        match self.scheme {
            1 => format!("{} elements, Top-K k={}", self.len, self.param),
            2 => format!("{} elements, INT8 blocks of {}", self.len, self.param),
            s => format!("{} elements, scheme {s}", self.len),
        }
    }
}

/// Checks that every rank exchanges `mine`.
///
/// # Errors
/// [`CompressError::BucketMismatch`] (on every rank alike); the
/// communicator's errors.
pub(crate) fn agree(comm: &Comm, mine: Bucket) -> Result<(), CompressError> {
    let send = [mine.scheme, mine.len, mine.param];
    let mut all = vec![0u64; 3 * comm.size() as usize];
    comm.all_gather(&send, &mut all)?;
    let of = |r: usize| Bucket {
        scheme: all[3 * r],
        len: all[3 * r + 1],
        param: all[3 * r + 2],
    };
    let first = of(0);
    match (1..comm.size() as usize).find(|&r| of(r) != first) {
        None => Ok(()),
        Some(r) => Err(CompressError::BucketMismatch {
            first: first.describe(),
            rank: r as u32,
            other: of(r).describe(),
        }),
    }
}

/// The check every compressed exchange makes before any bucket data moves:
/// `fb` must be this bucket's (length `len`), and every rank must exchange
/// the same bucket. A rank whose `fb` is wrong still takes part in the
/// AllGather (as scheme 0), so its peers fail with a mismatch instead of
/// waiting for it.
///
/// # Errors
/// This rank's [`CompressError::Length`] first, else
/// [`CompressError::BucketMismatch`]; the communicator's errors.
pub(crate) fn check_bucket(
    comm: &Comm,
    fb: &ErrorFeedback,
    scheme: u64,
    len: usize,
    param: u64,
) -> Result<(), CompressError> {
    let local = fb.check(len);
    let bucket = Bucket {
        scheme: if local.is_ok() { scheme } else { 0 },
        len: len as u64,
        param,
    };
    let agreed = agree(comm, bucket);
    local?;
    agreed
}
