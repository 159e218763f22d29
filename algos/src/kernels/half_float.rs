//! The 16-bit floats: fp16 (IEEE 754 binary16) and bf16.
//!
//! Both are widened to f32, combined in f32 and rounded back (round to
//! nearest, ties to even) once per kernel call.
//!
//! - bf16 is the top half of an f32: widening is a shift, narrowing a
//!   branch-free integer rounding ([`f32_to_bf16`]); the element loops
//!   (one fused loop: widen, combine, round) vectorize on every
//!   instruction set.
//! - fp16 sums and products on a CPU with AVX-512 FP16: `reduce` and
//!   `reduce_into` add or multiply 32 elements per instruction in fp16,
//!   which rounds as widening, the f32 op and rounding back do (see
//!   `simd::x86::fp16_op32_avx512fp16`).
//! - fp16 on a CPU with F16C: `reduce` and `reduce_into` convert 16
//!   elements per instruction in one fused loop ([`fp16_block`]); the
//!   other kernels run in [`staged`] blocks of [`STAGE`] elements, widened
//!   by `vcvtph2ps` into f32 arrays, the same element loops run on those
//!   (format [`Wide`]), and `vcvtps2ph` rounds the result back.
//! - fp16 elsewhere: the fused element loops with [`fp16_to_f32`] /
//!   [`f32_to_fp16`], branch-free software written to give F16C's bits.
//!
//! (Element loops over 16-lane arrays, a first try, let LLVM vectorize
//! across the blocks instead, with gathers and scatters: 10x slower.)

use super::simd::Simd;
use super::tail_in_place;
use crate::dtype::ReduceOp;

/// bf16 bits to f32, exact: bf16 is the top half of an f32.
#[inline(always)]
pub(super) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// f32 to bf16 bits, round to nearest, ties to even; NaN stays NaN with its
/// top payload bits and the quiet bit set (as the `half` crate does).
/// Integer operations only (the NaN test too), so it vectorizes.
#[inline(always)]
pub(super) fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    let nan = (x >> 16) | 0x0040;
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
    let is_nan = ((x & 0x7FFF_FFFF) as i32) > 0x7F80_0000;
    (if is_nan { nan } else { rounded }) as u16
}

/// fp16 bits to f32, exact, as F16C's `vcvtph2ps` does: a NaN gets the
/// quiet bit, its payload shifted up. Branch-free (selects only).
#[inline(always)]
pub(super) fn fp16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7FFF;
    let man = h & 0x03FF;
    // Normal: move exponent and mantissa into place, rebias 15 -> 127.
    let normal = (em << 13) + ((127 - 15) << 23);
    // Subnormal (or zero): man * 2^-24, exact (man < 2^10) and normal in f32.
    let sub = ((man as i32) as f32 * (1.0 / 16_777_216.0)).to_bits();
    let quiet = if man != 0 { 0x0040_0000 } else { 0 };
    let inf_nan = 0x7F80_0000 | (man << 13) | quiet;
    let bits = if em < 0x0400 {
        sub
    } else if em >= 0x7C00 {
        inf_nan
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// f32 to fp16 bits, round to nearest, ties to even, as F16C's `vcvtps2ph`
/// (imm 0) does: overflow gives infinity, a NaN the quiet bit and its top
/// 10 payload bits. Branch-free. The rounding follows F. Giesen's
/// `float_to_half_fast3_rtne` (public domain, 2016).
#[inline(always)]
pub(super) fn f32_to_fp16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = (x >> 16) & 0x8000;
    let a = x & 0x7FFF_FFFF;
    let nan = 0x7E00 | ((a >> 13) & 0x03FF);
    // Normal result: rebias 127 -> 15 and add half an ulp minus one, plus
    // the kept bit's parity (ties to even); a carry rounds up into the
    // exponent, up to infinity (0x7C00) just below 65536.
    let normal = (a
        .wrapping_add(((15u32.wrapping_sub(127)) << 23) + 0x0FFF)
        .wrapping_add((a >> 13) & 1))
        >> 13;
    // Subnormal or zero result (|v| < 2^-14): adding 0.5 puts the f16 ulp
    // (2^-24) at the f32 sum's last bit, so the float add rounds
    // (ties to even) and the sum's low bits are the result.
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3F00_0000);
    let a = a as i32;
    let r = if a > 0x7F80_0000 {
        nan
    } else if a >= 0x4780_0000 {
        0x7C00 // >= 65536: infinity (the infinities too)
    } else if a < 0x3880_0000 {
        sub
    } else {
        normal
    };
    (r | sign) as u16
}

