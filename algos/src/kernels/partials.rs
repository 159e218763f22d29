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

use super::half_float::{bf16_to_f32, f32_to_bf16};
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

type Widen = fn([u8; 2]) -> f32;
type Narrow = fn(f32) -> [u8; 2];

fn bf16_widen(b: [u8; 2]) -> f32 {
    bf16_to_f32(u16::from_le_bytes(b))
}
fn bf16_narrow(v: f32) -> [u8; 2] {
    f32_to_bf16(v).to_le_bytes()
}
fn fp16_widen(b: [u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(b)).to_f32()
}
fn fp16_narrow(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_bits().to_le_bytes()
}

/// The conversions of `dtype`, or `None` if it keeps no partials.
fn convs(dtype: DataType) -> Option<(Widen, Narrow)> {
    match dtype {
        DataType::Bf16 => Some((bf16_widen, bf16_narrow)),
        DataType::Fp16 => Some((fp16_widen, fp16_narrow)),
        _ => None,
    }
}

fn combine(op: ReduceOp) -> fn(f32, f32) -> f32 {
    match op {
        ReduceOp::Sum | ReduceOp::Avg => Native::<4>::sum,
        ReduceOp::Prod => Native::<4>::prod,
        ReduceOp::Max => Native::<4>::max,
        ReduceOp::Min => Native::<4>::min,
    }
}

fn pair(c: &[u8]) -> [u8; 2] {
    [c[0], c[1]]
}

/// Checks `dtype` keeps partials and every operand is whole elements of equal length.
fn check(dtype: DataType, ops: &[(&'static str, usize)]) -> Result<(Widen, Narrow), KernelError> {
    for &(name, len) in ops {
        check_whole(dtype, name, len)?;
    }
    for w in ops.windows(2) {
        check_same(dtype, w[0], w[1])?;
    }
    // Callers ask only for fp16/bf16; any other type is a caller bug, reported
    // as a partial element of a 2-byte type rather than a panic.
    convs(dtype).ok_or(KernelError::PartialElement {
        operand: "dtype",
        len: dtype.size(),
        dtype,
        elem_size: 2,
    })
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
    let (widen, _) = check(dtype, &[("src", bytes.len())])?;
    let mut out: Vec<f32> = bytes.chunks_exact(2).map(|c| widen(pair(c))).collect();
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
    let (widen, narrow) = check(dtype, &[("dst", dst.len()), ("src", src.len() * 2)])?;
    let f = combine(op);
    let (vals, known) = parts.slot(at / 2, src.len());
    for (((d, v), k), s) in dst.chunks_exact_mut(2).zip(vals).zip(known).zip(src) {
        let mine = if *k { *v } else { widen(pair(d)) };
        let r = f(mine, *s);
        *v = r;
        *k = true;
        d.copy_from_slice(&narrow(r));
    }
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
    let (widen, narrow) = check(dtype, &[("out", out.len()), ("a", a.len()), ("b", b.len())])?;
    let f = combine(op);
    let (vals, known) = parts.slot(at / 2, out.len() / 2);
    let elems = out
        .chunks_exact_mut(2)
        .zip(a.chunks_exact(2))
        .zip(b.chunks_exact(2));
    for (((o, x), y), (v, k)) in elems.zip(vals.iter_mut().zip(known)) {
        let r = f(widen(pair(x)), widen(pair(y)));
        *v = r;
        *k = true;
        o.copy_from_slice(&narrow(r));
    }
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
    let (widen, narrow) = check(dtype, &[("dst", dst.len()), ("src", src.len())])?;
    let f = combine(op);
    let (vals, known) = parts.slot(at / 2, dst.len() / 2);
    let elems = dst.chunks_exact_mut(2).zip(src.chunks_exact(2));
    for ((d, s), (v, k)) in elems.zip(vals.iter_mut().zip(known)) {
        let r = f(widen(pair(d)), widen(pair(s)));
        *v = r;
        *k = true;
        d.copy_from_slice(&narrow(r));
    }
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
    let (widen, narrow) = check(dtype, &[("dst", dst.len())])?;
    if divisor == 0 {
        return Err(KernelError::ZeroDivisor { dtype });
    }
    let div = divisor as f32;
    let (vals, known) = parts.slot(at / 2, dst.len() / 2);
    for ((d, v), k) in dst.chunks_exact_mut(2).zip(vals).zip(known) {
        let mine = if *k { *v } else { widen(pair(d)) };
        d.copy_from_slice(&narrow(mine / div));
        *k = false;
    }
    Ok(())
}
