//! Element-wise reduce kernels over little-endian byte slices.
//!
//! These are the host reduce kernels used by the in-memory transport, the
//! simulator's data mode and the TCP transport. Buffers are plain `&[u8]`
//! (the transport owns the memory; nothing here needs alignment): every
//! element is read with `from_le_bytes` and written with `to_le_bytes` in
//! fixed-size chunks, which the optimiser turns into SIMD loads and stores.
//!
//! # Semantics (the same on every rank, transport and algorithm)
//!
//! - **Integers** wrap on overflow for [`ReduceOp::Sum`] and
//!   [`ReduceOp::Prod`] (two's complement, like HCCL's and NCCL's device
//!   kernels); `Max`/`Min` compare as signed or unsigned per the type.
//! - **Floats**: `Max`/`Min` propagate NaN: if either operand is NaN the
//!   result is the canonical quiet NaN (`0x7FC0_0000` for fp32,
//!   `0x7E00` fp16, `0x7FC0` bf16, `0x7FF8_0000_0000_0000` fp64), whatever its
//!   payload, so the result does not depend on which rank held the NaN or on
//!   the reduction order. `Max` treats `-0.0 < +0.0` and `Min` the reverse
//!   (IEEE 754-2019 `maximum`/`minimum`), again so the order cannot show.
//! - **fp16 / bf16** operands are widened to f32, combined in f32 and rounded
//!   back (round to nearest, ties to even) once per kernel call. A transport
//!   that folds several inputs into one destination keeps the f32 values
//!   between calls with [`Partials`] and the `*_kept` kernels, so the fold
//!   rounds once.
//! - [`ReduceOp::Avg`] is a sum here: an average is `Sum` over all ranks and
//!   then one [`divide`] by the world size (integers truncate toward zero).
//!   Schedules never pass `Avg` to a reduce step; accepting it keeps the
//!   kernel total.
//!
//! # Instruction sets
//! Each kernel runs on the widest instruction set the CPU has (AVX-512
//! with FP16 and BF16, AVX-512 with BF16, AVX-512, AVX2 + F16C, else the
//! build's portable target), chosen at run time ([`Isa`]); every path
//! gives the same bits (NaN payloads aside).
//!
//! # Errors
//! Every function checks that each slice is a whole number of elements and
//! that the operands have equal lengths, and returns a [`KernelError`]
//! naming the lengths otherwise. Nothing here panics on bad input.

/// Defines a kernel call: a struct `$name` of the arguments and a
/// [`simd::Kernel`] impl whose body `$body` runs with `$s` the
/// instruction-set token and the fields bound by name.
macro_rules! kernel {
    (struct $name:ident<$lt:lifetime> { $($field:ident: $ty:ty),* $(,)? } -> $out:ty = |$s:ident| $body:block) => {
        struct $name<$lt> { $($field: $ty),* }
        impl $crate::kernels::simd::Kernel for $name<'_> {
            type Output = $out;
            #[inline(always)]
            fn run<S: $crate::kernels::simd::Simd>(self, $s: S) -> $out {
                let $name { $($field),* } = self;
                $body
            }
        }
    };
}

pub mod copy;
mod half_float;
mod native;
mod partials;
mod simd;

pub use partials::{
    divide_kept, fold_kept, keeps_partials, reduce_into_kept, reduce_kept, values, Partials,
};
pub(crate) use partials::{narrow_all, widen_all};
pub use simd::Isa;

use crate::dtype::{DataType, ReduceOp};

use half_float::Bf;

/// The last `< B` bytes of a loop over `B`-byte blocks, `dst = block(dst,
/// src)`: padded with zeros into one block (a zero lane's result is
/// dropped), so the tail is computed as the blocks are.
#[inline(always)]
fn tail_in_place<const B: usize>(
    dst: &mut [u8],
    src: &[u8],
    block: &impl Fn(&[u8; B], &[u8; B]) -> [u8; B],
) {
    if dst.is_empty() {
        return;
    }
    let n = dst.len();
    let (mut x, mut y) = ([0u8; B], [0u8; B]);
    x[..n].copy_from_slice(dst);
    y[..n].copy_from_slice(&src[..n]);
    dst.copy_from_slice(&block(&x, &y)[..n]);
}

