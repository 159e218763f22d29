//! Kernel tests. Expected values are computed by hand (noted beside each)
//! or, for the randomized checks, by a scalar oracle built from Rust's own
//! wrapping integer ops and the `half` crate's per-element conversions.

use half::{bf16, f16};
use proptest::prelude::*;

use super::half_float::{bf16_to_f32, f16_probe_bits, f32_to_bf16, f32_to_fp16, fp16_to_f32};
use super::partials::{divide_kept_on, fold_kept_on, narrow_on, reduce_kept_on, widen_on};
use super::*;

fn bytes_i8(v: &[i8]) -> Vec<u8> {
    v.iter().map(|x| *x as u8).collect()
}
fn bytes_i16(v: &[i16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_i64(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_u64(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_u16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn bits_f32(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
fn bits_u16(b: &[u8]) -> Vec<u16> {
    b.chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// Runs `reduce` and `reduce_into` and checks they agree; returns the result.
fn both(dtype: DataType, op: ReduceOp, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut dst = a.to_vec();
    reduce(dtype, op, &mut dst, b).unwrap();
    let mut out = vec![0xAB; a.len()];
    reduce_into(dtype, op, &mut out, a, b).unwrap();
    assert_eq!(dst, out, "reduce and reduce_into disagree for {dtype} {op}");
    dst
}

#[test]
fn integer_sums_wrap() {
    // 100 + 100 = 200 = -56 mod 256; -128 + -1 = 127 mod 256.
    assert_eq!(
        both(
            DataType::Int8,
            ReduceOp::Sum,
            &bytes_i8(&[100, -128]),
            &bytes_i8(&[100, -1])
        ),
        bytes_i8(&[-56, 127])
    );
    // 250 + 10 = 260 = 4 mod 256.
    assert_eq!(both(DataType::Uint8, ReduceOp::Sum, &[250], &[10]), vec![4]);
    assert_eq!(
        both(
            DataType::Int32,
            ReduceOp::Sum,
            &bytes_i32(&[i32::MAX]),
            &bytes_i32(&[1])
        ),
        bytes_i32(&[i32::MIN])
    );
    assert_eq!(
        both(
            DataType::Uint64,
            ReduceOp::Sum,
            &bytes_u64(&[u64::MAX]),
            &bytes_u64(&[2])
        ),
        bytes_u64(&[1])
    );
}

#[test]
fn integer_products_wrap() {
    // 300 * 300 = 90000 = 24464 mod 65536.
    assert_eq!(
        both(
            DataType::Int16,
            ReduceOp::Prod,
            &bytes_i16(&[300]),
            &bytes_i16(&[300])
        ),
        bytes_i16(&[24464])
    );
    // 2^32 * 2^32 = 2^64 = 0 mod 2^64.
    assert_eq!(
        both(
            DataType::Uint64,
            ReduceOp::Prod,
            &bytes_u64(&[1 << 32]),
            &bytes_u64(&[1 << 32])
        ),
        bytes_u64(&[0])
    );
    // -3 * 7 = -21.
    assert_eq!(
        both(
            DataType::Int64,
            ReduceOp::Prod,
            &bytes_i64(&[-3]),
            &bytes_i64(&[7])
        ),
        bytes_i64(&[-21])
    );
}

#[test]
fn integer_max_min_respect_signedness() {
    // As int8, 0xFF is -1 < 1; as uint8 it is 255 > 1.
    assert_eq!(both(DataType::Int8, ReduceOp::Max, &[0xFF], &[1]), vec![1]);
    assert_eq!(
        both(DataType::Uint8, ReduceOp::Max, &[0xFF], &[1]),
        vec![0xFF]
    );
    assert_eq!(
        both(DataType::Int8, ReduceOp::Min, &[0xFF], &[1]),
        vec![0xFF]
    );
    assert_eq!(both(DataType::Uint8, ReduceOp::Min, &[0xFF], &[1]), vec![1]);
    assert_eq!(
        both(
            DataType::Uint16,
            ReduceOp::Max,
            &bytes_u16(&[3, 40000]),
            &bytes_u16(&[9, 2])
        ),
        bytes_u16(&[9, 40000])
    );
}

#[test]
fn float_sum_prod_fp32_and_fp64() {
    assert_eq!(
        both(
            DataType::Fp32,
            ReduceOp::Sum,
            &bytes_f32(&[1.5, -2.0]),
            &bytes_f32(&[2.25, 0.5])
        ),
        bytes_f32(&[3.75, -1.5])
    );
    assert_eq!(
        both(
            DataType::Fp32,
            ReduceOp::Prod,
            &bytes_f32(&[1.5, -2.0]),
            &bytes_f32(&[2.25, 0.5])
        ),
        bytes_f32(&[3.375, -1.0])
    );
    let a: Vec<u8> = [0.1f64, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    let b: Vec<u8> = [0.2f64, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    // 0.1 + 0.2 in f64 is 0.30000000000000004 (0x3FD3333333333334).
    let want: Vec<u8> = [f64::from_bits(0x3FD3_3333_3333_3334), 7.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(both(DataType::Fp64, ReduceOp::Sum, &a, &b), want);
}

#[test]
fn max_min_propagate_nan_on_either_side_as_canonical_nan() {
    let payload_nan = f32::from_bits(0x7FC0_1234);
    let neg_nan = f32::from_bits(0xFFC0_0000);
    let a = bytes_f32(&[payload_nan, 1.0, 5.0, neg_nan]);
    let b = bytes_f32(&[1.0, payload_nan, 6.0, 2.0]);
    for op in [ReduceOp::Max, ReduceOp::Min] {
        let got = bits_f32(&both(DataType::Fp32, op, &a, &b));
        let five_or_six = if op == ReduceOp::Max { 6.0f32 } else { 5.0 };
        assert_eq!(
            got,
            vec![0x7FC0_0000, 0x7FC0_0000, five_or_six.to_bits(), 0x7FC0_0000]
        );
    }
    let a64: Vec<u8> = [f64::NAN, 1.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let b64: Vec<u8> = [0.0f64, f64::from_bits(0x7FF0_0000_0000_0001)]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let got = both(DataType::Fp64, ReduceOp::Max, &a64, &b64);
    let got: Vec<u64> = got
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![0x7FF8_0000_0000_0000; 2], "signalling NaN too");
    // fp16: 0x7E01 is a NaN with payload, 0x3C00 is 1.0; canonical is 0x7E00.
    let got = bits_u16(&both(
        DataType::Fp16,
        ReduceOp::Min,
        &bytes_u16(&[0x3C00, 0x7E01]),
        &bytes_u16(&[0x7E01, 0x3C00]),
    ));
    assert_eq!(got, vec![0x7E00, 0x7E00]);
    // bf16: 0xFFC1 is a negative NaN, 0x3F80 is 1.0; canonical is 0x7FC0.
    let got = bits_u16(&both(
        DataType::Bf16,
        ReduceOp::Max,
        &bytes_u16(&[0x3F80, 0xFFC1]),
        &bytes_u16(&[0xFFC1, 0x3F80]),
    ));
    assert_eq!(got, vec![0x7FC0, 0x7FC0]);
}

#[test]
fn max_min_order_signed_zeros() {
    let pz = 0.0f32;
    let nz = -0.0f32;
    let a = bytes_f32(&[pz, nz, nz]);
    let b = bytes_f32(&[nz, pz, nz]);
    assert_eq!(
        bits_f32(&both(DataType::Fp32, ReduceOp::Max, &a, &b)),
        vec![0, 0, 0x8000_0000]
    );
    assert_eq!(
        bits_f32(&both(DataType::Fp32, ReduceOp::Min, &a, &b)),
        vec![0x8000_0000, 0x8000_0000, 0x8000_0000]
    );
}

#[test]
fn fp16_rounds_once_to_nearest_even() {
    // fp16 has a 10-bit mantissa: ulp(1.0) = 2^-10; 2^-11 is 0x1000.
    // 1.0 + 2^-11 is a tie between 1.0 (even) and 1 + 2^-10: gives 1.0.
    // (1 + 2^-10) + 2^-11 is a tie between 0x3C01 (odd) and 0x3C02: 0x3C02.
    // 65504 (max, 0x7BFF) + 65504 overflows to +inf (0x7C00).
    let a = bytes_u16(&[0x3C00, 0x3C01, 0x7BFF]);
    let b = bytes_u16(&[0x1000, 0x1000, 0x7BFF]);
    assert_eq!(
        bits_u16(&both(DataType::Fp16, ReduceOp::Sum, &a, &b)),
        vec![0x3C00, 0x3C02, 0x7C00]
    );
    // 1.5 (0x3E00) * 1.5 = 2.25 (0x4080).
    assert_eq!(
        bits_u16(&both(
            DataType::Fp16,
            ReduceOp::Prod,
            &bytes_u16(&[0x3E00]),
            &bytes_u16(&[0x3E00])
        )),
        vec![0x4080]
    );
}

#[test]
fn bf16_rounds_once_to_nearest_even() {
    // bf16 has a 7-bit mantissa: ulp(1.0) = 2^-7; 2^-8 is 0x3B80.
    // 1.0 (0x3F80) + 2^-8 ties to 0x3F80; 0x3F81 + 2^-8 ties to 0x3F82.
    let a = bytes_u16(&[0x3F80, 0x3F81]);
    let b = bytes_u16(&[0x3B80, 0x3B80]);
    assert_eq!(
        bits_u16(&both(DataType::Bf16, ReduceOp::Sum, &a, &b)),
        vec![0x3F80, 0x3F82]
    );
}

/// f32 bit patterns that exercise rounding: every combination of the top
/// 19 bits (sign, exponent, top mantissa bits) with low bits at and around
/// the fp16 and bf16 rounding points, plus specials.
fn rounding_probe_bits() -> impl Iterator<Item = u32> {
    // fp16 keeps bits 13.. of a normal result (ties at 0x1000, the kept
    // bit 0x2000 even or odd), fewer of a subnormal one (ties at 0x4000,
    // 0x8000, or in the top half); bf16 keeps bits 16.. (ties at 0x8000).
    const LOW: [u32; 17] = [
        0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2FFF, 0x3000, 0x3001, 0x3FFF, 0x4000, 0x4001,
        0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF,
    ];
    let specials = [
        0x7F80_0000u32,
        0xFF80_0000,
        0x7FC0_0000,
        0x7F80_0001,
        0xFFFF_FFFF,
        0x7F7F_FFFF,
    ];
    (0u32..1 << 16)
        .flat_map(|top| LOW.into_iter().map(move |low| (top << 16) | low))
        .chain(specials)
}

/// The software fp16 conversions (the portable path's) against the `half`
/// crate: every fp16 value widened, NaNs included bit for bit (quiet bit
/// set, payload kept, as F16C and `half` do); the rounding probes narrowed.
#[test]
fn fp16_conversions_match_the_half_crate() {
    for h in 0..=u16::MAX {
        let want = f16::from_bits(h).to_f32().to_bits();
        assert_eq!(fp16_to_f32(h).to_bits(), want, "fp16 {h:#06x}");
    }
    for bits in rounding_probe_bits().chain(f16_probe_bits()) {
        let v = f32::from_bits(bits);
        assert_eq!(
            f32_to_fp16(v),
            f16::from_f32(v).to_bits(),
            "f32 {bits:#010x}"
        );
    }
}

/// Every f32 narrowed to fp16 and bf16 against `half`: 2^32 values,
/// about 90 s in a release build (`cargo test --release -p hccl-algos
/// -- --ignored every_f32`), so not part of the default run.
#[test]
#[ignore = "2^32 values: run in release"]
fn every_f32_narrows_as_the_half_crate_does() {
    for bits in 0..=u32::MAX {
        let v = f32::from_bits(bits);
        assert_eq!(
            f32_to_fp16(v),
            f16::from_f32(v).to_bits(),
            "fp16 {bits:#010x}"
        );
        assert_eq!(
            f32_to_bf16(v),
            bf16::from_f32(v).to_bits(),
            "bf16 {bits:#010x}"
        );
    }
}

#[test]
fn bf16_conversions_match_the_half_crate() {
    for h in 0..=u16::MAX {
        let want = bf16::from_bits(h).to_f32();
        let got = bf16_to_f32(h);
        if want.is_nan() {
            // `half` also sets the quiet bit; either NaN is fine here.
            assert!(got.is_nan(), "bf16 {h:#06x}");
        } else {
            assert_eq!(got.to_bits(), want.to_bits(), "bf16 {h:#06x}");
        }
    }
    for bits in rounding_probe_bits() {
        let v = f32::from_bits(bits);
        assert_eq!(
            f32_to_bf16(v),
            bf16::from_f32(v).to_bits(),
            "f32 {bits:#010x}"
        );
    }
}

#[test]
fn divide_truncates_integers_toward_zero() {
    let mut v = bytes_i32(&[-7, 7, -1, i32::MIN]);
    divide(DataType::Int32, &mut v, 2).unwrap();
    // -7/2 = -3.5 -> -3; 7/2 -> 3; -1/2 -> 0; -2^31/2 = -2^30.
    assert_eq!(v, bytes_i32(&[-3, 3, 0, -(1 << 30)]));
    // Divisors wider than the type: -128/200 -> 0, 127/100 -> 1.
    let mut v = bytes_i8(&[-128, 127]);
    divide(DataType::Int8, &mut v, 200).unwrap();
    assert_eq!(v, bytes_i8(&[0, 0]));
    let mut v = bytes_i8(&[-128, 127]);
    divide(DataType::Int8, &mut v, 100).unwrap();
    assert_eq!(v, bytes_i8(&[-1, 1]));
    let mut v = vec![255u8];
    divide(DataType::Uint8, &mut v, 2).unwrap();
    assert_eq!(v, vec![127]);
    // 2^63 / 3 = 3074457345618258602.67 -> -3074457345618258602.
    let mut v = bytes_i64(&[i64::MIN]);
    divide(DataType::Int64, &mut v, 3).unwrap();
    assert_eq!(v, bytes_i64(&[-3_074_457_345_618_258_602]));
    let mut v = bytes_u64(&[u64::MAX]);
    divide(DataType::Uint64, &mut v, u32::MAX).unwrap();
    // (2^64 - 1) / (2^32 - 1) = 2^32 + 1.
    assert_eq!(v, bytes_u64(&[(1 << 32) + 1]));
}

#[test]
fn divide_floats_rounds_once() {
    let mut v = bytes_f32(&[7.0, 1.0]);
    divide(DataType::Fp32, &mut v, 2).unwrap();
    assert_eq!(v, bytes_f32(&[3.5, 0.5]));
    // 1/3: fp16 0x3555 (0.333251953125), bf16 0x3EAB (f32 0x3EAAAAAB rounds up).
    let mut v = bytes_u16(&[0x3C00]);
    divide(DataType::Fp16, &mut v, 3).unwrap();
    assert_eq!(bits_u16(&v), vec![0x3555]);
    let mut v = bytes_u16(&[0x3F80]);
    divide(DataType::Bf16, &mut v, 3).unwrap();
    assert_eq!(bits_u16(&v), vec![0x3EAB]);
}

#[test]
fn avg_reduces_as_sum() {
    for dtype in DataType::ALL {
        let n = 5 * dtype.size() as usize;
        let a: Vec<u8> = (0..n as u8).map(|x| x % 3).collect();
        let b: Vec<u8> = (0..n as u8).map(|x| x % 5).collect();
        assert_eq!(
            both(dtype, ReduceOp::Avg, &a, &b),
            both(dtype, ReduceOp::Sum, &a, &b),
            "{dtype}"
        );
    }
}

#[test]
fn partial_elements_and_length_mismatches_are_errors() {
    let mut dst = vec![0u8; 6];
    let e = reduce(DataType::Fp32, ReduceOp::Sum, &mut dst, &[0; 6]).unwrap_err();
    assert_eq!(
        e,
        KernelError::PartialElement {
            operand: "dst",
            len: 6,
            dtype: DataType::Fp32,
            elem_size: 4
        }
    );
    assert!(
        e.to_string().contains("6 bytes") && e.to_string().contains("(4 bytes)"),
        "{e}"
    );

    let mut dst = vec![0u8; 8];
    let e = reduce(DataType::Int16, ReduceOp::Max, &mut dst, &[0; 4]).unwrap_err();
    assert!(
        matches!(
            e,
            KernelError::LengthMismatch {
                left_len: 8,
                right_len: 4,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("8 bytes") && e.to_string().contains("4 bytes"),
        "{e}"
    );

    let mut out = vec![0u8; 4];
    let e = reduce_into(DataType::Fp16, ReduceOp::Sum, &mut out, &[0; 4], &[0; 3]).unwrap_err();
    assert!(
        matches!(
            e,
            KernelError::PartialElement {
                operand: "b",
                len: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = reduce_into(DataType::Fp16, ReduceOp::Sum, &mut out, &[0; 2], &[0; 2]).unwrap_err();
    assert!(
        matches!(
            e,
            KernelError::LengthMismatch {
                left: "out",
                left_len: 4,
                right_len: 2,
                ..
            }
        ),
        "{e:?}"
    );

    let mut v = vec![1u8; 8];
    assert_eq!(
        divide(DataType::Int32, &mut v, 0),
        Err(KernelError::ZeroDivisor {
            dtype: DataType::Int32
        })
    );
    assert_eq!(v, vec![1u8; 8], "an error leaves the buffer untouched");
    assert!(divide(DataType::Fp64, &mut v[..7], 2).is_err());
}

#[test]
fn empty_slices_are_fine() {
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            reduce(dtype, op, &mut [], &[]).unwrap();
            reduce_into(dtype, op, &mut [], &[], &[]).unwrap();
        }
        divide(dtype, &mut [], 3).unwrap();
    }
}

/// Scalar oracle for one element, written independently of the kernels.
fn oracle(dtype: DataType, op: ReduceOp, a: &[u8], b: &[u8]) -> Vec<u8> {
    macro_rules! int {
        ($t:ty) => {{
            let x = <$t>::from_le_bytes(a.try_into().unwrap());
            let y = <$t>::from_le_bytes(b.try_into().unwrap());
            match op {
                ReduceOp::Sum | ReduceOp::Avg => x.wrapping_add(y),
                ReduceOp::Prod => x.wrapping_mul(y),
                ReduceOp::Max => x.max(y),
                ReduceOp::Min => x.min(y),
            }
            .to_le_bytes()
            .to_vec()
        }};
    }
    fn fl(op: ReduceOp, x: f64, y: f64) -> f64 {
        match op {
            ReduceOp::Sum | ReduceOp::Avg => x + y,
            ReduceOp::Prod => x * y,
            _ if x.is_nan() || y.is_nan() => f64::NAN,
            // Equal values can only be +0 / -0: Max prefers +0, Min -0.
            ReduceOp::Max if x == y => {
                if x.is_sign_positive() {
                    x
                } else {
                    y
                }
            }
            ReduceOp::Min if x == y => {
                if x.is_sign_negative() {
                    x
                } else {
                    y
                }
            }
            ReduceOp::Max => {
                if x > y {
                    x
                } else {
                    y
                }
            }
            ReduceOp::Min => {
                if x < y {
                    x
                } else {
                    y
                }
            }
        }
    }
    match dtype {
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::Uint8 => int!(u8),
        DataType::Uint16 => int!(u16),
        DataType::Uint32 => int!(u32),
        DataType::Uint64 => int!(u64),
        DataType::Fp64 => fl(
            op,
            f64::from_le_bytes(a.try_into().unwrap()),
            f64::from_le_bytes(b.try_into().unwrap()),
        )
        .to_le_bytes()
        .to_vec(),
        // f32 op computed in f64 then rounded once is exact for + and *
        // of two f32 (the f64 result has enough bits; double rounding is
        // innocuous for these, a known result for p' >= 2p + 2).
        DataType::Fp32 => (fl(
            op,
            f32::from_le_bytes(a.try_into().unwrap()).into(),
            f32::from_le_bytes(b.try_into().unwrap()).into(),
        ) as f32)
            .to_le_bytes()
            .to_vec(),
        DataType::Fp16 => {
            let x = f16::from_le_bytes([a[0], a[1]]).to_f64();
            let y = f16::from_le_bytes([b[0], b[1]]).to_f64();
            f16::from_f64(fl(op, x, y)).to_le_bytes().to_vec()
        }
        DataType::Bf16 => {
            let x = bf16::from_le_bytes([a[0], a[1]]).to_f64();
            let y = bf16::from_le_bytes([b[0], b[1]]).to_f64();
            bf16::from_f64(fl(op, x, y)).to_le_bytes().to_vec()
        }
    }
}

/// Values equal as numbers, NaN equal to NaN (the oracle's NaN payloads
/// differ), +0 vs -0 told apart.
fn same_value(dtype: DataType, x: &[u8], y: &[u8]) -> bool {
    let nan = |b: &[u8]| match dtype {
        DataType::Fp16 => f16::from_le_bytes([b[0], b[1]]).is_nan(),
        DataType::Bf16 => bf16::from_le_bytes([b[0], b[1]]).is_nan(),
        DataType::Fp32 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
        DataType::Fp64 => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
        _ => false,
    };
    (nan(x) && nan(y)) || x == y
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 64 } else { 256 }))]

    /// Random bytes (so every bit pattern: NaNs, infinities, subnormals),
    /// lengths around the 256-element fp16/bf16 block, an unaligned start.
    #[test]
    fn kernels_match_scalar_oracle(
        dtype_i in 0usize..12,
        op_i in 0usize..5,
        elems in prop_oneof![0usize..8, 250usize..270, 500usize..530],
        skew in 0usize..3,
        seed in any::<u64>(),
    ) {
        let dtype = DataType::ALL[dtype_i];
        let op = ReduceOp::ALL[op_i];
        let size = dtype.size() as usize;
        let n = elems * size;
        let mut state = seed | 1;
        let mut next = || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; state as u8 };
        let a_buf: Vec<u8> = (0..n + skew).map(|_| next()).collect();
        let b_buf: Vec<u8> = (0..n + skew).map(|_| next()).collect();
        let (a, b) = (&a_buf[skew..], &b_buf[skew..]);
        let got = both(dtype, op, a, b);
        for i in 0..elems {
            let r = i * size..(i + 1) * size;
            let want = oracle(dtype, op, &a[r.clone()], &b[r.clone()]);
            prop_assert!(same_value(dtype, &got[r.clone()], &want),
                "{dtype} {op} element {i}: {:?} op {:?} = {:?}, oracle {:?}", &a[r.clone()], &b[r.clone()], &got[r], want);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 64 } else { 256 }))]

    /// Integer division by a prepared divisor equals i128 division
    /// truncated toward zero, for every integer type, any value (the
    /// extremes included) and any divisor.
    #[test]
    fn integer_divide_matches_wide_division(
        values in proptest::collection::vec(any::<i64>(), 0..40),
        divisor in prop_oneof![Just(1u32), Just(2), Just(3), Just(7), Just(u32::MAX), 1u32..],
    ) {
        let mut values = values;
        values.extend([i64::MIN, i64::MAX, -1, 0, 1]);
        let d = i128::from(divisor);
        for dtype in [
            DataType::Int8, DataType::Int16, DataType::Int32, DataType::Int64,
            DataType::Uint8, DataType::Uint16, DataType::Uint32, DataType::Uint64,
        ] {
            let size = dtype.size() as usize;
            // Each value's low bytes, read back as the type.
            let mut buf: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()[..size].to_vec()).collect();
            let signed = matches!(dtype, DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64);
            let as_wide = |b: &[u8]| -> i128 {
                let mut w = [0u8; 16];
                w[..size].copy_from_slice(b);
                if signed && b[size - 1] & 0x80 != 0 {
                    w[size..].fill(0xff);
                }
                i128::from_le_bytes(w)
            };
            let want: Vec<i128> = buf.chunks_exact(size).map(|b| as_wide(b) / d).collect();
            divide(dtype, &mut buf, divisor).unwrap();
            let got: Vec<i128> = buf.chunks_exact(size).map(as_wide).collect();
            prop_assert_eq!(got, want, "{} / {}", dtype, divisor);
        }
    }
}

/// The `*_kept` kernels round one reduction as the plain kernels do, for
/// every op, both 16-bit types and lengths around the fp16 block size; a
/// fold continues from the kept f32 values (no second rounding).
#[test]
fn kept_kernels_match_the_plain_ones_and_fold_from_the_kept_values() {
    for dtype in [DataType::Bf16, DataType::Fp16] {
        let elem = |i: usize, s: u32| -> [u8; 2] {
            let x = ((i as f32) * 0.37 + s as f32).sin() * 300.0;
            match dtype {
                DataType::Bf16 => bf16::from_f32(x).to_le_bytes(),
                _ => f16::from_f32(x).to_le_bytes(),
            }
        };
        for n in [1usize, 127, 128, 129, 300] {
            let a: Vec<u8> = (0..n).flat_map(|i| elem(i, 1)).collect();
            let b: Vec<u8> = (0..n).flat_map(|i| elem(i, 2)).collect();
            for op in ReduceOp::ALL {
                let want = both(dtype, op, &a, &b);
                let mut parts = Partials::new();
                let mut d = a.clone();
                reduce_kept(dtype, op, &mut d, 6, &mut parts, &b).unwrap();
                assert_eq!(d, want, "{dtype} {op} n={n} reduce_kept");
                let mut o = vec![0u8; a.len()];
                let mut parts2 = Partials::new();
                reduce_into_kept(dtype, op, &mut o, 6, &mut parts2, &a, &b).unwrap();
                assert_eq!(o, want, "{dtype} {op} n={n} reduce_into_kept");
                // The kept values are the unrounded f32 results: folding a
                // zero (sum) from them and rounding gives the same bytes.
                if op == ReduceOp::Sum {
                    let zeros = vec![0f32; n];
                    fold_kept(dtype, op, &mut d, 6, &mut parts, &zeros).unwrap();
                    assert_eq!(d, want, "{dtype} n={n} fold of 0");
                }
            }
        }
    }
    // bf16: 256 + 1 + 1 kept in f32 is 258 (exact); rounded per step it is 256.
    let one = bf16::from_f32(1.0).to_le_bytes();
    let mut d = bf16::from_f32(256.0).to_le_bytes().to_vec();
    let mut parts = Partials::new();
    reduce_kept(DataType::Bf16, ReduceOp::Sum, &mut d, 0, &mut parts, &one).unwrap();
    assert_eq!(d, bf16::from_f32(256.0).to_le_bytes(), "257 rounds to 256");
    fold_kept(DataType::Bf16, ReduceOp::Sum, &mut d, 0, &mut parts, &[1.0]).unwrap();
    assert_eq!(d, bf16::from_f32(258.0).to_le_bytes());
    // A write forgets: the fold then starts from the bytes.
    parts.forget(0..2);
    fold_kept(DataType::Bf16, ReduceOp::Sum, &mut d, 0, &mut parts, &[1.0]).unwrap();
    assert_eq!(
        d,
        bf16::from_f32(260.0).to_le_bytes(),
        "258 + 1 = 259, a tie: 260"
    );
}

/// Element bit patterns for the every-path check: random bits (so NaNs,
/// infinities, subnormals of every type) mixed with each float type's
/// specials: ±0, the smallest and largest subnormal and normal, ±inf,
/// quiet and signalling NaNs with payloads, and values whose sums and
/// products round on a tie.
fn special_bits(dtype: DataType) -> Vec<u64> {
    match dtype {
        DataType::Fp16 => vec![
            0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7C01,
            0x7E00, 0xFE01, 0x7FFF, 0x3C00, 0x3C01, 0x1000, 0x1400, 0x0200,
        ],
        DataType::Bf16 => vec![
            0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7F81,
            0x7FC0, 0xFFC1, 0x7FFF, 0x3F80, 0x3F81, 0x3B80, 0x3C00, 0x0040,
        ],
        DataType::Fp32 => vec![
            0,
            0x8000_0000,
            1,
            0x007F_FFFF,
            0x0080_0000,
            0x7F7F_FFFF,
            0x7F80_0000,
            0xFF80_0000,
            0x7F80_0001,
            0x7FC0_0000,
            0xFFC0_0001,
            0x3F80_0000,
            0x3380_0000,
            0x3F80_0001,
        ],
        DataType::Fp64 => vec![
            0,
            0x8000_0000_0000_0000,
            1,
            0x0010_0000_0000_0000,
            0x7FF0_0000_0000_0000,
            0xFFF0_0000_0000_0000,
            0x7FF0_0000_0000_0001,
            0x7FF8_0000_0000_0000,
            0x3FF0_0000_0000_0000,
            0x3CA0_0000_0000_0000,
        ],
        _ => vec![
            0,
            1,
            u64::MAX,
            1 << (dtype.size() * 8 - 1),
            (1 << (dtype.size() * 8 - 1)) - 1,
        ],
    }
}

/// `n` elements of `dtype`: each a special (half of them) or random bits.
fn mixed_elems(dtype: DataType, n: usize, seed: u64) -> Vec<u8> {
    let size = dtype.size() as usize;
    let specials = special_bits(dtype);
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .flat_map(|_| {
            let r = next();
            let bits = if r & 1 == 0 {
                specials[(r >> 8) as usize % specials.len()]
            } else {
                next()
            };
            bits.to_le_bytes()[..size].to_vec()
        })
        .collect()
}

/// `bytes` as elements of `dtype` (a float type; others are returned as
/// they are) with every NaN replaced by one quiet NaN. Which payload a
/// NaN result carries is not one of the paths' guarantees: with two NaN
/// operands x86 returns the first one's, and Rust leaves the order of a
/// `+` or `*` to the compiler (LLVM commutes them), so the portable path
/// itself gives either operand's payload depending on how it was
/// vectorised (seen in release builds: `a` = signalling NaN with payload
/// 1, `b` = the quiet NaN, sum = either). Every path must give a NaN
/// exactly where the others do, and the same bits everywhere else.
fn one_nan(dtype: Option<DataType>, bytes: &[u8]) -> Vec<u8> {
    // (element bytes, exponent bits, mantissa bits)
    let (size, exp, man) = match dtype {
        Some(DataType::Fp16) => (2, 5, 10),
        Some(DataType::Bf16) => (2, 8, 7),
        Some(DataType::Fp32) => (4, 8, 23),
        Some(DataType::Fp64) => (8, 11, 52),
        _ => return bytes.to_vec(),
    };
    bytes
        .chunks(size)
        .flat_map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            let bits = u64::from_le_bytes(w);
            let exp_mask = ((1u64 << exp) - 1) << man;
            let man_mask = (1u64 << man) - 1;
            let nan = c.len() == size && bits & exp_mask == exp_mask && bits & man_mask != 0;
            let out = if nan { exp_mask | 1 << (man - 1) } else { bits };
            out.to_le_bytes()[..c.len()].to_vec()
        })
        .collect()
}

#[test]
fn one_nan_folds_payloads_and_signs_of_nans_only() {
    let f64s = |v: &[u64]| v.iter().flat_map(|b| b.to_le_bytes()).collect::<Vec<u8>>();
    let (snan, qnan, neg_qnan) = (
        0x7FF0_0000_0000_0001u64,
        0x7FF8_0000_0000_0000,
        0xFFF8_0000_0000_0005,
    );
    let inf = 0x7FF0_0000_0000_0000u64;
    let got = one_nan(Some(DataType::Fp64), &f64s(&[snan, qnan, neg_qnan, inf, 1]));
    assert_eq!(got, f64s(&[qnan, qnan, qnan, inf, 1]));
    // fp16: 0x7C01 (sNaN) and 0xFE00 (negative qNaN) -> 0x7E00; infinity kept.
    let got = one_nan(Some(DataType::Fp16), &[0x01, 0x7C, 0x00, 0xFE, 0x00, 0x7C]);
    assert_eq!(got, vec![0x00, 0x7E, 0x00, 0x7E, 0x00, 0x7C]);
    // Integers are compared as they are.
    assert_eq!(
        one_nan(Some(DataType::Int16), &[0x01, 0x7C]),
        vec![0x01, 0x7C]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(debug_assertions) { 48 } else { 256 }))]

    /// Every instruction set this CPU has gives the portable path's bits
    /// (NaN payloads aside: [`one_nan`]), for every kernel, type and op, on lengths around the vector widths
    /// and the fp16 staging block (128) and an unaligned start.
    #[test]
    fn every_isa_gives_the_same_bits(
        dtype_i in 0usize..12,
        op_i in 0usize..5,
        elems in prop_oneof![0usize..40, 120usize..140, 250usize..262],
        skew in 0usize..3,
        divisor in prop_oneof![Just(1u32), Just(3), Just(7), 1u32..1000],
        seed in any::<u64>(),
    ) {
        let dtype = DataType::ALL[dtype_i];
        let op = ReduceOp::ALL[op_i];
        let n = elems * dtype.size() as usize;
        let a_buf = [vec![0u8; skew], mixed_elems(dtype, elems, seed)].concat();
        let b_buf = [vec![0u8; skew], mixed_elems(dtype, elems, seed ^ 0x9E37_79B9)].concat();
        let (a, b) = (&a_buf[skew..], &b_buf[skew..]);
        let run = |isa: Isa| {
            let mut d = a.to_vec();
            reduce_with(isa, dtype, op, &mut d, b).unwrap();
            let mut o = vec![0xAB; n];
            reduce_into_on(isa, dtype, op, &mut o, a, b);
            let mut q = a.to_vec();
            divide_on(isa, dtype, &mut q, divisor);
            let mut kept = Vec::new();
            if keeps_partials(dtype) {
                // A RecvReduce, then a fold of the kept values, an Avg's
                // divide of them, and the widen / narrow of the fp32 precision.
                let mut parts = Partials::new();
                let mut k = a.to_vec();
                reduce_kept_on(isa, dtype, op, &mut k, 2, &mut parts, b).unwrap();
                let vals = values(dtype, b, 0, None).unwrap();
                fold_kept_on(isa, dtype, op, &mut k, 2, &mut parts, &vals).unwrap();
                let kept_vals = values(dtype, &k, 2, Some(&parts)).unwrap();
                divide_kept_on(isa, dtype, &mut k, 2, &mut parts, divisor).unwrap();
                let mut wide = vec![0u8; 2 * n];
                widen_on(isa, dtype, a, &mut wide);
                let mut narrow = vec![0u8; n];
                narrow_on(isa, dtype, &wide, &mut narrow);
                let wide_bits: Vec<u8> = kept_vals.iter().flat_map(|v| v.to_le_bytes()).collect();
                let (f32s, own) = (Some(DataType::Fp32), Some(dtype));
                kept = [
                    one_nan(own, &k),
                    one_nan(f32s, &wide),
                    one_nan(own, &narrow),
                    one_nan(f32s, &wide_bits),
                ]
                .concat();
            }
            let own = Some(dtype);
            (one_nan(own, &d), one_nan(own, &o), one_nan(own, &q), kept)
        };
        let want = run(Isa::Portable);
        for isa in Isa::available() {
            let got = run(isa);
            prop_assert!(got == want, "{dtype} {op} on {isa} differs from portable");
        }
    }
}

