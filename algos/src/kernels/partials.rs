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

use super::half_float::{
    by_op, load, stage_narrow, stage_widen, staged, Bf, FpSoft, Half, Wide, STAGE,
};
use super::simd::{self, Isa, Simd};
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

/// `dst = dst (op) src`, the destination's operand its kept value where
/// known; the result kept.
#[inline(always)]
fn fold_loop<H: Half<N>, const N: usize>(
    f: &impl Fn(f32, f32) -> f32,
    dst: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    src: &[f32],
) {
    for (((d, v), k), s) in dst.chunks_exact_mut(N).zip(vals).zip(known).zip(src) {
        let mine = if *k { *v } else { H::widen(load(d)) };
        let r = f(mine, *s);
        *v = r;
        *k = true;
        d.copy_from_slice(&H::narrow(r));
    }
}

/// `out = a (op) b` from bytes, the result kept.
#[inline(always)]
fn into_loop<H: Half<N>, const N: usize>(
    f: &impl Fn(f32, f32) -> f32,
    out: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    a: &[u8],
    b: &[u8],
) {
    // One flat zip chain (as `fold_loop`): nested zips did not vectorize.
    known.fill(true);
    let elems = out
        .chunks_exact_mut(N)
        .zip(vals)
        .zip(a.chunks_exact(N))
        .zip(b.chunks_exact(N));
    for (((o, v), x), y) in elems {
        let r = f(H::widen(load(x)), H::widen(load(y)));
        *v = r;
        o.copy_from_slice(&H::narrow(r));
    }
}

/// [`into_loop`] in place: `dst = dst (op) src`.
#[inline(always)]
fn in_place_loop<H: Half<N>, const N: usize>(
    f: &impl Fn(f32, f32) -> f32,
    dst: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    src: &[u8],
) {
    known.fill(true);
    let elems = dst.chunks_exact_mut(N).zip(vals).zip(src.chunks_exact(N));
    for ((d, v), s) in elems {
        let r = f(H::widen(load(d)), H::widen(load(s)));
        *v = r;
        d.copy_from_slice(&H::narrow(r));
    }
}

#[inline(always)]
fn divide_loop<H: Half<N>, const N: usize>(
    dst: &mut [u8],
    vals: &[f32],
    known: &mut [bool],
    div: f32,
) {
    for ((d, v), k) in dst.chunks_exact_mut(N).zip(vals).zip(known) {
        let mine = if *k { *v } else { H::widen(load(d)) };
        d.copy_from_slice(&H::narrow(mine / div));
        *k = false;
    }
}

/// 16-bit elements widened into f32 bytes (`out` twice as long): bf16 and
/// software fp16 per element, F16C fp16 8 at a time.
#[inline(always)]
fn widen_bytes<S: Simd>(s: S, dtype: DataType, src: &[u8], out: &mut [u8]) {
    fn each<H: Half<2>>(src: &[u8], out: &mut [u8]) {
        for (o, c) in out.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
            o.copy_from_slice(&H::widen(load(c)).to_le_bytes());
        }
    }
    if dtype == DataType::Bf16 {
        each::<Bf>(src, out)
    } else if S::F16C {
        stage_widen(s, src, out)
    } else {
        each::<FpSoft>(src, out)
    }
}

/// f32 bytes rounded into 16-bit elements (`out` half as long).
#[inline(always)]
fn narrow_bytes<S: Simd>(s: S, dtype: DataType, src: &[u8], out: &mut [u8]) {
    fn each<H: Half<2>>(src: &[u8], out: &mut [u8]) {
        for (o, c) in out.chunks_exact_mut(2).zip(src.chunks_exact(4)) {
            o.copy_from_slice(&H::narrow(f32::from_le_bytes(load(c))));
        }
    }
    if dtype == DataType::Bf16 {
        each::<Bf>(src, out)
    } else if S::F16C {
        stage_narrow(s, src, out)
    } else {
        each::<FpSoft>(src, out)
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
    let mut out = vec![0f32; bytes.len() / 2];
    widen_on(
        Isa::best(),
        dtype,
        bytes,
        bytemuck::cast_slice_mut(&mut out),
    );
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

/// 16-bit `bytes` widened into the f32 bytes `out` (twice as long) on `isa`.
pub(super) fn widen_on(isa: Isa, dtype: DataType, bytes: &[u8], out: &mut [u8]) {
    kernel!(struct Widen<'a> { dtype: DataType, bytes: &'a [u8], out: &'a mut [u8] } -> () = |s| {
        widen_bytes(s, dtype, bytes, out)
    });
    simd::run(isa, Widen { dtype, bytes, out });
}

/// The f32 bytes `src` rounded into 16-bit `out` (half as long) on `isa`.
pub(super) fn narrow_on(isa: Isa, dtype: DataType, src: &[u8], out: &mut [u8]) {
    kernel!(struct Narrow<'a> { dtype: DataType, src: &'a [u8], out: &'a mut [u8] } -> () = |s| {
        narrow_bytes(s, dtype, src, out)
    });
    simd::run(isa, Narrow { dtype, src, out });
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
    fold_kept_on(Isa::best(), dtype, op, dst, at, parts, src)
}

