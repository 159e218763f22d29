//! Kernels for the 16-bit floats, fp16 (IEEE 754 binary16) and bf16.
//!
//! Blocks of [`BLOCK`] elements are widened to f32, combined in f32 and
//! rounded back once (round to nearest, ties to even). fp16 conversion uses
//! the `half` crate's slice conversions, which pick the F16C instructions at
//! run time when the CPU has them; bf16 conversion is a shift one way and a
//! branch-free rounding the other, written here so it vectorizes.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use super::native::Native;
use crate::dtype::ReduceOp;

/// Elements per block: big enough to amortise the per-block conversion
/// calls, small enough that the f32 staging arrays (3 KiB) stay in L1.
const BLOCK: usize = 256;

/// Converts between 2-byte little-endian elements and f32.
pub(super) trait HalfCodec {
    /// `out[i] = widen(bytes[2i..2i+2])`; `bytes.len() == 2 * out.len() <= 2 * BLOCK`.
    fn widen(bytes: &[u8], out: &mut [f32]);
    /// `bytes[2i..2i+2] = round(values[i])`; `bytes.len() == 2 * values.len() <= 2 * BLOCK`.
    fn narrow(values: &[f32], bytes: &mut [u8]);
}

/// IEEE 754 binary16.
pub(super) struct Fp16Codec;

/// bfloat16: the top half of an f32.
pub(super) struct Bf16Codec;

#[inline(always)]
fn read_bits(bytes: &[u8], bits: &mut [u16]) {
    for (b, c) in bits.iter_mut().zip(bytes.chunks_exact(2)) {
        *b = u16::from_le_bytes([c[0], c[1]]);
    }
}

#[inline(always)]
fn write_bits(bits: &[u16], bytes: &mut [u8]) {
    for (c, b) in bytes.chunks_exact_mut(2).zip(bits) {
        c.copy_from_slice(&b.to_le_bytes());
    }
}

impl HalfCodec for Fp16Codec {
    #[inline(always)]
    fn widen(bytes: &[u8], out: &mut [f32]) {
        let n = out.len();
        let mut bits = [0u16; BLOCK];
        read_bits(bytes, &mut bits[..n]);
        bits[..n]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(out);
    }

    #[inline(always)]
    fn narrow(values: &[f32], bytes: &mut [u8]) {
        let n = values.len();
        let mut bits = [0u16; BLOCK];
        bits[..n]
            .reinterpret_cast_mut::<f16>()
            .convert_from_f32_slice(values);
        write_bits(&bits[..n], bytes);
    }
}

/// f32 to bf16 bits, round to nearest, ties to even; NaN stays NaN (quiet
/// bit set). Bit-identical to `half::bf16::from_f32` (tested), but written
/// without early returns so a loop of it vectorizes.
#[inline(always)]
pub(super) fn f32_to_bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let nan = (x >> 16) | 0x0040;
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    (if v.is_nan() { nan } else { rounded }) as u16
}

impl HalfCodec for Bf16Codec {
    #[inline(always)]
    fn widen(bytes: &[u8], out: &mut [f32]) {
        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
        }
    }

    #[inline(always)]
    fn narrow(values: &[f32], bytes: &mut [u8]) {
        for (c, v) in bytes.chunks_exact_mut(2).zip(values) {
            c.copy_from_slice(&f32_to_bf16_bits(*v).to_le_bytes());
        }
    }
}

#[inline(always)]
fn zip_in_place<C: HalfCodec>(dst: &mut [u8], src: &[u8], f: impl Fn(f32, f32) -> f32) {
    let mut a = [0f32; BLOCK];
    let mut b = [0f32; BLOCK];
    for (d, s) in dst.chunks_mut(2 * BLOCK).zip(src.chunks(2 * BLOCK)) {
        let n = d.len() / 2;
        C::widen(d, &mut a[..n]);
        C::widen(s, &mut b[..n]);
        for (x, y) in a[..n].iter_mut().zip(&b[..n]) {
            *x = f(*x, *y);
        }
        C::narrow(&a[..n], d);
    }
}

#[inline(always)]
fn zip_into<C: HalfCodec>(out: &mut [u8], a: &[u8], b: &[u8], f: impl Fn(f32, f32) -> f32) {
    let mut x = [0f32; BLOCK];
    let mut y = [0f32; BLOCK];
    for ((o, l), r) in out
        .chunks_mut(2 * BLOCK)
        .zip(a.chunks(2 * BLOCK))
        .zip(b.chunks(2 * BLOCK))
    {
        let n = o.len() / 2;
        C::widen(l, &mut x[..n]);
        C::widen(r, &mut y[..n]);
        for (p, q) in x[..n].iter_mut().zip(&y[..n]) {
            *p = f(*p, *q);
        }
        C::narrow(&x[..n], o);
    }
}

/// `dst = dst (op) src`; lengths already checked.
pub(super) fn reduce<C: HalfCodec>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => zip_in_place::<C>(dst, src, <f32 as Native<4>>::sum),
        ReduceOp::Prod => zip_in_place::<C>(dst, src, <f32 as Native<4>>::prod),
        ReduceOp::Max => zip_in_place::<C>(dst, src, <f32 as Native<4>>::max),
        ReduceOp::Min => zip_in_place::<C>(dst, src, <f32 as Native<4>>::min),
    }
}

/// `out = a (op) b`; lengths already checked.
pub(super) fn reduce_into<C: HalfCodec>(op: ReduceOp, out: &mut [u8], a: &[u8], b: &[u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => zip_into::<C>(out, a, b, <f32 as Native<4>>::sum),
        ReduceOp::Prod => zip_into::<C>(out, a, b, <f32 as Native<4>>::prod),
        ReduceOp::Max => zip_into::<C>(out, a, b, <f32 as Native<4>>::max),
        ReduceOp::Min => zip_into::<C>(out, a, b, <f32 as Native<4>>::min),
    }
}

/// `dst = dst / divisor` in f32, rounded once; `divisor > 0`.
pub(super) fn divide<C: HalfCodec>(dst: &mut [u8], divisor: u32) {
    let mut a = [0f32; BLOCK];
    let d = divisor as f32;
    for chunk in dst.chunks_mut(2 * BLOCK) {
        let n = chunk.len() / 2;
        C::widen(chunk, &mut a[..n]);
        for x in &mut a[..n] {
            *x /= d;
        }
        C::narrow(&a[..n], chunk);
    }
}
