//! Generic element loops, used for the eight integer types, f32 and f64
//! (and their f32 ops by `half_float`'s 16-bit loops).
//!
//! One generic loop per operation over `chunks_exact(N)` of the byte slices;
//! each element goes through `from_le_bytes`/`to_le_bytes` on an `[u8; N]`,
//! which compiles to plain (unaligned) vector loads and stores. The `match`
//! on the op sits outside the loop, so every loop body is a single
//! branch-free operation the optimiser can vectorize.

use strength_reduce::StrengthReducedU64;

use super::simd::Simd;
use super::tail_in_place;
use crate::dtype::ReduceOp;

/// A positive divisor prepared once per [`divide`] call: integers divide
/// by it with a multiply and a shift (`strength_reduce`'s reciprocal of an
/// invariant divisor, Granlund & Montgomery 1994) instead of a hardware
/// division per element, which made an int8 Avg 16× slower than a Sum.
#[derive(Clone, Copy, Debug)]
pub(super) struct Divisor {
    /// The divisor.
    pub value: u32,
    reduced: StrengthReducedU64,
}

impl Divisor {
    /// `value > 0`.
    #[inline(always)]
    pub(crate) fn new(value: u32) -> Divisor {
        Divisor {
            value,
            reduced: StrengthReducedU64::new(u64::from(value)),
        }
    }
}

/// An element type stored as `N` little-endian bytes.
pub(super) trait Native<const N: usize>: Copy {
    fn from_le(bytes: [u8; N]) -> Self;
    fn to_le(self) -> [u8; N];
    fn sum(self, other: Self) -> Self;
    fn prod(self, other: Self) -> Self;
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    /// Divide by a positive `divisor`; integers truncate toward zero.
    fn div(self, divisor: &Divisor) -> Self;
}

macro_rules! int_native {
    ($($t:ty => $n:literal, $div:ident;)*) => {$(
        impl Native<$n> for $t {
            #[inline(always)]
            fn from_le(bytes: [u8; $n]) -> Self { <$t>::from_le_bytes(bytes) }
            #[inline(always)]
            fn to_le(self) -> [u8; $n] { self.to_le_bytes() }
            #[inline(always)]
            fn sum(self, other: Self) -> Self { self.wrapping_add(other) }
            #[inline(always)]
            fn prod(self, other: Self) -> Self { self.wrapping_mul(other) }
            #[inline(always)]
            fn max(self, other: Self) -> Self { Ord::max(self, other) }
            #[inline(always)]
            fn min(self, other: Self) -> Self { Ord::min(self, other) }
            #[inline(always)]
            fn div(self, divisor: &Divisor) -> Self { $div(self.into(), divisor) as $t }
        }
    )*};
}

/// `x / d` truncated toward zero: the magnitude divided, the sign put back
/// (`|i64::MIN| / 1` wraps back to `i64::MIN`, the right quotient).
#[inline(always)]
fn div_signed(x: i64, d: &Divisor) -> i64 {
    let q = (x.unsigned_abs() / d.reduced) as i64;
    if x < 0 {
        q.wrapping_neg()
    } else {
        q
    }
}

#[inline(always)]
fn div_unsigned(x: u64, d: &Divisor) -> u64 {
    x / d.reduced
}

int_native! {
    i8 => 1, div_signed;
    i16 => 2, div_signed;
    i32 => 4, div_signed;
    i64 => 8, div_signed;
    u8 => 1, div_unsigned;
    u16 => 2, div_unsigned;
    u32 => 4, div_unsigned;
    u64 => 8, div_unsigned;
}

macro_rules! float_native {
    ($($t:ty => $n:literal;)*) => {$(
        impl Native<$n> for $t {
            #[inline(always)]
            fn from_le(bytes: [u8; $n]) -> Self { <$t>::from_le_bytes(bytes) }
            #[inline(always)]
            fn to_le(self) -> [u8; $n] { self.to_le_bytes() }
            #[inline(always)]
            fn sum(self, other: Self) -> Self { self + other }
            #[inline(always)]
            fn prod(self, other: Self) -> Self { self * other }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                // Selects only (no short-circuit `||`), so loops vectorize.
                let unordered = self.is_nan() | other.is_nan();
                // Equal values differ only as +0.0 / -0.0: AND of the bits
                // clears the sign unless both are -0.0.
                let equal = <$t>::from_bits(self.to_bits() & other.to_bits());
                let larger = if self > other { self } else { other };
                let picked = if self == other { equal } else { larger };
                if unordered { <$t>::NAN } else { picked }
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                let unordered = self.is_nan() | other.is_nan();
                // OR of the bits keeps -0.0 if either is -0.0.
                let equal = <$t>::from_bits(self.to_bits() | other.to_bits());
                let smaller = if self < other { self } else { other };
                let picked = if self == other { equal } else { smaller };
                if unordered { <$t>::NAN } else { picked }
            }
            #[inline(always)]
            fn div(self, divisor: &Divisor) -> Self { self / divisor.value as $t }
        }
    )*};
}

