//! Memory limits on the command line (`--sim-memory`, `--check-memory`):
//! their syntax ([`parse_memory`]) and their default ([`memory_limit`]:
//! half the memory available, else [`DATA_LIMIT_BYTES`]).
//!
//! A limit is a number, decimals allowed, with an optional unit K, M, G or
//! T (or KiB, MiB, GiB, TiB; B for bytes), any case, all powers of 1024.
//! Wider than hccl_test's `-b`/`-e` syntax (`test::sizes`), which stays as
//! hccl_test's: a memory limit is read by people, `1.5G` or `2T`.

/// The `SIZE` syntax [`parse_memory`] takes, as `--help` says it for
/// every memory flag (`--sim-memory` of `hccl sim`, `hccl workload` and
/// `hccl test`; `hccl test --check-memory`): said once, a literal for
/// `concat!` in the flags' `help`.
macro_rules! size_help {
    () => {
        "a number, decimals allowed, with K, M, G or T (or KiB ... TiB; powers of 1024, any case), e.g. 512M, 1.5G, 2T"
    };
}
pub(crate) use size_help;

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
    if let Some(rest) = t.strip_prefix('-') {
        return Err(
            if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
                format!("{text:?}: a memory size is not negative; use e.g. 512M or 8G")
            } else {
                format!("{text:?} is not a memory size but looks like a flag: give the size right after the flag, e.g. 8G")
            },
        );
    }
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

/// Largest estimated memory of one data-mode check (inputs, outputs and
/// reference of every rank) where the memory available cannot be read:
/// 8 GiB. 8 ranks × 64 MiB AllReduce needs ~2 GiB. Elsewhere the limit is
/// half the memory available ([`memory_limit`]), or `--check-memory`
/// (`--sim-memory` for the simulator commands' size guard).
pub(crate) const DATA_LIMIT_BYTES: u64 = 8 << 30;

/// Memory the kernel says is available for new work without swapping
/// (`MemAvailable` of /proc/meminfo), bytes; `None` where there is none.
pub(crate) fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A memory limit in bytes and what set it: `flag` (named `flag_name`)
/// if given, else half of the memory `available` (the rest for the
/// machine's other work), else [`DATA_LIMIT_BYTES`]. `hccl test`'s data
/// check and the simulator commands' size guard (`sim_size`) share it.
pub(crate) fn memory_limit(
    flag_name: &str,
    flag: Option<u64>,
    available: Option<u64>,
) -> (u64, String) {
    match (flag, available) {
        (Some(l), _) => (l, flag_name.into()),
        (None, Some(a)) => (
            a / 2,
            format!(
                "half of the {} available",
                hccl_topology::limits::human_bytes(u128::from(a))
            ),
        ),
        (None, None) => (DATA_LIMIT_BYTES, "the available memory is unknown".into()),
    }
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
            "", "G", "1.5", "1.G", ".5G", "1.2.3G", "1X", "1KB", "1 2G", "0x10", "1.5e3M",
        ] {
            let e = parse_memory(bad).unwrap_err();
            assert!(
                e.starts_with(&format!("{bad:?} is not a memory size: use a number")),
                "{bad}: {e}"
            );
        }
        let e = parse_memory("-5G").unwrap_err();
        assert!(e.contains("a memory size is not negative"), "{e}");
        let e = parse_memory("-b").unwrap_err();
        assert!(e.contains("looks like a flag"), "{e}");
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

    #[test]
    fn every_memory_flag_says_the_size_syntax_it_takes() {
        use clap::Args as _;
        let flags = [
            (
                crate::sim::SimArgs::augment_args(clap::Command::new("s")),
                "sim-memory",
            ),
            (
                crate::workload::WorkloadArgs::augment_args(clap::Command::new("w")),
                "sim-memory",
            ),
            (
                crate::test::TestArgs::augment_args(clap::Command::new("t")),
                "sim-memory",
            ),
            (
                crate::test::TestArgs::augment_args(clap::Command::new("t")),
                "check-memory",
            ),
        ];
        for (c, flag) in flags {
            let arg = c
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .unwrap();
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(
                help.contains(size_help!()),
                "{}: --{flag}: {help}",
                c.get_name()
            );
            assert_eq!(arg.get_value_names().unwrap()[0].as_str(), "SIZE");
        }
        // The examples it gives parse.
        for example in ["512M", "1.5G", "2T", "8GiB"] {
            assert!(parse_memory(example).is_ok(), "{example}");
        }
    }

    #[test]
    fn the_limit_follows_the_memory_available() {
        let gib = 1u64 << 30;
        let limit = |flag, available| memory_limit("--check-memory", flag, available);
        // 3 GiB free: 1.5 GiB for the check, not a fixed 8 GiB.
        let (l, why) = limit(None, Some(3 * gib));
        assert_eq!(l, 3 * gib / 2);
        assert!(why.contains("half of the 3.0 GiB available"), "{why}");
        // 64 GiB free: more than 8 GiB.
        assert_eq!(limit(None, Some(64 * gib)).0, 32 * gib);
        // The flag wins; unknown memory keeps the old 8 GiB.
        assert_eq!(limit(Some(100), Some(64 * gib)).0, 100);
        assert_eq!(limit(None, None).0, DATA_LIMIT_BYTES);
    }
}