/// The dispatcher picks the widest level this CPU has, and on a CPU with
/// AVX2 and F16C that is not the portable path (so the check above
/// compares two different code paths; on this project's machines the
/// CPU has AVX-512).
#[test]
fn best_isa_is_the_widest_available() {
    let avail = Isa::available();
    assert_eq!(avail.first(), Some(&Isa::Portable));
    assert_eq!(Isa::best(), *avail.last().unwrap());
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c") {
        assert!(Isa::best() >= Isa::Avx2);
    }
}

/// The 16-bit float `Max`/`Min` (which compare the bits, not widened
/// values) give, on every instruction set, what widening with the `half`
/// crate, IEEE 754-2019 `maximum`/`minimum` in f32 and narrowing back
/// give: every bit pattern against each special value of its type and a
/// spread of others (NaNs of both signs and any payload, infinities,
/// subnormals, both zeros).
#[test]
fn half_max_min_on_the_bits_match_widened_f32() {
    fn reference(dtype: DataType, op: ReduceOp, x: u16, y: u16) -> u16 {
        let wide = |h: u16| match dtype {
            DataType::Fp16 => f16::from_bits(h).to_f32(),
            _ => bf16::from_bits(h).to_f32(),
        };
        let (a, b) = (wide(x), wide(y));
        let r = if a.is_nan() || b.is_nan() {
            f32::NAN
        } else if a == b {
            // +0.0 against -0.0 (or equal bits): Max keeps +0.0, Min -0.0.
            let (ab, bb) = (a.to_bits(), b.to_bits());
            f32::from_bits(if op == ReduceOp::Max {
                ab & bb
            } else {
                ab | bb
            })
        } else if (a > b) == (op == ReduceOp::Max) {
            a
        } else {
            b
        };
        match dtype {
            DataType::Fp16 => f16::from_f32(r).to_bits(),
            _ => bf16::from_f32(r).to_bits(),
        }
    }
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let all_bytes = bytes_u16(&all);
    for dtype in [DataType::Fp16, DataType::Bf16] {
        let mut ys: Vec<u16> = special_bits(dtype).iter().map(|&b| b as u16).collect();
        ys.extend((0..=u16::MAX).step_by(4093));
        for op in [ReduceOp::Max, ReduceOp::Min] {
            for &y in &ys {
                let want: Vec<u16> = all.iter().map(|&x| reference(dtype, op, x, y)).collect();
                let src = bytes_u16(&vec![y; all.len()]);
                for isa in Isa::available() {
                    let mut dst = all_bytes.clone();
                    reduce_with(isa, dtype, op, &mut dst, &src).unwrap();
                    let got = bits_u16(&dst);
                    let bad = (0..all.len()).find(|&i| got[i] != want[i]);
                    assert!(
                        bad.is_none(),
                        "{dtype} {op} on {isa}: {:#06x} vs {y:#06x} gave {:#06x}, want {:#06x}",
                        all[bad.unwrap()],
                        got[bad.unwrap()],
                        want[bad.unwrap()]
                    );
                    let mut out = vec![0xAB; all_bytes.len()];
                    reduce_into_on(isa, dtype, op, &mut out, &all_bytes, &src);
                    assert!(out == dst, "{dtype} {op} on {isa}: reduce_into differs");
                }
            }
        }
    }
}