/// An element format as the loops see it: `N` little-endian bytes,
/// widened to f32 and narrowed back per element, inlined into the loop.
pub(super) trait Half<const N: usize> {
    /// One element widened.
    fn widen(b: [u8; N]) -> f32;
    /// One f32 rounded to the format.
    fn narrow(v: f32) -> [u8; N];
}

/// bf16 (the same code on every instruction set).
pub(super) struct Bf;
/// fp16 converted in software.
pub(super) struct FpSoft;
/// An f32 staging element: what [`staged`] blocks hold.
pub(super) struct Wide;

impl Half<2> for Bf {
    #[inline(always)]
    fn widen(b: [u8; 2]) -> f32 {
        bf16_to_f32(u16::from_le_bytes(b))
    }
    #[inline(always)]
    fn narrow(v: f32) -> [u8; 2] {
        f32_to_bf16(v).to_le_bytes()
    }
}

impl Half<2> for FpSoft {
    #[inline(always)]
    fn widen(b: [u8; 2]) -> f32 {
        fp16_to_f32(u16::from_le_bytes(b))
    }
    #[inline(always)]
    fn narrow(v: f32) -> [u8; 2] {
        f32_to_fp16(v).to_le_bytes()
    }
}

impl Half<4> for Wide {
    #[inline(always)]
    fn widen(b: [u8; 4]) -> f32 {
        f32::from_le_bytes(b)
    }
    #[inline(always)]
    fn narrow(v: f32) -> [u8; 4] {
        v.to_le_bytes()
    }
}

#[inline(always)]
pub(super) fn load<const N: usize>(c: &[u8]) -> [u8; N] {
    let mut b = [0u8; N];
    b.copy_from_slice(c);
    b
}

#[inline(always)]
fn zip_in_place<H: Half<N>, const N: usize>(
    dst: &mut [u8],
    src: &[u8],
    f: &impl Fn(f32, f32) -> f32,
) {
    for (d, s) in dst.chunks_exact_mut(N).zip(src.chunks_exact(N)) {
        let r = f(H::widen(load(d)), H::widen(load(s)));
        d.copy_from_slice(&H::narrow(r));
    }
}

#[inline(always)]
fn zip_into<H: Half<N>, const N: usize>(
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
    f: &impl Fn(f32, f32) -> f32,
) {
    let elems = out
        .chunks_exact_mut(N)
        .zip(a.chunks_exact(N))
        .zip(b.chunks_exact(N));
    for ((o, x), y) in elems {
        o.copy_from_slice(&H::narrow(f(H::widen(load(x)), H::widen(load(y)))));
    }
}

#[inline(always)]
fn divide_elems<H: Half<N>, const N: usize>(dst: &mut [u8], d: f32) {
    for c in dst.chunks_exact_mut(N) {
        c.copy_from_slice(&H::narrow(H::widen(load(c)) / d));
    }
}

/// fp16 elements per staged block: the f32 staging arrays (3 x 512 bytes)
/// stay in L1.
pub(super) const STAGE: usize = 128;

/// fp16 bytes widened into the f32 bytes `out` (twice as long) by the
/// token's F16C instructions, 16 at a time; the last `len % 16` in
/// software (the same bits).
#[inline(always)]
pub(super) fn stage_widen<S: Simd>(s: S, bytes: &[u8], out: &mut [u8]) {
    let (ob, ot) = out.as_chunks_mut::<64>();
    let (bb, bt) = bytes.as_chunks::<32>();
    for (o, b) in ob.iter_mut().zip(bb) {
        *o = s.fp16_widen16(b);
    }
    for (o, b) in ot.chunks_exact_mut(4).zip(bt.chunks_exact(2)) {
        o.copy_from_slice(&FpSoft::widen(load(b)).to_le_bytes());
    }
}

/// f32 bytes `wide` rounded into the fp16 bytes `out` (half as long), 16
/// at a time by F16C, the rest in software.
#[inline(always)]
pub(super) fn stage_narrow<S: Simd>(s: S, wide: &[u8], out: &mut [u8]) {
    let (ob, ot) = out.as_chunks_mut::<32>();
    let (wb, wt) = wide.as_chunks::<64>();
    for (o, w) in ob.iter_mut().zip(wb) {
        *o = s.fp16_narrow16(w);
    }
    for (o, w) in ot.chunks_exact_mut(2).zip(wt.chunks_exact(4)) {
        o.copy_from_slice(&FpSoft::narrow(f32::from_le_bytes(load(w))));
    }
}

