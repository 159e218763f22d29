//! f32 partial values of fp16/bf16 elements, kept beside the rounded bytes.
//!
//! A rank that combines several inputs into one destination (a mesh or
//! one-shot fold, a pipeline's intra-server reduction, NHR's extra member)
//! does so in several reduce steps. Rounding to 16 bits after every step
//! loses small inputs (bf16 `256 + 1 + 1 + ... = 256`), so a transport
//! keeps, per buffer, the f32 value a reduce step computed for each element
//! ([`Partials`]), and a later [`Op::LocalReduce`] or [`Op::Divide`]
//! continues from it: the fold rounds once, into the bytes after each step.
//!
//! What reads the kept values, and what does not:
//! - `LocalReduce` (both operands) and `Divide` read them.
//! - `RecvReduce` reads its local operand's *bytes*, as the peer that was
//!   sent the same partial does: a recursive-doubling exchange then gives
//!   both partners the same bits.
//! - `Send` and `Copy` read the bytes: what travels is rounded.
//! - Any write other than a reduce (a receive, a copy) forgets the values
//!   of the bytes it overwrote ([`Partials::forget`]).
//!
//! Nothing here depends on arrival order: which values are kept follows
//! from the schedule's steps alone, so results stay deterministic.
//!
//! [`Op::LocalReduce`]: crate::schedule::Op::LocalReduce
//! [`Op::Divide`]: crate::schedule::Op::Divide

use std::ops::Range;

use half::f16;

use super::half_float::{bf16_to_f32, f32_to_bf16, narrow_fp16, widen_fp16, BLOCK};
use super::native::Native;
use super::{check_same, check_whole, KernelError};
use crate::dtype::{DataType, ReduceOp};

/// True for the element types whose reductions keep [`Partials`]: fp16 and bf16.
pub fn keeps_partials(dtype: DataType) -> bool {
    matches!(dtype, DataType::Fp16 | DataType::Bf16)
}

/// The f32 values reduce steps computed for the 2-byte elements of one
/// buffer (a rank's output, scratch, ...), indexed by element (byte offset / 2).
/// Empty until a reduce writes; grows on demand.
#[derive(Clone, Debug, Default)]
pub struct Partials {
    vals: Vec<f32>,
    known: Vec<bool>,
}

impl Partials {
    /// Nothing kept.
    pub fn new() -> Partials {
        Partials::default()
    }

    /// Bytes `bytes` of the buffer were overwritten by something other than
    /// a reduce (a receive, a copy): their kept values no longer hold.
    pub fn forget(&mut self, bytes: Range<usize>) {
        let end = (bytes.end.div_ceil(2)).min(self.known.len());
        let start = (bytes.start / 2).min(end);
        self.known[start..end].fill(false);
    }

    /// Forgets everything (a new op on the same buffers).
    pub fn clear(&mut self) {
        self.known.fill(false);
    }

    /// True if some element's value is kept.
    pub fn any(&self) -> bool {
        self.known.iter().any(|k| *k)
    }

    /// The value and known slices of elements `[at, at + n)`, grown to fit.
    fn slot(&mut self, at: usize, n: usize) -> (&mut [f32], &mut [bool]) {
        if self.vals.len() < at + n {
            self.vals.resize(at + n, 0.0);
            self.known.resize(at + n, false);
        }
        (&mut self.vals[at..at + n], &mut self.known[at..at + n])
    }
}

/// A 16-bit float format: widening and narrowing of one element, inlined
/// into each kernel's loop (a function pointer per element made the loops
/// 10x slower than the plain kernels).
trait Half {
    fn widen(b: [u8; 2]) -> f32;
    fn narrow(v: f32) -> [u8; 2];
}

struct Bf;
struct Fp;

impl Half for Bf {
    #[inline(always)]
    fn widen(b: [u8; 2]) -> f32 {
        bf16_to_f32(u16::from_le_bytes(b))
    }
    #[inline(always)]
    fn narrow(v: f32) -> [u8; 2] {
        f32_to_bf16(v).to_le_bytes()
    }
}

