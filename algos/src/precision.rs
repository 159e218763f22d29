//! How fp16/bf16 reductions carry partial sums between ranks
//! (`HCCL_REDUCE_PRECISION`; HCCL has no such variable, hccl-rs adds it in
//! HCCL's style).
//!
//! - [`ReducePrecision::Native`] (the default): messages carry the element
//!   type. A rank's own fold of several inputs rounds once (see
//!   [`crate::kernels::Partials`]), but a partial sum is rounded each time it
//!   travels to another rank, so a ring or H-D_R result depends on the order
//!   the algorithm adds in (every rank still gets the same bits).
//! - [`ReducePrecision::Fp32`]: Sum, Prod and Avg of fp16/bf16 run as the
//!   same op in f32: inputs widened, every partial sum combined and sent in
//!   f32, the result rounded once. Twice the bytes on the wire and in
//!   scratch. For inputs whose f32 sum is exact (for example small integers
//!   times powers of two, within 24 significant bits) every algorithm then
//!   returns the correctly rounded sum. Max and Min are exact in any
//!   precision and are not widened.

use crate::collective::CollectiveArgs;
use crate::dtype::{DataType, ReduceOp};
use crate::kernels::{self, KernelError};

/// The precision partial sums of fp16/bf16 reductions travel in. See the
/// module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReducePrecision {
    /// In the element type (`HCCL_REDUCE_PRECISION=native`, the default).
    #[default]
    Native,
    /// In f32 (`HCCL_REDUCE_PRECISION=fp32`).
    Fp32,
}

impl ReducePrecision {
    /// The setting's name: `native` or `fp32`.
    pub const fn name(self) -> &'static str {
        match self {
            ReducePrecision::Native => "native",
            ReducePrecision::Fp32 => "fp32",
        }
    }

    /// Parses `native` or `fp32` (case-insensitive, surrounding spaces ignored).
    ///
    /// # Errors
    /// A message naming the value and the accepted ones.
    pub fn parse(s: &str) -> Result<ReducePrecision, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "native" => Ok(ReducePrecision::Native),
            "fp32" => Ok(ReducePrecision::Fp32),
            _ => Err(format!(
                "{s:?} is not a reduce precision; accepted: native (partial sums in the element type, the default), fp32 (fp16/bf16 partial sums in f32)"
            )),
        }
    }

    /// The f32 form of `args` if this precision widens it: [`Self::Fp32`]
    /// and an fp16/bf16 AllReduce, ReduceScatter(V) or Reduce with Sum,
    /// Prod or Avg. Counts stay; every byte size doubles.
    pub fn widened(self, args: &CollectiveArgs) -> Option<CollectiveArgs> {
        let applies = self == ReducePrecision::Fp32
            && args.kind.is_reduction()
            && matches!(args.dtype, DataType::Fp16 | DataType::Bf16)
            && matches!(args.op, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Avg);
        applies.then(|| {
            let mut wide = args.clone();
            wide.dtype = DataType::Fp32;
            wide
        })
    }
}

impl std::fmt::Display for ReducePrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn not_half(dtype: DataType) -> KernelError {
    KernelError::PartialElement {
        operand: "dtype",
        len: dtype.size(),
        dtype,
        elem_size: 2,
    }
}

/// fp16/bf16 little-endian elements to f32 little-endian elements (exact).
///
/// # Errors
/// [`KernelError::PartialElement`] if `src` has an odd length or `dtype`
/// is not fp16/bf16.
pub fn widen(dtype: DataType, src: &[u8]) -> Result<Vec<u8>, KernelError> {
    if !kernels::keeps_partials(dtype) {
        return Err(not_half(dtype));
    }
    if !src.len().is_multiple_of(2) {
        return Err(KernelError::PartialElement {
            operand: "src",
            len: src.len() as u64,
            dtype,
            elem_size: 2,
        });
    }
    let mut out = vec![0u8; 2 * src.len()];
    kernels::widen_all(dtype, src, &mut out);
    Ok(out)
}