float_native! {
    f32 => 4;
    f64 => 8;
}

#[inline(always)]
fn load<T: Native<N>, const N: usize>(chunk: &[u8]) -> T {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(chunk);
    T::from_le(bytes)
}

#[inline(always)]
fn zip_in_place<T: Native<N>, const N: usize>(dst: &mut [u8], src: &[u8], f: impl Fn(T, T) -> T) {
    for (d, s) in dst.chunks_exact_mut(N).zip(src.chunks_exact(N)) {
        let v = f(load(d), load(s));
        d.copy_from_slice(&v.to_le());
    }
}

#[inline(always)]
fn zip_into<T: Native<N>, const N: usize>(
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
    f: impl Fn(T, T) -> T,
) {
    for ((o, x), y) in out
        .chunks_exact_mut(N)
        .zip(a.chunks_exact(N))
        .zip(b.chunks_exact(N))
    {
        o.copy_from_slice(&f(load(x), load(y)).to_le());
    }
}

// Every function here is `#[inline(always)]`: it must compile inside each
// instruction set's entry point (`simd`), not once for the portable target.

/// `dst = dst (op) src`; lengths already checked.
#[inline(always)]
pub(super) fn reduce<T: Native<N>, const N: usize>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => zip_in_place(dst, src, T::sum),
        ReduceOp::Prod => zip_in_place(dst, src, T::prod),
        ReduceOp::Max => zip_in_place(dst, src, T::max),
        ReduceOp::Min => zip_in_place(dst, src, T::min),
    }
}

/// `out = a (op) b`; lengths already checked.
#[inline(always)]
pub(super) fn reduce_into<T: Native<N>, const N: usize>(
    op: ReduceOp,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => zip_into(out, a, b, T::sum),
        ReduceOp::Prod => zip_into(out, a, b, T::prod),
        ReduceOp::Max => zip_into(out, a, b, T::max),
        ReduceOp::Min => zip_into(out, a, b, T::min),
    }
}

/// `dst = dst / divisor`; length already checked, `divisor > 0`.
#[inline(always)]
pub(super) fn divide<T: Native<N>, const N: usize>(dst: &mut [u8], divisor: u32) {
    let divisor = Divisor::new(divisor);
    for d in dst.chunks_exact_mut(N) {
        let v = load::<T, N>(d).div(&divisor);
        d.copy_from_slice(&v.to_le());
    }
}

/// 64-bit integer `dst = max(dst, src)` (`max`) or `min`, as `i64`
/// (`signed`) or `u64`, in the token's 16-element blocks
/// ([`Simd::int64_extreme16`]; for tokens whose [`Simd::INT64_BLOCKS`]
/// is true); the last `len % 128` bytes padded into one block. Lengths
/// already checked.
#[inline(always)]
pub(super) fn int64_extremes<S: Simd>(s: S, signed: bool, max: bool, dst: &mut [u8], src: &[u8]) {
    match (max, signed) {
        (true, true) => int64_blocks::<S, true, true>(s, dst, src),
        (true, false) => int64_blocks::<S, true, false>(s, dst, src),
        (false, true) => int64_blocks::<S, false, true>(s, dst, src),
        (false, false) => int64_blocks::<S, false, false>(s, dst, src),
    }
}

#[inline(always)]
fn int64_blocks<S: Simd, const MAX: bool, const SIGNED: bool>(s: S, dst: &mut [u8], src: &[u8]) {
    let (db, dt) = dst.as_chunks_mut::<128>();
    let (sb, st) = src.as_chunks::<128>();
    for (d, x) in db.iter_mut().zip(sb) {
        *d = s.int64_extreme16::<MAX, SIGNED>(d, x);
    }
    tail_in_place(dt, st, &|x, y| s.int64_extreme16::<MAX, SIGNED>(x, y));
}
