//! Accepted ranges of the numbers read from files, flags and environment
//! variables (fabric files, fault plans, scenarios, preset sizes), shared by
//! every crate that loads them, so one rule gives one message.
//!
//! Times are checked against [`MAX_TIME_NS`], bandwidths against
//! [`MIN_GBPS`]`..=`[`MAX_GBPS`]. Sums of checked times can still pass
//! `u64::MAX`; the simulator adds them saturating, and a time of `u64::MAX`
//! means "never".

/// The longest time accepted, ns: 2147483647 s, the upper bound of
/// `HCCL_EXEC_TIMEOUT` (CANN 8.0 environment variable reference, range
/// `[0, 2147483647]` s), about 68 years. Eight such times still add up
/// inside a `u64`.
pub const MAX_TIME_NS: u64 = 2_147_483_647 * 1_000_000_000;

/// The smallest bandwidth accepted, GB/s (G = 10^9): 1 MB/s.
pub const MIN_GBPS: f64 = 1e-3;

/// The largest bandwidth accepted, GB/s: 1 PB/s, over a thousand times any
/// link or memory of the machines modelled (HCCS 28 GB/s, UB 196 GB/s, HBM
/// 1.6 TB/s).
pub const MAX_GBPS: f64 = 1e6;

/// Memory assumed when the machine's cannot be read (not Linux), bytes:
/// 64 GiB.
pub const FALLBACK_MEMORY_BYTES: u64 = 64 << 30;

/// Checks a time in ns; `Err` is the reason, for a message that names the
/// field and the value (`links[3].latency_ns = 18446744073709551615 ...`).
///
/// # Errors
/// When `ns > MAX_TIME_NS`.
pub fn check_ns(ns: u64) -> Result<(), String> {
    if ns > MAX_TIME_NS {
        Err(format!(
            "is out of range: accepted 0..={MAX_TIME_NS} ns (2147483647 s, HCCL_EXEC_TIMEOUT's longest)"
        ))
    } else {
        Ok(())
    }
}

/// Checks a bandwidth in GB/s; `Err` is the reason.
///
/// # Errors
/// When `gbps` is not a number in `MIN_GBPS..=MAX_GBPS`.
pub fn check_gbps(gbps: f64) -> Result<(), String> {
    if (MIN_GBPS..=MAX_GBPS).contains(&gbps) {
        Ok(())
    } else {
        Err(format!(
            "is out of range: accepted {MIN_GBPS}..={MAX_GBPS} GB/s (1 MB/s to 1 PB/s)"
        ))
    }
}

/// This machine's memory in bytes: `MemTotal` of `/proc/meminfo`, else
/// [`FALLBACK_MEMORY_BYTES`].
pub fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kb.checked_mul(1024)
        })
        .unwrap_or(FALLBACK_MEMORY_BYTES)
}

/// `bytes` for people: `1.5 GiB`, `640 KiB`, `12 B`.
pub fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(check_ns(MAX_TIME_NS).is_ok());
        let e = check_ns(u64::MAX).unwrap_err();
        assert!(e.contains("0..=2147483647000000000 ns"), "{e}");
        assert!(MAX_TIME_NS.checked_mul(8).is_some());
        assert!(check_gbps(25.0).is_ok() && check_gbps(MIN_GBPS).is_ok());
        for bad in [0.0, 1e-4, 2e6, f64::NAN, f64::INFINITY, -1.0] {
            assert!(check_gbps(bad).is_err(), "{bad}");
        }
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert!(memory_bytes() > 0);
    }
}
