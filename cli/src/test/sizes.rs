//! Message sizes: hccl_test's size syntax and its sweep rules.
//!
//! Source: CANN's `tools/hccl_test` (`hccl_test_common.cc`, `parsesize`,
//! `check_data_count`, `opbase_test_by_data_size`) and its README:
//! `-b`/`-e` take a number with an optional `K`, `M` or `G` suffix (powers
//! of 1024, either case); the sweep starts at `-b` and goes while the size
//! is `<= -e`, multiplying by `-f` when it is given (it wins over `-i`),
//! else adding `-i`, whose default is `(max - min) / 10`.

/// Why a size or a sweep was rejected. Messages name the flag and value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SizeError {
    /// Not a number with an optional K/M/G suffix.
    #[error("{value:?} is not a size: use a whole number of bytes with an optional K, M or G suffix (powers of 1024), e.g. 8K or 64M")]
    Syntax {
        /// The text given.
        value: String,
    },
    /// A leading minus sign: `-b -8K`.
    #[error("{value:?}: a size is not negative; give 0 or more, with an optional K, M or G suffix, e.g. 8K")]
    Negative {
        /// The text given.
        value: String,
    },
    /// A flag where the size should be: `-b -e 64K` (the size of `-b`
    /// is missing).
    #[error("{value:?} is not a size but looks like a flag: give the size right after the flag, e.g. -b 8K")]
    Flag {
        /// The text given.
        value: String,
    },
    /// The size does not fit in 64 bits.
    #[error("{value:?} does not fit in 64-bit bytes")]
    Overflow {
        /// The text given.
        value: String,
    },
    /// `-b` is larger than `-e`.
    #[error("-b/--minbytes {min} is larger than -e/--maxbytes {max}; give -b <= -e")]
    MinAboveMax {
        /// `-b` in bytes.
        min: u64,
        /// `-e` in bytes.
        max: u64,
    },
    /// `-f` is not a number above 1.
    #[error("-f/--stepfactor {factor} must be a number greater than 1 (hccl_test rule)")]
    BadFactor {
        /// The factor given.
        factor: f64,
    },
    /// `-i 0` with `-b < -e` would repeat `-b` forever (as hccl_test does).
    #[error("-i/--stepbytes 0 with -b {min} < -e {max} would test {min} bytes forever (hccl_test's behaviour); give -i > 0, -f, or -b = -e")]
    ZeroStep {
        /// `-b` in bytes.
        min: u64,
        /// `-e` in bytes.
        max: u64,
    },
    /// The sweep has more sizes than the limit.
    #[error(
        "the sweep from {min} to {max} bytes has more than {limit} sizes; use a larger -i or -f"
    )]
    TooMany {
        /// `-b` in bytes.
        min: u64,
        /// `-e` in bytes.
        max: u64,
        /// [`MAX_SIZES`].
        limit: usize,
    },
}

/// Most sizes one sweep may have (a guard against `-b 1 -e 1G -i 1`).
pub(crate) const MAX_SIZES: usize = 10_000;

/// Parses `8K`, `64M`, `1G`, `4096` into bytes (K/M/G = 2^10/2^20/2^30,
/// either case, as hccl_test's `parsesize`).
///
/// # Errors
/// [`SizeError::Negative`] (`-8K`), [`SizeError::Flag`] (`-e`, when a
/// flag took the next flag as its value), [`SizeError::Syntax`] or
/// [`SizeError::Overflow`].
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if let Some(rest) = t.strip_prefix('-') {
        let value = text.to_string();
        return Err(if rest.starts_with(|c: char| c.is_ascii_digit()) {
            SizeError::Negative { value }
        } else {
            SizeError::Flag { value }
        });
    }
    let syntax = || SizeError::Syntax {
        value: text.to_string(),
    };
    let (digits, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let unit: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(syntax()),
            };
            (&t[..i], unit)
        }
        _ => (t, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(syntax());
    }
    let n: u64 = digits.parse().map_err(|_| SizeError::Overflow {
        value: text.to_string(),
    })?;
    n.checked_mul(unit).ok_or_else(|| SizeError::Overflow {
        value: text.to_string(),
    })
}

/// How the sweep steps from one size to the next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// Multiply by this factor (`-f`, > 1). The product is truncated to
    /// whole bytes; when that would not grow the size (from 0 or 1 with a
    /// small factor) the next size is `size + 1`, so the sweep always ends.
    Factor(f64),
    /// Add this many bytes (`-i`).
    Bytes(u64),
}

impl Step {
    /// The step hccl_test uses for `-f` / `-i` / neither: `-f` wins over
    /// `-i`; with neither, `(max - min) / 10` bytes (at least 1).
    pub(crate) fn from_flags(
        factor: Option<f64>,
        step_bytes: Option<u64>,
        min: u64,
        max: u64,
    ) -> Step {
        match (factor, step_bytes) {
            (Some(f), _) => Step::Factor(f),
            (None, Some(i)) => Step::Bytes(i),
            (None, None) => Step::Bytes(((max - min.min(max)) / 10).max(1)),
        }
    }
}

