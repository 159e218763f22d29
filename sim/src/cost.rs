//! Converting bytes and bandwidths into whole nanoseconds of virtual time.

/// Fractions of a nanosecond below this are taken as floating-point noise
/// when rounding a duration up (so `32768 B / 32.768 GB/s` is 1000 ns, not
/// 1001, and a 1 EB/s reduce costs 0 ns, not 1).
pub const ROUNDING_SLACK_NS: f64 = 1e-3;

/// Whole nanoseconds to move or process `bytes` at `gbps` GB/s (G = 10^9
/// bytes per second, which is numerically bytes per nanosecond).
///
/// The exact quotient is rounded **up** to a whole nanosecond, ignoring a
/// fractional part below [`ROUNDING_SLACK_NS`]. 0 bytes take 0 ns; a
/// bandwidth that is 0, negative or NaN gives `None` (never finishes).
///
/// Every duration in the simulator goes through this function, and the
/// closed-form tests use it too, so their formulas match the engine exactly.
pub fn transfer_ns(bytes: u64, gbps: f64) -> Option<u64> {
    if bytes == 0 {
        return Some(0);
    }
    if gbps.is_nan() || gbps <= 0.0 {
        return None;
    }
    Some(ceil_ns(bytes as f64 / gbps))
}

/// `x` nanoseconds rounded up as in [`transfer_ns`]; saturates at `u64::MAX`.
pub fn ceil_ns(x: f64) -> u64 {
    // `(x - slack).ceil()` clamped to `0..=u64::MAX`, without `f64::ceil`:
    // x86-64's baseline has no rounding instruction (SSE4.1), so `ceil`
    // is a call into a software routine, ~25 instructions at every flow
    // rate change and every transfer. Equal for every input: NaN and
    // `v <= 0` give 0 (`ceil(v) <= 0`); `v >= 2^64` saturates; below, the
    // truncation `t` is `ceil(v)` when `v` is a whole number (every `v`
    // from 2^52 on is) and `ceil(v) - 1` otherwise.
    let v = x - ROUNDING_SLACK_NS;
    if v.is_nan() || v <= 0.0 {
        0
    } else if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        let t = v as u64;
        if (t as f64) < v {
            t + 1
        } else {
            t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_but_ignores_float_noise() {
        assert_eq!(transfer_ns(32768, 32.768), Some(1000));
        assert_eq!(transfer_ns(1001, 1.0), Some(1001));
        assert_eq!(transfer_ns(1, 3.0), Some(1), "0.33 ns rounds up to 1");
        // ASTRA-sim's case: 32 KiB at 50 GiB/s = 610.35 ns -> 611.
        assert_eq!(transfer_ns(32768, 50.0 * 1.073741824), Some(611));
        assert_eq!(transfer_ns(32768, 1e9), Some(0), "sub-0.001 ns is free");
        assert_eq!(transfer_ns(0, 0.0), Some(0));
        assert_eq!(transfer_ns(5, 0.0), None);
        assert_eq!(transfer_ns(5, f64::NAN), None);
    }

    /// `ceil_ns` against the `f64::ceil` form it replaced, on the edges
    /// (signs, NaN, infinities, whole numbers, the slack, 2^52..2^64) and
    /// a spread of random values.
    #[test]
    fn ceil_ns_equals_the_float_ceil() {
        fn by_ceil(x: f64) -> u64 {
            let y = (x - ROUNDING_SLACK_NS).ceil();
            if y <= 0.0 {
                0
            } else if y >= u64::MAX as f64 {
                u64::MAX
            } else {
                y as u64
            }
        }
        let mut xs = vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            -0.0,
            0.0,
            ROUNDING_SLACK_NS,
            ROUNDING_SLACK_NS * 0.5,
            ROUNDING_SLACK_NS * 2.0,
            0.5,
            1.0,
            1.001,
            1.0011,
            1000.0,
            4_503_599_627_370_496.0,      // 2^52
            9_007_199_254_740_992.0,      // 2^53
            18_446_744_073_709_549_568.0, // the largest f64 below 2^64
            18_446_744_073_709_551_616.0, // 2^64
            1e30,
            f64::MAX,
            f64::MIN_POSITIVE,
        ];
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            r = r
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Magnitudes 2^-20..2^70, both signs, some whole numbers.
            let m = (r >> 11) as f64 / (1u64 << 53) as f64;
            let e = ((r >> 3) % 90) as i32 - 20;
            let x = m * 2f64.powi(e);
            xs.push(x);
            xs.push(-x);
            xs.push(x.round());
            xs.push(x.round() + ROUNDING_SLACK_NS);
        }
        for x in xs {
            assert_eq!(ceil_ns(x), by_ceil(x), "x = {x:e}");
        }
    }
}