/// bf16 sums and products (vector blocks on AVX2 / AVX-512, which round in
/// 16-bit lanes) give, on every instruction set, the `half` crate's
/// rounding of the f32 result: every bit pattern against each non-NaN
/// special and a spread of others (NaN operands come from the patterns;
/// two NaNs' payload is the CPU's choice either way), with tails after
/// the 32-element blocks.
#[test]
fn bf16_sum_prod_match_the_half_crate_on_every_isa() {
    let all: Vec<u16> = (0..=u16::MAX).chain(0..31).collect();
    let all_bytes = bytes_u16(&all);
    let mut ys: Vec<u16> = special_bits(DataType::Bf16)
        .iter()
        .map(|&b| b as u16)
        .filter(|&b| !bf16::from_bits(b).is_nan())
        .collect();
    ys.extend(
        (0..=u16::MAX)
            .step_by(2039)
            .filter(|&b| !bf16::from_bits(b).is_nan()),
    );
    for op in [ReduceOp::Sum, ReduceOp::Prod] {
        for &y in &ys {
            let yf = bf16::from_bits(y).to_f32();
            let want: Vec<u16> = all
                .iter()
                .map(|&x| {
                    let xf = bf16::from_bits(x).to_f32();
                    let r = if op == ReduceOp::Sum {
                        xf + yf
                    } else {
                        xf * yf
                    };
                    bf16::from_f32(r).to_bits()
                })
                .collect();
            let src = bytes_u16(&vec![y; all.len()]);
            for isa in Isa::available() {
                // Tails of 31 and 14 elements after the 32-element blocks.
                for cut in [all.len(), all.len() - 17] {
                    let mut dst = all_bytes[..2 * cut].to_vec();
                    reduce_with(isa, DataType::Bf16, op, &mut dst, &src[..2 * cut]).unwrap();
                    let got = bits_u16(&dst);
                    let bad = (0..cut).find(|&i| got[i] != want[i]);
                    assert!(
                        bad.is_none(),
                        "bf16 {op} on {isa}: {:#06x} and {y:#06x} gave {:#06x}, want {:#06x}",
                        all[bad.unwrap()],
                        got[bad.unwrap()],
                        want[bad.unwrap()]
                    );
                    let mut out = vec![0xAB; 2 * cut];
                    reduce_into_on(
                        isa,
                        DataType::Bf16,
                        op,
                        &mut out,
                        &all_bytes[..2 * cut],
                        &src[..2 * cut],
                    );
                    assert!(out == dst, "bf16 {op} on {isa}: reduce_into differs");
                }
            }
        }
    }
}