/// Error of a reduce kernel: the byte slices do not describe whole,
/// equally long arrays of elements, or a division by zero.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A slice's length is not a multiple of the element size.
    #[error(
        "{operand} is {len} bytes, not a multiple of the {dtype} element size ({elem_size} bytes); \
         pass whole elements"
    )]
    PartialElement {
        /// Which operand (`dst`, `src`, `out`, `a`, `b`).
        operand: &'static str,
        /// Its length in bytes.
        len: u64,
        /// The element type.
        dtype: DataType,
        /// Bytes per element of `dtype`.
        elem_size: u64,
    },
    /// Two operands have different lengths.
    #[error(
        "{dtype} reduce operands differ in length: {left} is {left_len} bytes, {right} is \
         {right_len} bytes; reduce regions of equal length"
    )]
    LengthMismatch {
        /// The element type.
        dtype: DataType,
        /// Name of the first operand.
        left: &'static str,
        /// Its length in bytes.
        left_len: u64,
        /// Name of the second operand.
        right: &'static str,
        /// Its length in bytes.
        right_len: u64,
    },
    /// [`divide`] was asked to divide by zero.
    #[error("divide of {dtype} by 0: an average needs a world size of at least 1")]
    ZeroDivisor {
        /// The element type.
        dtype: DataType,
    },
}

/// `dst[i] = dst[i] (op) src[i]` for every element.
///
/// `dst` and `src` are little-endian arrays of `dtype` of equal length.
/// `Avg` reduces as `Sum` (see the module docs).
///
/// # Errors
/// [`KernelError::PartialElement`] if a length is not a multiple of
/// `dtype.size()`, [`KernelError::LengthMismatch`] if the lengths differ.
pub fn reduce(
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    src: &[u8],
) -> Result<(), KernelError> {
    reduce_with(Isa::best(), dtype, op, dst, src)
}

/// [`reduce`] on the instruction set `isa` (the portable path if this CPU
/// lacks it): for tests and benchmarks; every `isa` gives the same bits.
///
/// # Errors
/// As [`reduce`].
pub fn reduce_with(
    isa: Isa,
    dtype: DataType,
    op: ReduceOp,
    dst: &mut [u8],
    src: &[u8],
) -> Result<(), KernelError> {
    check_whole(dtype, "dst", dst.len())?;
    check_whole(dtype, "src", src.len())?;
    check_same(dtype, ("dst", dst.len()), ("src", src.len()))?;
    kernel!(struct Reduce<'a> { dtype: DataType, op: ReduceOp, dst: &'a mut [u8], src: &'a [u8] } -> () = |s| {
        reduce_body(s, dtype, op, dst, src)
    });
    simd::run(
        isa,
        Reduce {
            dtype,
            op,
            dst,
            src,
        },
    );
    Ok(())
}

#[inline(always)]
fn reduce_body<S: simd::Simd>(s: S, dtype: DataType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    match dtype {
        DataType::Int64 | DataType::Uint64
            if S::INT64_BLOCKS && matches!(op, ReduceOp::Max | ReduceOp::Min) =>
        {
            native::int64_extremes(s, dtype == DataType::Int64, op == ReduceOp::Max, dst, src)
        }
        DataType::Int8 => native::reduce::<i8, 1>(op, dst, src),
        DataType::Int16 => native::reduce::<i16, 2>(op, dst, src),
        DataType::Int32 => native::reduce::<i32, 4>(op, dst, src),
        DataType::Int64 => native::reduce::<i64, 8>(op, dst, src),
        DataType::Uint8 => native::reduce::<u8, 1>(op, dst, src),
        DataType::Uint16 => native::reduce::<u16, 2>(op, dst, src),
        DataType::Uint32 => native::reduce::<u32, 4>(op, dst, src),
        DataType::Uint64 => native::reduce::<u64, 8>(op, dst, src),
        DataType::Fp32 => native::reduce::<f32, 4>(op, dst, src),
        DataType::Fp64 => native::reduce::<f64, 8>(op, dst, src),
        DataType::Fp16 => half_float::fp16_reduce(s, op, dst, src),
        DataType::Bf16 => half_float::bf16_reduce(s, op, dst, src),
    }
}

/// `out[i] = a[i] (op) b[i]` for every element.
///
/// All three are little-endian arrays of `dtype` of equal length. `Avg`
/// reduces as `Sum` (see the module docs).
///
/// # Errors
/// [`KernelError::PartialElement`] if a length is not a multiple of
/// `dtype.size()`, [`KernelError::LengthMismatch`] if the lengths differ.
pub fn reduce_into(
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) -> Result<(), KernelError> {
    check_whole(dtype, "out", out.len())?;
    check_whole(dtype, "a", a.len())?;
    check_whole(dtype, "b", b.len())?;
    check_same(dtype, ("a", a.len()), ("b", b.len()))?;
    check_same(dtype, ("out", out.len()), ("a", a.len()))?;
    reduce_into_on(Isa::best(), dtype, op, out, a, b);
    Ok(())
}

/// [`reduce_into`] on `isa`, lengths checked.
pub(crate) fn reduce_into_on(
    isa: Isa,
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) {
    kernel!(struct ReduceInto<'a> { dtype: DataType, op: ReduceOp, out: &'a mut [u8], a: &'a [u8], b: &'a [u8] } -> () = |s| {
        reduce_into_body(s, dtype, op, out, a, b)
    });
    simd::run(
        isa,
        ReduceInto {
            dtype,
            op,
            out,
            a,
            b,
        },
    );
}