impl Half for Fp {
    #[inline(always)]
    fn widen(b: [u8; 2]) -> f32 {
        f16::from_bits(u16::from_le_bytes(b)).to_f32()
    }
    #[inline(always)]
    fn narrow(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_bits().to_le_bytes()
    }
}

/// Runs `$body` with `$t` the format of `$dtype` (a type) and `$f` the f32
/// combination of `$op` (a function item), so every (format, op) pair
/// compiles to its own inlined loop.
macro_rules! dispatch {
    ($dtype:expr, $op:expr, |$t:ident, $f:ident| $body:expr) => {
        if $dtype == DataType::Bf16 {
            type $t = Bf;
            dispatch!(@op $op, $f, $body)
        } else {
            type $t = Fp;
            dispatch!(@op $op, $f, $body)
        }
    };
    (@op $op:expr, $f:ident, $body:expr) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Avg => {
                let $f = Native::<4>::sum;
                $body
            }
            ReduceOp::Prod => {
                let $f = Native::<4>::prod;
                $body
            }
            ReduceOp::Max => {
                let $f = Native::<4>::max;
                $body
            }
            ReduceOp::Min => {
                let $f = Native::<4>::min;
                $body
            }
        }
    };
}

#[inline(always)]
fn pair(c: &[u8]) -> [u8; 2] {
    [c[0], c[1]]
}

