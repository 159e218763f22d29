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
    let y = (x - ROUNDING_SLACK_NS).ceil();
    if y <= 0.0 {
        0
    } else if y >= u64::MAX as f64 {
        u64::MAX
    } else {
        y as u64
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
}
