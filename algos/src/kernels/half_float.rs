//! The 16-bit floats: fp16 (IEEE 754 binary16) and bf16.
//!
//! Both are widened to f32, combined in f32 and rounded back (round to
//! nearest, ties to even) once per kernel call.
//!
//! - bf16 is a [`Native`] element type holding an f32: widening is a shift
//!   and narrowing a branch-free rounding written here, so the generic
//!   element loops in `native` vectorize with plain SSE2.
//! - fp16 goes through the `half` crate's slice conversions in blocks of
//!   [`BLOCK`] elements: they use the F16C instructions when the CPU has
//!   them (detected at run time, once per block), which a portable
//!   branch-free conversion could not match on this machine (measured 2x
//!   slower; see `algos/README.md`).

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use super::native::{Divisor, Native};
use crate::dtype::ReduceOp;

/// bf16 bits to f32, exact: bf16 is the top half of an f32.
#[inline(always)]
pub(super) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to bf16 bits, round to nearest, ties to even; NaN stays NaN with its
/// top payload bits and the quiet bit set (as the `half` crate does).
#[inline(always)]
pub(super) fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    let nan = (x >> 16) | 0x0040;
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    (if v.is_nan() { nan } else { rounded }) as u16
}

/// A bf16 element, widened to f32.
#[derive(Clone, Copy)]
pub(super) struct Bf16(f32);

impl Native<2> for Bf16 {
    #[inline(always)]
    fn from_le(bytes: [u8; 2]) -> Self {
        Bf16(bf16_to_f32(u16::from_le_bytes(bytes)))
    }
    #[inline(always)]
    fn to_le(self) -> [u8; 2] {
        f32_to_bf16(self.0).to_le_bytes()
    }
    #[inline(always)]
    fn sum(self, other: Self) -> Self {
        Bf16(self.0 + other.0)
    }
    #[inline(always)]
    fn prod(self, other: Self) -> Self {
        Bf16(self.0 * other.0)
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        Bf16(Native::<4>::max(self.0, other.0))
    }
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        Bf16(Native::<4>::min(self.0, other.0))
    }
    #[inline(always)]
    fn div(self, divisor: &Divisor) -> Self {
        Bf16(self.0 / divisor.value as f32)
    }
}

/// fp16 elements per block: amortises the conversion calls; the three
/// staging arrays (1.5 KiB) stay in L1.
pub(super) const BLOCK: usize = 128;

/// `out[i] = fp16 bytes[2i..2i+2]` widened; `bytes.len() == 2 * out.len() <= 2 * BLOCK`.
#[inline(always)]
pub(super) fn widen_fp16(bytes: &[u8], out: &mut [f32]) {
    let mut bits = [0u16; BLOCK];
    let bits = &mut bits[..out.len()];
    for (b, c) in bits.iter_mut().zip(bytes.chunks_exact(2)) {
        *b = u16::from_le_bytes([c[0], c[1]]);
    }
    bits.reinterpret_cast::<f16>().convert_to_f32_slice(out);
}

/// `bytes[2i..2i+2] = fp16(values[i])`, rounded to nearest even.
#[inline(always)]
pub(super) fn narrow_fp16(values: &[f32], bytes: &mut [u8]) {
    let mut bits = [0u16; BLOCK];
    let bits = &mut bits[..values.len()];
    bits.reinterpret_cast_mut::<f16>()
        .convert_from_f32_slice(values);
    for (c, b) in bytes.chunks_exact_mut(2).zip(bits.iter()) {
        c.copy_from_slice(&b.to_le_bytes());
    }
}

#[inline(always)]
fn fp16_zip_in_place(dst: &mut [u8], src: &[u8], f: impl Fn(f32, f32) -> f32) {
    let mut x = [0f32; BLOCK];
    let mut y = [0f32; BLOCK];
    for (d, s) in dst.chunks_mut(2 * BLOCK).zip(src.chunks(2 * BLOCK)) {
        let n = d.len() / 2;
        widen_fp16(d, &mut x[..n]);
        widen_fp16(s, &mut y[..n]);
        for (p, q) in x[..n].iter_mut().zip(&y[..n]) {
            *p = f(*p, *q);
        }
        narrow_fp16(&x[..n], d);
    }
}

#[inline(always)]
fn fp16_zip_into(out: &mut [u8], a: &[u8], b: &[u8], f: impl Fn(f32, f32) -> f32) {
    let mut x = [0f32; BLOCK];
    let mut y = [0f32; BLOCK];
    let blocks = out
        .chunks_mut(2 * BLOCK)
        .zip(a.chunks(2 * BLOCK))
        .zip(b.chunks(2 * BLOCK));
    for ((o, l), r) in blocks {
        let n = o.len() / 2;
        widen_fp16(l, &mut x[..n]);
        widen_fp16(r, &mut y[..n]);
        for (p, q) in x[..n].iter_mut().zip(&y[..n]) {
            *p = f(*p, *q);
        }
        narrow_fp16(&x[..n], o);
    }
}

/// fp16 `dst = dst (op) src`; lengths already checked.
pub(super) fn fp16_reduce(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => fp16_zip_in_place(dst, src, Native::<4>::sum),
        ReduceOp::Prod => fp16_zip_in_place(dst, src, Native::<4>::prod),
        ReduceOp::Max => fp16_zip_in_place(dst, src, Native::<4>::max),
        ReduceOp::Min => fp16_zip_in_place(dst, src, Native::<4>::min),
    }
}

/// fp16 `out = a (op) b`; lengths already checked.
pub(super) fn fp16_reduce_into(op: ReduceOp, out: &mut [u8], a: &[u8], b: &[u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => fp16_zip_into(out, a, b, Native::<4>::sum),
        ReduceOp::Prod => fp16_zip_into(out, a, b, Native::<4>::prod),
        ReduceOp::Max => fp16_zip_into(out, a, b, Native::<4>::max),
        ReduceOp::Min => fp16_zip_into(out, a, b, Native::<4>::min),
    }
}

/// fp16 `dst = dst / divisor` in f32, rounded once; `divisor > 0`.
pub(super) fn fp16_divide(dst: &mut [u8], divisor: u32) {
    let mut x = [0f32; BLOCK];
    let d = divisor as f32;
    for chunk in dst.chunks_mut(2 * BLOCK) {
        let n = chunk.len() / 2;
        widen_fp16(chunk, &mut x[..n]);
        for v in &mut x[..n] {
            *v /= d;
        }
        narrow_fp16(&x[..n], chunk);
    }
}