/// Runs `body` over blocks of [`STAGE`] fp16 elements: for block `i`,
/// `dst`'s bytes widened (F16C; zeros if not `read_dst`) into an f32
/// staging block, `srcs`' bytes likewise, `body(i, dst_wide, src_wides)`
/// computing into `dst_wide`, which is then rounded back into `dst`.
/// `srcs` hold as many bytes as `dst`.
#[inline(always)]
pub(super) fn staged<S: Simd, const K: usize>(
    s: S,
    dst: &mut [u8],
    read_dst: bool,
    srcs: [&[u8]; K],
    mut body: impl FnMut(usize, &mut [u8], [&[u8]; K]),
) {
    let mut wd = [0u8; 4 * STAGE];
    let mut ws = [[0u8; 4 * STAGE]; K];
    for (i, d) in dst.chunks_mut(2 * STAGE).enumerate() {
        let n = d.len();
        let at = i * 2 * STAGE;
        if read_dst {
            stage_widen(s, d, &mut wd[..2 * n]);
        }
        for (w, src) in ws.iter_mut().zip(srcs) {
            stage_widen(s, &src[at..at + n], &mut w[..2 * n]);
        }
        let wide: [&[u8]; K] = std::array::from_fn(|k| &ws[k][..2 * n]);
        body(i, &mut wd[..2 * n], wide);
        stage_narrow(s, &wd[..2 * n], d);
    }
}

/// Binds `$f` to the f32 combination of `$op` (a function item, so each op
/// compiles to its own inlined loop) and runs `$body`.
macro_rules! by_op {
    ($op:expr, |$f:ident| $body:expr) => {
        match $op {
            $crate::dtype::ReduceOp::Sum | $crate::dtype::ReduceOp::Avg => {
                let $f = <f32 as $crate::kernels::native::Native<4>>::sum;
                $body
            }
            $crate::dtype::ReduceOp::Prod => {
                let $f = <f32 as $crate::kernels::native::Native<4>>::prod;
                $body
            }
            $crate::dtype::ReduceOp::Max => {
                let $f = <f32 as $crate::kernels::native::Native<4>>::max;
                $body
            }
            $crate::dtype::ReduceOp::Min => {
                let $f = <f32 as $crate::kernels::native::Native<4>>::min;
                $body
            }
        }
    };
}
pub(super) use by_op;

/// bf16 / software fp16 `dst = dst (op) src`; lengths already checked.
#[inline(always)]
pub(super) fn reduce<H: Half<2>>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    by_op!(op, |f| zip_in_place::<H, 2>(dst, src, &f))
}

/// bf16 / software fp16 `out = a (op) b`; lengths already checked.
#[inline(always)]
pub(super) fn reduce_into<H: Half<2>>(op: ReduceOp, out: &mut [u8], a: &[u8], b: &[u8]) {
    by_op!(op, |f| zip_into::<H, 2>(out, a, b, &f))
}

/// bf16 `dst = dst (op) src`: `Max`/`Min` on the bits ([`extreme_in_place`]),
/// `Sum`/`Prod` in the token's 32-element blocks where it has them, else two
/// elements at a time (see [`bf16_pair`]).
#[inline(always)]
pub(super) fn bf16_reduce<S: Simd>(s: S, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ReduceOp::Max => return extreme_in_place::<true>(BF16, dst, src),
        ReduceOp::Min => return extreme_in_place::<false>(BF16, dst, src),
        ReduceOp::Sum | ReduceOp::Avg if S::BF16_BLOCKS => {
            return half_blocks(dst, src, |x, y| s.bf16_sum32(x, y))
        }
        ReduceOp::Prod if S::BF16_BLOCKS => {
            return half_blocks(dst, src, |x, y| s.bf16_prod32(x, y))
        }
        _ => {}
    }
    by_op!(op, |f| {
        let (dp, dt) = dst.as_chunks_mut::<4>();
        let (sp, st) = src.as_chunks::<4>();
        for (d, s) in dp.iter_mut().zip(sp) {
            *d = bf16_pairs(*d, *s, &f);
        }
        zip_in_place::<Bf, 2>(dt, st, &f)
    })
}

