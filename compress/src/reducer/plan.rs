//! The bucket plan: which parameters share a bucket, where each sits, and
//! the check that every rank has the same plan.

use hccl::Comm;

use crate::{CompressError, Compression};

/// Where one parameter's gradient lives: bucket and element offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) bucket: usize,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

/// The buckets over a model's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Per bucket, its parameters in the order they are laid out.
    pub(crate) buckets: Vec<Vec<usize>>,
    /// Per bucket, its length in elements.
    pub(crate) lens: Vec<usize>,
    /// Per parameter, its slot.
    pub(crate) slots: Vec<Slot>,
}

impl Plan {
    /// Buckets filled in `order` (parameter indices): the first closes
    /// once it holds `first_cap` bytes, the others at `cap` bytes (a
    /// parameter larger than the cap gets a bucket of its own), as DDP's
    /// `compute_bucket_assignment_by_size` does.
    pub(crate) fn build(sizes: &[usize], order: &[usize], first_cap: usize, cap: usize) -> Plan {
        let mut buckets: Vec<Vec<usize>> = Vec::new();
        let mut lens = Vec::new();
        let mut slots = vec![
            Slot {
                bucket: 0,
                offset: 0,
                len: 0
            };
            sizes.len()
        ];
        let mut open: Vec<usize> = Vec::new();
        let mut len = 0usize;
        for &p in order {
            slots[p] = Slot {
                bucket: buckets.len(),
                offset: len,
                len: sizes[p],
            };
            open.push(p);
            len += sizes[p];
            let limit = if buckets.is_empty() { first_cap } else { cap };
            if len * 4 >= limit {
                buckets.push(std::mem::take(&mut open));
                lens.push(std::mem::take(&mut len));
            }
        }
        if !open.is_empty() {
            buckets.push(open);
            lens.push(len);
        }
        Plan {
            buckets,
            lens,
            slots,
        }
    }

    /// Per bucket: (hash of its parameters, sizes, dtype and compression; len; parameters).
    fn summary(&self, sizes: &[usize], compression: &Compression, average: bool) -> Vec<[u64; 3]> {
        let scheme = format!("fp32 {} average={average}", compression.describe());
        self.buckets
            .iter()
            .zip(&self.lens)
            .map(|(ps, &len)| {
                let mut h = Fnv::new();
                h.bytes(scheme.as_bytes());
                for &p in ps {
                    h.word(p as u64);
                    h.word(sizes[p] as u64);
                }
                [h.0, len as u64, ps.len() as u64]
            })
            .collect()
    }

    /// Checks that every rank of `comm` has this plan: one AllGather of
    /// (bucket count, plan hash); only if they differ, a second one of
    /// every bucket's summary to name the first differing bucket.
    ///
    /// # Errors
    /// [`CompressError::PlanMismatch`] on every rank; the communicator's errors.
    pub(crate) fn check(
        &self,
        comm: &Comm,
        sizes: &[usize],
        compression: &Compression,
        average: bool,
    ) -> Result<(), CompressError> {
        let summary = self.summary(sizes, compression, average);
        let mut h = Fnv::new();
        for s in &summary {
            s.iter().for_each(|&w| h.word(w));
        }
        let n = comm.size() as usize;
        let mut heads = vec![0u64; 2 * n];
        comm.all_gather(&[summary.len() as u64, h.0], &mut heads)?;
        if heads.chunks(2).all(|c| c == &heads[..2]) {
            return Ok(());
        }
        let most = heads.chunks(2).map(|c| c[0]).max().unwrap_or(0) as usize;
        let mut mine = vec![0u64; 3 * most];
        for (b, s) in summary.iter().enumerate() {
            mine[3 * b..3 * b + 3].copy_from_slice(s);
        }
        let mut all = vec![0u64; 3 * most * n];
        comm.all_gather(&mine, &mut all)?;
        let count = |r: usize| heads[2 * r] as usize;
        let bucket = |r: usize, b: usize| &all[(r * most + b) * 3..(r * most + b) * 3 + 3];
        let describe = |r: usize, b: usize| {
            if b >= count(r) {
                format!("rank {r} has no bucket {b} ({} buckets)", count(r))
            } else {
                let s = bucket(r, b);
                format!(
                    "rank {r} has {} parameters, {} elements (hash {:016x})",
                    s[2], s[1], s[0]
                )
            }
        };
        for b in 0..most {
            if let Some(r) = (1..n).find(|&r| {
                (b < count(r)) != (b < count(0)) || (b < count(0) && bucket(r, b) != bucket(0, b))
            }) {
                return Err(CompressError::PlanMismatch {
                    detail: format!(
                        "the first differing bucket is bucket {b}: {}, {}",
                        describe(0, b),
                        describe(r, b)
                    ),
                });
            }
        }
        Err(CompressError::PlanMismatch {
            detail: "the plans hash differently but every bucket agrees".into(),
        })
    }
}

/// FNV-1a, 64 bit: a hash that is the same in every build and on every
/// host (std's `DefaultHasher` promises neither).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn word(&mut self, w: u64) {
        self.bytes(&w.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_close_at_the_first_cap_then_at_the_cap() {
        // 4-byte elements: first cap 400 B = 100 elements, then 1000 B.
        let sizes = [60, 60, 60, 200, 30, 300, 10];
        let order: Vec<usize> = (0..sizes.len()).rev().collect();
        let p = Plan::build(&sizes, &order, 400, 1000);
        assert_eq!(p.buckets, vec![vec![6, 5], vec![4, 3, 2], vec![1, 0]]);
        assert_eq!(p.lens, vec![310, 290, 120]);
        assert_eq!(
            p.slots[3],
            Slot {
                bucket: 1,
                offset: 30,
                len: 200
            }
        );
    }
}