/// 64-bit integer `Max`/`Min` (compare-and-blend blocks of 16 on AVX2)
/// give `Ord::max`/`Ord::min` of `i64` or `u64` on every instruction set:
/// every pair of values around the sign boundary and the 32-bit halves,
/// in place with a tail after the blocks and into a third buffer.
#[test]
fn int64_max_min_match_ord_on_every_isa() {
    let specials: Vec<u64> = [
        0,
        1,
        2,
        u64::MAX,
        u64::MAX - 1,
        1 << 63,
        (1 << 63) + 1,
        (1 << 63) - 1,
        (1 << 63) - 2,
        1 << 62,
        (1 << 62) | (1 << 63),
        0xFFFF_FFFF,
        1 << 32,
        0x8000_0000,
        0xFFFF_FFFF_0000_0000,
        0x0000_0001_FFFF_FFFF,
    ]
    .to_vec();
    let (xs, ys): (Vec<u64>, Vec<u64>) = specials
        .iter()
        .flat_map(|&x| specials.iter().map(move |&y| (x, y)))
        .unzip();
    let (xb, yb) = (bytes_u64(&xs), bytes_u64(&ys));
    for dtype in [DataType::Int64, DataType::Uint64] {
        for op in [ReduceOp::Max, ReduceOp::Min] {
            let want: Vec<u64> = xs
                .iter()
                .zip(&ys)
                .map(|(&x, &y)| match (dtype, op) {
                    (DataType::Int64, ReduceOp::Max) => (x as i64).max(y as i64) as u64,
                    (DataType::Int64, _) => (x as i64).min(y as i64) as u64,
                    (_, ReduceOp::Max) => x.max(y),
                    _ => x.min(y),
                })
                .collect();
            let want = bytes_u64(&want);
            for isa in Isa::available() {
                // 256 elements: 16 whole blocks; 251: a tail of 11.
                for n in [xs.len(), xs.len() - 5] {
                    let mut dst = xb[..8 * n].to_vec();
                    reduce_with(isa, dtype, op, &mut dst, &yb[..8 * n]).unwrap();
                    assert_eq!(dst, want[..8 * n], "{dtype} {op} on {isa}, {n} elements");
                    let mut out = vec![0xAB; 8 * n];
                    reduce_into_on(isa, dtype, op, &mut out, &xb[..8 * n], &yb[..8 * n]);
                    assert_eq!(out, want[..8 * n], "{dtype} {op} into, on {isa}");
                }
            }
        }
    }
}