/// [`fold_kept`] on `isa`.
pub(super) fn fold_kept_on(
    isa: Isa,
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    at: usize,
    parts: &mut Partials,
    src: &[f32],
) -> Result<(), KernelError> {
    check(dtype, &[("dst", dst.len()), ("src", src.len() * 2)])?;
    let (vals, known) = parts.slot(at / 2, src.len());
    kernel!(struct Fold<'a> {
        dtype: DataType, op: ReduceOp, dst: &'a mut [u8], vals: &'a mut [f32],
        known: &'a mut [bool], src: &'a [f32],
    } -> () = |s| {
        if dtype == DataType::Bf16 {
            by_op!(op, |f| fold_loop::<Bf, 2>(&f, dst, vals, known, src))
        } else if !S::F16C {
            by_op!(op, |f| fold_loop::<FpSoft, 2>(&f, dst, vals, known, src))
        } else {
            by_op!(op, |f| staged(s, dst, true, [], |i, d, []| {
                let e = i * STAGE..i * STAGE + d.len() / 4;
                fold_loop::<Wide, 4>(&f, d, &mut vals[e.clone()], &mut known[e.clone()], &src[e]);
            }))
        }
    });
    simd::run(
        isa,
        Fold {
            dtype,
            op,
            dst,
            vals,
            known,
            src,
        },
    );
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
    kept_on(Isa::best(), dtype, op, out, vals, known, Some(a), b);
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
    reduce_kept_on(Isa::best(), dtype, op, dst, at, parts, src)
}

/// [`reduce_kept`] on `isa`.
pub(super) fn reduce_kept_on(
    isa: Isa,
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    at: usize,
    parts: &mut Partials,
    src: &[u8],
) -> Result<(), KernelError> {
    check(dtype, &[("dst", dst.len()), ("src", src.len())])?;
    let (vals, known) = parts.slot(at / 2, dst.len() / 2);
    kept_on(isa, dtype, op, dst, vals, known, None, src);
    Ok(())
}

/// `out = a (op) b` (`a = None`: `out`), the result kept; lengths checked.
#[allow(clippy::too_many_arguments)]
fn kept_on(
    isa: Isa,
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    a: Option<&[u8]>,
    b: &[u8],
) {
    kernel!(struct Kept<'a> {
        dtype: DataType, op: ReduceOp, out: &'a mut [u8], vals: &'a mut [f32],
        known: &'a mut [bool], a: Option<&'a [u8]>, b: &'a [u8],
    } -> () = |s| {
        kept_body(s, dtype, op, out, vals, known, a, b)
    });
    simd::run(
        isa,
        Kept {
            dtype,
            op,
            out,
            vals,
            known,
            a,
            b,
        },
    );
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn kept_body<S: Simd>(
    s: S,
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    vals: &mut [f32],
    known: &mut [bool],
    a: Option<&[u8]>,
    b: &[u8],
) {
    match (a, dtype == DataType::Bf16, S::F16C) {
        (Some(a), true, _) => by_op!(op, |f| into_loop::<Bf, 2>(&f, out, vals, known, a, b)),
        (None, true, _) => by_op!(op, |f| in_place_loop::<Bf, 2>(&f, out, vals, known, b)),
        (Some(a), false, false) => {
            by_op!(op, |f| into_loop::<FpSoft, 2>(&f, out, vals, known, a, b))
        }
        (None, false, false) => {
            by_op!(op, |f| in_place_loop::<FpSoft, 2>(&f, out, vals, known, b))
        }
        (Some(a), false, true) => by_op!(op, |f| staged(s, out, false, [a, b], |i, o, [x, y]| {
            let e = i * STAGE..i * STAGE + o.len() / 4;
            into_loop::<Wide, 4>(&f, o, &mut vals[e.clone()], &mut known[e], x, y);
        })),
        (None, false, true) => by_op!(op, |f| staged(s, out, true, [b], |i, o, [y]| {
            let e = i * STAGE..i * STAGE + o.len() / 4;
            in_place_loop::<Wide, 4>(&f, o, &mut vals[e.clone()], &mut known[e], y);
        })),
    }
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
    divide_kept_on(Isa::best(), dtype, dst, at, parts, divisor)
}

/// [`divide_kept`] on `isa`.
pub(super) fn divide_kept_on(
    isa: Isa,
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
    kernel!(struct DivideKept<'a> {
        dtype: DataType, dst: &'a mut [u8], vals: &'a [f32], known: &'a mut [bool], div: f32,
    } -> () = |s| {
        if dtype == DataType::Bf16 {
            divide_loop::<Bf, 2>(dst, vals, known, div)
        } else if !S::F16C {
            divide_loop::<FpSoft, 2>(dst, vals, known, div)
        } else {
            staged(s, dst, true, [], |i, d, []| {
                let e = i * STAGE..i * STAGE + d.len() / 4;
                divide_loop::<Wide, 4>(d, &vals[e.clone()], &mut known[e], div);
            })
        }
    });
    simd::run(
        isa,
        DivideKept {
            dtype,
            dst,
            vals,
            known,
            div,
        },
    );
    Ok(())
}

/// fp16/bf16 elements widened into f32 elements (`out` holds twice the
/// bytes of `src`; lengths already checked).
pub(crate) fn widen_all(dtype: DataType, src: &[u8], out: &mut [u8]) {
    widen_on(Isa::best(), dtype, src, out)
}

/// f32 elements rounded into fp16/bf16 elements (`out` holds half the
/// bytes of `src`; lengths already checked).
pub(crate) fn narrow_all(dtype: DataType, src: &[u8], out: &mut [u8]) {
    narrow_on(Isa::best(), dtype, src, out)
}
