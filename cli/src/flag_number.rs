//! Whole-number flag values (`-n 20`, `--seed 7`, `--ranks 8`): clap's
//! own integer parser says "invalid digit found in string" for `-1`; these
//! say that the value is negative, or too large, naming the value (clap
//! adds the flag). The flags that take them set `allow_negative_numbers`,
//! so that `-n -1` reaches the parser instead of clap's "unexpected
//! argument '-1'" and its misleading `-- -1` tip.

use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;

/// An unsigned integer type a flag takes, with its largest value.
pub(crate) trait Whole: FromStr<Err = ParseIntError> {
    /// The type's largest value, for the "too large" message.
    const MAX_TEXT: &'static str;
}

impl Whole for u8 {
    const MAX_TEXT: &'static str = "255";
}
impl Whole for u32 {
    const MAX_TEXT: &'static str = "4294967295";
}
impl Whole for u64 {
    const MAX_TEXT: &'static str = "18446744073709551615";
}
impl Whole for usize {
    #[cfg(target_pointer_width = "64")]
    const MAX_TEXT: &'static str = "18446744073709551615";
    #[cfg(not(target_pointer_width = "64"))]
    const MAX_TEXT: &'static str = "4294967295";
}

/// `s` as a whole number 0 ..= `T::MAX` (surrounding blanks allowed).
///
/// # Errors
/// A message naming `s`: negative (`-1`), too large, or not a whole
/// number (`1.5`, `abc`, the empty string).
pub(crate) fn whole<T: Whole>(s: &str) -> Result<T, String> {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix('-') {
        if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return Err(format!(
                "{t} is negative: the value is a whole number, 0 or more"
            ));
        }
    }
    t.parse::<T>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow => format!("{t} is too large: at most {}", T::MAX_TEXT),
        _ => format!("{s:?} is not a whole number (0 or more)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_large_and_malformed_values_say_which() {
        assert_eq!(whole::<u32>("20"), Ok(20));
        assert_eq!(whole::<u64>(" 0 "), Ok(0));
        let e = whole::<u32>("-1").unwrap_err();
        assert!(e.contains("-1 is negative"), "{e}");
        let e = whole::<u32>("4294967296").unwrap_err();
        assert!(e.contains("too large: at most 4294967295"), "{e}");
        let e = whole::<u8>("1.5").unwrap_err();
        assert!(e.contains("\"1.5\" is not a whole number"), "{e}");
        let e = whole::<u64>("-x").unwrap_err();
        assert!(e.contains("not a whole number"), "{e}");
    }
}