/// The AVX-512 BF16 and FP16 paths are among those the checks above run
/// wherever the CPU has the features (this project's Xeon has both).
#[test]
fn bf16_and_fp16_paths_run_where_the_cpu_has_them() {
    #[cfg(target_arch = "x86_64")]
    {
        let has = |f: &str| match f {
            "avx512bf16" => std::arch::is_x86_feature_detected!("avx512bf16"),
            _ => std::arch::is_x86_feature_detected!("avx512fp16"),
        };
        let base = Isa::Avx512.is_available() && std::arch::is_x86_feature_detected!("avx512dq");
        let avail = Isa::available();
        assert_eq!(avail.contains(&Isa::Avx512Bf16), base && has("avx512bf16"));
        assert_eq!(
            avail.contains(&Isa::Avx512Fp16),
            base && has("avx512bf16") && has("avx512fp16")
        );
    }
    let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
    assert_eq!(
        names,
        ["portable", "avx2", "avx512", "avx512bf16", "avx512fp16"]
    );
}

/// Sums and products whose results are subnormal (or round from a
/// subnormal f32 up to the least normal), at ties, at ±0, overflowing to
/// infinity or NaN, on every instruction set: the hand-computed bits
/// (checked against the `half` crate too). Each case sits in a 32-element
/// block of normal values (the AVX-512 BF16 path computes a block with a
/// subnormal f32 result on the integer rounding, since `vcvtne2ps2bf16`
/// flushes it to zero; AVX-512 FP16 computes every block in fp16), each
/// at another lane, and again in the tail after the blocks.
#[test]
fn subnormal_results_on_every_isa() {
    use ReduceOp::{Prod, Sum};
    const NAN: u16 = 0xFFFF; // any NaN
    #[rustfmt::skip]
    let bf16_cases: &[(ReduceOp, u16, u16, u16)] = &[
        (Sum, 0x0001, 0x0001, 0x0002),  // 2^-133 + 2^-133
        (Sum, 0x0080, 0x8001, 0x007F),  // least normal - least subnormal
        (Sum, 0x007F, 0x0001, 0x0080),  // subnormals summing to the least normal
        (Sum, 0x8001, 0x8001, 0x8002),
        (Sum, 0x0001, 0x8001, 0x0000),  // x + -x = +0
        (Sum, 0x0080, 0x8080, 0x0000),
        (Sum, 0x8000, 0x8000, 0x8000),  // -0 + -0
        (Sum, 0x7F7F, 0x7F7F, 0x7F80),  // overflow to inf
        (Sum, 0x7F81, 0x3F80, NAN),     // signalling NaN + 1
        (Sum, 0x7F80, 0xFF80, NAN),     // inf - inf
        (Prod, 0x0080, 0x3F00, 0x0040), // 2^-126 * 0.5
        (Prod, 0x0081, 0x3F00, 0x0040), // f32 0x00408000: tie, kept even
        (Prod, 0x0083, 0x3F00, 0x0042), // f32 0x00418000: tie, kept odd: up
        (Prod, 0x0080, 0x3F7F, 0x0080), // f32 0x007F8000: tie, odd: up to normal
        (Prod, 0x0001, 0x3F00, 0x0000), // 2^-134: tie with 0, even
        (Prod, 0x0003, 0x3F00, 0x0002), // 1.5 * 2^-133: tie, up
        (Prod, 0x8001, 0x3F80, 0x8001),
        (Prod, 0x0001, 0x8000, 0x8000), // -0
        (Prod, 0x7F7F, 0x4000, 0x7F80), // overflow to inf
        (Prod, 0x0000, 0x7F80, NAN),    // 0 * inf
    ];
    #[rustfmt::skip]
    let fp16_cases: &[(ReduceOp, u16, u16, u16)] = &[
        (Sum, 0x0001, 0x0001, 0x0002),  // 2^-24 + 2^-24
        (Sum, 0x0400, 0x8001, 0x03FF),  // least normal - least subnormal
        (Sum, 0x03FF, 0x0001, 0x0400),  // to the least normal
        (Sum, 0x0001, 0x8001, 0x0000),  // x + -x = +0
        (Sum, 0x8000, 0x8000, 0x8000),
        (Sum, 0x7BFF, 0x4C00, 0x7C00),  // 65504 + 16: tie, to even = 2^16: inf
        (Sum, 0x7BFF, 0x4BFF, 0x7BFF),  // 65504 + 15.99: below the tie
        (Sum, 0x7C01, 0x3C00, NAN),     // signalling NaN + 1
        (Sum, 0x7C00, 0xFC00, NAN),     // inf - inf
        (Prod, 0x0001, 0x3800, 0x0000), // 2^-25: tie with 0, even
        (Prod, 0x0003, 0x3800, 0x0002), // 1.5 * 2^-24: tie, up
        (Prod, 0x0200, 0x3800, 0x0100), // 2^-15 * 0.5
        (Prod, 0x0400, 0x3BFF, 0x0400), // 2^-14 - 2^-25: tie, even = normal
        (Prod, 0x1000, 0x1000, 0x0004), // 2^-11 * 2^-11 = 2^-22
        (Prod, 0x8001, 0x3C00, 0x8001),
        (Prod, 0x0001, 0x8000, 0x8000), // -0
        (Prod, 0x7BFF, 0x4000, 0x7C00), // overflow to inf
        (Prod, 0x0000, 0x7C00, NAN),    // 0 * inf
    ];
    for (dtype, cases, one) in [
        (DataType::Bf16, bf16_cases, 0x3F80u16),
        (DataType::Fp16, fp16_cases, 0x3C00),
    ] {
        let widen = |h: u16| match dtype {
            DataType::Bf16 => bf16::from_bits(h).to_f32(),
            _ => f16::from_bits(h).to_f32(),
        };
        let narrow = |v: f32| match dtype {
            DataType::Bf16 => bf16::from_f32(v).to_bits(),
            _ => f16::from_f32(v).to_bits(),
        };
        let is_nan = |h: u16| widen(h).is_nan();
        for (k, &(op, x, y, want)) in cases.iter().enumerate() {
            let (xf, yf) = (widen(x), widen(y));
            let exact = narrow(if op == Sum { xf + yf } else { xf * yf });
            assert!(
                exact == want || is_nan(exact) && want == NAN,
                "{dtype} {op} {x:#06x} {y:#06x}: the half crate gives {exact:#06x}, the case says {want:#06x}"
            );
            // Lane k % 32 of block 0, block 1 all ones, lane k % 5 of a
            // 5-element tail.
            let (lane, tail) = (k % 32, 64 + k % 5);
            let mut xs = vec![one; 69];
            let mut ys = vec![one; 69];
            (xs[lane], ys[lane], xs[tail], ys[tail]) = (x, y, x, y);
            let filler = if op == Sum { narrow(2.0) } else { one };
            for isa in Isa::available() {
                let mut dst = bytes_u16(&xs);
                reduce_with(isa, dtype, op, &mut dst, &bytes_u16(&ys)).unwrap();
                let mut out = vec![0xAB; dst.len()];
                reduce_into_on(isa, dtype, op, &mut out, &bytes_u16(&xs), &bytes_u16(&ys));
                for got in [bits_u16(&dst), bits_u16(&out)] {
                    for (i, &g) in got.iter().enumerate() {
                        let w = if i == lane || i == tail { want } else { filler };
                        assert!(
                            g == w || w == NAN && is_nan(g),
                            "{dtype} {op} on {isa}: {x:#06x}, {y:#06x} at element {i} gave {g:#06x}, want {w:#06x}"
                        );
                    }
                }
            }
        }
    }
}