/// bf16 `out = a (op) b`, as [`bf16_reduce`].
#[inline(always)]
pub(super) fn bf16_reduce_into<S: Simd>(s: S, op: ReduceOp, out: &mut [u8], a: &[u8], b: &[u8]) {
    match op {
        ReduceOp::Max => return extreme_into::<true>(BF16, out, a, b),
        ReduceOp::Min => return extreme_into::<false>(BF16, out, a, b),
        ReduceOp::Sum | ReduceOp::Avg if S::BF16_BLOCKS => {
            return half_blocks_into(out, a, b, |x, y| s.bf16_sum32(x, y))
        }
        ReduceOp::Prod if S::BF16_BLOCKS => {
            return half_blocks_into(out, a, b, |x, y| s.bf16_prod32(x, y))
        }
        _ => {}
    }
    by_op!(op, |f| {
        let (op_, ot) = out.as_chunks_mut::<4>();
        let (ap, at) = a.as_chunks::<4>();
        let (bp, bt) = b.as_chunks::<4>();
        for ((o, x), y) in op_.iter_mut().zip(ap).zip(bp) {
            *o = bf16_pairs(*x, *y, &f);
        }
        zip_into::<Bf, 2>(ot, at, bt, &f)
    })
}

/// `dst = block(dst, src)` over 64-byte blocks (32 bf16 or fp16); the last
/// `len % 64` bytes zero-padded into one more block ([`tail_in_place`]), so
/// they get the blocks' bits (`block` is the token's `bf16_sum32`,
/// `bf16_prod32`, `fp16_sum32` or `fp16_prod32`).
#[inline(always)]
fn half_blocks(dst: &mut [u8], src: &[u8], block: impl Fn(&[u8; 64], &[u8; 64]) -> [u8; 64]) {
    let (db, dt) = dst.as_chunks_mut::<64>();
    let (sb, st) = src.as_chunks::<64>();
    for (d, s) in db.iter_mut().zip(sb) {
        *d = block(d, s);
    }
    tail_in_place(dt, st, &block)
}

/// `out = block(a, b)` over 64-byte blocks, as [`half_blocks`].
#[inline(always)]
fn half_blocks_into(
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
    block: impl Fn(&[u8; 64], &[u8; 64]) -> [u8; 64],
) {
    let (ob, ot) = out.as_chunks_mut::<64>();
    let (ab, at) = a.as_chunks::<64>();
    let (bb, bt) = b.as_chunks::<64>();
    for ((o, x), y) in ob.iter_mut().zip(ab).zip(bb) {
        *o = block(x, y);
    }
    let n = ot.len();
    ot.copy_from_slice(at);
    tail_in_place(ot, &bt[..n], &block)
}

/// Two bf16 elements of `x` and `y` (one `u32` each) combined by `f` and
/// rounded back in place.
#[inline(always)]
pub(super) fn bf16_pairs(x: [u8; 4], y: [u8; 4], f: &impl Fn(f32, f32) -> f32) -> [u8; 4] {
    let (x0, x1) = bf16_pair(x);
    let (y0, y1) = bf16_pair(y);
    bf16_unpair(f(x0, y0), f(x1, y1))
}

/// A 16-bit float format as its bits: the largest magnitude that is not a
/// NaN (infinity) and the canonical quiet NaN `Max`/`Min` return.
#[derive(Clone, Copy)]
pub(super) struct Bits16 {
    inf: u16,
    nan: u16,
}

/// fp16's bits (infinity 0x7C00, quiet NaN 0x7E00 as f32 NaN narrows to).
pub(super) const FP16: Bits16 = Bits16 {
    inf: 0x7C00,
    nan: 0x7E00,
};
/// bf16's bits (infinity 0x7F80, quiet NaN 0x7FC0).
pub(super) const BF16: Bits16 = Bits16 {
    inf: 0x7F80,
    nan: 0x7FC0,
};