/// The sizes of a sweep from `min` to `max` inclusive (the last size is
/// the largest `<= max` the steps reach, as in hccl_test's loop).
///
/// # Errors
/// [`SizeError::MinAboveMax`], [`SizeError::BadFactor`],
/// [`SizeError::ZeroStep`], [`SizeError::TooMany`].
pub(crate) fn sweep(min: u64, max: u64, step: Step) -> Result<Vec<u64>, SizeError> {
    if min > max {
        return Err(SizeError::MinAboveMax { min, max });
    }
    match step {
        Step::Factor(f) if !(f.is_finite() && f > 1.0) => {
            return Err(SizeError::BadFactor { factor: f });
        }
        Step::Bytes(0) if min < max => return Err(SizeError::ZeroStep { min, max }),
        _ => {}
    }
    let mut out = Vec::new();
    let mut size = min;
    loop {
        if out.len() == MAX_SIZES {
            return Err(SizeError::TooMany {
                min,
                max,
                limit: MAX_SIZES,
            });
        }
        out.push(size);
        let next = match step {
            Step::Factor(f) => {
                let grown = (size as f64 * f).floor();
                if grown >= u64::MAX as f64 {
                    break;
                }
                (grown as u64).max(size + 1)
            }
            Step::Bytes(0) => break,
            Step::Bytes(i) => match size.checked_add(i) {
                Some(n) => n,
                None => break,
            },
        };
        if next > max {
            break;
        }
        size = next;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_powers_of_1024_in_either_case() {
        assert_eq!(parse_size("8K"), Ok(8192));
        assert_eq!(parse_size("8k"), Ok(8192));
        assert_eq!(parse_size("64M"), Ok(67_108_864));
        assert_eq!(parse_size("1G"), Ok(1_073_741_824));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("0"), Ok(0));
        assert!(matches!(parse_size("-8K"), Err(SizeError::Negative { .. })));
        assert!(matches!(parse_size("-e"), Err(SizeError::Flag { .. })));
        for bad in ["", "K", "8KB", "8T", "1.5M", "0x10"] {
            assert!(
                matches!(parse_size(bad), Err(SizeError::Syntax { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_size("17179869184G"),
            Err(SizeError::Overflow { .. })
        ));
    }

    #[test]
    fn factor_sweep_matches_the_readme_example() {
        // -b 8K -e 64M -f 2: 8K, 16K, ..., 64M = 14 sizes.
        let s = sweep(8192, 64 << 20, Step::Factor(2.0)).unwrap();
        assert_eq!(s.len(), 14);
        assert_eq!(s[0], 8192);
        assert_eq!(s[1], 16384);
        assert_eq!(*s.last().unwrap(), 64 << 20);
    }

    #[test]
    fn factor_sweep_stops_at_the_last_size_below_max() {
        // 1000, 3000, 9000; 27000 > 10000.
        assert_eq!(
            sweep(1000, 10_000, Step::Factor(3.0)).unwrap(),
            vec![1000, 3000, 9000]
        );
        // Non-integer factor truncates: 10, 15, 22, 33.
        assert_eq!(
            sweep(10, 40, Step::Factor(1.5)).unwrap(),
            vec![10, 15, 22, 33]
        );
        // From 0 a factor cannot grow the size: +1 instead, then doubling.
        assert_eq!(sweep(0, 4, Step::Factor(2.0)).unwrap(), vec![0, 1, 2, 4]);
    }

    #[test]
    fn byte_steps_and_the_default_step() {
        assert_eq!(
            sweep(100, 130, Step::Bytes(10)).unwrap(),
            vec![100, 110, 120, 130]
        );
        assert_eq!(
            sweep(100, 125, Step::Bytes(10)).unwrap(),
            vec![100, 110, 120]
        );
        // Default: (max - min) / 10 -> 11 sizes from min to max.
        let step = Step::from_flags(None, None, 0, 1000);
        assert_eq!(step, Step::Bytes(100));
        let s = sweep(0, 1000, step).unwrap();
        assert_eq!(s.len(), 11);
        assert_eq!(s[10], 1000);
        // min = max: one size whatever the step.
        assert_eq!(
            sweep(64, 64, Step::from_flags(None, None, 64, 64)).unwrap(),
            vec![64]
        );
        assert_eq!(sweep(64, 64, Step::Bytes(0)).unwrap(), vec![64]);
        // A range smaller than 10 bytes still advances.
        assert_eq!(Step::from_flags(None, None, 1, 5), Step::Bytes(1));
        // -f wins over -i.
        assert_eq!(
            Step::from_flags(Some(2.0), Some(7), 1, 5),
            Step::Factor(2.0)
        );
    }

    #[test]
    fn bad_sweeps_are_errors() {
        assert_eq!(
            sweep(10, 5, Step::Bytes(1)),
            Err(SizeError::MinAboveMax { min: 10, max: 5 })
        );
        assert!(matches!(
            sweep(1, 5, Step::Factor(1.0)),
            Err(SizeError::BadFactor { .. })
        ));
        assert!(matches!(
            sweep(1, 5, Step::Factor(f64::NAN)),
            Err(SizeError::BadFactor { .. })
        ));
        assert_eq!(
            sweep(1, 5, Step::Bytes(0)),
            Err(SizeError::ZeroStep { min: 1, max: 5 })
        );
        assert!(matches!(
            sweep(1, 1 << 30, Step::Bytes(1)),
            Err(SizeError::TooMany { .. })
        ));
        // Near u64::MAX the sweep ends instead of overflowing.
        assert_eq!(
            sweep(u64::MAX - 1, u64::MAX, Step::Bytes(5)).unwrap(),
            vec![u64::MAX - 1]
        );
    }
}