#[inline(always)]
fn reduce_into_body<S: simd::Simd>(
    s: S,
    dtype: DataType,
    op: ReduceOp,
    out: &mut [u8],
    a: &[u8],
    b: &[u8],
) {
    match dtype {
        DataType::Int8 => native::reduce_into::<i8, 1>(op, out, a, b),
        DataType::Int16 => native::reduce_into::<i16, 2>(op, out, a, b),
        DataType::Int32 => native::reduce_into::<i32, 4>(op, out, a, b),
        DataType::Int64 => native::reduce_into::<i64, 8>(op, out, a, b),
        DataType::Uint8 => native::reduce_into::<u8, 1>(op, out, a, b),
        DataType::Uint16 => native::reduce_into::<u16, 2>(op, out, a, b),
        DataType::Uint32 => native::reduce_into::<u32, 4>(op, out, a, b),
        DataType::Uint64 => native::reduce_into::<u64, 8>(op, out, a, b),
        DataType::Fp32 => native::reduce_into::<f32, 4>(op, out, a, b),
        DataType::Fp64 => native::reduce_into::<f64, 8>(op, out, a, b),
        DataType::Fp16 => half_float::fp16_reduce_into(s, op, out, a, b),
        DataType::Bf16 => half_float::bf16_reduce_into(s, op, out, a, b),
    }
}

/// `dst[i] = dst[i] / divisor` for every element: the last step of
/// [`ReduceOp::Avg`], with `divisor` the world size of the reducing group.
///
/// Integers truncate toward zero (`-7 / 2 = -3`, as Rust's `/` and C's);
/// floats divide in their own precision (fp16/bf16 in f32, rounded once).
///
/// # Errors
/// [`KernelError::PartialElement`] if `dst.len()` is not a multiple of
/// `dtype.size()`, [`KernelError::ZeroDivisor`] if `divisor` is 0.
pub fn divide(dtype: DataType, dst: &mut [u8], divisor: u32) -> Result<(), KernelError> {
    check_whole(dtype, "dst", dst.len())?;
    if divisor == 0 {
        return Err(KernelError::ZeroDivisor { dtype });
    }
    divide_on(Isa::best(), dtype, dst, divisor);
    Ok(())
}

/// [`divide`] on `isa`, length checked, `divisor > 0`.
pub(crate) fn divide_on(isa: Isa, dtype: DataType, dst: &mut [u8], divisor: u32) {
    kernel!(struct Divide<'a> { dtype: DataType, dst: &'a mut [u8], divisor: u32 } -> () = |s| {
        divide_body(s, dtype, dst, divisor)
    });
    simd::run(
        isa,
        Divide {
            dtype,
            dst,
            divisor,
        },
    );
}

#[inline(always)]
fn divide_body<S: simd::Simd>(s: S, dtype: DataType, dst: &mut [u8], divisor: u32) {
    match dtype {
        DataType::Int8 => native::divide::<i8, 1>(dst, divisor),
        DataType::Int16 => native::divide::<i16, 2>(dst, divisor),
        DataType::Int32 => native::divide::<i32, 4>(dst, divisor),
        DataType::Int64 => native::divide::<i64, 8>(dst, divisor),
        DataType::Uint8 => native::divide::<u8, 1>(dst, divisor),
        DataType::Uint16 => native::divide::<u16, 2>(dst, divisor),
        DataType::Uint32 => native::divide::<u32, 4>(dst, divisor),
        DataType::Uint64 => native::divide::<u64, 8>(dst, divisor),
        DataType::Fp32 => native::divide::<f32, 4>(dst, divisor),
        DataType::Fp64 => native::divide::<f64, 8>(dst, divisor),
        DataType::Fp16 => half_float::fp16_divide(s, dst, divisor),
        DataType::Bf16 => half_float::divide::<Bf>(dst, divisor),
    }
}

fn check_whole(dtype: DataType, operand: &'static str, len: usize) -> Result<(), KernelError> {
    let elem_size = dtype.size();
    if !(len as u64).is_multiple_of(elem_size) {
        return Err(KernelError::PartialElement {
            operand,
            len: len as u64,
            dtype,
            elem_size,
        });
    }
    Ok(())
}

fn check_same(
    dtype: DataType,
    (left, left_len): (&'static str, usize),
    (right, right_len): (&'static str, usize),
) -> Result<(), KernelError> {
    if left_len != right_len {
        return Err(KernelError::LengthMismatch {
            dtype,
            left,
            left_len: left_len as u64,
            right,
            right_len: right_len as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