/// `Max` (`MAX`) or `Min` of two fp16 or bf16 elements without widening:
/// the larger (smaller) value's own bits, the canonical NaN if either is a
/// NaN. The same bits as widening to f32, the f32 `max`/`min` of
/// `native` and rounding back (exact for a widened value): both order
/// -0.0 below +0.0 and map every NaN to the canonical one.
///
/// The bits compare as `i16` in the values' order except when both are
/// negative (sign-magnitude: the larger magnitude is the smaller value),
/// where the order flips; so one signed compare, one test of both sign
/// bits and a select, not a map of each operand and of the result to
/// two's complement (`x ^ ((x >> 15) & 0x7FFF)`: on AVX2, 9 vector
/// instructions of the loop's 14, 6 of them shifts, which have 2 of AMD
/// Zen 3's 4 vector pipes; now 10, no shift: 23.7-23.8 → 31.2-34.9 GB/s
/// in cache on the project's EPYC, 0.52-0.53x → 0.72-0.78x memcpy;
/// algos/README.md, session 14).
#[inline(always)]
fn extreme<const MAX: bool>(fmt: Bits16, x: u16, y: u16) -> u16 {
    let (a, b) = (x as i16, y as i16);
    let both_negative = (a & b) < 0;
    // Equal values have equal bits (-0.0 and +0.0 differ in sign, so never
    // both negative and ordered by the compare), so ties may pick either.
    let pick_x = if MAX { a > b } else { a < b } != both_negative;
    let is_nan = ((x & 0x7FFF) > fmt.inf) | ((y & 0x7FFF) > fmt.inf);
    if is_nan {
        fmt.nan
    } else if pick_x {
        x
    } else {
        y
    }
}

/// fp16/bf16 `dst = max(dst, src)` (or min) on the bits: integer lanes only,
/// so it runs as an int16 max does (plus the NaN test).
#[inline(always)]
pub(super) fn extreme_in_place<const MAX: bool>(fmt: Bits16, dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst
        .as_chunks_mut::<2>()
        .0
        .iter_mut()
        .zip(src.as_chunks::<2>().0)
    {
        *d = extreme::<MAX>(fmt, u16::from_le_bytes(*d), u16::from_le_bytes(*s)).to_le_bytes();
    }
}

/// fp16/bf16 `out = max(a, b)` (or min) on the bits.
#[inline(always)]
pub(super) fn extreme_into<const MAX: bool>(fmt: Bits16, out: &mut [u8], a: &[u8], b: &[u8]) {
    let elems = out
        .as_chunks_mut::<2>()
        .0
        .iter_mut()
        .zip(a.as_chunks::<2>().0)
        .zip(b.as_chunks::<2>().0);
    for ((o, x), y) in elems {
        *o = extreme::<MAX>(fmt, u16::from_le_bytes(*x), u16::from_le_bytes(*y)).to_le_bytes();
    }
}

/// Two bf16 elements (4 little-endian bytes, read as one `u32`) widened:
/// the first is the low half shifted up, the second the high half masked.
/// Pairs need no unpacking or packing of lanes (a vector of `u32`s holds
/// both halves in place): with SSE2 or AVX-512 alike the loop is shifts,
/// masks and adds only.
#[inline(always)]
fn bf16_pair(b: [u8; 4]) -> (f32, f32) {
    let w = u32::from_le_bytes(b);
    (f32::from_bits(w << 16), f32::from_bits(w & 0xFFFF_0000))
}

/// Two f32 rounded to bf16 and put back in place (see [`bf16_pair`]).
#[inline(always)]
fn bf16_unpair(lo: f32, hi: f32) -> [u8; 4] {
    ((bf16_round_high(lo) >> 16) | (bf16_round_high(hi) & 0xFFFF_0000)).to_le_bytes()
}

/// `v` rounded as [`f32_to_bf16`] does, the bf16 in the top 16 bits (the
/// low 16 are left over).
#[inline(always)]
fn bf16_round_high(v: f32) -> u32 {
    let x = v.to_bits();
    let is_nan = ((x & 0x7FFF_FFFF) as i32) > 0x7F80_0000;
    let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1));
    if is_nan {
        x | 0x0040_0000
    } else {
        rounded
    }
}

/// bf16 / software fp16 `dst = dst / divisor` in f32, rounded once.
#[inline(always)]
pub(super) fn divide<H: Half<2>>(dst: &mut [u8], divisor: u32) {
    divide_elems::<H, 2>(dst, divisor as f32)
}

