//! The check column: every element of every rank's output against the
//! sequential reference (`hccl_algos::reference`), as hccl_test's
//! `check_buf_result` does with its fixed inputs.

use std::fmt;

use hccl_algos::DataType;
use serde::Serialize;

/// Result of a row's check, printed as hccl_test prints `check_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "result", content = "wrong")]
pub(crate) enum Check {
    /// Every element equals the reference.
    Success,
    /// This many elements (over all ranks) differ from the reference.
    Failed(u64),
    /// Not checked: `-c 0`, or timing mode (no data).
    Null,
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Check::Success => f.write_str("success"),
            Check::Failed(n) => write!(f, "failed #{n}"),
            Check::Null => f.write_str("NULL"),
        }
    }
}

/// True if the element is a float NaN (any payload).
fn is_nan(dtype: DataType, e: &[u8]) -> bool {
    match dtype {
        DataType::Fp16 => half::f16::from_le_bytes([e[0], e[1]]).is_nan(),
        DataType::Bf16 => half::bf16::from_le_bytes([e[0], e[1]]).is_nan(),
        DataType::Fp32 => f32::from_le_bytes([e[0], e[1], e[2], e[3]]).is_nan(),
        DataType::Fp64 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(e);
            f64::from_le_bytes(b).is_nan()
        }
        _ => false,
    }
}

/// Compares every rank's output element by element: equal bytes, or both
/// NaN for floats (the verifiable inputs put NaNs in max/min; their payload
/// may differ). A missing rank or a length difference counts every
/// element of the longer buffer as wrong.
pub(crate) fn compare(dtype: DataType, expected: &[Vec<u8>], got: &[Vec<u8>]) -> Check {
    let esz = dtype.size() as usize;
    let empty = Vec::new();
    let mut wrong = 0u64;
    for r in 0..expected.len().max(got.len()) {
        let want = expected.get(r).unwrap_or(&empty);
        let have = got.get(r).unwrap_or(&empty);
        if want.len() != have.len() {
            wrong += (want.len().max(have.len()) / esz) as u64;
            continue;
        }
        if want == have {
            continue;
        }
        wrong += want
            .chunks_exact(esz)
            .zip(have.chunks_exact(esz))
            .filter(|(w, h)| w != h && !(is_nan(dtype, w) && is_nan(dtype, h)))
            .count() as u64;
    }
    if wrong == 0 {
        Check::Success
    } else {
        Check::Failed(wrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_wrong_elements_over_all_ranks() {
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let want = vec![f(&[1.0, 2.0]), f(&[3.0, f32::NAN])];
        assert_eq!(
            compare(DataType::Fp32, &want, &want.clone()),
            Check::Success
        );
        // A NaN with another payload is still a NaN.
        let other_nan = f32::from_bits(0x7fc0_0001);
        let got = vec![f(&[1.0, 2.0]), f(&[3.0, other_nan])];
        assert_eq!(compare(DataType::Fp32, &want, &got), Check::Success);
        let got = vec![f(&[1.0, 2.5]), f(&[0.0, 1.0])];
        assert_eq!(compare(DataType::Fp32, &want, &got), Check::Failed(3));
        // A missing rank: all its elements are wrong.
        assert_eq!(compare(DataType::Fp32, &want, &want[..1]), Check::Failed(2));
        // Integers compare bits: no NaN rule.
        assert_eq!(
            compare(DataType::Int8, &[vec![1, 2, 3]], &[vec![1, 0, 3]]),
            Check::Failed(1)
        );
        assert_eq!(Check::Failed(3).to_string(), "failed #3");
        assert_eq!(Check::Null.to_string(), "NULL");
    }
}
