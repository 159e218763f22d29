//! Top-K selection: the indices of the k largest magnitudes of a slice.
//!
//! Two methods, both returning exactly k indices in ascending order:
//! - [`Selection::Exact`]: quickselect (`select_nth_unstable`, introselect
//!   in std) on the magnitudes' bit patterns, O(n).
//! - [`Selection::Sampled`]: DGC's sampled threshold (Lin et al., "Deep
//!   Gradient Compression", ICLR 2018, section 3 / appendix: estimate the
//!   threshold on a 0.1%–1% sample, then select exactly among the elements
//!   above it): the quickselect then runs on the candidates only. If the
//!   estimate leaves fewer than k candidates, the exact method runs on the
//!   whole slice, so the result is always the true top k.
//!
//! Magnitudes compare as `f32::abs(x).to_bits()`: for non-negative floats
//! the bit order is the value order, and a NaN (any payload) ranks above
//! infinity, so a NaN gradient is selected and reaches every rank, as it
//! would through a dense AllReduce. Ties at the threshold go to the lowest
//! indices.

/// How [`crate::TopK`] finds the k largest magnitudes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Selection {
    /// Quickselect over the whole bucket.
    Exact,
    /// DGC's sampled threshold: `sample_ratio` of the bucket (at least 64
    /// elements, at most all), picked by a fixed pseudo-random sequence,
    /// estimates the threshold; exact selection among the candidates.
    /// DGC samples 0.1%–1%; `0 < sample_ratio <= 1`.
    Sampled {
        /// Fraction of the bucket sampled.
        sample_ratio: f64,
    },
}

/// The sort key of `x`'s magnitude.
fn key(x: f32) -> u32 {
    x.to_bits() & 0x7fff_ffff
}

/// The indices of the `k` largest magnitudes of `values`, ascending.
/// `k >= values.len()` gives every index.
pub fn top_k(values: &[f32], k: usize, selection: Selection) -> Vec<u32> {
    let n = values.len();
    if k >= n {
        return (0..n as u32).collect();
    }
    if k == 0 {
        return Vec::new();
    }
    match selection {
        Selection::Exact => exact(values, None, k),
        Selection::Sampled { sample_ratio } => sampled(values, k, sample_ratio),
    }
}

/// Exact top `k` of `values` restricted to `among` (ascending indices;
/// `None`: all), `k < candidates`.
fn exact(values: &[f32], among: Option<&[u32]>, k: usize) -> Vec<u32> {
    let mut keys: Vec<u32> = match among {
        Some(idx) => idx.iter().map(|&i| key(values[i as usize])).collect(),
        None => values.iter().map(|&x| key(x)).collect(),
    };
    let m = keys.len();
    let (_, &mut thr, above) = keys.select_nth_unstable(m - k);
    // Everything after the k-th largest is >= it; ties equal to it fill
    // the rest, lowest index first.
    let mut ties = k - above.iter().filter(|&&x| x > thr).count();
    let mut out = Vec::with_capacity(k);
    let mut take = |i: u32| {
        let x = key(values[i as usize]);
        if x > thr || (x == thr && ties > 0) {
            if x == thr {
                ties -= 1;
            }
            out.push(i);
        }
    };
    match among {
        Some(idx) => idx.iter().for_each(|&i| take(i)),
        None => (0..values.len() as u32).for_each(take),
    }
    out
}

/// DGC's sampled threshold, then exact selection among the candidates.
fn sampled(values: &[f32], k: usize, sample_ratio: f64) -> Vec<u32> {
    let n = values.len();
    let m = ((n as f64 * sample_ratio).ceil() as usize).clamp(n.min(64), n);
    // xorshift64 from a fixed seed: the same sample for the same length.
    let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ n as u64;
    let mut sample: Vec<u32> = (0..m)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            key(values[(s % n as u64) as usize])
        })
        .collect();
    // A quarter more than the sample's share of k: the estimate errs
    // towards too many candidates, which costs a little, not a rerun.
    let ks = ((k as f64 / n as f64 * m as f64 * 1.25).ceil() as usize).clamp(1, m);
    let (_, &mut thr, _) = sample.select_nth_unstable(m - ks);
    let candidates: Vec<u32> = (0..n as u32)
        .filter(|&i| key(values[i as usize]) >= thr)
        .collect();
    match candidates.len() {
        c if c == k => candidates,
        c if c > k => exact(values, Some(&candidates), k),
        _ => exact(values, None, k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The top k by a full sort (magnitude descending, index ascending).
    fn by_sort(values: &[f32], k: usize) -> Vec<u32> {
        let mut idx: Vec<u32> = (0..values.len() as u32).collect();
        idx.sort_by(|&a, &b| {
            values[b as usize]
                .abs()
                .total_cmp(&values[a as usize].abs())
                .then(a.cmp(&b))
        });
        let mut top = idx[..k].to_vec();
        top.sort_unstable();
        top
    }

    fn data(n: usize) -> Vec<f32> {
        // Deterministic values with many ties (a few hundred distinct).
        (0..n)
            .map(|i| (((i * 7919) % 613) as f32 - 306.0) * 0.5)
            .collect()
    }

    #[test]
    fn both_methods_give_the_sorted_top_k_with_ties_to_low_indices() {
        for n in [1, 2, 5, 100, 1000, 4097] {
            let v = data(n);
            for k in [0, 1, 3, n / 100, n / 10, n / 2, n - 1, n, n + 5] {
                let want = by_sort(&v, k.min(n));
                assert_eq!(top_k(&v, k, Selection::Exact), want, "exact n={n} k={k}");
                for r in [0.001, 0.01, 1.0] {
                    let got = top_k(&v, k, Selection::Sampled { sample_ratio: r });
                    assert_eq!(got, want, "sampled {r} n={n} k={k}");
                }
            }
        }
    }

    #[test]
    fn a_nan_ranks_above_every_number() {
        let v = [1.0, f32::NAN, -f32::INFINITY, 3.0];
        assert_eq!(top_k(&v, 1, Selection::Exact), vec![1]);
        assert_eq!(top_k(&v, 2, Selection::Exact), vec![1, 2]);
    }
}