/// Checks `dtype` keeps partials and every operand is whole elements of
/// equal length.
fn check(dtype: DataType, ops: &[(&'static str, usize)]) -> Result<(), KernelError> {
    if !keeps_partials(dtype) {
        // Callers ask only for fp16/bf16; any other type is a caller bug,
        // reported as a partial element of a 2-byte type, not a panic.
        return Err(KernelError::PartialElement {
            operand: "dtype",
            len: dtype.size(),
            dtype,
            elem_size: 2,
        });
    }
    for &(name, len) in ops {
        check_whole(dtype, name, len)?;
    }
    for w in ops.windows(2) {
        check_same(dtype, w[0], w[1])?;
    }
    Ok(())
}

#[inline(always)]
fn fold_loop<T: Half>(
    f: impl Fn(f32, f32) -> f32,
    dst: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    src: &[f32],
) {
    for (((d, v), k), s) in dst.chunks_exact_mut(2).zip(vals).zip(known).zip(src) {
        let mine = if *k { *v } else { T::widen(pair(d)) };
        let r = f(mine, *s);
        *v = r;
        *k = true;
        d.copy_from_slice(&T::narrow(r));
    }
}

#[inline(always)]
fn into_loop<T: Half>(
    f: impl Fn(f32, f32) -> f32,
    out: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    a: &[u8],
    b: &[u8],
) {
    // One flat zip chain (as `fold_loop`): nested zips did not vectorize.
    known.fill(true);
    let elems = out
        .chunks_exact_mut(2)
        .zip(vals)
        .zip(a.chunks_exact(2))
        .zip(b.chunks_exact(2));
    for (((o, v), x), y) in elems {
        let r = f(T::widen(pair(x)), T::widen(pair(y)));
        *v = r;
        o.copy_from_slice(&T::narrow(r));
    }
}

#[inline(always)]
fn in_place_loop<T: Half>(
    f: impl Fn(f32, f32) -> f32,
    dst: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    src: &[u8],
) {
    known.fill(true);
    for ((d, v), s) in dst.chunks_exact_mut(2).zip(vals).zip(src.chunks_exact(2)) {
        let r = f(T::widen(pair(d)), T::widen(pair(s)));
        *v = r;
        d.copy_from_slice(&T::narrow(r));
    }
}

/// fp16 `out = a (op) b` (`a = None`: `out` itself) in blocks through the
/// `half` crate's slice conversions (F16C when the CPU has it), as the
/// plain fp16 kernel does: per element they cost 5x.
#[inline(always)]
fn fp16_blocks(
    f: impl Fn(f32, f32) -> f32,
    out: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    a: Option<&[u8]>,
    b: &[u8],
) {
    known.fill(true);
    let mut x = [0f32; BLOCK];
    let mut y = [0f32; BLOCK];
    for (i, (o, v)) in out
        .chunks_mut(2 * BLOCK)
        .zip(vals.chunks_mut(BLOCK))
        .enumerate()
    {
        let n = v.len();
        let range = 2 * BLOCK * i..2 * BLOCK * i + 2 * n;
        match a {
            Some(a) => widen_fp16(&a[range.clone()], &mut x[..n]),
            None => widen_fp16(o, &mut x[..n]),
        }
        widen_fp16(&b[range], &mut y[..n]);
        for ((p, q), w) in x[..n].iter_mut().zip(&y[..n]).zip(v.iter_mut()) {
            *p = f(*p, *q);
            *w = *p;
        }
        narrow_fp16(&x[..n], o);
    }
}

#[inline(always)]
fn divide_loop<T: Half>(dst: &mut [u8], vals: &[f32], known: &mut [bool], div: f32) {
    for ((d, v), k) in dst.chunks_exact_mut(2).zip(vals).zip(known) {
        let mine = if *k { *v } else { T::widen(pair(d)) };
        d.copy_from_slice(&T::narrow(mine / div));
        *k = false;
    }
}

/// The f32 values of the elements in `bytes`, which start at byte `at` of a
/// buffer whose kept values are `parts` (`None`: none kept): the kept value
/// where there is one, else the element widened.
///
/// # Errors
/// [`KernelError::PartialElement`] if `bytes` is not whole elements or
/// `dtype` is not fp16/bf16.
pub fn values(
    dtype: DataType,
    bytes: &[u8],
    at: usize,
    parts: Option<&Partials>,
) -> Result<Vec<f32>, KernelError> {
    check(dtype, &[("src", bytes.len())])?;
    let mut out: Vec<f32> = if dtype == DataType::Bf16 {
        bytes.chunks_exact(2).map(|c| Bf::widen(pair(c))).collect()
    } else {
        bytes.chunks_exact(2).map(|c| Fp::widen(pair(c))).collect()
    };
    if let Some(p) = parts {
        let e0 = at / 2;
        for (i, v) in out.iter_mut().enumerate() {
            if p.known.get(e0 + i) == Some(&true) {
                *v = p.vals[e0 + i];
            }
        }
    }
    Ok(out)
}

/// `dst = dst (op) src` for a [`Op::LocalReduce`]: the destination's
/// operand is its kept value where there is one (else its bytes), `src`
/// comes from [`values`]. The f32 result is kept and rounded once into
/// `dst`. `dst` starts at byte `at` of the buffer `parts` belongs to.
///
/// # Errors
/// Lengths and partial elements as [`super::reduce`]; `dtype` not fp16/bf16.
///
/// [`Op::LocalReduce`]: crate::schedule::Op::LocalReduce
pub fn fold_kept(
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    at: usize,
    parts: &mut Partials,
    src: &[f32],
) -> Result<(), KernelError> {
    check(dtype, &[("dst", dst.len()), ("src", src.len() * 2)])?;
    let (vals, known) = parts.slot(at / 2, src.len());
    dispatch!(dtype, op, |T, f| fold_loop::<T>(f, dst, vals, known, src));
    Ok(())
}

/// `out = a (op) b` from bytes (a `RecvReduce`: `a` the local operand's
/// bytes, `b` what arrived), the f32 result kept and rounded once into
/// `out`, which starts at byte `at` of the buffer `parts` belongs to.
///
/// # Errors
/// Lengths and partial elements as [`super::reduce_into`]; `dtype` not fp16/bf16.
pub fn reduce_into_kept(
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    at: usize,
    parts: &mut Partials,
    a: &[u8],
    b: &[u8],
) -> Result<(), KernelError> {
    check(dtype, &[("out", out.len()), ("a", a.len()), ("b", b.len())])?;
    let (vals, known) = parts.slot(at / 2, out.len() / 2);
    if dtype == DataType::Fp16 {
        dispatch!(@op op, f, fp16_blocks(f, out, vals, known, Some(a), b));
        return Ok(());
    }
    dispatch!(dtype, op, |T, f| into_loop::<T>(f, out, vals, known, a, b));
    Ok(())
}

/// [`reduce_into_kept`] in place: `dst = dst (op) src`, `dst`'s bytes as
/// the local operand.
///
/// # Errors
/// As [`reduce_into_kept`].
pub fn reduce_kept(
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    at: usize,
    parts: &mut Partials,
    src: &[u8],
) -> Result<(), KernelError> {
    check(dtype, &[("dst", dst.len()), ("src", src.len())])?;
    let (vals, known) = parts.slot(at / 2, dst.len() / 2);
    if dtype == DataType::Fp16 {
        dispatch!(@op op, f, fp16_blocks(f, dst, vals, known, None, src));
        return Ok(());
    }
    dispatch!(dtype, op, |T, f| in_place_loop::<T>(
        f, dst, vals, known, src
    ));
    Ok(())
}

/// `dst = dst / divisor` from the kept values where there are any (an
/// average is then the f32 sum divided, rounded once), then forgets them.
///
/// # Errors
/// As [`super::divide`]; `dtype` not fp16/bf16.
pub fn divide_kept(
    dtype: DataType,
    dst: &mut [u8],
    at: usize,
    parts: &mut Partials,
    divisor: u32,
) -> Result<(), KernelError> {
    check(dtype, &[("dst", dst.len())])?;
    if divisor == 0 {
        return Err(KernelError::ZeroDivisor { dtype });
    }
    let div = divisor as f32;
    let (vals, known) = parts.slot(at / 2, dst.len() / 2);
    if dtype == DataType::Bf16 {
        divide_loop::<Bf>(dst, vals, known, div);
    } else {
        divide_loop::<Fp>(dst, vals, known, div);
    }
    Ok(())
}

/// fp16/bf16 elements widened into f32 elements (`out` holds twice the
/// bytes of `src`; lengths already checked): bf16 by a shift, fp16 in
/// blocks through the `half` crate's F16C slice conversion.
pub(crate) fn widen_all(dtype: DataType, src: &[u8], out: &mut [u8]) {
    if dtype == DataType::Bf16 {
        for (o, c) in out.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
            o.copy_from_slice(&Bf::widen(pair(c)).to_le_bytes());
        }
        return;
    }
    let mut x = [0f32; BLOCK];
    for (s, o) in src.chunks(2 * BLOCK).zip(out.chunks_mut(4 * BLOCK)) {
        let n = s.len() / 2;
        widen_fp16(s, &mut x[..n]);
        for (b, v) in o.chunks_exact_mut(4).zip(&x[..n]) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// f32 elements rounded into fp16/bf16 elements (`out` holds half the
/// bytes of `src`; lengths already checked).
pub(crate) fn narrow_all(dtype: DataType, src: &[u8], out: &mut [u8]) {
    let f32_at = |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    if dtype == DataType::Bf16 {
        // On the bits, as `f32_to_bf16` but with an integer NaN test: the
        // float compare kept this loop scalar (a fifth of a widened op's time).
        for (o, c) in out.chunks_exact_mut(2).zip(src.chunks_exact(4)) {
            let x = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let nan = (x >> 16) | 0x0040;
            let rounded = x.wrapping_add(0x7FFF + ((x >> 16) & 1)) >> 16;
            let is_nan = (x & 0x7FFF_FFFF) > 0x7F80_0000;
            o.copy_from_slice(&((if is_nan { nan } else { rounded }) as u16).to_le_bytes());
        }
        return;
    }
    let mut x = [0f32; BLOCK];
    for (s, o) in src.chunks(4 * BLOCK).zip(out.chunks_mut(2 * BLOCK)) {
        let n = s.len() / 4;
        for (v, c) in x[..n].iter_mut().zip(s.chunks_exact(4)) {
            *v = f32_at(c);
        }
        narrow_fp16(&x[..n], o);
    }
}
