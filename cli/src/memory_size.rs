//! Memory limits on the command line (`--sim-memory`, `--check-memory`):
//! a number, decimals allowed, with an optional unit K, M, G or T (or
//! KiB, MiB, GiB, TiB; B for bytes), any case, all powers of 1024. Wider
//! than hccl_test's `-b`/`-e` syntax (`test::sizes`), which stays as
//! hccl_test's: a memory limit is read by people, `1.5G` or `2T`.

/// Units by name (upper case), bytes.
const UNITS: [(&str, u64); 9] = [
    ("B", 1),
    ("K", 1 << 10),
    ("KIB", 1 << 10),
    ("M", 1 << 20),
    ("MIB", 1 << 20),
    ("G", 1 << 30),
    ("GIB", 1 << 30),
    ("T", 1 << 40),
    ("TIB", 1 << 40),
];

/// Parses a memory size into bytes: `4096`, `512M`, `1.5G` (1610612736),
/// `2T`, `8GiB`, `0.5tib`. A fraction of a byte is dropped (`0.1K` is
/// 102 B); a decimal needs a unit.
///
/// # Errors
/// A message naming the value and the accepted form (clap prefixes the
/// flag), or saying it does not fit in 64 bits.
pub(crate) fn parse_memory(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let syntax = || {
        format!(
            "{text:?} is not a memory size: use a number (decimals allowed) with an optional unit K, M, G or T (or KiB, MiB, GiB, TiB), powers of 1024, e.g. 512M, 1.5G or 2T"
        )
    };
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_uppercase();
    let scale = match UNITS.iter().find(|(name, _)| *name == unit) {
        Some(&(_, s)) => s,
        None if unit.is_empty() => 1,
        None => return Err(syntax()),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    // "1.", ".5", "1.2.3" and "" are not numbers; a decimal needs a unit.
    if whole.is_empty()
        || !all_digits(whole)
        || (number.contains('.') && (frac.is_empty() || !all_digits(frac) || scale == 1))
    {
        return Err(syntax());
    }
    let too_big = || format!("{text:?} is more memory than 64-bit bytes hold");
    let whole: u128 = whole.parse().map_err(|_| too_big())?;
    // 2^40 × 10^19 still fits in u128; digits past the 19th are below a byte.
    let frac = &frac[..frac.len().min(19)];
    let frac_bytes = if frac.is_empty() {
        0
    } else {
        let digits: u128 = frac.parse().map_err(|_| syntax())?;
        digits * u128::from(scale) / 10u128.pow(frac.len() as u32)
    };
    let bytes = whole
        .checked_mul(u128::from(scale))
        .and_then(|b| b.checked_add(frac_bytes))
        .ok_or_else(too_big)?;
    u64::try_from(bytes).map_err(|_| too_big())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_decimals_and_either_case() {
        assert_eq!(parse_memory("1.5G"), Ok(1_610_612_736));
        assert_eq!(parse_memory("2T"), Ok(2_199_023_255_552));
        assert_eq!(parse_memory("2t"), Ok(2_199_023_255_552));
        assert_eq!(parse_memory("8GiB"), Ok(8_589_934_592));
        assert_eq!(parse_memory("8gib"), Ok(8_589_934_592));
        assert_eq!(parse_memory("0.5TiB"), Ok(549_755_813_888));
        assert_eq!(parse_memory("512M"), Ok(536_870_912));
        assert_eq!(parse_memory("512 MiB"), Ok(536_870_912));
        assert_eq!(parse_memory("4K"), Ok(4096));
        assert_eq!(parse_memory("4096"), Ok(4096));
        assert_eq!(parse_memory("4096B"), Ok(4096));
        // A fraction of a byte is dropped: 0.1 KiB = 102.4 B.
        assert_eq!(parse_memory("0.1K"), Ok(102));
        assert_eq!(parse_memory("0"), Ok(0));
    }

    #[test]
    fn bad_input_names_the_value_and_the_form() {
        for bad in [
            "", "G", "1.5", "1.G", ".5G", "1.2.3G", "-1G", "1X", "1KB", "1 2G", "0x10", "1.5e3M",
        ] {
            let e = parse_memory(bad).unwrap_err();
            assert!(
                e.starts_with(&format!("{bad:?} is not a memory size: use a number")),
                "{bad}: {e}"
            );
        }
        for big in [
            "16777216T",
            "18446744073709551616",
            "99999999999999999999999999999999999999999T",
        ] {
            let e = parse_memory(big).unwrap_err();
            assert_eq!(e, format!("{big:?} is more memory than 64-bit bytes hold"));
        }
        // The largest that fits: 16 EiB - 1 B in bytes.
        assert_eq!(parse_memory("18446744073709551615"), Ok(u64::MAX));
    }
}