/// f32 little-endian elements rounded (to nearest, ties to even) into
/// fp16/bf16 little-endian elements; `dst` holds half as many bytes as `src`.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the lengths do not match,
/// [`KernelError::PartialElement`] if `dtype` is not fp16/bf16.
pub fn narrow(dtype: DataType, src: &[u8], dst: &mut [u8]) -> Result<(), KernelError> {
    if !kernels::keeps_partials(dtype) {
        return Err(not_half(dtype));
    }
    if src.len() != 2 * dst.len() || !src.len().is_multiple_of(4) {
        return Err(KernelError::LengthMismatch {
            dtype,
            left: "f32 src",
            left_len: src.len() as u64,
            right: "dst (half the bytes)",
            right_len: dst.len() as u64,
        });
    }
    kernels::narrow_all(dtype, src, dst);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::CollectiveKind;

    #[test]
    fn parse_accepts_the_two_names_and_names_bad_values() {
        assert_eq!(ReducePrecision::parse(" FP32 "), Ok(ReducePrecision::Fp32));
        assert_eq!(
            ReducePrecision::parse("native"),
            Ok(ReducePrecision::Native)
        );
        let e = ReducePrecision::parse("fp64").unwrap_err();
        assert!(e.contains("\"fp64\"") && e.contains("fp32"), "{e}");
    }

    #[test]
    fn only_half_sums_products_and_averages_widen() {
        let a = |d, op| CollectiveArgs::new(CollectiveKind::AllReduce, 4, d, 2).with_op(op);
        let w = ReducePrecision::Fp32;
        assert_eq!(
            w.widened(&a(DataType::Bf16, ReduceOp::Sum))
                .map(|x| x.dtype),
            Some(DataType::Fp32)
        );
        assert!(w.widened(&a(DataType::Fp16, ReduceOp::Avg)).is_some());
        assert!(w.widened(&a(DataType::Bf16, ReduceOp::Max)).is_none());
        assert!(w.widened(&a(DataType::Fp32, ReduceOp::Sum)).is_none());
        assert!(ReducePrecision::Native
            .widened(&a(DataType::Bf16, ReduceOp::Sum))
            .is_none());
        let g = CollectiveArgs::new(CollectiveKind::AllGather, 4, DataType::Bf16, 2);
        assert!(w.widened(&g).is_none());
    }

    #[test]
    fn widen_then_narrow_round_trips_and_narrow_rounds_to_even() {
        // bf16 0x4380 = 256, 0x3F80 = 1; f32 257 is a tie between 256 and 258: 256.
        let b = [0x80, 0x43, 0x80, 0x3F];
        let w = widen(DataType::Bf16, &b).unwrap();
        assert_eq!(w, [256f32.to_le_bytes(), 1f32.to_le_bytes()].concat());
        let mut back = [0u8; 4];
        narrow(DataType::Bf16, &w, &mut back).unwrap();
        assert_eq!(back, b);
        narrow(
            DataType::Bf16,
            &[257f32.to_le_bytes(), 263f32.to_le_bytes()].concat(),
            &mut back,
        )
        .unwrap();
        assert_eq!(back, [0x80, 0x43, 0x84, 0x43], "257 -> 256, 263 -> 264");
        assert!(widen(DataType::Fp32, &b).is_err());
        assert!(narrow(DataType::Bf16, &w, &mut [0u8; 2]).is_err());
    }

    #[test]
    fn fp16_widen_and_narrow_cross_the_block_boundary() {
        // 300 values, exact in fp16 (halves from -70 to 79.5).
        let vals: Vec<f32> = (0..300).map(|i| i as f32 * 0.5 - 70.0).collect();
        let b: Vec<u8> = vals
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let w = widen(DataType::Fp16, &b).unwrap();
        let back: Vec<f32> = w
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(back, vals);
        let mut n = vec![0u8; b.len()];
        narrow(DataType::Fp16, &w, &mut n).unwrap();
        assert_eq!(n, b);
    }
}