/// Every pair of fp16 operands (2^32), and of bf16 operands, summed and
/// multiplied on the widest instruction set gives the AVX-512 (F16C /
/// integer rounding) path's bits, NaN payloads aside: the exhaustive check
/// behind `simd::x86::fp16_op32_avx512fp16`'s double-rounding argument
/// and `bf16_op32_avx512bf16`'s fallback. Release build: about 10 s on this project's Xeon.
#[test]
#[ignore]
fn every_16_bit_pair_matches_the_avx512_path() {
    if Isa::best() <= Isa::Avx512 {
        return;
    }
    let all: Vec<u16> = (0..=u16::MAX).collect();
    let ys = bytes_u16(&all);
    for dtype in [DataType::Fp16, DataType::Bf16] {
        for op in [ReduceOp::Sum, ReduceOp::Prod] {
            let mut bad = 0u64;
            for x in 0..=u16::MAX {
                let xs = bytes_u16(&vec![x; all.len()]);
                let mut got = xs.clone();
                reduce_with(Isa::best(), dtype, op, &mut got, &ys).unwrap();
                let mut want = xs;
                reduce_with(Isa::Avx512, dtype, op, &mut want, &ys).unwrap();
                if got != want && one_nan(Some(dtype), &got) != one_nan(Some(dtype), &want) {
                    bad += 1;
                    eprintln!("{dtype} {op}: x = {x:#06x} differs");
                }
            }
            assert_eq!(bad, 0, "{dtype} {op}: operands x that differ");
        }
    }
}