/// fp16 `dst = dst (op) src` on the token's instructions: `Max`/`Min` on
/// the bits, `Sum`/`Prod` in the token's 32-element fp16 blocks where it
/// has them (AVX-512 FP16), else widened by F16C (or software) in
/// [`fp16_block`]s.
#[inline(always)]
pub(super) fn fp16_reduce<S: Simd>(s: S, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ReduceOp::Max => return extreme_in_place::<true>(FP16, dst, src),
        ReduceOp::Min => return extreme_in_place::<false>(FP16, dst, src),
        _ => {}
    }
    match op {
        ReduceOp::Sum | ReduceOp::Avg if S::FP16_BLOCKS => {
            return half_blocks(dst, src, |x, y| s.fp16_sum32(x, y))
        }
        ReduceOp::Prod if S::FP16_BLOCKS => {
            return half_blocks(dst, src, |x, y| s.fp16_prod32(x, y))
        }
        _ => {}
    }
    if !S::F16C {
        return reduce::<FpSoft>(op, dst, src);
    }
    by_op!(op, |f| {
        let (db, dt) = dst.as_chunks_mut::<32>();
        let (sb, st) = src.as_chunks::<32>();
        for (d, b) in db.iter_mut().zip(sb) {
            *d = fp16_block(s, d, b, &f);
        }
        zip_in_place::<FpSoft, 2>(dt, st, &f)
    })
}

/// fp16 `out = a (op) b` on the token's instructions.
#[inline(always)]
pub(super) fn fp16_reduce_into<S: Simd>(s: S, op: ReduceOp, out: &mut [u8], a: &[u8], b: &[u8]) {
    match op {
        ReduceOp::Max => return extreme_into::<true>(FP16, out, a, b),
        ReduceOp::Min => return extreme_into::<false>(FP16, out, a, b),
        _ => {}
    }
    match op {
        ReduceOp::Sum | ReduceOp::Avg if S::FP16_BLOCKS => {
            return half_blocks_into(out, a, b, |x, y| s.fp16_sum32(x, y))
        }
        ReduceOp::Prod if S::FP16_BLOCKS => {
            return half_blocks_into(out, a, b, |x, y| s.fp16_prod32(x, y))
        }
        _ => {}
    }
    if !S::F16C {
        return reduce_into::<FpSoft>(op, out, a, b);
    }
    by_op!(op, |f| {
        let (ob, ot) = out.as_chunks_mut::<32>();
        let (ab, at) = a.as_chunks::<32>();
        let (bb, bt) = b.as_chunks::<32>();
        for ((o, p), q) in ob.iter_mut().zip(ab).zip(bb) {
            *o = fp16_block(s, p, q, &f);
        }
        zip_into::<FpSoft, 2>(ot, at, bt, &f)
    })
}

/// 16 fp16 elements of `x` and `y` widened by the token's F16C, combined
/// and rounded back: the fused loop body of [`fp16_reduce`] and
/// [`fp16_reduce_into`] (the conversions are instructions LLVM cannot
/// vectorize further, so it vectorizes the 16 lanes between them instead of
/// across blocks: twice the staged loops' speed in cache).
#[inline(always)]
fn fp16_block<S: Simd>(s: S, x: &[u8; 32], y: &[u8; 32], f: &impl Fn(f32, f32) -> f32) -> [u8; 32] {
    let x: [f32; LANES] = bytemuck::cast(s.fp16_widen16(x));
    let y: [f32; LANES] = bytemuck::cast(s.fp16_widen16(y));
    let mut r = [0f32; LANES];
    for i in 0..LANES {
        r[i] = f(x[i], y[i]);
    }
    s.fp16_narrow16(&bytemuck::cast(r))
}

/// Lanes of [`fp16_block`].
const LANES: usize = 16;

/// fp16 `dst = dst / divisor` on the token's instructions.
#[inline(always)]
pub(super) fn fp16_divide<S: Simd>(s: S, dst: &mut [u8], divisor: u32) {
    if !S::F16C {
        return divide::<FpSoft>(dst, divisor);
    }
    let d = divisor as f32;
    staged(s, dst, true, [], |_, w, []| divide_elems::<Wide, 4>(w, d))
}

/// f32 bit patterns around every fp16 rounding point: for each f32
/// exponent that rounds to an fp16 normal or subnormal, the tie, one ulp
/// either side and the kept bit's parity, at each bit position rounding
/// may cut (tests only).
#[cfg(test)]
pub(super) fn f16_probe_bits() -> impl Iterator<Item = u32> {
    (96u32..=143).flat_map(|e| {
        (13u32..=23).flat_map(move |cut| {
            let tie = 1u32 << (cut - 1);
            [0u32, 1 << cut, 0x007F_FFFF & !((1 << cut) - 1)]
                .into_iter()
                .flat_map(move |kept| {
                    [tie - 1, tie, tie + 1].into_iter().flat_map(move |low| {
                        let m = (kept | low) & 0x007F_FFFF;
                        [(e << 23) | m, 0x8000_0000 | (e << 23) | m]
                    })
                })
        })
    })
}
